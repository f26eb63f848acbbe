"""What a fine-tuning driver writes and never touches: every output file gets the umask's mode, a run
refused by the run lock writes nothing, a missing data file or a folder given as a file leaves no output
folder behind."""
import json
import os
import stat
import subprocess
import sys

import pytest

from albert_tf import run_lock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ = 24


def sentiment_rows(n, seed):
    """(text, label) rows, the label told by one word."""
    words = {"pos": ["good", "great", "lovely"], "neg": ["bad", "awful", "boring"]}
    return [(f"the film {seed} was {words[label][i % 3]}", label)
            for i, label in enumerate(["pos", "neg"] * (n // 2) + ["pos"] * (n % 2))]


def run_classifier(*args, mask=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, os.path.join(REPO, "run_classifier.py"), *args], capture_output=True,
                          text=True, env=env, timeout=600, preexec_fn=None if mask is None else lambda: os.umask(mask))


def _train_args(tiny_config_file, spm_model, out, steps):
    return ["--task_name=custom", f"--albert_config_file={tiny_config_file}", f"--spm_model_file={spm_model}",
            f"--output_dir={out}", f"--max_seq_length={SEQ}", "--train_batch_size=8", "--eval_batch_size=8",
            "--predict_batch_size=8", f"--train_step={steps}", f"--save_checkpoints_steps={steps // 2}",
            "--learning_rate=1e-3", "--warmup_step=0", f"--log_steps={steps // 2}", f"--iterations_per_loop={steps}"]


def _write_split(folder, split, n, seed, labels=None):
    rows = sentiment_rows(n, seed)
    path = folder / f"{split}.tsv"
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{labels[i % len(labels)] if labels else label}\n"
                                              for i, (t, label) in enumerate(rows)), encoding="utf-8")
    return path


def _tree(folder):
    """{relative path: (mode, size, mtime)} of everything under ``folder``."""
    out = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            st = os.stat(path)
            out[os.path.relpath(path, folder)] = (stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])  # 002: a group-shared folder (TF's makedirs gave 0755)
def test_every_output_file_gets_the_umask_mode(tmp_path, tiny_config_file, spm_model, mask):
    for split, n, seed in (("train", 32, 0), ("dev", 8, 1), ("test", 8, 2)):
        _write_split(tmp_path, split, n, seed)
    out = tmp_path / "out"
    args = [*_train_args(tiny_config_file, spm_model, out, 4), "--do_train", "--do_eval", "--do_predict",
            f"--train_file={tmp_path / 'train.tsv'}", f"--dev_file={tmp_path / 'dev.tsv'}",
            f"--test_file={tmp_path / 'test.tsv'}", "--text_columns=text", f"--export_dir={out / 'export'}"]
    proc = run_classifier(*args, mask=mask)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tree = _tree(out)
    names = {os.path.basename(p) for p in tree}
    # Each kind of output: the state file, checkpoint data, labels, results, predictions, the best
    # checkpoint's record, cached features, summaries and the export.
    for kind in ("checkpoint", "model.ckpt-4.index", "model.ckpt-best.index", "labels.txt", "eval_results.txt",
                 "best_trial.txt", "submit_results.tsv", "test_results.tsv", "saved_model.pb"):
        assert kind in names, sorted(names)
    assert any(p.startswith("cached_features") for p in tree) and any("tfevents" in n for n in names)
    wrong = {p: oct(mode) for p, (mode, _, _) in tree.items()
             if mode != ((0o777 if os.path.isdir(out / p) else 0o666) & ~mask)}
    assert not wrong, (oct(mask), wrong)


def test_a_run_refused_by_the_lock_writes_nothing(tmp_path, tiny_config_file, spm_model):
    """A second run into a busy folder, with other labels: one line naming the holder; the folder (its
    labels.txt, cached features, the lock) is exactly as it was."""
    out = tmp_path / "busy"
    out.mkdir()
    (out / "labels.txt").write_text("neg\npos\n")
    holder = subprocess.Popen(["sleep", "300"])
    try:
        record = {"host": run_lock.socket.gethostname(), "pid": holder.pid,
                  "start_ticks": run_lock.process_start_ticks(holder.pid), "started": "2024-01-01T00:00:00+00:00"}
        (out / "run.lock").write_text(json.dumps(record) + "\n")
        before = _tree(out)
        train = _write_split(tmp_path, "train", 16, 0, labels=["1", "2", "neg", "pos"])
        proc = run_classifier(*_train_args(tiny_config_file, spm_model, out, 4), "--do_train",
                              f"--train_file={train}", "--text_columns=text")
        assert proc.returncode == 1, proc.stderr[-3000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("run_classifier.py: error: --output_dir is in use by another run"), proc.stderr
        assert f"pid {holder.pid}" in last
        assert _tree(out) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_release_folder_as_output_dir_keeps_its_model_ckpt_best(tmp_path, tiny_config_file, spm_model,
                                                                 random_tf1_checkpoint):
    """Google's releases ship model.ckpt-best: --output_dir=$ALBERT_DIR with --do_eval (and that very
    checkpoint as --init_checkpoint) would have replaced it at the first evaluation. One line, nothing
    written (not even cached features)."""
    from albert_tf import AlbertConfig

    release = tmp_path / "albert_base"
    release.mkdir()  # a release of the config: --init_checkpoint is checked against it before the folder
    random_tf1_checkpoint(AlbertConfig(**json.loads(tiny_config_file.read_text())), release / "model.ckpt-best")
    before = _tree(release)
    train, dev = _write_split(tmp_path, "train", 16, 0), _write_split(tmp_path, "dev", 8, 1)
    proc = run_classifier(*_train_args(tiny_config_file, spm_model, release, 4), "--do_train", "--do_eval",
                          f"--init_checkpoint={release / 'model.ckpt-best'}", f"--train_file={train}",
                          f"--dev_file={dev}", "--text_columns=text")
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"run_classifier.py: error: {release / 'model.ckpt-best'} is not from an evaluation in "
                           f"this folder"), proc.stderr[-3000:]
    assert _tree(release) == before


def test_the_originals_run_folder_is_refused_before_any_write(tmp_path, tiny_config_file, spm_model):
    """Going on with a fine-tuning run the original (TF1 Estimator) began: its checkpoints cannot be resumed
    (no input position, other slot names). The refusal came when training started, after labels.txt and the
    feature caches were written, its checkpoints evaluated into eval_results.txt and its state file (gs://
    paths of a TPU run) rewritten (review 49a #1). Now one line, and the folder is as it was."""
    import tensorflow as tf

    folder = tmp_path / "original_mrpc"
    folder.mkdir()
    with tf.Graph().as_default():  # what the original's Estimator saved: TF1 names and global_step
        tf.compat.v1.Variable([1.0], name="bert/embeddings/LayerNorm/beta")
        step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(step.assign(4))
            tf.compat.v1.train.Saver().save(session, str(folder / "model.ckpt"), global_step=4)
    (folder / "checkpoint").write_text('model_checkpoint_path: "gs://bucket/mrpc/model.ckpt-4"\n'
                                       'all_model_checkpoint_paths: "gs://bucket/mrpc/model.ckpt-4"\n')
    before = _tree(folder)
    train, dev = _write_split(tmp_path, "train", 16, 0), _write_split(tmp_path, "dev", 8, 1)
    proc = run_classifier(*_train_args(tiny_config_file, spm_model, folder, 8), "--do_train", "--do_eval",
                          f"--train_file={train}", f"--dev_file={dev}", "--text_columns=text")
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"run_classifier.py: error: {folder / 'model.ckpt-4'} was written by the original "
                           f"(TF1) code, which this loop does not resume"), proc.stderr[-3000:]
    assert _tree(folder) == before


def test_missing_inputs_leave_no_output_folder(tmp_path, tiny_config_file, spm_model, driver_errors):
    glue = tmp_path / "glue"
    (glue / "MRPC").mkdir(parents=True)
    (glue / "MRPC" / "dev.tsv").write_text("x\n")
    folder_as_file = tmp_path / "a_folder"
    folder_as_file.mkdir()
    common = [f"--albert_config_file={tiny_config_file}", f"--spm_model_file={spm_model}",
              f"--max_seq_length={SEQ}", "--train_step=2"]
    results = driver_errors({
        "glue train file missing": ["--task_name=MRPC", f"--data_dir={glue}", f"--output_dir={tmp_path / 'o1'}",
                                    "--do_train", *common],
        "train file is a folder": ["--task_name=custom", f"--train_file={folder_as_file}", "--text_columns=text",
                                   "--file_format=tsv",
                                   f"--output_dir={tmp_path / 'o2'}", "--do_train", *common],
    })
    assert all(r["code"] == 1 for r in results.values()), results
    assert "GLUE mrpc train file not found" in results["glue train file missing"]["stderr"]
    assert results["train file is a folder"]["stderr"] == (
        f"run_classifier.py: error: {folder_as_file}: is a folder; expected a file\n")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_squad_train_file_naming_a_folder(tmp_path, tiny_config_file, spm_model):
    folder = tmp_path / "squad"
    folder.mkdir()
    proc = subprocess.run(
        [sys.executable, "run_squad.py", f"--albert_config_file={tiny_config_file}", f"--spm_model_file={spm_model}",
         f"--output_dir={tmp_path / 'out'}", "--do_train", f"--train_file={folder}", "--max_seq_length=32",
         "--max_query_length=8"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        cwd=REPO)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == f"run_squad.py: error: --train_file={folder}: is a folder; " \
                                                   "expected a file"
    assert not (tmp_path / "out").exists()
