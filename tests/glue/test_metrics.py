"""GLUE metrics against values worked out by hand."""
import math

import numpy as np
import pytest

from albert_tf.glue import metrics


def test_accuracy_f1_mcc_by_hand():
    labels = [1, 1, 0, 0, 1]
    preds = [1, 0, 1, 0, 1]
    # tp=2 (rows 0,4), tn=1 (row 3), fp=1 (row 2), fn=1 (row 1)
    assert metrics.confusion_counts(labels, preds) == (2, 1, 1, 1)
    assert metrics.accuracy(labels, preds) == pytest.approx(3 / 5)
    assert metrics.f1_score(labels, preds) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    # (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6
    assert metrics.matthews_corrcoef(labels, preds) == pytest.approx(1 / 6)
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [0, 1, 1, 0]) == pytest.approx(1.0)
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [1, 0, 0, 1]) == pytest.approx(-1.0)


def test_degenerate_cases_are_zero_not_nan():
    assert metrics.matthews_corrcoef([0, 1, 1], [1, 1, 1]) == 0.0  # constant predictions
    assert metrics.f1_score([0, 0], [0, 0]) == 0.0
    assert metrics.pearson_corr([1, 2, 3], [2, 2, 2]) == 0.0


def test_pearson_by_hand():
    # dx = [-1,0,1], dy = [-5/3,-2/3,7/3]; sum dx*dy = 4, sum dx^2 = 2, sum dy^2 = 78/9
    assert metrics.pearson_corr([1, 2, 3], [1, 2, 5]) == pytest.approx(4 / math.sqrt(2 * 78 / 9))
    assert metrics.pearson_corr([1, 2, 3], [-2, -4, -6]) == pytest.approx(-1.0)


def test_average_ranks_and_spearman_with_ties():
    np.testing.assert_allclose(metrics.average_ranks([10, 20, 10, 30, 20, 20]), [1.5, 4, 1.5, 6, 4, 4])
    # ranks x = [1, 2.5, 2.5, 4], y = [1, 3, 2, 4]: sum dxdy = 4.5, sum dx^2 = 4.5, sum dy^2 = 5
    assert metrics.spearman_corr([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    # Monotone but not linear: Spearman 1, Pearson below 1.
    x = [1, 2, 3, 4]
    assert metrics.spearman_corr(x, [1, 8, 27, 64]) == pytest.approx(1.0)
    assert metrics.pearson_corr(x, [1, 8, 27, 64]) < 0.99


def test_cola_metrics_from_logits_ignore_padding_rows():
    ln3 = math.log(3.0)
    logits = [[0.0, ln3], [ln3, 0.0], [0.0, ln3], [5.0, -5.0]]  # p(1) = 3/4, 1/4, 3/4; last row padding
    labels = [1, 1, 0, 1]
    results = metrics.compute_glue_metrics("cola", labels, logits, is_real_example=[1, 1, 1, 0])
    # predictions 1, 0, 1 vs labels 1, 1, 0: tp=1 fp=1 fn=1 tn=0
    assert results["eval_accuracy"] == pytest.approx(1 / 3)
    assert results["eval_loss"] == pytest.approx(-(math.log(0.75) + math.log(0.25) + math.log(0.25)) / 3)
    assert results["matthew_corr"] == pytest.approx((0 - 1) / math.sqrt(2 * 2 * 1 * 1))
    assert results["num_examples"] == 3
    assert "f1" not in results and "pearson" not in results


def test_mrpc_has_f1_and_mnli_three_classes():
    results = metrics.compute_glue_metrics("mrpc", [1, 0, 1], [[0, 1], [0, 1], [2, 0]])
    assert results["eval_accuracy"] == pytest.approx(1 / 3)
    assert results["f1"] == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))
    results = metrics.compute_glue_metrics("mnli", [2, 0], [[0, 0, 1], [1, 0, 0]])
    assert results["eval_accuracy"] == 1.0 and "f1" not in results


def test_stsb_metrics():
    scores = np.array([[1.0], [2.0], [3.0], [9.0]])
    gold = [1.5, 2.0, 4.0, 0.0]
    results = metrics.compute_glue_metrics("sts-b", gold, scores, is_real_example=[1, 1, 1, 0])
    assert results["MSE"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert results["eval_loss"] == pytest.approx((0.25 + 0 + 1) / 3)
    # dx = [-1, 0, 1], dy = [-1, -0.5, 1.5]: sum dx*dy = 2.5, sum dx^2 = 2, sum dy^2 = 3.5
    assert results["pearson"] == pytest.approx(2.5 / math.sqrt(2 * 3.5))
    assert results["spearman"] == pytest.approx(1.0)
    assert "eval_accuracy" not in results


def test_key_metric():
    assert metrics.key_metric("CoLA") == "matthew_corr"
    assert metrics.key_metric("sts-b") == "pearson"
    assert metrics.key_metric("qqp") == "eval_accuracy"


def test_each_task_lists_its_metrics_and_the_key_metric_is_checked_at_import():
    import dataclasses

    from albert_tf.glue.processors import TASKS, get_task_spec

    for spec in TASKS.values():
        results = metrics.compute_glue_metrics(spec.name, [0.0, 1.0] if spec.is_regression else [0, 1],
                                               np.eye(2, max(spec.num_labels, 2))[:, :spec.num_labels])
        assert set(results) == {"eval_loss", "num_examples", *spec.metrics}, spec.name
        assert spec.key_metric in results
    with pytest.raises(ValueError, match="key_metric 'f1' is not among its metrics"):
        dataclasses.replace(get_task_spec("rte"), key_metric="f1")
