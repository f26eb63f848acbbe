"""Output files in the original's formats."""
import numpy as np
import pytest

from albert_tf.glue import outputs
from albert_tf.glue.processors import InputExample, get_task_spec
from albert_tf.training.results import format_eval_results, write_eval_results


def _examples(n):
    return [InputExample(str(i), "a", "b") for i in range(n)]


def test_submit_and_test_results_classification(tmp_path):
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], np.float32)
    test_path, submit_path = outputs.write_predictions(tmp_path, get_task_spec("mismnli"), _examples(2), probs)
    assert open(test_path).read() == "0.7\t0.2\t0.1\n0.1\t0.1\t0.8\n"
    assert open(submit_path).read() == "index\tprediction\n0\tcontradiction\n1\tneutral\n"


def test_submit_with_explicit_predictions_and_stsb(tmp_path):
    probs = np.array([[0.6, 0.4], [0.3, 0.7]], np.float32)
    _, submit = outputs.write_predictions(tmp_path, get_task_spec("rte"), _examples(2), probs,
                                          predictions=np.array([1, 1]))
    assert open(submit).read().splitlines()[1:] == ["0\tnot_entailment", "1\tnot_entailment"]
    test_path, submit = outputs.write_predictions(tmp_path, get_task_spec("sts-b"), _examples(2),
                                                  np.array([3.25, 0.5], np.float32))
    assert open(test_path).read() == "3.25\n0.5\n"
    assert open(submit).read() == "index\tprediction\n0\t3.25\n1\t0.5\n"


def test_count_mismatch_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="3 test examples but 2 predictions"):
        outputs.write_predictions(tmp_path, get_task_spec("cola"), _examples(3), np.zeros([2, 2]))


def test_eval_blocks_accumulate(tmp_path):
    block = format_eval_results({"eval_loss": 0.5, "eval_accuracy": np.float64(0.75), "global_step": 100},
                                outputs.RESULTS_LAYOUT, best=0.75)
    assert block == ("eval_accuracy = 0.75\neval_loss = 0.5\nglobal_step = 100\nbest = 0.75\n" + "=" * 50 + "\n")
    path = tmp_path / "eval_results.txt"
    write_eval_results(path, {"eval_loss": 0.5, "eval_accuracy": np.float64(0.75), "global_step": 100},
                       outputs.RESULTS_LAYOUT, best=0.75)
    write_eval_results(path, {"eval_loss": 0.25}, outputs.RESULTS_LAYOUT)
    assert path.read_text() == block + "eval_loss = 0.25\n" + "=" * 50 + "\n"
    assert [p.name for p in tmp_path.iterdir()] == ["eval_results.txt"]
