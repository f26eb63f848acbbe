"""The drivers' closing summary (cli.closing_summary): a path per line, numbers as the result files
write them, no Python reprs."""
import numpy as np

from albert_tf.cli import closing_summary
from albert_tf.training.results import format_eval_results, ResultsLayout


def test_paths_one_per_line_and_numbers_as_in_the_result_files():
    outputs = {
        "eval_results": "/out/eval_results.txt",
        "weights": "/out/model.ckpt-best",
        "predictions": ("/out/test_results.tsv", "/out/submit_results.tsv"),
        "metrics": {"exact_match": 14.444444444444445, "f1": np.float32(0.8125), "global_step": np.int64(30)},
        "export": ["/exp/1"],
        "best_checkpoint": None,
    }
    text = closing_summary("run_squad.py", outputs)
    assert text.splitlines() == [
        "run_squad.py: done",
        "  eval_results: /out/eval_results.txt",
        "  weights: /out/model.ckpt-best",
        "  predictions:",
        "    /out/test_results.tsv",
        "    /out/submit_results.tsv",
        "  metrics:",
        "    exact_match = 14.444444444444445",
        "    f1 = 0.8125",
        "    global_step = 30",
        "  export:",
        "    /exp/1",
    ]
    # The metrics read as in eval_results.txt, the same text for the same values.
    written = format_eval_results(outputs["metrics"], ResultsLayout(sort_keys=False))
    assert [line.strip() for line in text.splitlines()[7:10]] == written.splitlines()
    assert not any(mark in text for mark in ("(", "{", "[", "np.", "'"))


def test_outputs_given_relative_are_shown_absolute(tmp_path, monkeypatch):
    """--export_dir=out and --init_checkpoint=ck were printed as given, beside absolute paths."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "export ü" / "17").mkdir(parents=True)
    (tmp_path / "ck.index").write_text("")
    text = closing_summary("run_classifier.py", {"weights": "ck", "export": ["export ü/17"], "label": "entailment"})
    assert text.splitlines() == ["run_classifier.py: done", f"  weights: {tmp_path / 'ck'}", "  export:",
                                 f"    {tmp_path / 'export ü' / '17'}", "  label: entailment"]
