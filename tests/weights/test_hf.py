"""Hugging Face folders both ways, against files and outputs transformers itself wrote."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer, load_checkpoint
from albert_tf.weights import CheckpointError, save_hf_checkpoint, save_model_checkpoint, save_tf1_checkpoint
from albert_tf.conversion import convert

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL = 1e-4
MULTI_GROUP = dict(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=4, num_hidden_groups=2,
                   inner_group_num=2, num_attention_heads=3, intermediate_size=20, max_position_embeddings=16,
                   type_vocab_size=2)


@pytest.fixture
def hf_reference(shared):
    folder = shared("reference", "hf_albert_tiny_shared")
    return folder, dict(np.load(folder / "io.npz"))


def _tf1_tensors(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def _convert_cli(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, os.path.join(REPO, "convert_checkpoint.py"), *args],
                          capture_output=True, text=True, timeout=300, env=env)


def _error_line(done) -> str:
    """The driver's one error line (TensorFlow's own start-up lines on stderr aside)."""
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("convert_checkpoint.py:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def _assert_same_tensors(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        assert np.array_equal(got[name], value), name


def test_hf_folder_reproduces_transformers_outputs(hf_reference):
    folder, io = hf_reference
    config = AlbertConfig.from_json_file(str(folder / "config.json"))
    model = AlbertPretrainer(config)
    report = load_checkpoint(model, str(folder))
    assert report.format == "hf" and not report.missing_allowed and not report.notes
    inputs = {k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    inputs["masked_lm_positions"] = tf.constant(np.tile(np.arange(17), (3, 1)), tf.int32)
    out = model(inputs)
    real = io["input_mask"].astype(bool)
    for key in ("sequence_output", "mlm_logits"):
        assert np.abs(out[key].numpy() - io[key])[real].max() < TOL, key
    for key in ("pooled_output", "sop_logits"):
        assert np.abs(out[key].numpy() - io[key]).max() < TOL, key


def test_hf_to_tf1_equals_the_reference_checkpoint(hf_reference, reference, tmp_path):
    hf_folder, _ = hf_reference
    tf1_folder, _ = reference
    done = _convert_cli(f"--checkpoint_to_convert={hf_folder}", f"--converted_checkpoint={tmp_path}/tf1/model.ckpt",
                        "--direction=hf_to_tf1")
    assert done.returncode == 0, done.stderr
    original = _tf1_tensors(tf1_folder / "model.ckpt")
    weights = {n: v for n, v in original.items() if n != "global_step" and "/adam_" not in n}
    _assert_same_tensors(_tf1_tensors(tmp_path / "tf1" / "model.ckpt"), weights)
    # No --albert_config_file: the folder's config.json, in the original's terms, is written beside the output.
    written = json.loads((tmp_path / "tf1" / "albert_config.json").read_text())
    google = json.loads((tf1_folder / "albert_config.json").read_text())
    assert {k: written[k] for k in google} == google  # "gelu_new" is the original's (tanh) "gelu"
    assert "model_type" not in written and "architectures" not in written and written["layer_norm_eps"] == 1e-12


def test_tf1_to_hf_reproduces_the_transformers_file(hf_reference, reference, tmp_path):
    hf_folder, _ = hf_reference
    tf1_folder, _ = reference
    done = _convert_cli(f"--checkpoint_to_convert={tf1_folder / 'model.ckpt'}",
                        f"--albert_config_file={tf1_folder / 'albert_config.json'}",
                        f"--converted_checkpoint={tmp_path / 'hf'}", "--direction=tf1_to_hf")
    assert done.returncode == 0, done.stderr
    _assert_same_tensors(safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors")),
                         safetensors.numpy.load_file(str(hf_folder / "model.safetensors")))
    # Even the bytes: same header (names, dtypes, shapes, offsets, metadata) and data.
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == (hf_folder / "model.safetensors").read_bytes()
    ours = json.loads((tmp_path / "hf" / "config.json").read_text())
    theirs = json.loads((hf_folder / "config.json").read_text())
    # transformers_version names the writer; the reference's maker set classifier_dropout_prob to 0,
    # transformers' default (and our GLUE head's rate) is 0.1.
    differ = {k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k)}
    assert differ == {"transformers_version", "classifier_dropout_prob"}
    assert ours["classifier_dropout_prob"] == 0.1 and "transformers_version" not in ours


def test_multi_group_round_trip_is_bit_exact(tmp_path, hf_folder):
    written = hf_folder(tmp_path / "hf", MULTI_GROUP, seed=3)
    config = AlbertConfig.from_json_file(str(tmp_path / "hf" / "config.json"))
    model = AlbertPretrainer(config)
    load_checkpoint(model, str(tmp_path / "hf"))
    # Each group's inner block got its own tensors (Linear weights transposed into kernels).
    for g in range(2):
        for i in range(2):
            block = model.encoder.groups[g][i]
            p = f"albert.encoder.albert_layer_groups.{g}.albert_layers.{i}."
            np.testing.assert_array_equal(block.attention.query.kernel.numpy(), written[p + "attention.query.weight"].T)
            np.testing.assert_array_equal(block.ffn_output.kernel.numpy(), written[p + "ffn_output.weight"].T)
            np.testing.assert_array_equal(block.output_layer_norm.gamma.numpy(),
                                          written[p + "full_layer_layer_norm.weight"])
    save_model_checkpoint(model, str(tmp_path / "ours" / "model.ckpt"))
    again = AlbertPretrainer(config)
    load_checkpoint(again, str(tmp_path / "ours"))
    save_hf_checkpoint(again, str(tmp_path / "back"), "AlbertForPreTraining")
    _assert_same_tensors(safetensors.numpy.load_file(str(tmp_path / "back" / "model.safetensors")), written)
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert {k: back[k] for k in MULTI_GROUP} == MULTI_GROUP and back["hidden_act"] == "gelu_new"


def test_bare_and_sharded_folders(tmp_path, hf_folder):
    """transformers' AlbertModel saves without the `albert.` prefix; large models come in shards."""
    config = dict(MULTI_GROUP, num_hidden_groups=1, inner_group_num=1)
    written = hf_folder(tmp_path / "bare", config, architecture="AlbertModel", prefix="", heads="none")
    model = AlbertModel(AlbertConfig.from_json_file(str(tmp_path / "bare" / "config.json")))
    load_checkpoint(model, str(tmp_path / "bare"))
    np.testing.assert_array_equal(model.pooler.kernel.numpy(), written["pooler.weight"].T)
    save_hf_checkpoint(model, str(tmp_path / "bare_again"), "AlbertModel")
    _assert_same_tensors(safetensors.numpy.load_file(str(tmp_path / "bare_again" / "model.safetensors")), written)

    sharded = tmp_path / "sharded"
    shutil.copytree(tmp_path / "bare", sharded)
    os.remove(sharded / "model.safetensors")
    names = sorted(written)
    weight_map = {}
    for k, part in enumerate((names[:10], names[10:])):
        shard = f"model-0000{k + 1}-of-00002.safetensors"
        safetensors.numpy.save_file({n: written[n] for n in part}, str(sharded / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    from_shards = AlbertModel(model.config)
    load_checkpoint(from_shards, str(sharded))
    for a, b in zip(model.weights, from_shards.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_hf_config_mapping(tmp_path, hf_reference):
    folder, _ = hf_reference
    data = json.loads((folder / "config.json").read_text())
    for hf_act, ours in (("gelu_new", "gelu"), ("gelu_fast", "gelu"), ("gelu_pytorch_tanh", "gelu"),
                         ("gelu", "gelu_erf"), ("gelu_python", "gelu_erf"), ("relu", "relu")):
        assert AlbertConfig.from_dict(dict(data, hidden_act=hf_act)).hidden_act == ours, hf_act
    config = AlbertConfig.from_dict(dict(data, my_field=[1, 2], id2label={"0": "no", "1": "yes"}))
    assert config.extra["my_field"] == [1, 2] and config.extra["pad_token_id"] == 0
    back = config.to_hf_dict("AlbertForSequenceClassification", num_labels=2)
    assert back["my_field"] == [1, 2] and back["id2label"] == {"0": "no", "1": "yes"}
    assert back["label2id"] == {"no": 0, "yes": 1} and back["architectures"] == ["AlbertForSequenceClassification"]
    assert "id2label" not in config.to_hf_dict("AlbertForPreTraining")  # the SOP head needs the default 2 labels
    assert AlbertConfig.from_dict(dict(data, hidden_act="gelu")).to_hf_dict("AlbertModel")["hidden_act"] == "gelu"
    with pytest.raises(ValueError, match="model_type 'bert'"):
        AlbertConfig.from_dict(dict(data, model_type="bert"))
    with pytest.raises(ValueError, match="hidden_act.*'silu'"):
        AlbertConfig.from_dict(dict(data, hidden_act="silu"))
    with pytest.raises(ValueError, match="layer_norm_eps.*1e-05"):
        AlbertConfig.from_dict(dict(data, layer_norm_eps=1e-5))


def test_gelu_erf_is_the_exact_form_and_differs_from_tanh():
    import math

    from albert_tf.modeling.activations import gelu, get_activation

    x = np.linspace(-5, 5, 201)
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    got = get_activation("gelu_erf")(tf.constant(x, tf.float64)).numpy()
    assert np.abs(got - want).max() < 1e-12
    assert np.abs(gelu(tf.constant(x, tf.float64)).numpy() - want).max() > 1e-4


def test_a_custom_runs_labels_name_the_classifiers_hf_labels(tmp_path, random_tf1_checkpoint):
    """A --task_name=custom run writes labels.txt beside its checkpoints; converted to transformers, the
    classifier's id2label carries those names (it had LABEL_0..2), and only when their count fits the head."""
    config = AlbertConfig(**MULTI_GROUP)
    rng = np.random.default_rng(6)
    head = {"output_weights": rng.standard_normal([3, config.hidden_size]).astype(np.float32),
            "output_bias": rng.standard_normal([3]).astype(np.float32)}
    run = tmp_path / "run"
    run.mkdir()
    random_tf1_checkpoint(config, run / "model.ckpt-best", extra=head)
    config.to_json_file(str(tmp_path / "albert_config.json"))
    (run / "labels.txt").write_text("neg\nneutral\npos\n", encoding="utf-8")
    convert(str(run / "model.ckpt-best"), str(tmp_path / "hf"), "tf1_to_hf",
            config_file=str(tmp_path / "albert_config.json"))
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["id2label"] == {"0": "neg", "1": "neutral", "2": "pos"}
    assert hf_config["label2id"] == {"neg": 0, "neutral": 1, "pos": 2}

    (run / "labels.txt").write_text("neg\npos\n", encoding="utf-8")  # another run's: not this head's labels
    convert(str(run / "model.ckpt-best"), str(tmp_path / "hf2"), "tf1_to_hf",
            config_file=str(tmp_path / "albert_config.json"))
    hf_config = json.loads((tmp_path / "hf2" / "config.json").read_text())
    assert hf_config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}

    (run / "labels.txt").unlink()
    (run / "labels.txt").mkdir()  # unreadable (as one without read permission): the names are only a nicety
    convert(str(run / "model.ckpt-best"), str(tmp_path / "hf3"), "tf1_to_hf",
            config_file=str(tmp_path / "albert_config.json"))
    assert json.loads((tmp_path / "hf3" / "config.json").read_text())["id2label"]["0"] == "LABEL_0"


def test_task_heads_use_transformers_class_names(tmp_path, random_tf1_checkpoint):
    config = AlbertConfig(**MULTI_GROUP)
    H = config.hidden_size
    rng = np.random.default_rng(5)
    glue = {"output_weights": rng.standard_normal([3, H]).astype(np.float32),
            "output_bias": rng.standard_normal([3]).astype(np.float32)}
    weights = random_tf1_checkpoint(config, tmp_path / "glue.ckpt", extra=glue)
    config.to_json_file(str(tmp_path / "albert_config.json"))
    done = convert(str(tmp_path / "glue.ckpt"), str(tmp_path / "glue_hf"), "tf1_to_hf",
                   config_file=str(tmp_path / "albert_config.json"))
    assert done.kind == "classifier"
    tensors = safetensors.numpy.load_file(str(tmp_path / "glue_hf" / "model.safetensors"))
    np.testing.assert_array_equal(tensors["classifier.weight"], glue["output_weights"])
    np.testing.assert_array_equal(tensors["albert.pooler.weight"], weights["bert/pooler/dense/kernel"].T)
    assert not any(n.startswith(("predictions.", "sop_classifier.")) for n in tensors)
    hf_config = json.loads((tmp_path / "glue_hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["AlbertForSequenceClassification"] and len(hf_config["id2label"]) == 3
    back = convert(str(tmp_path / "glue_hf"), str(tmp_path / "glue_tf1" / "model.ckpt"), "hf_to_tf1")
    assert back.kind == "classifier"
    tf1 = _tf1_tensors(tmp_path / "glue_tf1" / "model.ckpt")
    np.testing.assert_array_equal(tf1["output_bias"], glue["output_bias"])

    race = {"output_weights": rng.standard_normal([1, H]).astype(np.float32),
            "output_bias": rng.standard_normal([1]).astype(np.float32)}
    random_tf1_checkpoint(config, tmp_path / "race.ckpt", extra=race)
    convert(str(tmp_path / "race.ckpt"), str(tmp_path / "race_hf"), "tf1_to_hf", kind="race",
            config_file=str(tmp_path / "albert_config.json"))
    race_config = json.loads((tmp_path / "race_hf" / "config.json").read_text())
    assert race_config["architectures"] == ["AlbertForMultipleChoice"]
    assert convert(str(tmp_path / "race_hf"), str(tmp_path / "race_tf1" / "model.ckpt"), "hf_to_tf1").kind == "race"
    np.testing.assert_array_equal(_tf1_tensors(tmp_path / "race_tf1" / "model.ckpt")["output_weights"],
                                  race["output_weights"])
    # run_race.py's model holds it in our format too, and is told from a GLUE head there
    convert(str(tmp_path / "race_hf"), str(tmp_path / "race_tf2" / "model.ckpt"), "hf_to_tf2")
    back = convert(str(tmp_path / "race_tf2" / "model.ckpt"), str(tmp_path / "race_tf1b" / "model.ckpt"),
                   "tf2_to_tf1", config_file=str(tmp_path / "albert_config.json"))
    assert back.kind == "race"
    np.testing.assert_array_equal(_tf1_tensors(tmp_path / "race_tf1b" / "model.ckpt")["output_bias"],
                                  race["output_bias"])

    squad = {"cls/squad/output_weights": rng.standard_normal([2, H]).astype(np.float32),
             "cls/squad/output_bias": rng.standard_normal([2]).astype(np.float32)}
    random_tf1_checkpoint(config, tmp_path / "squad.ckpt", extra=squad)
    assert convert(str(tmp_path / "squad.ckpt"), str(tmp_path / "squad_hf"), "tf1_to_hf",
                   config_file=str(tmp_path / "albert_config.json")).kind == "squad"
    tensors = safetensors.numpy.load_file(str(tmp_path / "squad_hf" / "model.safetensors"))
    np.testing.assert_array_equal(tensors["qa_outputs.weight"], squad["cls/squad/output_weights"])
    assert not any("pooler" in n for n in tensors)  # AlbertForQuestionAnswering has no pooler
    # ... and is read back without one: the span head never uses it
    back = convert(str(tmp_path / "squad_hf"), str(tmp_path / "squad_tf1" / "model.ckpt"), "hf_to_tf1")
    assert back.kind == "squad" and back.report.missing_allowed == ["bert/pooler/dense/bias",
                                                                    "bert/pooler/dense/kernel"]
    np.testing.assert_array_equal(_tf1_tensors(tmp_path / "squad_tf1" / "model.ckpt")["cls/squad/output_bias"],
                                  squad["cls/squad/output_bias"])


def test_squad_v2_head_is_refused_in_one_line(tmp_path, random_tf1_checkpoint):
    from albert_tf.weights.kinds import tf1_name_map
    from albert_tf.squad.heads import build_squad_model

    config = AlbertConfig(**MULTI_GROUP)
    config.to_json_file(str(tmp_path / "albert_config.json"))
    model = build_squad_model(config, version_2=True)
    save_tf1_checkpoint(model, str(tmp_path / "v2" / "model.ckpt"))
    assert "answer_class/dense_0/kernel" in tf1_name_map(model)
    done = _convert_cli(f"--checkpoint_to_convert={tmp_path / 'v2'}",
                        f"--albert_config_file={tmp_path}/albert_config.json",
                        f"--converted_checkpoint={tmp_path / 'hf'}", "--direction=tf1_to_hf")
    assert "SQuAD 2.0 head" in _error_line(done)
    assert not (tmp_path / "hf").exists()


def test_tokenizer_files_for_transformers(tmp_path, shared):
    spm = shared("data", "spm", "30k-clean.model")
    config = AlbertConfig(vocab_size=30000, embedding_size=8, hidden_size=12, num_hidden_layers=1,
                          num_attention_heads=3, intermediate_size=20, max_position_embeddings=32)
    model = AlbertModel(config)
    model(model.dummy_inputs())
    save_hf_checkpoint(model, str(tmp_path / "hf"), "AlbertModel", spm_model_file=str(spm), do_lower_case=True)
    assert (tmp_path / "hf" / "spiece.model").read_bytes() == spm.read_bytes()
    tokenizer = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert tokenizer["tokenizer_class"] == "AlbertTokenizer" and tokenizer["do_lower_case"] is True
    assert (tokenizer["cls_token"], tokenizer["sep_token"], tokenizer["mask_token"]) == ("[CLS]", "[SEP]", "[MASK]")
    assert tokenizer["model_max_length"] == 32 and tokenizer["keep_accents"] is False
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (hf_config["pad_token_id"], hf_config["bos_token_id"], hf_config["eos_token_id"]) == (0, 2, 3)
    with pytest.raises(CheckpointError, match="30000 pieces.*vocab_size is 40"):
        save_hf_checkpoint(AlbertModel(AlbertConfig(**MULTI_GROUP)), str(tmp_path / "bad"), "AlbertModel",
                           spm_model_file=str(spm))
    assert not (tmp_path / "bad").exists()


def test_an_interrupted_write_leaves_no_file_and_the_rerun_writes_them_all(tmp_path, shared, monkeypatch):
    """Ctrl-C while one of the folder's files is written (here the tokenizer's copy, which came after the
    weights had been renamed into place): none of them is in place, so the rerun (which replaces nothing)
    goes through."""
    spm = shared("data", "spm", "30k-clean.model")
    config = AlbertConfig(vocab_size=30000, embedding_size=8, hidden_size=12, num_hidden_layers=1,
                          num_attention_heads=3, intermediate_size=20, max_position_embeddings=32)
    model = AlbertModel(config)
    model(model.dummy_inputs())
    folder = tmp_path / "hf"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tf.io.gfile, "copy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_hf_checkpoint(model, str(folder), "AlbertModel", spm_model_file=str(spm))
    assert list(folder.iterdir()) == []
    monkeypatch.undo()
    save_hf_checkpoint(model, str(folder), "AlbertModel", spm_model_file=str(spm))
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "spiece.model",
                                                        "tokenizer_config.json"]


def test_ctrl_c_between_the_renames_acts_after_the_last(tmp_path, monkeypatch, sigint_raises):
    """Every file is written before the first rename; a Ctrl-C that arrives just after the weights were renamed
    into place used to stop there, leaving model.safetensors without config.json (a folder the rerun refuses to
    write into). It now acts once the folder is complete."""
    import signal

    from albert_tf import fileio

    model = AlbertModel(AlbertConfig(**MULTI_GROUP))
    model(model.dummy_inputs())
    real_replace = os.replace

    def replace_then_interrupt(src, dst):
        real_replace(src, dst)
        if str(dst).endswith("model.safetensors"):
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(fileio.os, "replace", replace_then_interrupt)
    folder = tmp_path / "hf"
    with pytest.raises(KeyboardInterrupt):
        save_hf_checkpoint(model, str(folder), "AlbertModel")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((folder / "config.json").read_text())["num_hidden_groups"] == 2


@pytest.mark.parametrize("fault", ["file_size_limit", "full_disk"])
def test_storage_out_of_room_while_writing_the_weights_is_one_line_naming_them(tmp_path, monkeypatch, fault):
    """safetensors raises its own SafetensorError (a 31-line traceback from convert_checkpoint): it is the
    OSError of any other output, naming model.safetensors, and nothing is left in the folder. The file size
    limit is real (ulimit -f: config.json fits, the weights do not); the full disk is safetensors' words."""
    import resource
    import signal

    from albert_tf.cli import error_line

    model = AlbertModel(AlbertConfig(**MULTI_GROUP))
    model(model.dummy_inputs())
    folder = tmp_path / "hf"
    folder.mkdir()
    weights = folder / "model.safetensors"
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if fault == "full_disk":
        def full(*args, **kwargs):
            raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on device "
                                              "(os error 28)")
        monkeypatch.setattr(safetensors.numpy, "save_file", full)
    else:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
    try:
        with pytest.raises(OSError) as raised:
            save_hf_checkpoint(model, str(folder), "AlbertModel")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    want = {"file_size_limit": "[Errno 27] File too large", "full_disk": "[Errno 28] No space left on device"}
    assert error_line(raised.value) == f"{want[fault]}: '{weights}'"
    assert list(folder.iterdir()) == []


# ---- bad input: one line naming the file (and tensor), nothing written ----

def _bad_folder(tmp_path, hf_reference, name):
    folder = tmp_path / name
    shutil.copytree(hf_reference[0], folder)
    os.chmod(folder, 0o755)
    for path in folder.iterdir():
        os.chmod(path, 0o644)
    return folder


def test_folder_without_config_or_weights(tmp_path, hf_reference):
    model = AlbertPretrainer(AlbertConfig.from_json_file(str(hf_reference[0] / "config.json")))
    no_config = _bad_folder(tmp_path, hf_reference, "no_config")
    os.remove(no_config / "config.json")
    with pytest.raises(CheckpointError, match=r"no_config has no config\.json"):
        load_checkpoint(model, str(no_config))
    no_weights = _bad_folder(tmp_path, hf_reference, "no_weights")
    os.remove(no_weights / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"no_weights has no model\.safetensors"):
        load_checkpoint(model, str(no_weights))
    bert = _bad_folder(tmp_path, hf_reference, "bert")
    (bert / "config.json").write_text(json.dumps(dict(json.loads((bert / "config.json").read_text()),
                                                      model_type="bert")))
    with pytest.raises(CheckpointError, match=r"bert/config\.json: model_type is 'bert'"):
        load_checkpoint(model, str(bert))


def test_pickle_weights_are_refused(tmp_path, hf_reference):
    folder = _bad_folder(tmp_path, hf_reference, "pickled")
    os.rename(folder / "model.safetensors", folder / "pytorch_model.bin")
    done = _convert_cli(f"--checkpoint_to_convert={folder}", f"--converted_checkpoint={tmp_path}/out/model.ckpt",
                        "--direction=hf_to_tf1")
    line = _error_line(done)
    assert "pytorch_model.bin: only safetensors weights are read" in line and "pickle" in line
    assert not (tmp_path / "out").exists()
    with pytest.raises(CheckpointError, match="only safetensors"):
        load_checkpoint(AlbertModel(AlbertConfig(**MULTI_GROUP)), str(folder / "pytorch_model.bin"))


def test_shape_disagreeing_with_config_names_file_and_tensor(tmp_path, hf_reference):
    folder = _bad_folder(tmp_path, hf_reference, "bad_shape")
    tensors = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    name = "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"
    tensors[name] = tensors[name][:80]
    safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    done = _convert_cli(f"--checkpoint_to_convert={folder}", f"--converted_checkpoint={tmp_path}/out",
                        "--direction=hf_to_tf2")
    line = _error_line(done)
    assert f"{folder}/model.safetensors: tensor {name} has shape [80, 48], expected [96, 48]" in line
    assert "intermediate_size" in line
    assert not (tmp_path / "out").exists()


def test_run_classifier_fine_tunes_from_an_hf_folder(tmp_path, hf_folder, shared):
    """--init_checkpoint=<HF folder> with --albert_config_file=<HF folder>/config.json, through the real
    driver. With learning rate 0 the saved checkpoint holds exactly the weights the driver loaded."""
    config = dict(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=32)
    written = hf_folder(tmp_path / "hf", config, seed=11)
    data = tmp_path / "glue" / "SST-2"
    data.mkdir(parents=True)
    (data / "train.tsv").write_text("sentence\tlabel\na charming journey\t1\nno wit , only labored gags\t0\n")
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=SST-2",
         f"--data_dir={tmp_path / 'glue'}",
         f"--albert_config_file={tmp_path / 'hf' / 'config.json'}", f"--init_checkpoint={tmp_path / 'hf'}",
         f"--spm_model_file={shared('data', 'spm', '30k-clean.model')}", f"--output_dir={tmp_path / 'out'}",
         "--do_train", "--max_seq_length=16", "--train_batch_size=2", "--train_step=1", "--save_checkpoints_steps=1",
         "--iterations_per_loop=1", "--learning_rate=0", "--warmup_step=0"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hf format" in done.stderr  # the driver's init_checkpoint log line
    model = AlbertModel(AlbertConfig.from_json_file(str(tmp_path / "hf" / "config.json")))
    assert load_checkpoint(model, str(tmp_path / "out" / "model.ckpt-1")).format == "tf2"
    block = model.groups[0][0]
    p = "albert.encoder.albert_layer_groups.0.albert_layers.0."
    np.testing.assert_array_equal(block.attention.value.kernel.numpy(), written[p + "attention.value.weight"].T)
    np.testing.assert_array_equal(model.embeddings.word_embeddings.numpy(),
                                  written["albert.embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(model.pooler.bias.numpy(), written["albert.pooler.bias"])


def test_masked_lm_folder_with_old_tied_names(tmp_path, hf_folder):
    """The Hub's ALBERT releases are AlbertForMaskedLM: no sentence-order head, no pooler. Older
    transformers versions also stored the tied decoder (weight = the word table, bias = predictions.bias)."""
    config = dict(MULTI_GROUP, num_hidden_groups=1, inner_group_num=1)
    written = hf_folder(tmp_path / "mlm", config, architecture="AlbertForMaskedLM", pooler=False,
                        heads="masked_lm")
    tensors = dict(written)
    tensors["predictions.decoder.bias"] = tensors.pop("predictions.bias")
    tensors["predictions.decoder.weight"] = tensors["albert.embeddings.word_embeddings.weight"]
    safetensors.numpy.save_file(tensors, str(tmp_path / "mlm" / "model.safetensors"), metadata={"format": "pt"})
    config = AlbertConfig.from_json_file(str(tmp_path / "mlm" / "config.json"))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(AlbertPretrainer(config), str(tmp_path / "mlm"))
    assert "pooler" not in str(err.value)  # AlbertForMaskedLM saves none
    assert "AlbertForMaskedLM has no such head" in str(err.value)
    assert "no tensor sop_classifier.classifier.weight (expected shape [2, 12])" in str(err.value)
    model = AlbertPretrainer(config)
    report = load_checkpoint(model, str(tmp_path / "mlm"), allow_missing_heads=True)
    assert report.missing_allowed == ["bert/pooler/dense/bias", "bert/pooler/dense/kernel",
                                      "cls/seq_relationship/output_bias", "cls/seq_relationship/output_weights"]
    assert report.skipped == ["predictions.decoder.weight"]
    np.testing.assert_array_equal(model.masked_lm.output_bias.numpy(), written["predictions.bias"])


def _handmade_safetensors(path, tensors: dict, dtype: str, to_bytes):
    """The safetensors layout by hand (8-byte header length, JSON header, data), for dtypes the
    safetensors NumPy writer lacks."""
    import struct

    header, data, offset = {"__metadata__": {"format": "pt"}}, b"", 0
    for name, value in tensors.items():
        raw = to_bytes(value)
        header[name] = {"dtype": dtype, "shape": list(value.shape), "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_half_precision_files(tmp_path, hf_folder, dtype):
    import ml_dtypes

    config = dict(MULTI_GROUP, num_hidden_groups=1, inner_group_num=1)
    written = hf_folder(tmp_path / "half", config, seed=7)
    numpy_dtype = np.float16 if dtype == "F16" else ml_dtypes.bfloat16
    _handmade_safetensors(tmp_path / "half" / "model.safetensors", written, dtype,
                          lambda v: v.astype(numpy_dtype).tobytes())
    model = AlbertPretrainer(AlbertConfig.from_json_file(str(tmp_path / "half" / "config.json")))
    load_checkpoint(model, str(tmp_path / "half"))
    want = written["albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"]
    np.testing.assert_array_equal(model.encoder.groups[0][0].intermediate.kernel.numpy(),
                                  want.astype(numpy_dtype).astype(np.float32).T)


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_every_file_of_the_folder_gets_the_umask_mode(tmp_path, mask):
    """model.safetensors too: safetensors' save_file would replace the temporary file with one of mode 0600."""
    model = AlbertModel(AlbertConfig(**MULTI_GROUP))
    model(model.dummy_inputs())
    old = os.umask(mask)
    try:
        save_hf_checkpoint(model, str(tmp_path / "hf"), "AlbertModel")
    finally:
        os.umask(old)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "hf").iterdir()}
    assert modes == {"config.json": oct(0o666 & ~mask), "model.safetensors": oct(0o666 & ~mask)}


def test_a_config_with_fewer_groups_than_the_weights_is_refused(tmp_path, hf_folder):
    """config.json says one group, model.safetensors holds two: the second group's tensors would be lost.
    The converter exits 1 with one line naming them and the config fields, and writes nothing."""
    hf_folder(tmp_path / "hf", MULTI_GROUP)  # 2 groups x 2 inner groups
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(config, num_hidden_groups=1)))
    done = _convert_cli(f"--checkpoint_to_convert={tmp_path / 'hf'}", f"--converted_checkpoint={tmp_path / 'out' / 'model.ckpt'}",
                        "--direction=hf_to_tf1")
    line = _error_line(done)
    assert f"{tmp_path / 'hf' / 'model.safetensors'} holds 32 encoder-layer weights" in line
    assert "albert.encoder.albert_layer_groups.1.albert_layers.0." in line and "num_hidden_groups" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# L=18, G=14: Google's modeling.py gives layer 9 group int(9 / 18 * 14) = 7, transformers' modeling_albert
# int(9 / (18 / 14)) = 6 (float rounding); 18 = 6 x 3 layers with 3 groups agree (both give 0,0,...,2).
ANOTHER_ORDER = dict(vocab_size=40, embedding_size=8, hidden_size=8, num_hidden_layers=18, num_hidden_groups=14,
                     num_attention_heads=2, intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)


def test_a_layer_order_transformers_does_not_share_is_refused_both_ways(tmp_path, hf_folder):
    assert int(9 / 18 * 14) == 7 and int(9 / (18 / 14)) == 6
    model = AlbertModel(AlbertConfig(**ANOTHER_ORDER))
    with pytest.raises(CheckpointError, match=r"^\S*out: with num_hidden_layers=18 and num_hidden_groups=14, "
                                              r"layer 9 uses group 7 in ALBERT but group 6 in transformers"):
        save_hf_checkpoint(model, str(tmp_path / "out"), "AlbertModel")
    assert not (tmp_path / "out").exists()
    hf_folder(tmp_path / "hf", ANOTHER_ORDER, architecture="AlbertModel", prefix="", heads="none")
    done = _convert_cli(f"--checkpoint_to_convert={tmp_path / 'hf'}",
                        f"--converted_checkpoint={tmp_path / 'tf1' / 'model.ckpt'}", "--direction=hf_to_tf1")
    assert f"{tmp_path / 'hf' / 'config.json'}: with num_hidden_layers=18" in _error_line(done)
    with pytest.raises(CheckpointError, match="layer 9 uses group 7 in ALBERT but group 6 in transformers"):
        load_checkpoint(AlbertModel(AlbertConfig(**ANOTHER_ORDER)), str(tmp_path / "hf"))
    agreeing = dict(ANOTHER_ORDER, num_hidden_groups=3)
    save_hf_checkpoint(AlbertModel(AlbertConfig(**agreeing)), str(tmp_path / "fine"), "AlbertModel")


def test_a_folder_without_the_tasks_head_names_no_flag_the_fine_tuning_drivers_lack(tmp_path, hf_folder):
    """run_classifier.py --do_predict on a pretrained folder (AlbertModel: no classifier) was told to pass
    --allow_missing_heads, which only the converter and export_model.py have; a TF1 checkpoint without a
    head gets the fine-tuning hint."""
    from albert_tf.glue.heads import GlueClassifier

    config = dict(MULTI_GROUP, num_hidden_groups=1, inner_group_num=1)
    hf_folder(tmp_path / "base", config, architecture="AlbertModel")
    config = AlbertConfig.from_json_file(str(tmp_path / "base" / "config.json"))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(GlueClassifier(config, num_labels=2), str(tmp_path / "base"))
    line = str(err.value)
    assert "no tensor classifier.weight" in line
    assert "--allow_missing_heads" not in line
    assert "train first (--do_train), or give a fine-tuned checkpoint" in line
