"""Loading Google and our checkpoints, conversion both ways, and the errors users meet."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer, load_checkpoint
from albert_tf.weights import CheckpointError, save_model_checkpoint, save_tf1_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(**changes):
    data = dict(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
                intermediate_size=20, max_position_embeddings=16)
    data.update(changes)
    return AlbertConfig(**data)


def _tensors(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def test_tf1_to_ours_to_tf1_is_bit_exact(reference, tmp_path):
    folder, _ = reference
    model = AlbertPretrainer(AlbertConfig.from_json_file(str(folder / "albert_config.json")))
    load_checkpoint(model, str(folder / "model.ckpt"))
    save_model_checkpoint(model, str(tmp_path / "ours" / "model.ckpt"))
    again = AlbertPretrainer(model.config)
    report = load_checkpoint(again, str(tmp_path / "ours"))  # a directory works too
    assert report.format == "tf2"
    save_tf1_checkpoint(again, str(tmp_path / "tf1" / "model.ckpt"))
    original, back = _tensors(folder / "model.ckpt"), _tensors(tmp_path / "tf1" / "model.ckpt")
    weights = {n: v for n, v in original.items() if n != "global_step" and "/adam_" not in n}
    assert set(back) == set(weights)
    for name, value in weights.items():
        assert back[name].dtype == value.dtype and np.array_equal(back[name], value), name
    assert tf.train.latest_checkpoint(str(tmp_path / "tf1")).endswith("model.ckpt")


def test_pretrainer_checkpoint_into_encoder_and_back(tmp_path, random_tf1_checkpoint):
    config = _config()
    random_tf1_checkpoint(config, tmp_path / "g.ckpt")
    pre = AlbertPretrainer(config)
    load_checkpoint(pre, str(tmp_path / "g.ckpt"))
    save_model_checkpoint(pre, str(tmp_path / "ours" / "model.ckpt"))
    encoder = AlbertModel(config)
    report = load_checkpoint(encoder, str(tmp_path / "ours" / "model.ckpt"))
    assert any("masked_lm" in s for s in report.skipped)
    inputs = encoder.dummy_inputs(2, 5)
    np.testing.assert_array_equal(encoder(inputs)["sequence_output"], pre.encoder(inputs)["sequence_output"])
    # An encoder-only checkpoint of ours loads into a pretrainer only if heads may stay missing.
    save_model_checkpoint(encoder, str(tmp_path / "enc" / "model.ckpt"))
    with pytest.raises(CheckpointError, match="cls/seq_relationship/output_weights"):
        load_checkpoint(AlbertPretrainer(config), str(tmp_path / "enc" / "model.ckpt"))
    report = load_checkpoint(AlbertPretrainer(config), str(tmp_path / "enc" / "model.ckpt"), allow_missing_heads=True)
    assert "cls/predictions/output_bias" in report.missing_allowed


def test_hub_module_prefix_without_sentence_order(tmp_path, random_tf1_checkpoint, tf1_shapes):
    config = _config()
    weights = random_tf1_checkpoint(config, tmp_path / "full.ckpt")
    names = sorted(n for n in tf1_shapes(config) if not n.startswith("cls/seq_relationship"))
    os.makedirs(tmp_path / "hub" / "variables")
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "hub" / "variables" / "variables"),
                      tensor_names=["module/" + n for n in names], shape_and_slices=[""] * len(names),
                      tensors=[weights[n] for n in names])
    with pytest.raises(CheckpointError, match="seq_relationship.*TF-Hub"):
        load_checkpoint(AlbertPretrainer(config), str(tmp_path / "hub"))
    model = AlbertPretrainer(config)
    report = load_checkpoint(model, str(tmp_path / "hub"), allow_missing_heads=True)
    assert report.missing_allowed == ["cls/seq_relationship/output_bias", "cls/seq_relationship/output_weights"]
    np.testing.assert_array_equal(model.masked_lm.output_bias.numpy(), weights["cls/predictions/output_bias"])


def test_mismatched_sizes_listed_with_config_fields(tmp_path, random_tf1_checkpoint):
    random_tf1_checkpoint(_config(), tmp_path / "m.ckpt")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(AlbertModel(_config(vocab_size=41, intermediate_size=24)), str(tmp_path / "m.ckpt"))
    text = str(err.value)
    assert "bert/embeddings/word_embeddings: expected shape [41, 8], found shape [40, 8]" in text
    assert "vocab_size" in text and "intermediate_size" in text
    assert "ffn_1/intermediate/dense/kernel: expected shape [12, 24], found shape [12, 20]" in text


def test_init_from_group0(tmp_path, random_tf1_checkpoint):
    random_tf1_checkpoint(_config(), tmp_path / "one.ckpt")
    two_groups = _config(num_hidden_groups=2)
    with pytest.raises(CheckpointError, match="group_1.*num_hidden_groups"):
        load_checkpoint(AlbertModel(two_groups), str(tmp_path / "one.ckpt"))
    model = AlbertModel(two_groups)
    load_checkpoint(model, str(tmp_path / "one.ckpt"), init_from_group0=True)
    g0, g1 = model.groups[0][0], model.groups[1][0]
    np.testing.assert_array_equal(g0.attention.query.kernel.numpy(), g1.attention.query.kernel.numpy())


def test_init_from_group0_reads_our_own_checkpoints_too(tmp_path, random_tf1_checkpoint):
    """A two-group model from a one-group albert_tf checkpoint: every group gets group_0's weights
    as Google's one-group checkpoint holds them."""
    weights = random_tf1_checkpoint(_config(), tmp_path / "one.ckpt")
    one_group = AlbertPretrainer(_config())
    load_checkpoint(one_group, str(tmp_path / "one.ckpt"))
    save_model_checkpoint(one_group, str(tmp_path / "ours" / "model.ckpt"))
    model = AlbertModel(_config(num_hidden_groups=2))
    report = load_checkpoint(model, str(tmp_path / "ours"), init_from_group0=True)
    assert report.format == "tf2"
    group0 = "bert/encoder/transformer/group_0/inner_group_0/"
    for g in range(2):
        block = model.groups[g][0]
        np.testing.assert_array_equal(block.attention.query.kernel.numpy(),
                                      weights[group0 + "attention_1/self/query/kernel"])
        np.testing.assert_array_equal(block.output_layer_norm.gamma.numpy(), weights[group0 + "LayerNorm_1/gamma"])
    np.testing.assert_array_equal(model.embeddings.word_embeddings.numpy(), weights["bert/embeddings/word_embeddings"])


def _slots_on_every_weight(config) -> dict:
    """adam_m / adam_v beside every weight, as the original's optimizer leaves them."""
    from tests.conftest import _tf1_shapes

    return {f"{name}/{slot}": np.zeros(shape, np.float32) for name, shape in _tf1_shapes(config).items()
            for slot in ("adam_m", "adam_v")}


@pytest.mark.parametrize("fewer, lost, lost_tf2", [
    (dict(num_hidden_groups=1, inner_group_num=2), "/group_1/inner_group_0/", "groups/1/0/"),
    (dict(num_hidden_groups=2, inner_group_num=1), "/group_0/inner_group_1/", "groups/0/1/")], ids=["groups", "inner"])
def test_encoder_layers_the_config_has_no_place_for_are_refused(tmp_path, random_tf1_checkpoint, fewer, lost,
                                                                 lost_tf2):
    """A config with fewer groups or inner groups than the checkpoint would drop transformer blocks:
    refused in one line naming them and the config fields, from Google's format and ours."""
    two_by_two = _config(num_hidden_groups=2, inner_group_num=2)
    random_tf1_checkpoint(two_by_two, tmp_path / "google.ckpt", extra=_slots_on_every_weight(two_by_two))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(AlbertModel(_config(**fewer)), str(tmp_path / "google.ckpt"))
    text = str(err.value)
    assert "\n" not in text and "holds 32 encoder-layer weights" in text and lost in text
    assert "num_hidden_groups / inner_group_num" in text
    assert "adam_" not in text
    model = AlbertPretrainer(two_by_two)
    load_checkpoint(model, str(tmp_path / "google.ckpt"))
    save_model_checkpoint(model, str(tmp_path / "ours" / "model.ckpt"))
    with pytest.raises(CheckpointError, match=r"^checkpoint \S*ours/model.ckpt holds 32 encoder-layer weights "
                                              rf".*\(model/encoder/{lost_tf2}.*num_hidden_groups / inner_group_num"):
        load_checkpoint(AlbertModel(_config(**fewer)), str(tmp_path / "ours"))


def test_slots_step_and_heads_beside_the_encoder_are_still_skipped(tmp_path, random_tf1_checkpoint):
    """What the model has no place for but loses nothing of it: optimizer slots on every weight,
    global_step, and the pretraining heads when only the encoder is loaded."""
    two_by_two = _config(num_hidden_groups=2, inner_group_num=2)
    weights = random_tf1_checkpoint(two_by_two, tmp_path / "google.ckpt", extra=_slots_on_every_weight(two_by_two))
    model = AlbertModel(two_by_two)
    report = load_checkpoint(model, str(tmp_path / "google.ckpt"))
    assert "cls/seq_relationship/output_weights" in report.skipped and "global_step" in report.skipped
    np.testing.assert_array_equal(model.groups[1][1].attention.key.kernel.numpy(),
                                  weights["bert/encoder/transformer/group_1/inner_group_1/attention_1/self/key/kernel"])


def test_missing_checkpoint_named(tmp_path):
    with pytest.raises(CheckpointError, match="nowhere/model.ckpt"):
        load_checkpoint(AlbertModel(_config()), str(tmp_path / "nowhere" / "model.ckpt"))


def _convert(*args):
    return subprocess.run([sys.executable, os.path.join(REPO, "convert_checkpoint.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_convert_checkpoint_cli(reference, tmp_path):
    folder, _ = reference
    config = str(folder / "albert_config.json")
    done = _convert(f"--checkpoint_to_convert={folder / 'model.ckpt'}", f"--albert_config_file={config}",
                    f"--converted_checkpoint={tmp_path / 'tf2' / 'model.ckpt'}", "--direction=tf1_to_tf2")
    assert done.returncode == 0, done.stderr
    assert "wrote pretrainer checkpoint" in done.stdout
    done = _convert(f"--checkpoint_to_convert={tmp_path / 'tf2'}", f"--albert_config_file={config}",
                    f"--converted_checkpoint={tmp_path / 'tf1' / 'model.ckpt'}", "--direction=tf1_to_tf2")
    assert done.returncode == 1 and "expects a tf1 checkpoint" in done.stderr
    assert not (tmp_path / "tf1").exists()


def test_convert_into_unwritable_place_is_one_error_line(reference, tmp_path):
    folder, _ = reference
    done = _convert(f"--checkpoint_to_convert={folder / 'model.ckpt'}",
                    f"--albert_config_file={folder / 'albert_config.json'}",
                    "--converted_checkpoint=/proc/no_such_place/model.ckpt", "--direction=tf1_to_tf2")
    assert done.returncode == 1
    assert "convert_checkpoint.py: error:" in done.stderr and "Traceback" not in done.stderr


def test_saving_keeps_other_checkpoints_in_the_state_file(tmp_path):
    model = AlbertModel(_config())
    model(model.dummy_inputs())
    save_model_checkpoint(model, str(tmp_path / "model.ckpt-1"))
    save_tf1_checkpoint(model, str(tmp_path / "model.ckpt-2"))
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["model.ckpt-1", "model.ckpt-2"]
    assert not list(tmp_path.glob("*tmp-write*"))


def test_saving_keeps_entries_whose_files_cannot_be_seen_from_here(tmp_path):
    """A state file the user keeps beside a converted checkpoint may list checkpoints on a disk not
    mounted here; converting into the folder used to drop those entries."""
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "/mnt/elsewhere/model.ckpt-9000"\n'
                                         'all_model_checkpoint_paths: "/mnt/elsewhere/model.ckpt-8000"\n'
                                         'all_model_checkpoint_paths: "/mnt/elsewhere/model.ckpt-9000"\n')
    model = AlbertModel(_config())
    model(model.dummy_inputs())
    save_tf1_checkpoint(model, str(tmp_path / "model.ckpt"))
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert list(state.all_model_checkpoint_paths) == ["/mnt/elsewhere/model.ckpt-8000",
                                                      "/mnt/elsewhere/model.ckpt-9000", str(tmp_path / "model.ckpt")]
    # A run's folder (the original's TF1 runs too) goes on resuming from its own latest checkpoint.
    assert state.model_checkpoint_path == "/mnt/elsewhere/model.ckpt-9000"


def test_saving_leaves_a_checkpoint_file_tensorflow_cannot_read_alone(tmp_path):
    notes = b"my notes about the best checkpoint: step 125000\n"
    (tmp_path / "checkpoint").write_bytes(notes)
    model = AlbertModel(_config())
    model(model.dummy_inputs())
    save_tf1_checkpoint(model, str(tmp_path / "model.ckpt"))
    assert (tmp_path / "checkpoint").read_bytes() == notes
    assert (tmp_path / "model.ckpt.index").exists()


@pytest.mark.parametrize("damage", ["truncated_data", "garbage_index", "missing_data"])
def test_damaged_init_checkpoint_is_one_line_naming_the_file(tmp_path, damage, random_tf1_checkpoint):
    random_tf1_checkpoint(_config(), tmp_path / "ours" / "model.ckpt")
    prefix = str(tmp_path / "ours" / "model.ckpt")
    data, index = tmp_path / "ours" / "model.ckpt.data-00000-of-00001", tmp_path / "ours" / "model.ckpt.index"
    if damage == "truncated_data":
        data.write_bytes(data.read_bytes()[:-100])
    elif damage == "garbage_index":
        index.write_bytes(b"not an sstable")
    else:
        data.unlink()
    named = index if damage == "garbage_index" else data
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(AlbertModel(_config()), prefix)
    assert str(named) in str(err.value) and "\n" not in str(err.value)


def test_a_pretrained_checkpoint_for_a_task_model_says_it_has_no_task_head(tmp_path):
    """Predicting with --init_checkpoint at a pretrained checkpoint: the hint read "check config field the
    model type (encoder vs pretrainer) or the checkpoint", and not what is wrong."""
    from albert_tf.glue import heads

    pretrainer = AlbertPretrainer(_config())
    pretrainer(pretrainer.dummy_inputs())
    prefix = save_tf1_checkpoint(pretrainer, str(tmp_path / "model.ckpt"))
    classifier = heads.build_classifier(_config(), "mrpc")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(classifier, prefix)
    lines = str(err.value).splitlines()
    assert lines[0].startswith(f"checkpoint {prefix} does not fit the model (2 variables)")
    for line, name in zip(lines[1:], ("output_weights", "output_bias")):
        assert line.startswith(f"  {name}: expected shape")
        assert line.endswith("missing; the checkpoint has no head for this task (a pretrained checkpoint has none): "
                             "train first (--do_train), or give a fine-tuned checkpoint")
    encoder = AlbertModel(_config(num_hidden_groups=2))
    with pytest.raises(CheckpointError, match="missing; check config field num_hidden_groups"):
        load_checkpoint(encoder, prefix)


def test_checkpoint_step_reads_the_step_the_checkpoint_holds(tmp_path):
    """model.ckpt-best or an --init_checkpoint under another name: its own global_step (ours and TF1's),
    the name's step when it has one, 0 only without a step variable (a pretrained release)."""
    from albert_tf.weights import checkpoint_step

    ours = tf.train.Checkpoint(global_step=tf.Variable(13, dtype=tf.int64), w=tf.Variable([1.0]))
    ours.write(str(tmp_path / "ours" / "model.ckpt-best"))
    names = ["global_step", "bert/w"]
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "tf1" / "fine_tuned"), tensor_names=names, shape_and_slices=["", ""],
                      tensors=[tf.constant(21, tf.int64), tf.constant([1.0])])
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "release" / "model.ckpt"), tensor_names=["bert/w"],
                      shape_and_slices=[""], tensors=[tf.constant([1.0])])
    assert checkpoint_step(str(tmp_path / "ours" / "model.ckpt-best")) == 13
    assert checkpoint_step(str(tmp_path / "tf1" / "fine_tuned")) == 21
    assert checkpoint_step(str(tmp_path / "release" / "model.ckpt")) == 0
    assert checkpoint_step(str(tmp_path / "elsewhere" / "model.ckpt-5")) == 5  # the name says it: not read


def test_checkpoint_step_reads_only_the_step(tmp_path, monkeypatch):
    """model.ckpt-best's step is read on every predict and external evaluation: only global_step, not every
    tensor once more (the damage check read back gigabytes of weights and slots to get one number). A
    weight damaged on disk is then no error here: the load that follows reads the weights and reports it."""
    from tensorflow.python.training import py_checkpoint_reader

    from albert_tf.weights import checkpoint_step

    prefix = str(tmp_path / "model.ckpt-best")
    tf.train.Checkpoint(global_step=tf.Variable(1234, dtype=tf.int64), w=tf.Variable(tf.fill([1000], 1.5))).write(prefix)
    expected = int(tf.train.load_variable(prefix, "global_step/.ATTRIBUTES/VARIABLE_VALUE"))
    data = tmp_path / "model.ckpt-best.data-00000-of-00001"
    content = data.read_bytes()
    weight = content.index(bytes.fromhex("0000c03f") * 1000)  # the weight's 1.5s; its checksum fails now
    data.write_bytes(content[:weight] + bytes(4000) + content[weight + 4000:])
    with pytest.raises((tf.errors.OpError, RuntimeError), match="Checksum does not match"):
        tf.train.load_variable(prefix, "w/.ATTRIBUTES/VARIABLE_VALUE")
    read, get_tensor = [], py_checkpoint_reader.CheckpointReader.get_tensor
    restore = tf.raw_ops.RestoreV2

    def counted_get_tensor(self, name):
        read.append(name)
        return get_tensor(self, name)

    def counted_restore(**kwargs):
        read.extend(kwargs["tensor_names"])
        return restore(**kwargs)
    monkeypatch.setattr(py_checkpoint_reader.CheckpointReader, "get_tensor", counted_get_tensor)
    monkeypatch.setattr(tf.raw_ops, "RestoreV2", counted_restore)
    assert checkpoint_step(prefix) == expected == 1234
    assert read == ["global_step/.ATTRIBUTES/VARIABLE_VALUE"]


def test_the_fit_check_reads_only_the_index(tmp_path):
    """Resuming and evaluating check that a checkpoint fits the model before TensorFlow reads it, after
    checking it reads back: the fit check read every tensor once more (a whole extra read of a large
    checkpoint, from a bucket too). With the data file cut short it still says whether the shapes fit."""
    from albert_tf.weights import check_fits

    model = AlbertModel(_config())
    model(model.dummy_inputs())
    prefix = save_model_checkpoint(model, str(tmp_path / "model.ckpt-3"))
    data = tmp_path / "model.ckpt-3.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:100])  # a tensor read would fail
    check_fits(model, prefix)
    other = AlbertModel(_config(hidden_size=24))
    other(other.dummy_inputs())
    with pytest.raises(CheckpointError) as err:
        check_fits(other, prefix)
    assert "hidden_size" in str(err.value)
