"""convert_checkpoint.py both ways and with --converted_model=encoder, the results read
back with tf.train.load_checkpoint and compared bit for bit with Google's checkpoint."""
import json
import os
import posixpath
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The driver's own flags and main(), several conversions in one process (one TF start-up).
RUN_CONVERSIONS = r"""
import json, sys
from absl import flags
import convert_checkpoint
codes = []
for argv in json.loads(sys.argv[1]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["convert_checkpoint.py", *argv])
    codes.append(convert_checkpoint.main([]))
print(json.dumps(codes))
"""


def _tensors(prefix) -> dict:
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def converted(tmp_path_factory, shared):
    folder = shared("reference", "albert_tiny_shared")
    out = tmp_path_factory.mktemp("convert_cli")
    config = f"--albert_config_file={folder / 'albert_config.json'}"
    google = str(folder / "model.ckpt")
    runs = []
    for model in ("pretrainer", "encoder"):
        runs += [
            [f"--checkpoint_to_convert={google}", config, f"--converted_model={model}",
             f"--converted_checkpoint={out / model / 'tf2' / 'model.ckpt'}", "--direction=tf1_to_tf2"],
            [f"--checkpoint_to_convert={out / model / 'tf2'}", config, f"--converted_model={model}",
             f"--converted_checkpoint={out / model / 'tf1' / 'model.ckpt'}", "--direction=tf2_to_tf1"],
        ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", RUN_CONVERSIONS, json.dumps(runs)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, 0, 0, 0], done.stderr[-3000:]
    original = {n: v for n, v in _tensors(google).items() if n != "global_step" and "/adam_" not in n}
    return out, original


def test_tf1_to_tf2_to_tf1_is_bit_exact(converted):
    out, original = converted
    back = _tensors(out / "pretrainer" / "tf1" / "model.ckpt")
    assert sorted(back) == sorted(original)
    for name, value in original.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape, name
        assert np.array_equal(back[name], value), name
    # The intermediate checkpoint is ours (object-based names), with the same values.
    ours = _tensors(out / "pretrainer" / "tf2" / "model.ckpt")
    assert all(name.endswith("/.ATTRIBUTES/VARIABLE_VALUE") for name in ours if name != "_CHECKPOINTABLE_OBJECT_GRAPH")
    assert sorted(np.asarray(v).tobytes() for n, v in ours.items() if n != "_CHECKPOINTABLE_OBJECT_GRAPH") == \
        sorted(v.tobytes() for v in original.values())


def test_encoder_only_conversion_keeps_exactly_the_encoder(converted):
    out, original = converted
    encoder = {n: v for n, v in original.items() if n.startswith("bert/")}
    assert len(encoder) < len(original)  # the reference has heads to leave out
    back = _tensors(out / "encoder" / "tf1" / "model.ckpt")
    assert sorted(back) == sorted(encoder)
    for name, value in encoder.items():
        assert back[name].dtype == value.dtype and np.array_equal(back[name], value), name
    ours = _tensors(out / "encoder" / "tf2" / "model.ckpt")
    assert len([n for n in ours if n != "_CHECKPOINTABLE_OBJECT_GRAPH"]) == len(encoder)


def test_a_conversion_replaces_no_file(shared, tmp_path):
    """Outputs are new files only: converting onto an existing checkpoint (here the input itself) or
    into a Hugging Face folder's files is refused in one line with everything left as it was; a second
    checkpoint of the same model beside the first is fine (its albert_config.json is the same); a folder
    a run is writing is refused by its run lock."""
    import shutil

    from albert_tf.conversion import convert
    from albert_tf import run_lock
    from albert_tf.weights.errors import CheckpointError

    folder = tmp_path / "google"
    shutil.copytree(shared("reference", "albert_tiny_shared"), folder)
    google, config = str(folder / "model.ckpt"), str(folder / "albert_config.json")
    hf_folder = str(shared("reference", "hf_albert_tiny_shared"))
    tf2 = tmp_path / "tf2"
    first = convert(hf_folder, str(tf2 / "a.ckpt"), "hf_to_tf2")  # brings its config: written beside
    assert first.config_written == str(tf2 / "albert_config.json")
    second = convert(hf_folder, str(tf2 / "b.ckpt"), "hf_to_tf2")
    assert second.config_written is None and (tf2 / "b.ckpt.index").exists()

    def unchanged(*folders):
        return {str(p): p.read_bytes() for f in folders for p in sorted(f.iterdir())}

    hf_out = tmp_path / "hf"
    hf_out.mkdir()
    (hf_out / "config.json").write_text("{}")  # a Hugging Face folder's file
    before = unchanged(folder, tf2, hf_out)
    cases = [(str(tf2), str(tf2 / "a.ckpt"), "tf2_to_tf1", f"{tf2 / 'a.ckpt'}.index"),
             (str(tf2), google, "tf2_to_tf1", f"{google}.index"),  # onto Google's own checkpoint
             (google, str(hf_out), "tf1_to_hf", str(hf_out / "config.json"))]
    for source, output, direction, named in cases:
        with pytest.raises(CheckpointError) as err:
            convert(source, output, direction, config_file=config)
        assert "\n" not in str(err.value) and named in str(err.value) and "replaces none" in str(err.value)
    assert unchanged(folder, tf2, hf_out) == before
    # A run (here: process 1 of this host, alive) holds the folder's lock.
    run = tmp_path / "run"
    run.mkdir()
    holder = {"host": socket.gethostname(), "pid": 1, "start_ticks": run_lock.process_start_ticks(1)}
    (run / "run.lock").write_text(json.dumps(holder))
    with pytest.raises(run_lock.RunLockedError, match="in use by another run"):
        convert(google, str(run / "model.ckpt"), "tf1_to_tf2", config_file=config)
    assert sorted(os.listdir(run)) == ["run.lock"]


def test_a_folder_as_the_tf_output_is_refused_before_any_write(shared, tmp_path):
    """A TF checkpoint's files go beside its prefix: `DIR/` or an existing DIR would write DIR.index and a
    `checkpoint` state file into DIR's parent. Refused in one line naming the flag, the parent untouched."""
    folder = shared("reference", "albert_tiny_shared")
    parent = tmp_path / "parent"
    (parent / "existing").mkdir(parents=True)
    google = [f"--checkpoint_to_convert={folder / 'model.ckpt'}", f"--albert_config_file={folder / 'albert_config.json'}"]
    hf_input = [f"--checkpoint_to_convert={shared('reference', 'hf_albert_tiny_shared')}"]
    runs = [google + [f"--converted_checkpoint={parent / 'new'}/", "--direction=tf1_to_tf2"],
            google + [f"--converted_checkpoint={parent / 'existing'}", "--direction=tf1_to_tf2"],
            hf_input + [f"--converted_checkpoint={parent / 'existing'}", "--direction=hf_to_tf1"]]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", RUN_CONVERSIONS, json.dumps(runs)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1, 1, 1], done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("convert_checkpoint.py: error:")]
    assert errors[0] == (f"convert_checkpoint.py: error: --converted_checkpoint={parent / 'new'}/ is a folder; "
                         f"a TF output is a checkpoint prefix such as {parent / 'new' / 'model.ckpt'}")
    assert errors[1].endswith(f"such as {parent / 'existing' / 'model.ckpt'}")
    assert sorted(p.name for p in parent.rglob("*")) == ["existing"]


def test_a_kill_at_the_config_leaves_a_state_the_rerun_completes(shared, tmp_path, monkeypatch):
    """hf_to_tf1 brings a config that exists nowhere else: it is put in place before the checkpoint, so a kill
    while it is renamed leaves no checkpoint without it, and the rerun writes both."""
    from albert_tf import fileio
    from albert_tf.conversion import convert

    hf_input, out = str(shared("reference", "hf_albert_tiny_shared")), tmp_path / "out"
    real_replace = os.replace

    def killed_at_the_config(src, dst):
        if str(dst).endswith("albert_config.json"):
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "replace", killed_at_the_config)
    with pytest.raises(KeyboardInterrupt):
        convert(hf_input, str(out / "model.ckpt"), "hf_to_tf1")
    monkeypatch.undo()
    assert not (out / "model.ckpt.index").exists()
    done = convert(hf_input, str(out / "model.ckpt"), "hf_to_tf1")
    assert done.config_written == str(out / "albert_config.json")
    assert json.loads((out / "albert_config.json").read_text())["num_hidden_layers"] == \
        json.loads((shared("reference", "hf_albert_tiny_shared") / "config.json").read_text())["num_hidden_layers"]
    assert (out / "model.ckpt.index").exists()


def test_ctrl_c_between_the_checkpoint_renames_acts_after_the_index(shared, tmp_path, monkeypatch, sigint_raises):
    """A Ctrl-C just after the data shard was renamed into place used to leave it without its index: no
    checkpoint, and a rerun refused by the shard. It now acts once the index is in place too."""
    import signal

    from albert_tf.conversion import convert
    from albert_tf.weights import files

    folder = shared("reference", "albert_tiny_shared")
    real_rename = tf.io.gfile.rename

    def rename_then_interrupt(src, dst, overwrite=False):
        real_rename(src, dst, overwrite=overwrite)
        if ".data-" in dst:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(files.tf.io.gfile, "rename", rename_then_interrupt)
    out = tmp_path / "out" / "model.ckpt"
    with pytest.raises(KeyboardInterrupt):
        convert(str(folder / "model.ckpt"), str(out), "tf1_to_tf2",
                config_file=str(folder / "albert_config.json"))
    monkeypatch.undo()
    assert (tmp_path / "out" / "model.ckpt.index").exists()
    assert files.checkpoint_damage(str(out)) is None


def test_the_converter_clears_what_killed_writes_left_in_its_output_folder(shared, tmp_path):
    """Under the folder's run lock (the one a run's chief holds when it does the same), the temporaries this
    package's writers name are removed; a user's file with .tmp- in its name is not."""
    from albert_tf.conversion import convert

    out = tmp_path / "out"
    out.mkdir()
    left = [".tmp-0123456789abcdef0123456789abcdef-model.ckpt.index", "model.safetensors.tmp-a1b2c3d4.tmp",
            "albert_config.json.tmp-zz_9y8x7.tmp"]
    for name in left + ["notes.tmp-mine"]:
        (out / name).write_bytes(b"x" * 100)
    convert(str(shared("reference", "hf_albert_tiny_shared")), str(out / "model.ckpt"), "hf_to_tf1")
    assert sorted(p.name for p in out.iterdir()) == ["albert_config.json", "checkpoint", "model.ckpt.data-00000-of-00001",
                                                     "model.ckpt.index", "notes.tmp-mine"]


def test_a_head_the_checkpoint_lacks_or_has_of_another_size_is_worded_for_conversion(shared, tmp_path,
                                                                                      random_tf1_checkpoint):
    """--converted_model=squad on a pretrained checkpoint (no SQuAD head), or race on a 3-label classifier's (TF1 or
    a Hugging Face folder): each variable's hint spoke of "this task" and said "train first (--do_train)" or "a new
    --output_dir", the fine-tuning drivers' words (the converter has no task, nor those flags). Now it names the kind
    and the converter's flags."""
    from albert_tf import AlbertConfig

    folder = shared("reference", "albert_tiny_shared")
    config_file = folder / "albert_config.json"
    hidden = json.loads(config_file.read_text())["hidden_size"]
    classifier = tmp_path / "classifier" / "model.ckpt"
    classifier.parent.mkdir()
    random_tf1_checkpoint(AlbertConfig.from_json_file(str(config_file)), classifier,
                          extra={"output_weights": np.zeros([3, hidden], np.float32),
                                 "output_bias": np.zeros([3], np.float32)})
    out = tmp_path / "out"
    runs = [[f"--checkpoint_to_convert={checkpoint}", f"--albert_config_file={config_file}", f"--converted_model={kind}",
             f"--converted_checkpoint={out / kind / 'model.ckpt'}", "--direction=tf1_to_tf2"]
            for checkpoint, kind in ((folder / "model.ckpt", "squad"), (classifier, "race"))]
    hf_classifier = shared("reference", "hf_albert_tiny_heads", "AlbertForSequenceClassification")  # 3 labels
    runs.append([f"--checkpoint_to_convert={hf_classifier}", "--converted_model=race",
                 f"--converted_checkpoint={out / 'hf' / 'model.ckpt'}", "--direction=hf_to_tf2"])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", RUN_CONVERSIONS, json.dumps(runs)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1, 1, 1], done.stderr[-3000:]
    lines = done.stderr.splitlines()
    first, second, _ = [i for i, line in enumerate(lines) if line.startswith("convert_checkpoint.py: error:")]
    squad, race = lines[first + 1:first + 3], lines[second + 1:second + 3]  # (a line per variable)
    missing = ("missing; the checkpoint has no squad head (a pretrained one has none): convert one fine-tuned for "
               "squad (--converted_model), or pass --allow_missing_heads to start the head fresh")
    assert squad == [f"  cls/squad/output_weights: expected shape [2, {hidden}], {missing}",
                     f"  cls/squad/output_bias: expected shape [2], {missing}"], lines
    other = ("the checkpoint's head has 3 outputs, the race model's 1: it holds another kind's head; name that kind "
             "with --converted_model (auto: what it holds)")
    assert race == [f"  output_weights: expected shape [1, {hidden}], found shape [3, {hidden}]; {other}",
                    f"  output_bias: expected shape [1], found shape [3]; {other}"], lines
    # (a Hugging Face folder's error names the file on every line; its first line is the weight's)
    hf_hidden = json.loads((hf_classifier / "config.json").read_text())["hidden_size"]
    hf_lines = [line for line in lines if line.startswith(("convert_checkpoint.py: error:", str(hf_classifier)))]
    assert hf_lines[-1] == (f"{hf_classifier / 'model.safetensors'}: tensor classifier.bias has shape [3], expected "
                            f"[1]; {other}"), hf_lines
    assert hf_lines[-2].endswith(f"tensor classifier.weight has shape [3, {hf_hidden}], expected [1, {hf_hidden}]; "
                                 f"{other}"), hf_lines
    assert not out.exists()


def test_a_full_disk_while_writing_the_checkpoint_is_one_line_naming_the_output(shared, tmp_path, monkeypatch):
    """TensorFlow's own error named a temporary file and its op ('{{function_node __wrapped__SaveV2...}}
    .../.tmp-<hex>-model.ckpt_temp/part-00000-of-00001.data-00000-of-00001.tempstate...; No space left on
    device [Op:SaveV2]', as a 1 MiB tmpfs shows): it is now one line naming --converted_checkpoint, and
    nothing of the checkpoint is left behind, so the rerun after freeing space writes it."""
    from albert_tf.conversion import convert
    from albert_tf.training import faults

    folder = shared("reference", "albert_tiny_shared")
    google, config = str(folder / "model.ckpt"), str(folder / "albert_config.json")
    out = tmp_path / "out" / "model.ckpt"
    write = tf.train.Checkpoint.write

    def full_disk(self, file_prefix, options=None):
        write(self, file_prefix, options)  # the data half written, as TensorFlow leaves it
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{{{{function_node __wrapped__SaveV2}}}} {file_prefix}_temp/part-00000-of-00001.data-"
                        f"00000-of-00001.tempstate1; No space left on device [Op:SaveV2]")

    monkeypatch.setattr(tf.train.Checkpoint, "write", full_disk)
    with pytest.raises(faults.DiskFullError) as err:
        convert(google, str(out), "tf1_to_tf2", config_file=config)
    monkeypatch.undo()
    message = str(err.value)
    assert message == f"no space left on the device writing checkpoint {out}; nothing of it was kept; free space and rerun"
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
    done = convert(google, str(out), "tf1_to_tf2", config_file=config)
    assert done.written == str(out)
    assert sorted(os.listdir(out.parent)) == ["checkpoint", "model.ckpt.data-00000-of-00001", "model.ckpt.index"]


def test_a_full_disk_at_the_state_file_removes_the_checkpoint_just_written(shared, tmp_path, monkeypatch):
    """The last write is the folder's small `checkpoint` state file, after the data and index were renamed into
    place: the line was "[Errno 28] No space left on device: '<dir>/checkpoint'", the checkpoint stayed, and the
    rerun was refused by it ("already exist(s)"). Now those files, this run's own, are removed and the line is the
    one a full disk gives elsewhere; what the folder held before (a state file, another file) is as it was."""
    import errno

    from albert_tf import fileio
    from albert_tf.conversion import convert
    from albert_tf.training import faults

    folder = shared("reference", "albert_tiny_shared")
    google, config = str(folder / "model.ckpt"), str(folder / "albert_config.json")
    out = tmp_path / "out" / "model.ckpt"
    out.parent.mkdir()
    state = 'model_checkpoint_path: "elsewhere/model.ckpt-7"\nall_model_checkpoint_paths: "elsewhere/model.ckpt-7"\n'
    (out.parent / "checkpoint").write_text(state)
    (out.parent / "notes.txt").write_text("the user's")
    write_utf8 = fileio.write_utf8

    def full_disk_at_the_state_file(path, text):
        if os.path.basename(path).startswith("checkpoint" + fileio.TMP_MARK):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a write names no file
        return write_utf8(path, text)

    monkeypatch.setattr(fileio, "write_utf8", full_disk_at_the_state_file)
    with pytest.raises(faults.DiskFullError) as err:
        convert(google, str(out), "tf1_to_tf2", config_file=config)
    monkeypatch.undo()
    assert str(err.value) == (f"no space left on the device writing checkpoint {out}; nothing of it was kept; "
                              f"free space and rerun")
    assert sorted(os.listdir(out.parent)) == ["checkpoint", "notes.txt"]
    assert (out.parent / "checkpoint").read_text() == state and (out.parent / "notes.txt").read_text() == "the user's"
    done = convert(google, str(out), "tf1_to_tf2", config_file=config)
    assert done.written == str(out)
    assert sorted(os.listdir(out.parent)) == ["checkpoint", "model.ckpt.data-00000-of-00001", "model.ckpt.index",
                                              "notes.txt"]
    assert tf.train.get_checkpoint_state(str(out.parent)).model_checkpoint_path.endswith("elsewhere/model.ckpt-7")


# The driver in a process of its own, Ctrl-C'd (a real SIGINT) as soon as its output's first file is renamed into
# place: the signal acts once the last rename is done, i.e. in the instant after the output is complete.
CTRL_C_AFTER_THE_FIRST_RENAME = r"""
import os, runpy, signal, sys
import tensorflow as tf
rename, replace = tf.io.gfile.rename, os.replace
def interrupted(move):
    def moved(src, dst, *args, **kwargs):
        move(src, dst, *args, **kwargs)
        if os.path.basename(str(dst)) in ("model.ckpt.data-00000-of-00001", "model.safetensors"):
            os.kill(os.getpid(), signal.SIGINT)
    return moved
tf.io.gfile.rename, os.replace = interrupted(rename), interrupted(replace)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_rerun_after_ctrl_c_just_after_the_output_is_in_place_accepts_it(shared, tmp_path):
    """Ctrl-C in the instant after the converter renamed its output into place (before the `checkpoint` state
    file names it, or before the driver said "wrote"): the line said "rerun the same command to finish", and the
    rerun was refused by those very files ("already exist(s)"). Now a rerun finds them byte for byte what it
    writes, keeps them as they are and completes the state file; another conversion onto them is still refused,
    and they stay as they were. (Two processes of the driver, Ctrl-C'd: 10 s of the test's time.)"""
    from albert_tf.conversion import convert
    from albert_tf.weights.errors import CheckpointError

    folder = shared("reference", "albert_tiny_shared")
    common = [f"--checkpoint_to_convert={folder / 'model.ckpt'}", f"--albert_config_file={folder / 'albert_config.json'}"]
    tf2, hf_out = tmp_path / "tf2" / "model.ckpt", tmp_path / "hf"
    runs = [common + [f"--converted_checkpoint={tf2}", "--direction=tf1_to_tf2"],
            common + [f"--converted_checkpoint={hf_out}", "--direction=tf1_to_hf"]]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    for argv in runs:
        # SIGINT as a user's shell leaves it: pytest-xdist workers ignore it, and children inherit that.
        done = subprocess.run([sys.executable, "-c", CTRL_C_AFTER_THE_FIRST_RENAME, "convert_checkpoint.py", *argv],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert done.returncode == 130, done.stderr[-3000:]
        assert "rerun the same command to finish" in done.stderr.strip().splitlines()[-1]
    assert sorted(os.listdir(tf2.parent)) == ["model.ckpt.data-00000-of-00001", "model.ckpt.index"]  # no state file
    assert sorted(os.listdir(hf_out)) == ["config.json", "model.safetensors"]
    before = {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in [*tf2.parent.iterdir(), *hf_out.iterdir()]}
    config = str(folder / "albert_config.json")
    for output, direction in ((tf2, "tf1_to_tf2"), (hf_out, "tf1_to_hf")):
        done = convert(str(folder / "model.ckpt"), str(output), direction, config_file=config)
        assert done.already_there and done.written == str(output)
        with pytest.raises(CheckpointError, match="replaces none"):  # another conversion's values
            convert(str(folder / "model.ckpt"), str(output), direction, config_file=config, kind="encoder")
    assert tf.train.latest_checkpoint(str(tf2.parent)) == str(tf2)  # the state file the interrupted run lacked
    assert {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in [*tf2.parent.iterdir(), *hf_out.iterdir()]
            if p.name != "checkpoint"} == before
    assert sorted(os.listdir(hf_out)) == ["config.json", "model.safetensors"]  # no temporary left


def test_a_remote_tf_output_gets_its_config_beside_it_and_no_local_folder(shared, tmp_path, monkeypatch):
    """A remote --converted_checkpoint (gs://..., here TensorFlow's in-memory ram://) of an HF input: its
    albert_config.json went to a local folder `gs:/bucket/...` made in the current folder (os.path.abspath of
    the URL), not beside the checkpoint, and that folder stayed."""
    import uuid

    from albert_tf.conversion import convert

    monkeypatch.chdir(tmp_path)
    out = f"ram://convert-{uuid.uuid4().hex}/run/model.ckpt"
    done = convert(str(shared("reference", "hf_albert_tiny_shared")), out, "hf_to_tf2")
    assert done.config_written == posixpath.join(posixpath.dirname(out), "albert_config.json")
    assert tf.io.gfile.exists(done.config_written) and tf.io.gfile.exists(out + ".index")
    assert json.loads(tf.io.gfile.GFile(done.config_written).read())["vocab_size"] > 0
    assert os.listdir(tmp_path) == []  # nothing local
