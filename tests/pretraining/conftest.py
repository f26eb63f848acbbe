"""Pretraining data for the driver tests: create_pretraining_data.py on the sample text, beside an
albert_config.json."""
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def make_pretraining_data(tmp_path_factory, shared):
    """``make(name, config, max_seq_length, max_predictions_per_seq, dupe_factor)`` -> (the records made from
    the sample text with Google's 30k-clean model, the ``config`` dict written as albert_config.json)."""

    def make(name: str, config: dict, max_seq_length: int, max_predictions_per_seq: int,
             dupe_factor: int = 1) -> tuple[pathlib.Path, pathlib.Path]:
        folder = tmp_path_factory.mktemp(name)
        records = folder / "train.tfrecord"
        done = subprocess.run([
            sys.executable, str(REPO / "create_pretraining_data.py"),
            f"--input_file={shared('data', 'corpus', 'sample_text.txt')}", f"--output_file={records}",
            f"--spm_model_file={shared('data', 'spm', '30k-clean.model')}", f"--max_seq_length={max_seq_length}",
            f"--max_predictions_per_seq={max_predictions_per_seq}", f"--dupe_factor={dupe_factor}",
            "--num_workers=1"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        config_file = folder / "albert_config.json"
        config_file.write_text(json.dumps(config))
        return records, config_file

    return make
