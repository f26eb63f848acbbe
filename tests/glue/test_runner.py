"""Best-checkpoint selection and evaluation/prediction from --init_checkpoint (in process), through
the one fine-tuning runner with the GLUE task."""
import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.finetuning import FineTuningJob, resolve_weights, run
from albert_tf.finetuning import runner
from albert_tf.finetuning.runner import _Runner
from albert_tf.glue import heads
from albert_tf.glue.processors import get_processor
from albert_tf.glue.task import GlueTask
from albert_tf.weights import files
from albert_tf.weights.errors import CheckpointError

CPU = tf.distribute.OneDeviceStrategy("/cpu:0")


@pytest.fixture
def job(tiny_config_file, tmp_path):
    return FineTuningJob(output_dir=str(tmp_path / "out"), albert_config=AlbertConfig.from_json_file(
        str(tiny_config_file)), eval_batch_size=16, predict_batch_size=16)


@pytest.fixture
def task(glue_slices, spm_model, tmp_path):
    from albert_tf.tokenization import FullTokenizer, tokenizer_fingerprint

    return GlueTask(processor=get_processor("mrpc"), data_dir=str(glue_slices),
                    features_dir=str(tmp_path / "out" / "cached_features"),
                    tokenizer=FullTokenizer(spm_model_file=spm_model),
                    tokenizer_id=tokenizer_fingerprint(spm_model, None, True), max_seq_length=32,
                    spm_model_file=spm_model)


def _save(model, output_dir, step):
    """A checkpoint as the Trainer writes it, marked by output_bias[0] = step."""
    model.classifier.output_bias.assign([float(step), 0.0])
    prefix = files.checkpoint_prefix(output_dir, step)
    files.write_checkpoint_atomically(tf.train.Checkpoint(model=model), prefix)
    files.update_state_file(output_dir, prefix, keep_checkpoint_max=0)


def _bias_of(prefix):
    return tf.train.load_checkpoint(prefix).get_tensor("model/classifier/output_bias/.ATTRIBUTES/VARIABLE_VALUE")


def test_best_checkpoint_selection_and_reruns(task, job, monkeypatch):
    os.makedirs(job.output_dir)
    model = heads.build_classifier(job.albert_config, "mrpc")
    for step in (10, 20, 30):
        _save(model, job.output_dir, step)
    scripted = {10: 0.5, 20: 0.8, 30: 0.6, 40: 0.9}

    def fake_evaluation(self, evaluated_model):
        def evaluate(checkpoint_path):
            # The evaluated weights are those of the checkpoint being scored.
            global_step = files.step_of(checkpoint_path)
            assert float(evaluated_model.classifier.output_bias[0]) == global_step
            return {"eval_accuracy": scripted[global_step], "eval_loss": 1.0, "global_step": global_step}
        return evaluate

    monkeypatch.setattr(_Runner, "evaluation", fake_evaluation)
    evaluator = _Runner(task, job, CPU).checkpoint_evaluator(heads.build_classifier(job.albert_config, "mrpc"))
    assert evaluator.evaluate_pending() == 3
    out = job.output_dir
    assert open(os.path.join(out, "best_trial.txt")).read() == "30:20:0.8"
    assert _bias_of(os.path.join(out, "model.ckpt-best"))[0] == 20.0
    text = open(os.path.join(out, "eval_results.txt")).read()
    assert [line for line in text.splitlines() if line.startswith("best")] == ["best = 0.5", "best = 0.8",
                                                                             "best = 0.8"]
    # A rerun evaluates nothing twice; a new, better checkpoint takes over.
    assert evaluator.evaluate_pending() == 0
    assert open(os.path.join(out, "eval_results.txt")).read() == text
    _save(model, out, 40)
    assert evaluator.evaluate_pending() == 1
    assert open(os.path.join(out, "best_trial.txt")).read() == "40:40:0.9"
    assert _bias_of(os.path.join(out, "model.ckpt-best"))[0] == 40.0
    # Predict/export use model.ckpt-best.
    assert resolve_weights(out, None) == os.path.join(out, "model.ckpt-best")
    # A run killed while replacing model.ckpt-best left it without an index: the chosen step's own
    # checkpoint is the same weights; without that either, no other weights pass for the best.
    os.remove(os.path.join(out, "model.ckpt-best.index"))
    assert resolve_weights(out, None) == os.path.join(out, "model.ckpt-40")
    for name in os.listdir(out):
        if name.startswith("model.ckpt-40."):
            os.remove(os.path.join(out, name))
    with pytest.raises(ValueError, match="best_trial.txt names step 40 as the best, but neither .*model.ckpt-best "
                                         "nor that step's checkpoint is there intact"):
        resolve_weights(out, None)


def test_a_damaged_best_falls_back_to_its_own_step(task, job, monkeypatch):
    """model.ckpt-best damaged on disk (a disk fault): the step best_trial.txt names holds the same
    weights, so predicting uses it; with that step pruned too, the run stops naming the damage."""
    os.makedirs(job.output_dir)
    model = heads.build_classifier(job.albert_config, "mrpc")
    for step in (10, 20):
        _save(model, job.output_dir, step)
    out = job.output_dir
    files.copy_checkpoint(os.path.join(out, "model.ckpt-10"), os.path.join(out, "model.ckpt-best"))
    with open(os.path.join(out, "best_trial.txt"), "w") as f:
        f.write("20:10:0.8")
    data = os.path.join(out, "model.ckpt-best.data-00000-of-00001")
    with open(data, "r+b") as f:
        f.truncate(10)
    warnings = []
    monkeypatch.setattr(runner.logging, "warning", lambda fmt, *args: warnings.append(fmt % args))
    assert resolve_weights(out, None) == os.path.join(out, "model.ckpt-10")  # not the newer model.ckpt-20
    assert warnings and f"{data} is damaged" in warnings[0] and "model.ckpt-10" in warnings[0]
    for name in os.listdir(out):
        if name.startswith("model.ckpt-10."):
            os.remove(os.path.join(out, name))
    with pytest.raises(CheckpointError) as err:
        run(task, dataclasses.replace(job, do_predict=True), CPU)
    message = str(err.value)
    assert "\n" not in message and f"{data} is damaged" in message
    assert not [name for name in os.listdir(out) if "results" in name]  # no predictions written


def test_predicting_over_only_damaged_checkpoints_stops_instead_of_using_init_checkpoint(task, job, tmp_path):
    """A fine-tuned run's checkpoints all damaged: predicting from --init_checkpoint would pass its
    (other) weights off as the run's; the run stops naming the damage and writes nothing."""
    model = heads.build_classifier(job.albert_config, "mrpc")
    _save(model, str(tmp_path / "source"), 7)
    _save(model, job.output_dir, 20)
    data = os.path.join(job.output_dir, "model.ckpt-20.data-00000-of-00001")
    with open(data, "r+b") as f:
        f.truncate(10)
    job = dataclasses.replace(job, init_checkpoint=str(tmp_path / "source" / "model.ckpt-7"), do_predict=True)
    with pytest.raises(CheckpointError) as err:
        run(task, job, CPU)
    message = str(err.value)
    assert "\n" not in message and f"{data} is damaged" in message and "not falling back" in message
    assert not [name for name in os.listdir(job.output_dir) if "results" in name]  # no predictions written


def test_eval_and_predict_from_init_checkpoint(task, job, tmp_path):
    """As run_glue.sh does for MNLI-mm and AX: weights from another run, nothing trained here."""
    source = tmp_path / "source"
    model = heads.build_classifier(job.albert_config, "mrpc")
    _save(model, str(source), 7)
    job = dataclasses.replace(job, init_checkpoint=str(source / "model.ckpt-7"), do_eval=True, do_predict=True)
    produced = run(task, job, CPU)
    assert produced["weights"] == job.init_checkpoint
    text = open(produced["eval_results"]).read()
    assert "global_step = 7" in text and "num_examples = 48" in text
    assert not os.path.exists(os.path.join(job.output_dir, "best_trial.txt"))  # not a checkpoint of this run
    probs = np.loadtxt(produced["predictions"][0], delimiter="\t", ndmin=2)
    assert probs.shape == (12, 2)
    # The checkpoint's head (output_bias = [7, 0]) was loaded, not a fresh one.
    assert np.all(probs[:, 0] > 0.99)


def test_weights_named_without_a_step_report_the_step_they_hold(task, job, tmp_path, monkeypatch):
    """An --init_checkpoint (or model.ckpt-best) whose name has no step: eval_results.txt, the eval
    TensorBoard step and the predictions' step are the checkpoint's own global_step, as the original's
    Estimator reported, not 0 (which reads as the untrained init)."""
    model = heads.build_classifier(job.albert_config, "mrpc")
    source = str(tmp_path / "source" / "model.ckpt-best")
    files.write_checkpoint_atomically(tf.train.Checkpoint(model=model, global_step=tf.Variable(13, dtype=tf.int64)),
                                      source)
    steps = []
    write = GlueTask.write_predictions
    monkeypatch.setattr(GlueTask, "write_predictions",
                        lambda self, out, split, outputs, context: steps.append(context.step) or write(
                            self, out, split, outputs, context))
    job = dataclasses.replace(job, init_checkpoint=source, do_eval=True, do_predict=True)
    produced = run(task, job, CPU)
    assert "global_step = 13\n" in open(produced["eval_results"]).read()
    assert steps == [13]
    events = [event.step for path in tf.io.gfile.glob(os.path.join(job.output_dir, "eval", "events.*"))
              for event in tf.compat.v1.train.summary_iterator(path) if event.summary.value]
    assert events and set(events) == {13}


def test_eval_only_run_with_every_checkpoint_evaluated_says_so_and_names_no_results(task, job, caplog):
    """MisMNLI in MNLI's --output_dir, or a --do_eval rerun: best_trial.txt says every checkpoint was
    evaluated. The run must not end pointing at eval_results.txt (an earlier run's numbers) in silence."""
    model = heads.build_classifier(job.albert_config, "mrpc")
    for step in (10, 20):
        _save(model, job.output_dir, step)
    job = dataclasses.replace(job, do_eval=True)
    first = run(task, job, CPU)
    text = open(first["eval_results"]).read()
    assert text.count("=" * 50) == 2
    with caplog.at_level("WARNING"):
        again = run(task, job, CPU)
    assert "eval_results" not in again
    assert open(first["eval_results"]).read() == text
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "evaluat" in r.getMessage()]
    assert len(warnings) == 1
    assert "every checkpoint in --output_dir" in warnings[0] and "up to step 20" in warnings[0]
    assert f"--init_checkpoint={os.path.join(job.output_dir, 'model.ckpt-best')}" in warnings[0]


def test_result_files_print_float32_as_the_original(task, job):
    """The original's Estimator metrics were float32 and eval_results.txt / best_trial.txt printed
    str(np.float32): 0.6935212, not 0.6935211869329214. Two checkpoints with the same weights score the
    same: the first stays the best (compared as written, nothing rounds a tie into a win)."""
    model = heads.build_classifier(job.albert_config, "mrpc")
    for step in (10, 20):  # the same weights under both names
        prefix = files.checkpoint_prefix(job.output_dir, step)
        files.write_checkpoint_atomically(tf.train.Checkpoint(model=model), prefix)
        files.update_state_file(job.output_dir, prefix, keep_checkpoint_max=0)
    produced = run(task, dataclasses.replace(job, do_eval=True), CPU)
    blocks = [dict(line.split(" = ") for line in block.splitlines())
              for block in open(produced["eval_results"]).read().split("=" * 50 + "\n")[:-1]]
    assert len(blocks) == 2 and blocks[0] == blocks[1] | {"global_step": "10"}
    for key, text in blocks[0].items():
        if key not in ("global_step", "num_examples"):
            assert text == str(np.float32(text)), (key, text)
    last, best_step, best = open(os.path.join(job.output_dir, "best_trial.txt")).read().split(":")
    assert (last, best_step, best) == ("20", "10", blocks[0]["eval_accuracy"])
    assert blocks[1]["best"] == blocks[0]["eval_accuracy"]


def test_the_eval_log_line_prints_the_digits_eval_results_txt_has(task, job, tmp_path, monkeypatch):
    """The original logged str(result[key]) of its float32 metrics: the log line's values are the
    text of eval_results.txt (0.49819493), not float64 noise (0.49819493293762207)."""
    from albert_tf.finetuning import runner

    source = tmp_path / "source"
    _save(heads.build_classifier(job.albert_config, "mrpc"), str(source), 7)
    # The logged lines read directly: caplog sees no absl INFO once an earlier test lowered absl's verbosity.
    logged_lines = []
    monkeypatch.setattr(runner.logging, "info", lambda message, *args: logged_lines.append(message % args))
    produced = run(task, dataclasses.replace(job, init_checkpoint=str(source / "model.ckpt-7"), do_eval=True), CPU)
    lines = [line for line in logged_lines if line.startswith("Eval results at step 7: ")]
    assert len(lines) == 1
    logged = dict(pair.split(" = ") for pair in lines[0][len("Eval results at step 7: "):].split(", "))
    written = dict(line.split(" = ") for line in open(produced["eval_results"]).read().splitlines() if " = " in line)
    assert logged == {key: text for key, text in written.items() if key != "best"}
    for key, text in logged.items():
        if key not in ("global_step", "num_examples"):
            assert text == str(np.float32(text)), (key, text)


def test_the_predict_log_line_names_each_output_without_python_reprs(task, job, tmp_path, monkeypatch):
    """It read "predictions: ('<dir>/test_results.tsv', '<dir>/submit_results.tsv')" (SQuAD's: a list, and its
    metrics as a dict): the paths are named as the closing summary names them, the figures as eval_results.txt."""
    source = tmp_path / "source"
    _save(heads.build_classifier(job.albert_config, "mrpc"), str(source), 7)
    logged_lines = []
    monkeypatch.setattr(runner.logging, "info", lambda message, *args: logged_lines.append(message % args))
    produced = run(task, dataclasses.replace(job, init_checkpoint=str(source / "model.ckpt-7"), do_predict=True), CPU)
    (line,) = [line for line in logged_lines if line.startswith("Predicted ")]
    assert line.endswith(f"records with {source / 'model.ckpt-7'}: predictions: {', '.join(produced['predictions'])}")
    assert runner._inline({"exact": np.float32(0.5), "total": 2}) == "exact = 0.5, total = 2"


def test_a_run_that_evaluates_its_checkpoints_names_the_best_it_kept(task, job, monkeypatch):
    """--do_eval over the run's checkpoints copies the best to model.ckpt-best: the closing summary named
    eval_results.txt only (run_pretraining.py's names its best_checkpoint). From --init_checkpoint: no best."""
    os.makedirs(job.output_dir)
    model = heads.build_classifier(job.albert_config, "mrpc")
    for step in (10, 20):
        _save(model, job.output_dir, step)
    produced = run(task, dataclasses.replace(job, do_eval=True), CPU)
    best = os.path.join(job.output_dir, "model.ckpt-best")
    assert produced["best_checkpoint"] == best and os.path.exists(best + ".index")
    assert list(produced) == ["eval_results", "best_checkpoint"]
    elsewhere = dataclasses.replace(job, output_dir=job.output_dir + "_init", do_eval=True,
                                    init_checkpoint=os.path.join(job.output_dir, "model.ckpt-20"))
    assert "best_checkpoint" not in run(task, elsewhere, CPU)
