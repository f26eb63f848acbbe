"""export_model.py: every signature, reloaded in a fresh process, matches the Keras model."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.weights import save_tf1_checkpoint
from albert_tf.tokenization import FullTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SENTENCES = ["The quick brown fox, version 3.0, jumps.", "Hello world!"]
SEQ = 16


@pytest.fixture(scope="module")
def exported(tmp_path_factory, shared):
    spm = str(shared("data", "spm", "30k-clean.model"))
    folder = tmp_path_factory.mktemp("export")
    config = AlbertConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_hidden_groups=2, num_attention_heads=4, intermediate_size=64,
                          max_position_embeddings=32)
    config.to_json_file(str(folder / "albert_config.json"))
    model = AlbertPretrainer(config)
    model(model.dummy_inputs())
    save_tf1_checkpoint(model, str(folder / "google" / "model.ckpt"))
    done = subprocess.run([sys.executable, os.path.join(REPO, "export_model.py"),
                           f"--albert_config_file={folder / 'albert_config.json'}",
                           f"--checkpoint={folder / 'google' / 'model.ckpt'}", f"--spm_model_file={spm}",
                           f"--export_path={folder / 'saved'}", f"--max_seq_length={SEQ}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, model, spm


def _reference(model, spm):
    tokenizer = FullTokenizer(spm_model_file=spm, do_lower_case=True)
    ids = np.zeros([2, SEQ], np.int32)
    for row, text in enumerate(SENTENCES):
        pieces = tokenizer.convert_tokens_to_ids(["[CLS]", *tokenizer.tokenize(text), "[SEP]"])
        ids[row, :len(pieces)] = pieces
    inputs = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": np.zeros_like(ids),
              "masked_lm_positions": np.array([[1, 2, 3], [1, 2, 0]], np.int32)}
    out = model(inputs)
    sop = out["sop_logits"].numpy()
    sop = sop - np.log(np.exp(sop).sum(-1, keepdims=True))
    return inputs, {"sequence_output": out["sequence_output"].numpy(), "pooled_output": out["pooled_output"].numpy(),
                    "mlm_logits": out["mlm_logits"].numpy(), "sop_log_probs": sop}


def test_signatures_match_keras_in_fresh_process(exported, tmp_path):
    folder, model, spm = exported
    inputs, want = _reference(model, spm)
    np.savez(tmp_path / "io.npz", **inputs, **{"want_" + k: v for k, v in want.items()})
    script = textwrap.dedent(f"""
        import json, numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
        io = np.load({str(tmp_path / 'io.npz')!r})
        loaded = tf.saved_model.load({str(folder / 'saved')!r})
        sigs = loaded.signatures
        ids = {{k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}}
        worst = {{}}
        def diff(signature, name, got):  # one entry per (signature, output): none overwrites another
            want = io["want_" + name]
            if name == "sequence_output":  # the text signature computes at the longest row: compare its positions
                want = want[:, :got.shape[1]]
            worst[signature + "/" + name] = float(np.abs(got.numpy() - want).max())
        out = sigs["tokens"](**ids)
        diff("tokens", "sequence_output", out["sequence_output"])
        diff("tokens", "pooled_output", out["pooled_output"])
        out = sigs["mlm"](**ids, mlm_positions=tf.constant(io["masked_lm_positions"]))
        for name in ("mlm_logits", "sequence_output", "pooled_output"):
            diff("mlm", name, out[name])
        out = sigs["sop"](**ids)
        for name in ("sop_log_probs", "sequence_output", "pooled_output"):
            diff("sop", name, out[name])
        text = sigs["serving_default"](text=tf.constant({SENTENCES!r}))
        width = text["input_ids"].shape[1]  # packed to the longest row, not to max_seq_length
        worst["text_ids_equal"] = bool((text["input_ids"].numpy() == io["input_ids"][:, :width]).all()
                                       and not io["input_mask"][:, width:].any()
                                       and io["input_mask"][:, width - 1].any())
        worst["text_mask_equal"] = bool((text["input_mask"].numpy() == io["input_mask"][:, :width]).all())
        diff("serving_default", "sequence_output", text["sequence_output"])
        diff("serving_default", "pooled_output", text["pooled_output"])
        info = sigs["tokenization_info"]()
        worst["asset"] = info["vocab_file"].numpy().decode()
        worst["lower"] = bool(info["do_lower_case"].numpy())
        print(json.dumps(worst))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    outputs = {"tokens": ("sequence_output", "pooled_output"),
               "mlm": ("mlm_logits", "sequence_output", "pooled_output"),
               "sop": ("sop_log_probs", "sequence_output", "pooled_output"),
               "serving_default": ("sequence_output", "pooled_output")}
    keys = [f"{signature}/{name}" for signature, names in outputs.items() for name in names]
    assert sorted(k for k in result if "/" in k) == sorted(keys)
    for key in keys:
        assert result[key] <= 1e-5, (key, result[key])
    assert result["text_ids_equal"] and result["text_mask_equal"]
    assert result["asset"].endswith("30k-clean.model") and os.path.exists(result["asset"])
    assert result["lower"] is True


def test_id_signatures_take_lengths_up_to_max_position_embeddings(exported, tmp_path):
    """The original's module took ids of any length up to max_position_embeddings; ours stopped at
    --max_seq_length (default 128), so export_to_tfhub.py's command (no --max_seq_length) built a module
    refusing 129-512 tokens (SQuAD at 384). The fixture exports with --max_seq_length=16 and 32 positions."""
    folder, model, _ = exported
    assert model.config.max_position_embeddings == 32 > 24 > SEQ
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 30000, [2, 24]).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 19:] = 0
    inputs = {"input_ids": ids * mask, "input_mask": mask, "segment_ids": (np.arange(24)[None] >= 10) * mask}
    inputs = {k: v.astype(np.int32) for k, v in inputs.items()}
    out = model.encoder(inputs, training=False)
    np.savez(tmp_path / "io.npz", **inputs, want_sequence_output=out["sequence_output"].numpy(),
             want_pooled_output=out["pooled_output"].numpy())
    script = textwrap.dedent(f"""
        import json, numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
        io = np.load({str(tmp_path / 'io.npz')!r})
        tokens = tf.saved_model.load({str(folder / 'saved')!r}).signatures["tokens"]
        ids = {{k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}}
        result = {{k: float(np.abs(v.numpy() - io["want_" + k]).max()) for k, v in tokens(**ids).items()}}
        try:
            tokens(**{{k: tf.zeros([1, 33], tf.int32) for k in ids}})
            result["refused"] = None
        except tf.errors.InvalidArgumentError as e:
            result["refused"] = e.message
        print(json.dumps(result))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["sequence_output"] <= 1e-5 and result["pooled_output"] <= 1e-5, result
    refused = result["refused"] or ""  # the graph's message escapes the apostrophe: model\'s
    assert "input length exceeds this model" in refused and "max_position_embeddings (32); shorten" in refused


def test_id_signatures_name_input_ids_outside_the_vocabulary(exported):
    """An id >= vocab_size or < 0 given to tokens, mlm or sop failed in the graph's embedding gather
    ("indices[0,2] = 30000 is not in [0, 30000) [[{{node ...embeddings/Gather}}]]"): now the message names
    input_ids, the id and the vocab_size; segment_ids past type_vocab_size likewise."""
    folder, _, _ = exported
    script = textwrap.dedent(f"""
        import json, tensorflow as tf, tensorflow_text  # noqa: F401
        sigs = tf.saved_model.load({str(folder / 'saved')!r}).signatures
        result = {{}}
        for name, bad in (("tokens", 30000), ("mlm", 31234), ("sop", -1)):
            ids = tf.constant([[2, 40, bad, 3]])
            extra = {{"mlm_positions": tf.constant([[1]])}} if name == "mlm" else {{}}
            try:
                sigs[name](input_ids=ids, input_mask=tf.ones_like(ids), segment_ids=tf.zeros_like(ids), **extra)
                result[name] = None
            except tf.errors.InvalidArgumentError as e:
                result[name] = e.message
        ids = tf.constant([[2, 40, 41, 3]])
        try:
            sigs["tokens"](input_ids=ids, input_mask=tf.ones_like(ids), segment_ids=tf.constant([[0, 0, 2, 1]]))
            result["segments"] = None
        except tf.errors.InvalidArgumentError as e:
            result["segments"] = e.message
        good = tf.constant([[2, 29999, 0, 3]])
        result["edge"] = sigs["tokens"](input_ids=good, input_mask=tf.ones_like(good),
                                        segment_ids=tf.zeros_like(good))["pooled_output"].shape.as_list()
        print(json.dumps(result))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for name, bad in (("tokens", 30000), ("mlm", 31234), ("sop", -1)):
        message = result[name] or ""
        assert "input_ids holds an id outside [0, 30000) (vocab_size 30000 of the ALBERT config); ids made with " \
               "another tokenizer?" in message, (name, message)
        assert f"The id:] [{bad}]" in message, (name, message)
    # segment_ids past type_vocab_size (2): on a GPU the gather gives zeros, wrong numbers without an error.
    assert "segment_ids holds an id outside [0, 2) (type_vocab_size 2 of the ALBERT config); they run from 0 " \
           "to 1. The id:] [2]" in (result["segments"] or ""), result["segments"]
    assert result["edge"] == [1, 32]


def test_export_is_a_reusable_saved_model(exported, tmp_path):
    """What hub.KerasLayer(path, trainable=True) fine-tunes (TF Hub's reusable SavedModel): the reload has
    __call__ (the tokens outputs), variables, trainable_variables and an empty regularization_losses, and
    gradients flow through __call__ to every trainable variable. It had none of these: KerasLayer refused
    to fine-tune it. Checked in a fresh process without albert_tf, against the Keras encoder."""
    import tensorflow as tf

    folder, model, spm = exported
    inputs, _ = _reference(model, spm)
    ids = {k: tf.constant(inputs[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    rng = np.random.default_rng(1)
    weights = {"sequence_output": rng.normal(size=[2, SEQ, 32]).astype(np.float32),
               "pooled_output": rng.normal(size=[2, 32]).astype(np.float32)}
    encoder = model.encoder
    with tf.GradientTape() as tape:
        out = encoder(ids, training=True)  # the config's dropout is 0: training changes nothing else
        loss = sum(tf.reduce_sum(out[k] * w) for k, w in weights.items())
    grads = tape.gradient(loss, encoder.trainable_variables)
    np.savez(tmp_path / "io.npz", **inputs, **{"w_" + k: w for k, w in weights.items()},
             **{"want_" + k: out[k].numpy() for k in weights},
             **{f"grad_{i}": tf.convert_to_tensor(g).numpy() for i, g in enumerate(grads)})
    script = textwrap.dedent(f"""
        import json, sys, numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
        io = np.load({str(tmp_path / 'io.npz')!r})
        obj = tf.saved_model.load({str(folder / 'saved')!r})
        ids = {{k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}}
        result = {{"outputs": {{k: float(np.abs(v.numpy() - io["want_" + k]).max()) for k, v in obj(ids).items()}},
                   "variables": len(obj.variables), "trainable": len(obj.trainable_variables),
                   "all_trainable": all(v.trainable for v in obj.trainable_variables),
                   "regularization_losses": list(obj.regularization_losses), "albert_tf": "albert_tf" in sys.modules}}
        with tf.GradientTape() as tape:
            out = obj(ids, training=True)
            loss = sum(tf.reduce_sum(out[k] * io["w_" + k]) for k in ("sequence_output", "pooled_output"))
        grads = tape.gradient(loss, obj.trainable_variables)
        result["none"] = sum(g is None for g in grads)
        result["grad"] = max(float(np.abs(tf.convert_to_tensor(g).numpy() - io[f"grad_{{i}}"]).max())
                             for i, g in enumerate(grads) if g is not None)
        print(json.dumps(result))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert not result["albert_tf"]
    assert sorted(result["outputs"]) == ["pooled_output", "sequence_output"]
    assert max(result["outputs"].values()) <= 1e-5, result
    assert result["variables"] == result["trainable"] == len(encoder.trainable_variables) and result["all_trainable"]
    assert result["regularization_losses"] == [] and result["none"] == 0
    assert result["grad"] <= 1e-4, result["grad"]


def test_export_is_a_fine_tuning_start(exported):
    """export -> fine-tune: the export's assets hold albert_config.json, and load_checkpoint (the
    drivers' --init_checkpoint / --albert_hub_module_handle path) reads its variables exactly."""
    from albert_tf.drivers.finetuning import init_checkpoint_from_flags
    from albert_tf.glue.heads import GlueClassifier
    from albert_tf import AlbertModel, load_checkpoint
    from albert_tf.weights.loading import fine_tuning_init
    from albert_tf.weights.kinds import tf1_name_map

    folder, model, _ = exported
    saved = str(folder / "saved")
    config = AlbertConfig.from_json_file(os.path.join(saved, "assets", "albert_config.json"))
    assert config.to_dict() == model.config.to_dict()
    again = AlbertPretrainer(config)
    report = load_checkpoint(again, saved)
    assert report.format == "export" and not report.missing_allowed and report.skipped == []
    want = tf1_name_map(model)
    got = tf1_name_map(again)
    assert sorted(report.loaded) == sorted(want) == sorted(got)
    for name, variable in want.items():
        assert np.array_equal(got[name].numpy(), variable.numpy()), name
    classifier = GlueClassifier(AlbertModel(config), 2)
    fine_tuning_init(init_checkpoint_from_flags(None, saved))(classifier)
    for name, variable in tf1_name_map(classifier).items():
        if name.startswith("bert/"):
            assert np.array_equal(variable.numpy(), want[name].numpy()), name


def test_the_drivers_fit_check_reads_the_exports_names_and_shapes(exported):
    """The drivers' check of --init_checkpoint / --albert_hub_module_handle uses an encoder whose variables have
    no values (``_variables_without_values``): the same TF1 names and shapes as a built one, and it accepts the
    export and the Google checkpoint it came from."""
    from albert_tf import AlbertModel
    from albert_tf.drivers.finetuning import _variables_without_values
    from albert_tf.weights import check_fits
    from albert_tf.weights.kinds import tf1_name_map

    folder, model, _ = exported
    unvalued = _variables_without_values(model.config)
    eager = AlbertModel(model.config)
    eager(eager.dummy_inputs())
    assert ({n: v.shape.as_list() for n, v in tf1_name_map(unvalued).items()}
            == {n: v.shape.as_list() for n, v in tf1_name_map(eager).items()})
    for path in (folder / "saved", folder / "google" / "model.ckpt"):
        assert check_fits(unvalued, str(path)) == [], path


def _called_functions(nodes) -> set:
    """Names of the functions that `nodes` call (through any function-valued attribute)."""
    names = set()
    for node in nodes:
        for value in node.attr.values():
            names.update(f.name for f in [value.func, *value.list.func] if f.name)
    return names


def test_export_serves_without_xla(exported):
    """Training compiles a few elementwise steps with XLA (`albert_tf.fused`); what an export
    runs must not: TensorFlow Serving runs XLA-compiled functions only when started with XLA on.
    (The saved custom gradients, which only training on the SavedModel would run, may.)"""
    from tensorflow.core.protobuf import saved_model_pb2

    folder, _, _ = exported
    saved = saved_model_pb2.SavedModel()
    with open(folder / "saved" / "saved_model.pb", "rb") as f:
        saved.ParseFromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    functions = {function.signature.name: function for function in graph.library.function}
    reachable, frontier = set(), _called_functions(graph.node)
    while frontier:
        reachable |= frontier
        frontier = _called_functions(node for name in frontier if name in functions
                                     for node in functions[name].node_def) - reachable
    assert any("serving" in name or "signature" in name for name in reachable), sorted(reachable)[:20]
    compiled = [name for name in reachable if name in functions and functions[name].attr["_XlaMustCompile"].b]
    compiled += [node.name for name in reachable if name in functions for node in functions[name].node_def
                 if node.attr["_XlaMustCompile"].b]
    assert not compiled, compiled


def test_export_refuses_wrong_tokenizer(exported, tmp_path, shared):
    folder, _, _ = exported
    small = str(shared("data", "spm", "sentencepiece_test_model.model"))
    done = subprocess.run([sys.executable, os.path.join(REPO, "export_model.py"),
                           f"--albert_config_file={folder / 'albert_config.json'}",
                           f"--checkpoint={folder / 'google'}", f"--spm_model_file={small}",
                           f"--export_path={tmp_path / 'bad'}"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert "error:" in done.stderr
    assert not (tmp_path / "bad").exists()


def test_export_to_tfhub_form(exported, tmp_path):
    """export_to_tfhub.py's command line: --albert_directory with the default --checkpoint_name
    (model.ckpt-best) and the original's --use_einsum; the reload matches the same Keras model."""
    folder, model, spm = exported
    albert_dir = tmp_path / "albert_base"
    albert_dir.mkdir()
    os.symlink(folder / "albert_config.json", albert_dir / "albert_config.json")
    os.symlink(spm, albert_dir / "30k-clean.model")
    for f in (folder / "google").glob("model.ckpt.*"):
        os.symlink(f, albert_dir / f.name.replace("model.ckpt", "model.ckpt-best"))
    done = subprocess.run([sys.executable, os.path.join(REPO, "export_model.py"), f"--albert_directory={albert_dir}",
                           f"--export_path={tmp_path / 'hub'}", "--use_einsum=false", "--do_lower_case",
                           f"--max_seq_length={SEQ}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    inputs, want = _reference(model, spm)
    np.savez(tmp_path / "io.npz", **inputs, **{"want_" + k: v for k, v in want.items()})
    script = textwrap.dedent(f"""
        import json, numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
        io = np.load({str(tmp_path / 'io.npz')!r})
        sop = tf.saved_model.load({str(tmp_path / 'hub')!r}).signatures["sop"](
            **{{k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}})
        print(json.dumps({{k: float(np.abs(v.numpy() - io["want_" + k]).max()) for k, v in sop.items()}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(result) == ["pooled_output", "sequence_output", "sop_log_probs"]
    assert max(result.values()) <= 1e-5, result


def test_a_max_seq_length_beyond_the_positions_is_refused_before_the_checkpoint_is_read(exported, tmp_path):
    """The default --max_seq_length=128 with a config of fewer positions (32 here) was refused only once the
    checkpoint had loaded (minutes for a real model). The checkpoint here does not exist: the old error was
    about it. With --notext_signature the flag is unused, so the checkpoint is what is missing then."""
    folder, _, spm = exported
    config = folder / "albert_config.json"

    def run(*extra):
        return subprocess.run([sys.executable, os.path.join(REPO, "export_model.py"), f"--albert_config_file={config}",
                               f"--checkpoint={tmp_path / 'missing' / 'model.ckpt'}", f"--spm_model_file={spm}",
                               f"--export_path={tmp_path / 'x'}", *extra], capture_output=True, text=True, timeout=600)

    for extra, given in (((), "128 (its default)"), (("--max_seq_length=64",), "64")):
        done = run(*extra)
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == (
            f"export_model.py: error: --max_seq_length={given} exceeds max_position_embeddings 32 of "
            f"--albert_config_file={config}: pass --max_seq_length=32 or less"), done.stderr[-3000:]
    done = run("--notext_signature")
    assert done.returncode == 1 and "--max_seq_length" not in done.stderr and "checkpoint not found" in done.stderr
    assert not (tmp_path / "x").exists()


def test_albert_directory_errors(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(REPO, "export_model.py"),
                           f"--albert_directory={tmp_path / 'missing'}", f"--export_path={tmp_path / 'x'}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "--albert_directory=" in done.stderr and "not a directory" in done.stderr
    assert not (tmp_path / "x").exists()


def test_a_checkpoint_of_another_config_is_one_line(exported, tmp_path):
    """A checkpoint of another model size: every weight differs, and the error was a line per weight (31
    lines after the driver's). One line now: the checkpoint, the first weight and the config flag."""
    folder, _, spm = exported
    other = AlbertPretrainer(AlbertConfig(vocab_size=30000, embedding_size=8, hidden_size=24, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=48, max_position_embeddings=32))
    other(other.dummy_inputs())
    prefix = save_tf1_checkpoint(other, str(tmp_path / "other" / "model.ckpt"))
    done = _export(folder, spm, tmp_path / "x", checkpoint=prefix)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    last = done.stderr.strip().splitlines()[-1]
    assert errors == [last], done.stderr[-3000:]
    assert last.startswith(f"export_model.py: error: checkpoint {prefix} does not fit the model (")
    assert "bert/embeddings/word_embeddings: expected shape [30000, 16], found shape [30000, 8]" in last
    assert last.endswith(f"(was it written for another config than "
                         f"--albert_config_file={folder / 'albert_config.json'}?)")
    assert not (tmp_path / "x").exists()


def _export(folder, spm, export_path, checkpoint=None, mask=None, extra=()):
    return subprocess.run([sys.executable, os.path.join(REPO, "export_model.py"),
                           f"--albert_config_file={folder / 'albert_config.json'}",
                           f"--checkpoint={checkpoint or folder / 'google' / 'model.ckpt'}", f"--spm_model_file={spm}",
                           f"--export_path={export_path}", f"--max_seq_length={SEQ}", *extra],
                          capture_output=True, text=True, timeout=600,
                          preexec_fn=None if mask is None else (lambda: os.umask(mask)))


def test_export_path_with_other_files_or_a_file_is_refused_before_any_work(exported, tmp_path):
    """Nothing of the user's is deleted or moved: one line, before the checkpoint is even read (a missing
    one would be the error otherwise)."""
    folder, _, spm = exported
    notes = tmp_path / "mine"
    notes.mkdir()
    (notes / "notes.txt").write_text("my notes")
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    for target, message in ((notes, "holds files that are not an export of this tool (notes.txt); not replacing "
                                    "them: give a new or empty folder"),
                            (a_file, "is a file; expected a folder for the SavedModel (a new one, or an earlier "
                                     "export to replace)")):
        done = _export(folder, spm, target, checkpoint=tmp_path / "no_such_checkpoint")
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == f"export_model.py: error: --export_path={target} {message}"
    assert (notes / "notes.txt").read_text() == "my notes" and os.listdir(notes) == ["notes.txt"]
    assert a_file.read_text() == "not a folder"
    assert sorted(os.listdir(tmp_path)) == ["a_file", "mine"]  # no .old-export, no temporary folder


def test_a_folder_that_cannot_be_written_is_refused_before_any_work(exported, tmp_path):
    """A read-only place failed after the checkpoint was read, with the OS's message about the lock file
    (``[Errno 13] Permission denied: '.../exp.lock'``); one line naming --export_path now, before any work.
    Root writes anywhere: it runs without the capability to override file modes (``setpriv``)."""
    import shutil

    folder, _, spm = exported
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "mine.txt").write_text("mine")
    locked.chmod(0o555)
    prefix = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root without setpriv: every folder is writable")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    try:
        for target, message in (
                (locked / "exp", f"cannot write in {locked}; expected a folder this user can write in (the export "
                                 f"is written beside --export_path, then renamed into place)"),
                (a_file / "sub" / "exp", f"{a_file} is a file; expected a folder to hold the export")):
            done = subprocess.run([*prefix, sys.executable, os.path.join(REPO, "export_model.py"),
                                   f"--albert_config_file={folder / 'albert_config.json'}",
                                   f"--checkpoint={tmp_path / 'no_such_checkpoint'}", f"--spm_model_file={spm}",
                                   f"--export_path={target}"], capture_output=True, text=True, timeout=600)
            assert done.returncode == 1
            assert done.stderr.strip().splitlines()[-1] == f"export_model.py: error: --export_path={target}: {message}"
    finally:
        locked.chmod(0o755)
    assert os.listdir(locked) == ["mine.txt"] and a_file.read_text() == "not a folder"


def test_a_mount_point_export_path_is_refused_before_any_work(exported, tmp_path):
    """A mount point cannot be renamed aside (EBUSY), so the export failed after it was built with
    "[Errno 16] Device or resource busy"; now one line saying to pass a folder inside it, before the
    checkpoint is read. No mounting here: os.path.ismount says the target is one."""
    folder, _, spm = exported
    target = tmp_path / "volume"
    target.mkdir()
    script = (f"import os, sys; ismount = os.path.ismount; "
              f"os.path.ismount = lambda p: os.fspath(p) == {str(target)!r} or ismount(p); "
              f"sys.argv = ['export_model.py'] + sys.argv[1:]; "
              f"from albert_tf.drivers.export_model import run; run()")
    done = subprocess.run([sys.executable, "-c", script, f"--albert_config_file={folder / 'albert_config.json'}",
                           f"--checkpoint={tmp_path / 'no_such_checkpoint'}", f"--spm_model_file={spm}",
                           f"--export_path={target}"], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"export_model.py: error: --export_path={target} is a mount point, which the export cannot replace (it is "
        f"written beside --export_path, then renamed into place): pass a folder inside it, e.g. "
        f"--export_path={target / 'albert'}")
    assert os.listdir(target) == [] and sorted(os.listdir(tmp_path)) == ["volume"]


@pytest.mark.parametrize("failing", ["aside", "into place"])
def test_a_rename_the_os_refuses_is_one_line_and_changes_nothing(exported, tmp_path, monkeypatch, failing):
    """What check_export_path cannot foresee (a bind mount's EBUSY, EXDEV, a sticky folder's EPERM): the
    OS's words came out ("[Errno 16] Device or resource busy: ..."); now one line naming --export_path,
    and the previous export is there as it was, with nothing left beside it."""
    import errno

    from albert_tf import export

    _, model, spm = exported
    target = tmp_path / "hub"
    export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    first = {p: p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()}
    replace = os.replace

    def refused(src, dst):
        if (os.fspath(src) == str(target) if failing == "aside"  # the previous export moved aside
                else os.fspath(dst) == str(target) and os.fspath(src).endswith("-export")):  # the new one in
            code = errno.EBUSY if failing == "aside" else errno.EXDEV
            raise OSError(code, os.strerror(code), os.fspath(src), None, os.fspath(dst))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(ValueError) as err:
        export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    monkeypatch.undo()
    reason = os.strerror(errno.EBUSY if failing == "aside" else errno.EXDEV)
    assert str(err.value) == (f"--export_path={target}: cannot rename the new export into place ({reason}); "
                              f"nothing there was changed: pass a new folder, or one inside it")
    assert {p: p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()} == first
    assert sorted(os.listdir(tmp_path)) == ["hub"]


def test_another_users_export_in_a_sticky_folder_is_refused_before_any_work(exported, tmp_path, monkeypatch):
    """In a sticky folder (/tmp, mode 1777) only the owner of an entry or of the folder (or root) may rename the
    entry: another user's earlier export there could not be moved aside, found only after the new export was
    built. Now one line before any work. Another user: this process under another effective uid (os.geteuid)."""
    from albert_tf import export

    _, model, spm = exported
    sticky = tmp_path / "shared"
    sticky.mkdir()
    sticky.chmod(0o1777)
    target = sticky / "hub"
    export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    first = {p: p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()}
    owner = os.stat(target).st_uid
    other = owner + 4242  # owns neither the export nor the folder, and is not root
    monkeypatch.setattr(os, "geteuid", lambda: other)
    with pytest.raises(ValueError) as err:
        export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    assert str(err.value) == (
        f"--export_path={target} belongs to another user (uid {owner}) in {os.path.realpath(sticky)}, a sticky "
        f"folder (like /tmp) where only its owner can rename it, and the export replaces it by a rename: pass a "
        f"new folder, or ask its owner to remove it")
    assert {p: p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()} == first
    assert os.listdir(sticky) == ["hub"]  # no lock, no temporary folder
    # Root, the export's owner, or any user in a folder without the sticky bit may rename it: not refused.
    for user, mode in ((0, 0o1777), (owner, 0o1777), (other, 0o777)):
        sticky.chmod(mode)
        monkeypatch.setattr(os, "geteuid", lambda user=user: user)
        export.check_export_path(str(target))
    sticky.chmod(0o1777)
    if owner == 0:  # the folder's owner may rename what is in it: root can give the folder away
        os.chown(sticky, other, -1)
        monkeypatch.setattr(os, "geteuid", lambda: other)
        export.check_export_path(str(target))


def test_files_a_user_added_inside_an_earlier_export_are_never_deleted(exported, tmp_path):
    """Only the top level was checked: a user's assets/labels.txt (or a note in variables/) passed, and
    the re-export moved the folder aside and deleted it, exit 0. Now anything the export did not write,
    at any depth, is refused in one line naming it, and nothing is touched."""
    from albert_tf import export

    folder, model, spm = exported
    target = tmp_path / "hub"
    export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    ours = sorted(os.path.relpath(os.path.join(root, name), target)
                  for root, _, names in os.walk(target) for name in names)
    assert "assets/30k-clean.model" in ours and "assets/albert_config.json" in ours
    labels = target / "assets" / "labels.txt"
    labels.write_text("negative\npositive\n")
    done = _export(folder, spm, target)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"export_model.py: error: --export_path={target} holds files that are not an export of this tool "
        f"(assets/labels.txt); not replacing them: give a new or empty folder")
    assert labels.read_text() == "negative\npositive\n"
    labels.unlink()
    for added in ("variables/NOTE.txt", "assets/extra/notes.md", "variables.txt"):
        (target / added).parent.mkdir(exist_ok=True)
        (target / added).write_text("mine")
        named = added.split("/notes.md")[0]  # a folder is named, not what is in it
        with pytest.raises(ValueError, match=f"not an export of this tool \\({named}\\); not replacing"):
            export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
        assert (target / added).read_text() == "mine"
        (target / added).unlink()
        if added.startswith("assets/extra"):
            (target / "assets" / "extra").rmdir()
    assert sorted(os.listdir(tmp_path)) == ["hub"]
    # What the export itself wrote, in float32 or bfloat16, is still replaced.
    export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ, serving_precision="bfloat16")
    export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    assert sorted(os.path.relpath(os.path.join(root, name), target)
                  for root, _, names in os.walk(target) for name in names) == ours


def test_an_earlier_export_is_replaced_with_the_umask_mode(exported, tmp_path):
    """Exporting again into an export of ours replaces it; its files get the umask's mode (027 here)."""
    folder, _, spm = exported
    target = tmp_path / "hub"
    assert _export(folder, spm, target).returncode == 0
    first = os.stat(target / "saved_model.pb").st_mtime_ns
    done = _export(folder, spm, target, mask=0o027)
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.stat(target / "saved_model.pb").st_mtime_ns != first
    assert sorted(os.listdir(tmp_path)) == ["hub"]
    for root, dirs, names in os.walk(target):
        for name in names:
            assert os.stat(os.path.join(root, name)).st_mode & 0o777 == 0o640, os.path.join(root, name)


def test_bfloat16_export(exported, tmp_path):
    """--serving_precision=bfloat16: the signatures return float32 outputs near the Keras model's
    (bf16 keeps 8 significant bits), and the variables are saved exactly (float32) for fine-tuning."""
    from albert_tf import load_checkpoint
    from albert_tf.weights.kinds import tf1_name_map

    folder, model, spm = exported
    done = subprocess.run([sys.executable, os.path.join(REPO, "export_model.py"),
                           f"--albert_config_file={folder / 'albert_config.json'}",
                           f"--checkpoint={folder / 'google' / 'model.ckpt'}", f"--spm_model_file={spm}",
                           f"--export_path={tmp_path / 'bf16'}", f"--max_seq_length={SEQ}",
                           "--serving_precision=bfloat16"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exported SavedModel (bfloat16)" in done.stdout
    inputs, want = _reference(model, spm)
    np.savez(tmp_path / "io.npz", **inputs)
    script = textwrap.dedent(f"""
        import json, numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
        io = np.load({str(tmp_path / 'io.npz')!r})
        sigs = tf.saved_model.load({str(tmp_path / 'bf16')!r}).signatures
        ids = {{k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}}
        out = dict(sigs["mlm"](**ids, mlm_positions=tf.constant(io["masked_lm_positions"])))
        out.update(sop_log_probs=sigs["sop"](**ids)["sop_log_probs"])
        assert all(v.dtype == tf.float32 for v in out.values()), {{k: v.dtype for k, v in out.items()}}
        np.savez({str(tmp_path / 'got.npz')!r}, **{{k: v.numpy() for k, v in out.items()}})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(tmp_path / "got.npz")
    for name in ("sequence_output", "pooled_output", "mlm_logits", "sop_log_probs"):
        scale = np.abs(want[name]).max()
        difference = np.abs(got[name] - want[name]).max()
        assert 0 < difference <= 0.03 * scale, (name, difference, scale)  # 0: bf16 did not run
    again = AlbertPretrainer(model.config)
    load_checkpoint(again, str(tmp_path / "bf16"))
    saved = tf1_name_map(again)
    for name, variable in tf1_name_map(model).items():
        assert np.array_equal(saved[name].numpy(), variable.numpy()), name


def test_a_remote_export_keeps_the_previous_one_until_the_new_one_is_whole(exported, monkeypatch):
    """gs:// renames no folder: the new export is saved beside the old one first. A save that fails
    (a preemption, a quota) leaves the previous export as it was and nothing else; a save that works
    replaces it. TensorFlow's ram:// filesystem stands in for a bucket."""
    import uuid

    import tensorflow as tf

    from albert_tf import export

    _, model, spm = exported
    bucket = f"ram://exports-{uuid.uuid4().hex}"
    target = f"{bucket}/hub"

    def tree(path):
        return {f"{root[len(path):]}/{name}": tf.io.gfile.GFile(f"{root}/{name}", "rb").read()
                for root, _, names in tf.io.gfile.walk(path) for name in names}

    export.export_hub_module(model, target, spm_model_file=spm, max_seq_length=SEQ)
    first = tree(target)
    assert "/saved_model.pb" in first and any(name.startswith("/variables/") for name in first)
    save = tf.saved_model.save

    def preempted(module, path, signatures=None):
        save(module, path, signatures=signatures)  # written whole, then the job is stopped
        raise tf.errors.UnavailableError(None, None, "preempted")

    monkeypatch.setattr(tf.saved_model, "save", preempted)
    with pytest.raises(tf.errors.UnavailableError):
        export.export_hub_module(model, target, spm_model_file=spm, max_seq_length=SEQ)
    monkeypatch.undo()
    assert tree(target) == first and [e.rstrip("/") for e in tf.io.gfile.listdir(bucket)] == ["hub"]
    export.export_hub_module(model, target, spm_model_file=spm, max_seq_length=SEQ, serving_precision="bfloat16")
    second = tree(target)
    assert sorted(second) == sorted(first) and second["/saved_model.pb"] != first["/saved_model.pb"]
    assert [e.rstrip("/") for e in tf.io.gfile.listdir(bucket)] == ["hub"]

    # A copy into place that fails (quota, network) after the previous export was removed: the new
    # export stays whole where it was staged, and the error says where.
    copy, copied = tf.io.gfile.copy, []

    def quota(src, dst, overwrite=False):
        if len(copied) == 2:
            raise tf.errors.ResourceExhaustedError(None, None, "quota exceeded")
        copied.append(dst)
        copy(src, dst, overwrite=overwrite)

    monkeypatch.setattr(tf.io.gfile, "copy", quota)
    with pytest.raises(RuntimeError, match=f"replacing {target} failed .*quota exceeded.*the new export is whole at "
                                           f"{bucket}/"):
        export.export_hub_module(model, target, spm_model_file=spm, max_seq_length=SEQ)
    monkeypatch.undo()
    (staged,) = [e.rstrip("/") for e in tf.io.gfile.listdir(bucket) if e.rstrip("/") != "hub"]
    assert sorted(tree(f"{bucket}/{staged}")) == sorted(first)
    assert tf.saved_model.load(f"{bucket}/{staged}").signatures


def test_an_interrupt_between_the_renames_puts_the_previous_export_back(exported, tmp_path, monkeypatch):
    """Locally the previous export is moved aside, then the new one renamed into place; Ctrl-C between
    the two renames lost both (the cleanup removed the one moved aside)."""
    from albert_tf import export

    _, model, spm = exported
    target = tmp_path / "hub"
    export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    first = (target / "saved_model.pb").read_bytes()
    replace, calls = os.replace, []

    def interrupted(src, dst):
        calls.append((os.fspath(src), os.fspath(dst)))
        if os.fspath(dst) == str(target) and len([c for c in calls if c[1] == str(target)]) == 1:
            raise KeyboardInterrupt  # the new export's rename into place, after the old one moved aside
        replace(src, dst)

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    monkeypatch.undo()
    assert [src for src, dst in calls if dst != str(target)][-1] == str(target)  # the old one had been moved
    assert (target / "saved_model.pb").read_bytes() == first
    assert sorted(os.listdir(tmp_path)) == ["hub"]


def test_what_a_killed_export_left_is_put_back_or_removed(exported, tmp_path):
    """SIGKILL runs no cleanup: a kill between the renames left the previous export moved aside (and the
    new one whole beside it), a kill during the save a half-written folder. The next export, under the
    path's lock, puts the previous one back and removes the rest; a busy path is refused in one line."""
    import shutil

    from albert_tf import export, run_lock

    _, model, spm = exported
    target = tmp_path / "hub"
    export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    first = (target / "saved_model.pb").read_bytes()
    moved_aside, half = tmp_path / f"hub.tmp-{'a' * 32}-old", tmp_path / f"hub.tmp-{'b' * 32}-export"
    os.replace(target, moved_aside)
    half.mkdir()
    (half / "variables").mkdir()
    users = tmp_path / "hub.tmp-mine"  # not a name this package gives: left alone
    users.mkdir()
    export._recover_killed_export(str(target))
    assert (target / "saved_model.pb").read_bytes() == first
    assert sorted(os.listdir(tmp_path)) == ["hub", "hub.tmp-mine"]

    holder = subprocess.Popen(["sleep", "300"])
    try:
        record = {"host": run_lock.socket.gethostname(), "pid": holder.pid,
                  "start_ticks": run_lock.process_start_ticks(holder.pid), "started": "2024-01-01T00:00:00+00:00"}
        (tmp_path / "hub.lock").write_text(json.dumps(record) + "\n")
        with pytest.raises(run_lock.RunLockedError, match=f"--export_path={target} is in use by another run"):
            export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    finally:
        holder.kill()
        holder.wait()
    assert (target / "saved_model.pb").read_bytes() == first
    shutil.rmtree(users)


def test_a_symlinked_export_path_is_exported_through(exported, tmp_path):
    """A serving path that links to a version folder: the export goes into the link's target (as the
    original's save into the path did) and the link stays; it was renamed aside, a real folder took its
    name, the target kept the old export and the moved link stayed forever (rmtree refuses a symlink)."""
    from albert_tf import export

    _, model, spm = exported
    real = tmp_path / "real"
    real.mkdir()
    export.export_hub_module(model, str(real / "v1"), spm_model_file=spm, max_seq_length=SEQ)
    first = (real / "v1" / "saved_model.pb").read_bytes()
    (tmp_path / "latest").symlink_to("real/v1")
    stray = real / f"v1.tmp-{'c' * 32}-old"  # what the earlier code left beside a linked path
    stray.symlink_to("v1")
    assert export.export_hub_module(model, str(tmp_path / "latest"), spm_model_file=spm, max_seq_length=SEQ,
                                    serving_precision="bfloat16") == str(tmp_path / "latest")
    assert os.readlink(tmp_path / "latest") == "real/v1"
    assert (real / "v1" / "saved_model.pb").read_bytes() != first  # the bfloat16 graph, in the target
    assert sorted(os.listdir(tmp_path)) == ["latest", "real"] and os.listdir(real) == ["v1"]


def test_the_summary_names_a_symlinked_export_path_as_given(exported, tmp_path):
    """export_model.py's closing line names the --export_path the user gave (a serving link), not the
    version folder it points at, which the export went into."""
    folder, _, spm = exported
    (tmp_path / "v1").mkdir()
    (tmp_path / "current").symlink_to("v1")
    done = _export(folder, spm, tmp_path / "current")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "v1" / "saved_model.pb").exists()
    summary = [line for line in done.stdout.splitlines() if line.startswith("exported SavedModel")]
    assert summary == [f"exported SavedModel (float32) to {tmp_path / 'current'} "
                       f"(signatures: tokens, mlm, sop, tokenization_info, serving_default)"]


def test_notext_signature_export_loads_in_plain_tensorflow(exported, tmp_path, saved_model_ops,
                                                           tensorflow_text_ops):
    """--notext_signature: no tensorflow-text op anywhere in the graph, so a process that never imports
    tensorflow_text (nor albert_tf), as stock TF Serving or a converter, loads it; serving_default is
    tokens on ids. Every export had the in-graph tokenizer: loading one failed without tensorflow_text
    ("Op type not registered"), even for the id signatures. The rest is as the text export's: the
    assets, the TF1 variable names load_checkpoint reads, and a later export may replace it."""
    from albert_tf import export, load_checkpoint

    folder, model, spm = exported
    target = tmp_path / "ids"
    done = _export(folder, spm, target, extra=["--notext_signature"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].endswith("(signatures: tokens, mlm, sop, tokenization_info, "
                                                 "serving_default = tokens)")
    assert "SentencepieceOp" in saved_model_ops(folder / "saved") & tensorflow_text_ops  # the text export's
    assert saved_model_ops(target) & tensorflow_text_ops == set()
    inputs, want = _reference(model, spm)
    np.savez(tmp_path / "io.npz", **inputs, **{"want_" + k: v for k, v in want.items()})
    script = textwrap.dedent(f"""
        import json, sys, numpy as np, tensorflow as tf
        io = np.load({str(tmp_path / 'io.npz')!r})
        ids = {{k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}}
        obj = tf.saved_model.load({str(target)!r})
        result = {{"signatures": sorted(obj.signatures)}}
        for name, outputs in (("serving_default", obj.signatures["serving_default"](**ids)),
                              ("tokens", obj.signatures["tokens"](**ids)), ("__call__", obj(ids))):
            for key, got in outputs.items():
                result[name + "/" + key] = float(np.abs(got.numpy() - io["want_" + key]).max())
        result["vocab_file"] = obj.signatures["tokenization_info"]()["vocab_file"].numpy().decode()
        result["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow_text", "albert_tf"))
        # LiteRT converts it, with built-in ops alone at a fixed shape (in this process without tensorflow_text).
        fixed = tf.function(lambda a, b, c: obj.signatures["serving_default"](input_ids=a, input_mask=b, segment_ids=c))
        spec = tf.TensorSpec(io["input_ids"].shape, tf.int32)
        traced = fixed.get_concrete_function(spec, spec, spec)
        converter = tf.lite.TFLiteConverter.from_concrete_functions([traced], obj)
        from ai_edge_litert.interpreter import Interpreter
        lite = Interpreter(model_content=converter.convert()).get_signature_runner()
        out = lite(a=io["input_ids"], b=io["input_mask"], c=io["segment_ids"])
        for key in ("sequence_output", "pooled_output"):
            match = [v for v in out.values() if v.shape == io["want_" + key].shape]
            result["litert/" + key] = float(np.abs(match[0] - io["want_" + key]).max())
        print(json.dumps(result))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("modules") == []
    assert result.pop("signatures") == ["mlm", "serving_default", "sop", "tokenization_info", "tokens"]
    assert result.pop("vocab_file").endswith("30k-clean.model")
    assert sorted(result) == [f"{name}/{key}" for name in ("__call__", "litert", "serving_default", "tokens")
                              for key in ("pooled_output", "sequence_output")]
    assert max(result.values()) <= 1e-5, result
    assert sorted(os.listdir(target / "assets")) == ["30k-clean.model", "albert_config.json"]
    report = load_checkpoint(AlbertPretrainer(model.config), str(target))
    assert report.format == "export" and report.skipped == [] and not report.missing_allowed
    assert export.is_hub_export(str(target))


def _readme_variables(config) -> dict:
    """The README's table of the export's variables, for ``config``: TF1 name -> shape."""
    import itertools
    import re

    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### Export (TF-Hub-style SavedModel)"):text.index("## New and changed flags")]
    sizes = {"V": config.vocab_size, "E": config.embedding_size, "H": config.hidden_size,
             "I": config.intermediate_size, "P": config.max_position_embeddings, "T": config.type_vocab_size}
    table = {}
    for name, note, shape in re.findall(r"^\| `([^`]+)`( \(only when E ≠ H[^)]*\))? \| `\[([^\]]*)\]` \|$", section,
                                        re.M):
        if note and config.embedding_size == config.hidden_size:
            continue
        dims = [sizes.get(d.strip(), None) or int(d) for d in shape.split(",")]
        variants = [name]
        while any("{" in v for v in variants):  # {a,b} alternatives
            variants = [v[:v.index("{")] + alt + v[v.index("}") + 1:] for v in variants
                        for alt in v[v.index("{") + 1:v.index("}")].split(",")]
        for variant in variants:
            if variant.startswith("L/"):
                for g, k in itertools.product(range(config.num_hidden_groups), range(config.inner_group_num)):
                    table[f"bert/encoder/transformer/group_{g}/inner_group_{k}{variant[1:]}"] = dims
            else:
                table[variant] = dims
    return table


def test_readme_lists_the_exported_variables(exported):
    """The README told that the variables are saved under their TF1 names, not which names and shapes a
    user reading ``variables/variables`` (or the reload's ``tf1_variables``) finds. Its table, checked
    against the export's own checkpoint file and, for E == H (no projection), against a model's."""
    import tensorflow as tf

    from albert_tf.weights.kinds import tf1_name_map

    folder, model, _ = exported
    reader = tf.train.load_checkpoint(str(folder / "saved" / "variables" / "variables"))
    saved = {key[len("tf1_variables/"):-len("/.ATTRIBUTES/VARIABLE_VALUE")].replace(".S", "/"): shape
             for key, shape in reader.get_variable_to_shape_map().items() if key.startswith("tf1_variables/")}
    assert len(saved) == 2 * 16 + 5 + 2 + 2 + 7  # 2 groups of 16, embeddings, projection, pooler, heads
    assert _readme_variables(model.config) == saved
    square = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=8, num_hidden_layers=2, num_hidden_groups=1,
                          inner_group_num=2, num_attention_heads=2, intermediate_size=12, max_position_embeddings=16)
    other = AlbertPretrainer(square)
    other(other.dummy_inputs())
    names = {name: list(variable.shape) for name, variable in tf1_name_map(other).items()}
    assert "bert/encoder/embedding_hidden_mapping_in/kernel" not in names
    assert _readme_variables(square) == names


def test_a_full_disk_during_the_save_is_one_line_and_keeps_the_earlier_export(exported, tmp_path, monkeypatch):
    """On a full disk TensorFlow's error named the temporary folder and its op ('{{function_node
    __wrapped__SaveV2...}} <export_path>.tmp-<hex>-export/variables/variables_temp/part-...tempstate...; No space
    left on device [Op:SaveV2]', as a tmpfs showed): now one line naming --export_path; the earlier export is
    as it was and nothing is left beside it."""
    import tensorflow as tf

    from albert_tf import export
    from albert_tf.training import faults

    _, model, spm = exported
    target = tmp_path / "hub"
    export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    first = {p: p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()}
    save = tf.saved_model.save

    def full_disk(obj, export_dir, signatures=None, options=None):
        save(obj, export_dir, signatures=signatures, options=options)  # written, but the last file cut short
        raise tf.errors.ResourceExhaustedError(None, None, f"{export_dir}/saved_model.pb.tmp0123; No space left "
                                                           f"on device")

    monkeypatch.setattr(tf.saved_model, "save", full_disk)
    with pytest.raises(faults.DiskFullError) as err:
        export.export_hub_module(model, str(target), spm_model_file=spm, max_seq_length=SEQ)
    monkeypatch.undo()
    assert str(err.value) == (f"no space left on the device writing the export {target}; what was written of it "
                              f"is removed and an earlier export there is unchanged; free space and rerun")
    assert {p: p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()} == first
    assert sorted(os.listdir(tmp_path)) == ["hub"]
