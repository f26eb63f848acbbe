"""The README's promise that a command written for Google's code runs here unchanged,
checked flag by flag: every `flags.DEFINE_*` of the original drivers (names and
defaults copied below from google-research/albert, one commit per file) must be
accepted by our counterpart, with the same default.

Our drivers' flags are read in a subprocess that runs the driver as `__main__` with
`absl.app.run` replaced by a stop, so exactly the flags a real command line would
be parsed against are listed (whatever module defines them), without running
anything. One subprocess per driver (run_squad.py serves both SQuAD drivers).
"""
from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORIGINAL_REPO = "google-research/albert"

# ---- the original's flags: name -> default, as written in each file ----
# Commit of each list: the newest version of the file stored in the code index
# (4ae12a2 has use_einsum/export_dir in run_squad_v1 and masked_lm_budget in
# run_pretraining; the newest stored create_pretraining_data.py, 24b1eb9, is the
# one with input_file_mode). A later upstream run_classifier.py also defines
# export_dir and threshold_to_export; that version is not in the index, and ours
# accepts both anyway.
_TPU = {"use_tpu": False, "tpu_name": None, "tpu_zone": None, "gcp_project": None, "master": None,
        "num_tpu_cores": 8}

CREATE_PRETRAINING_DATA = {  # create_pretraining_data.py @ 24b1eb92aa5cc2baa9c9a4b47c876d1583e6b285
    "input_file": None, "output_file": None, "vocab_file": None, "spm_model_file": None, "input_file_mode": "r",
    "do_lower_case": True, "do_whole_word_mask": True, "do_permutation": False, "favor_shorter_ngram": True,
    "random_next_sentence": False, "max_seq_length": 512, "ngram": 3, "max_predictions_per_seq": 20,
    "random_seed": 12345, "dupe_factor": 40, "masked_lm_prob": 0.15, "short_seq_prob": 0.1,
}

RUN_PRETRAINING = {  # run_pretraining.py @ 4ae12a256efbf091430bbf7bf44cebead110262e
    "albert_config_file": None, "input_file": None, "output_dir": None, "init_checkpoint": None,
    "max_seq_length": 512, "max_predictions_per_seq": 20, "do_train": True, "do_eval": False,
    "train_batch_size": 4096, "eval_batch_size": 64, "optimizer": "lamb", "learning_rate": 0.00176,
    "poly_power": 1.0, "num_train_steps": 125000, "num_warmup_steps": 3125, "start_warmup_step": 0,
    "save_checkpoints_steps": 5000, "keep_checkpoint_max": 5, "iterations_per_loop": 1000,
    "max_eval_steps": 100, "use_tpu": False, "init_from_group0": False, "tpu_name": None, "tpu_zone": None,
    "gcp_project": None, "master": None, "num_tpu_cores": 8, "masked_lm_budget": 0,
}

RUN_CLASSIFIER = {  # run_classifier.py @ 4ae12a256efbf091430bbf7bf44cebead110262e
    "data_dir": None, "albert_config_file": None, "task_name": None, "vocab_file": None, "spm_model_file": None,
    "output_dir": None, "cached_dir": None, "init_checkpoint": None, "albert_hub_module_handle": None,
    "do_lower_case": True, "max_seq_length": 512, "do_train": False, "do_eval": False, "do_predict": False,
    "train_batch_size": 32, "eval_batch_size": 8, "predict_batch_size": 8, "learning_rate": 5e-5,
    "train_step": 1000, "warmup_step": 0, "save_checkpoints_steps": 1000, "keep_checkpoint_max": 5,
    "iterations_per_loop": 1000, "optimizer": "adamw", **_TPU,
}

_SQUAD_COMMON = {
    "albert_config_file": None, "vocab_file": None, "spm_model_file": None, "output_dir": None,
    "train_file": None, "predict_file": None, "train_feature_file": None, "predict_feature_file": None,
    "predict_feature_left_file": None, "init_checkpoint": None, "albert_hub_module_handle": None,
    "do_lower_case": True, "max_seq_length": 384, "doc_stride": 128, "max_query_length": 64,
    "do_train": False, "do_predict": False, "train_batch_size": 32, "predict_batch_size": 8,
    "learning_rate": 5e-5, "num_train_epochs": 3.0, "warmup_proportion": 0.1, "save_checkpoints_steps": 1000,
    "iterations_per_loop": 1000, "n_best_size": 20, "max_answer_length": 30, **_TPU,
}
RUN_SQUAD_V1 = {  # run_squad_v1.py @ 4ae12a256efbf091430bbf7bf44cebead110262e
    **_SQUAD_COMMON, "use_einsum": True, "export_dir": None,
}
RUN_SQUAD_V2 = {  # run_squad_v2.py @ 4ae12a256efbf091430bbf7bf44cebead110262e
    **_SQUAD_COMMON, "start_n_top": 5, "end_n_top": 5, "dropout_prob": 0.1,
}

RUN_RACE = {  # run_race.py @ 4ae12a256efbf091430bbf7bf44cebead110262e
    "data_dir": None, "albert_config_file": None, "task_name": "race", "vocab_file": None, "train_file": None,
    "eval_file": None, "predict_file": None, "spm_model_file": None, "output_dir": None,
    "init_checkpoint": None, "albert_hub_module_handle": None, "do_lower_case": True, "dropout_prob": 0.1,
    "max_seq_length": 512, "max_qa_length": 128, "num_keep_checkpoint": 5, "high_only": False,
    "middle_only": False, "do_train": True, "do_eval": True, "do_predict": False, "train_batch_size": 32,
    "eval_batch_size": 8, "predict_batch_size": 8, "learning_rate": 1e-5, "train_step": 12000,
    "warmup_step": 1000, "save_checkpoints_steps": 100, "iterations_per_loop": 1000, **_TPU,
}

EXPORT_TO_TFHUB = {  # export_to_tfhub.py @ 4ae12a256efbf091430bbf7bf44cebead110262e
    "albert_directory": None, "checkpoint_name": "model.ckpt-best", "do_lower_case": True, "use_einsum": True,
    "export_path": None,
}

# original driver -> (its flags, commit, our counterpart)
ORIGINALS = {
    "create_pretraining_data.py": (CREATE_PRETRAINING_DATA, "24b1eb92aa5cc2baa9c9a4b47c876d1583e6b285",
                                   "create_pretraining_data.py"),
    "run_pretraining.py": (RUN_PRETRAINING, "4ae12a256efbf091430bbf7bf44cebead110262e", "run_pretraining.py"),
    "run_classifier.py": (RUN_CLASSIFIER, "4ae12a256efbf091430bbf7bf44cebead110262e", "run_classifier.py"),
    "run_squad_v1.py": (RUN_SQUAD_V1, "4ae12a256efbf091430bbf7bf44cebead110262e", "run_squad.py"),
    "run_squad_v2.py": (RUN_SQUAD_V2, "4ae12a256efbf091430bbf7bf44cebead110262e", "run_squad.py"),
    "run_race.py": (RUN_RACE, "4ae12a256efbf091430bbf7bf44cebead110262e", "run_race.py"),
    "export_to_tfhub.py": (EXPORT_TO_TFHUB, "4ae12a256efbf091430bbf7bf44cebead110262e", "export_model.py"),
}

# Defaults we change on purpose: (original driver, flag) -> why. Empty today: every
# flag we accept has the original's default.
DEFAULT_CHANGES: dict[tuple[str, str], str] = {}

# Runs a driver as __main__ up to absl.app.run, then prints its registered flags.
_LIST_FLAGS = r"""
import json, runpy, sys
from absl import app, flags

class _Stop(Exception):
    pass

def _stop(*args, **kwargs):
    raise _Stop()

app.run = _stop
path = sys.argv[1]
sys.argv = [path]
try:
    runpy.run_path(path, run_name="__main__")
except _Stop:
    pass
out = {}
for name in flags.FLAGS:
    default = flags.FLAGS[name].default
    out[name] = default if isinstance(default, (str, int, float, bool, type(None))) else repr(default)
print("FLAGS_JSON " + json.dumps(out))
"""


@functools.lru_cache(maxsize=None)
def our_flags(driver: str) -> dict | None:
    """{flag: default} that `python <driver>` accepts, or None if there is no such driver."""
    path = os.path.join(REPO, driver)
    if not os.path.isfile(path):
        return None
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", _LIST_FLAGS, path], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("FLAGS_JSON ")]
    assert done.returncode == 0 and lines, f"listing the flags of {driver} failed:\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("FLAGS_JSON "):])


def missing_flags(original: str) -> list[str]:
    expected, _, ours = ORIGINALS[original]
    accepted = our_flags(ours) or {}
    return [name for name in expected if name not in accepted]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and (a is None) == (b is None)


@pytest.mark.parametrize("original", sorted(ORIGINALS))
def test_accepts_every_original_flag(original):
    expected, commit, ours = ORIGINALS[original]
    missing = missing_flags(original)
    where = f"{ORIGINAL_REPO}@{commit[:7]} {original}"
    if our_flags(ours) is None:
        pytest.fail(f"{ours} does not exist, so none of the {len(expected)} flags of {where} is accepted: "
                    + " ".join(f"--{name}" for name in expected), pytrace=False)
    if missing:
        pytest.fail(f"{ours} does not accept {len(missing)} of the {len(expected)} flags of {where}: "
                    + " ".join(f"--{name}" for name in missing), pytrace=False)


@pytest.mark.parametrize("original", sorted(ORIGINALS))
def test_defaults_match_original(original):
    expected, commit, ours = ORIGINALS[original]
    accepted = our_flags(ours)
    if accepted is None:
        pytest.fail(f"{ours} does not exist (defaults of {original} cannot be compared)", pytrace=False)
    differ = [f"--{name}: original {expected[name]!r}, ours {accepted[name]!r}"
              for name in expected
              if name in accepted and (original, name) not in DEFAULT_CHANGES
              and not _same(expected[name], accepted[name])]
    assert not differ, f"{ours} changes defaults of {ORIGINAL_REPO}@{commit[:7]} {original}: " + "; ".join(differ)


def test_listing_sees_flags_defined_anywhere_and_only_those(tmp_path):
    """The checker itself: a driver whose flags live in an imported module and one
    that defines them in the script are both listed; an undefined flag is missing."""
    (tmp_path / "helper_flags.py").write_text(
        "from absl import flags\nflags.DEFINE_integer('from_module', 7, 'x')\n", encoding="utf-8")
    script = tmp_path / "fake_driver.py"
    script.write_text(
        "import sys\nsys.path.insert(0, %r)\nimport helper_flags\nfrom absl import app, flags\n"
        "flags.DEFINE_string('from_script', 'abc', 'x')\n"
        "def main(argv):\n    raise SystemExit('main must not run')\n"
        "if __name__ == '__main__':\n    app.run(main)\n" % str(tmp_path), encoding="utf-8")
    listed = our_flags(str(script))
    assert listed["from_module"] == 7 and listed["from_script"] == "abc"
    assert "not_defined_anywhere" not in listed
