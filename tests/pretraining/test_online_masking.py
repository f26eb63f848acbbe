"""run_pretraining.py --masked_lm_budget: every example masked anew in the input pipeline with
create_pretraining_data.py's algorithm, reproducible from the seed, exact on resume."""
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.data.books import write_book_as_sentences
from albert_tf.pretraining import pretraining_task
from albert_tf.data.input_pipeline import TrainInputContext

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ, PRED, MASK_ID = 64, 10, 4  # [MASK] is id 4 in 30k-clean.model
CONFIG = AlbertConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=16, max_position_embeddings=SEQ)


@pytest.fixture(scope="module")
def records(tmp_path_factory, shared):
    folder = tmp_path_factory.mktemp("online")
    book = write_book_as_sentences(shared("data", "corpus", "botchan.txt"), folder / "botchan.txt")
    out = folder / "train.tfrecord"
    done = subprocess.run([
        sys.executable, os.path.join(REPO, "create_pretraining_data.py"), f"--input_file={book}",
        f"--output_file={out}", f"--spm_model_file={shared('data', 'spm', '30k-clean.model')}",
        f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}", "--dupe_factor=1", "--num_workers=1"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return str(out)


def _batches(records, count, seed=5, budget=0.15, skip=0):
    task = pretraining_task(CONFIG, records, SEQ, PRED, 32, 32, seed, masked_lm_budget=budget)
    dataset = task.train_dataset_fn(TrainInputContext(global_batches_to_skip=skip))
    return [tf.nest.map_structure(lambda t: t.numpy(), b) for b in dataset.take(count)]


def _stack(batches):
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def _originals(f):
    """Each row's unmasked ids, rebuilt here from the record's positions and labels."""
    tokens = f["input_ids"].copy()
    for row in range(len(tokens)):
        real = f["masked_lm_weights"][row] > 0
        tokens[row, f["masked_lm_positions"][row][real]] = f["masked_lm_ids"][row][real]
    return tokens


def _statistics(f):
    """Shares measured from the features alone: replacements, predictions per row, masked span lengths."""
    originals = _originals(f)
    mask = keep = other = 0
    spans = {1: 0, 2: 0, 3: 0, "more": 0}
    for row in range(len(originals)):
        real = f["masked_lm_weights"][row] > 0
        positions = f["masked_lm_positions"][row][real]
        shown = f["input_ids"][row][positions]
        labels = f["masked_lm_ids"][row][real]
        mask += int(np.sum(shown == MASK_ID))
        keep += int(np.sum((shown == labels) & (labels != MASK_ID)))
        other += int(np.sum((shown != labels) & (shown != MASK_ID)))
        # Words of maximal runs of adjacent masked positions (a run of n words counts once).
        boundary = f["token_boundary"][row]
        run = 0
        masked = set(positions.tolist())
        for p in range(1, SEQ + 1):
            if p in masked:
                run += int(boundary[p])
            elif run:
                spans[run if run <= 3 else "more"] += 1
                run = 0
    total = mask + keep + other
    count = sum(spans.values())
    return {"mask": mask / total, "keep": keep / total, "random": other / total,
            **{f"span{k}": v / count for k, v in spans.items()}}


def test_online_masks_follow_the_offline_algorithm(records):
    online = _stack(_batches(records, 12))
    offline = _stack(_batches(records, 12, budget=0.0))
    lengths = online["input_mask"].sum(1)
    counts = (online["masked_lm_weights"] > 0).sum(1)
    np.testing.assert_array_equal(counts, np.minimum(PRED, np.maximum(1, np.round(lengths * 0.15))))
    for row in range(len(lengths)):
        positions = online["masked_lm_positions"][row][: counts[row]]
        assert list(positions) == sorted(positions)
        first_sep = int((online["segment_ids"][row][: lengths[row]] == 0).sum()) - 1
        assert not {0, first_sep, lengths[row] - 1} & set(positions.tolist())  # [CLS]/[SEP] never masked
        for p in positions:  # whole words: a word's later pieces are masked with its start
            if not online["token_boundary"][row][p]:
                assert p - 1 in positions or p - 1 in (0, first_sep)  # a row may start mid-word
    # The originals under both masks are the same text: labels are the true tokens.
    np.testing.assert_array_equal(_originals(online), _originals(offline))
    offline["token_boundary"] = online["token_boundary"]  # the same rows; read only for online masking
    got, expected = _statistics(online), _statistics(offline)
    assert abs(got["mask"] - 0.8) < 0.03 and abs(got["keep"] - 0.1) < 0.03 and abs(got["random"] - 0.1) < 0.03
    for key in expected:
        assert abs(got[key] - expected[key]) < 0.03, (key, got, expected)
    assert (online["masked_lm_positions"] != offline["masked_lm_positions"]).any(axis=1).mean() > 0.9


def test_reproducible_from_the_seed_and_new_each_epoch(records):
    first = _stack(_batches(records, 4))
    np.testing.assert_array_equal(_stack(_batches(records, 4))["input_ids"], first["input_ids"])
    assert (_stack(_batches(records, 4, seed=6))["masked_lm_positions"] != first["masked_lm_positions"]).any()
    # Over many batches a record comes round again (the stream repeats) with other masks.
    seen = {}
    repeated = 0
    many = _stack(_batches(records, 40))
    originals = _originals(many)
    for row in range(len(originals)):
        key = originals[row].tobytes()
        if key in seen:
            repeated += 1
            assert not np.array_equal(many["masked_lm_positions"][row], many["masked_lm_positions"][seen[key]])
        seen[key] = row
    assert repeated > 0


def test_exact_on_resume_from_an_iterator_checkpoint_and_by_skipping(records, tmp_path):
    task = pretraining_task(CONFIG, records, SEQ, PRED, 32, 32, 5, masked_lm_budget=0.15)
    iterator = iter(task.train_dataset_fn(TrainInputContext()))
    for _ in range(3):
        next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "input"))
    expected = [next(iterator)["input_ids"].numpy() for _ in range(3)]
    restored = iter(task.train_dataset_fn(TrainInputContext()))
    tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
    np.testing.assert_array_equal([next(restored)["input_ids"].numpy() for _ in range(3)], expected)
    skipped = _batches(records, 3, skip=3)
    np.testing.assert_array_equal([b["input_ids"] for b in skipped], expected)


def test_driver_trains_with_online_masking(records, tmp_path):
    """The driver trains on re-masked batches: the same run (seed, weights, data order) on the
    records' own masks ends with other weights, and only the masks differ between the two."""
    config = tmp_path / "albert_config.json"
    config.write_text(CONFIG.to_json_string())

    def train(out, *extra):
        done = subprocess.run([
            sys.executable, os.path.join(REPO, "run_pretraining.py"), f"--albert_config_file={config}",
            f"--input_file={records}", f"--output_dir={tmp_path / out}", f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PRED}", "--train_batch_size=8", "--num_train_steps=2", "--seed=5",
            "--learning_rate=0.01", "--num_warmup_steps=0", "--log_steps=1", *extra], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        reader = tf.train.load_checkpoint(str(tmp_path / out / "model.ckpt-2"))
        weights = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
                   if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}
        losses = [float(v) for v in re.findall(r"step \d+/2: loss = ([0-9.]+)", done.stderr)]
        assert len(losses) == 2, done.stderr[-3000:]
        return done, weights, losses

    done, online, online_losses = train("out", "--masked_lm_budget=0.15")
    assert "online masking: [MASK] id 4" in done.stderr
    done, offline, offline_losses = train("offline")
    assert "online masking" not in done.stderr
    assert online_losses[0] != offline_losses[0]  # the first batch already had other masks
    assert set(online) == set(offline) and online
    worst = max(float(np.abs(online[k] - offline[k]).max()) for k in online)
    assert worst > 1e-4, worst


def _rewrite(source, target, change):
    """``target``: the records of ``source``, each tf.train.Example passed through ``change``."""
    with tf.io.TFRecordWriter(str(target)) as writer:
        for serialized in tf.data.TFRecordDataset(source):
            example = tf.train.Example.FromString(serialized.numpy())
            change(example)
            writer.write(example.SerializeToString())
    return str(target)


def test_bert_format_records_train_on_their_own_masks(records, tmp_path):
    """Records without token_boundary (BERT's create_pretraining_data.py) train as in the original,
    which parsed token_boundary only for online masking; online masking refuses them in one line."""
    bert = _rewrite(records, tmp_path / "bert.tfrecord", lambda e: e.features.feature.pop("token_boundary"))
    task = pretraining_task(CONFIG, bert, SEQ, PRED, 8, 8, seed=5)
    batch = next(iter(task.train_dataset_fn(TrainInputContext())))
    assert "token_boundary" not in batch
    # The same records read straight from the file: every feature the batch holds, row for row.
    spec = {"input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([PRED], tf.int64)}
    rows = {tuple(tf.io.parse_single_example(r, spec)["input_ids"].numpy()): r
            for r in tf.data.TFRecordDataset(bert)}
    for ids in batch["input_ids"].numpy():
        assert tuple(ids) in rows
    with pytest.raises(ValueError, match=r"--masked_lm_budget: online masking needs each record's token_boundary"):
        pretraining_task(CONFIG, bert, SEQ, PRED, 8, 8, seed=5, masked_lm_budget=0.15)


def test_online_masking_on_records_of_another_length_names_the_settings(records):
    """Records with token_boundary but of another --max_seq_length (the original's tool leaves no summary
    beside them) are records of other settings, not BERT's records without token_boundary: the file and both
    lengths are named, as run_pretraining.py's check of each file's first record does (it said "a file is
    damaged, or was written for other settings", naming neither)."""
    with pytest.raises(ValueError) as raised:
        pretraining_task(CONFIG, records, SEQ // 2, PRED, 8, 8, seed=5, masked_lm_budget=0.15)
    assert str(raised.value) == (f"--input_file: {records}: its records were made with --max_seq_length={SEQ} but "
                                 f"this run has --max_seq_length={SEQ // 2}: pass the data's values, or make the "
                                 f"data again")


def _unmasked(example):
    """The record as create_pretraining_data.py --masked_lm_prob=0 writes it: original tokens, no masks."""
    feature = example.features.feature
    ids = list(feature["input_ids"].int64_list.value)
    weights = feature["masked_lm_weights"].float_list.value
    for position, label, weight in zip(feature["masked_lm_positions"].int64_list.value,
                                       feature["masked_lm_ids"].int64_list.value, weights):
        if weight > 0:
            ids[position] = label
    feature["input_ids"].int64_list.value[:] = ids
    for name in ("masked_lm_positions", "masked_lm_ids"):
        feature[name].int64_list.value[:] = [0] * PRED
    feature["masked_lm_weights"].float_list.value[:] = [0.0] * PRED


def test_records_without_masks_take_the_mask_id_from_the_tokenizer(records, tmp_path, shared):
    """With no masks in the records the [MASK] id cannot be read from them: one line naming the flags;
    the driver's --spm_model_file gives it, and online masking then writes that id."""
    plain = _rewrite(records, tmp_path / "plain.tfrecord", _unmasked)
    with pytest.raises(ValueError, match=r"hold no masked positions .*give --spm_model_file \(or --vocab_file\)"):
        pretraining_task(CONFIG, plain, SEQ, PRED, 8, 8, seed=5, masked_lm_budget=0.15)
    config = tmp_path / "albert_config.json"
    config.write_text(CONFIG.to_json_string())
    common = [sys.executable, os.path.join(REPO, "run_pretraining.py"), f"--albert_config_file={config}",
              f"--input_file={plain}", f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}",
              "--train_batch_size=8", "--num_train_steps=1", "--num_warmup_steps=0", "--masked_lm_budget=0.15"]
    spm = shared("data", "spm", "30k-clean.model")
    done = subprocess.run([*common, f"--output_dir={tmp_path / 'out'}", f"--spm_model_file={spm}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.path.exists(tmp_path / "out" / "model.ckpt-1.index")
    refused = subprocess.run([*common, f"--output_dir={tmp_path / 'refused'}"], capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 1
    assert refused.stderr.startswith("run_pretraining.py: error: --masked_lm_budget: cannot tell the [MASK] id")
    assert len(refused.stderr.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "refused")
    # The re-masked batches show the given [MASK] id at 80% of the masked positions, as with masked records.
    task = pretraining_task(CONFIG, plain, SEQ, PRED, 32, 32, seed=5, masked_lm_budget=0.15, mask_id=MASK_ID)
    batches = [tf.nest.map_structure(lambda t: t.numpy(), b)
               for b in task.train_dataset_fn(TrainInputContext()).take(6)]
    assert abs(_statistics(_stack(batches))["mask"] - 0.8) < 0.05


def _record_starts(data):
    """Each record's byte offset in TFRecord bytes, and the end, from the framing (uint64 length, 4 bytes of
    its CRC, the data, 4 bytes of the data's CRC)."""
    starts = [0]
    while starts[-1] < len(data):
        starts.append(starts[-1] + 16 + struct.unpack_from("<Q", data, starts[-1])[0])
    return starts


def test_a_file_cut_short_is_named_with_its_record_and_byte(records, tmp_path):
    """Online masking reads the first records before the loop (also for a caller of pretraining_task, who
    has no run_pretraining.py to check the files first): a file cut inside a record's data or header is
    run_pretraining.py's one line naming the file, the record and its byte, not TensorFlow's "truncated
    record at N" naming no file, nor (cut in a header) read silently as a shorter file."""
    data = open(records, "rb").read()
    starts = _record_starts(data)
    whole = tmp_path / "whole.tfrecord"
    whole.write_bytes(data[:starts[3]])  # three whole records, read first
    remake = "copy it again, or make it again with create_pretraining_data.py"
    in_data = tmp_path / "in_data.tfrecord"
    in_data.write_bytes(data[:starts[4] + 30])
    in_header = tmp_path / "in_header.tfrecord"
    in_header.write_bytes(data[:starts[2] + 5])
    cases = [(in_data, f"truncated: it ends inside record #5 (at byte {starts[4]}), after 4 whole records (30 of "
                       f"the record's {starts[5] - starts[4]} bytes are there); {remake}"),
             (in_header, f"truncated: it ends 5 bytes into the header of record #3 (at byte {starts[2]}), after 2 "
                         f"whole records; {remake}")]
    for cut, words in cases:
        with pytest.raises(ValueError) as raised:
            pretraining_task(CONFIG, f"{whole},{cut}", SEQ, PRED, 8, 8, seed=5, masked_lm_budget=0.15)
        assert str(raised.value) == f"--input_file: {cut}: {words}"


def test_a_damaged_file_or_other_lengths_are_one_line_before_any_work(records, tmp_path):
    """Online masking reads the first records before the loop: their read errors are one line naming the file
    (after a first file that is fine) and, for other lengths, both lengths."""
    data = open(records, "rb").read()
    first = tmp_path / "first.tfrecord"
    first.write_bytes(data[:_record_starts(data)[3]])  # three records of the run's lengths, read first

    def more_predictions(example):  # as made with --max_predictions_per_seq=PRED + 2
        for name in ("masked_lm_positions", "masked_lm_ids"):
            example.features.feature[name].int64_list.value.extend([0, 0])
        example.features.feature["masked_lm_weights"].float_list.value.extend([0.0, 0.0])

    other = _rewrite(first, tmp_path / "other.tfrecord", more_predictions)
    with pytest.raises(ValueError) as raised:
        pretraining_task(CONFIG, f"{first},{other}", SEQ, PRED, 8, 8, seed=5, masked_lm_budget=0.15)
    assert str(raised.value) == (f"--input_file: {other}: its records were made with --max_predictions_per_seq="
                                 f"{PRED + 2} but this run has --max_predictions_per_seq={PRED}: pass the data's "
                                 f"values, or make the data again")
