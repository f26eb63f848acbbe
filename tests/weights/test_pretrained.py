"""albert_tf.from_pretrained on the folders transformers 4.57.6 wrote (../shared/reference/hf_albert_tiny_heads,
hf_albert_tiny_shared) and on Google's TF1 checkpoint (albert_tiny_shared), compared with the logits recorded
there; and convert_checkpoint.py --direction=hf_to_tf2 on the three task folders."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy

import albert_tf
from albert_tf.weights import CheckpointError, save_hf_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL = 1e-4  # ../shared/reference/README.md: a correct port matches within 1e-4 on real positions
HEADS = ("AlbertForSequenceClassification", "AlbertForQuestionAnswering", "AlbertForMultipleChoice")
INPUTS = ("input_ids", "input_mask", "segment_ids")


def _io(folder):
    data = dict(np.load(folder / "io.npz"))
    return {k: data[k] for k in INPUTS}, data


def _max_diff(got, want, mask=None) -> float:
    diff = np.abs(np.asarray(got) - want)
    return float((diff[mask == 1] if mask is not None else diff).max())


@pytest.mark.parametrize("architecture", HEADS)
def test_task_folder_gives_transformers_logits(shared, architecture):
    folder = shared("reference", "hf_albert_tiny_heads", architecture)
    inputs, want = _io(folder)
    model = albert_tf.from_pretrained(str(folder))
    if architecture == "AlbertForMultipleChoice":  # one question with 3 choices (README there)
        inputs = {k: v[None] for k, v in inputs.items()}
    outputs = model(inputs, training=False)
    keys = ("start_logits", "end_logits") if architecture == "AlbertForQuestionAnswering" else ("logits",)
    for key in keys:
        assert outputs[key].shape == want[key].shape, key
        mask = want["input_mask"] if key != "logits" else None  # span logits are not masked: real positions
        diff = _max_diff(outputs[key], want[key], mask)
        print(f"{architecture} {key}: max |ours - transformers| = {diff:.3g}")
        assert diff <= TOL, key
    expected_class = {"AlbertForSequenceClassification": "GlueClassifier",
                      "AlbertForQuestionAnswering": "SquadV1Model", "AlbertForMultipleChoice": "RaceModel"}
    assert type(model).__name__ == expected_class[architecture]
    assert model.load_report.format == "hf" and not model.load_report.skipped


def test_classifier_labels_come_with_the_model_and_go_back_out(shared, tmp_path):
    folder = shared("reference", "hf_albert_tiny_heads", "AlbertForSequenceClassification")
    names = json.loads((folder / "config.json").read_text())["id2label"]
    model = albert_tf.from_pretrained(str(folder))
    assert model.id2label == {int(k): v for k, v in names.items()} == {0: "neg", 1: "neu", 2: "pos"}
    save_hf_checkpoint(model, str(tmp_path / "hf"), "AlbertForSequenceClassification")
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["id2label"] == names and written["label2id"] == {"neg": 0, "neu": 1, "pos": 2}
    # through our format: hf_to_tf2 writes them into albert_config.json, tf2_to_hf back into config.json
    from albert_tf.conversion import convert

    convert(str(folder), str(tmp_path / "tf2" / "model.ckpt"), "hf_to_tf2")
    ours = albert_tf.from_pretrained(str(tmp_path / "tf2"))  # one of ours, with its albert_config.json
    assert ours.id2label == model.id2label
    inputs, want = _io(folder)
    assert _max_diff(ours(inputs)["logits"], want["logits"]) <= TOL
    convert(str(tmp_path / "tf2" / "model.ckpt"), str(tmp_path / "hf2"), "tf2_to_hf",
            config_file=str(tmp_path / "tf2" / "albert_config.json"))
    assert json.loads((tmp_path / "hf2" / "config.json").read_text())["id2label"] == names


def test_question_answering_folder_with_a_pooler(shared, tmp_path):
    """Some hub QA folders carry the pooler (saved from another class): it is read, not refused."""
    qa = shared("reference", "hf_albert_tiny_heads", "AlbertForQuestionAnswering")
    classifier = shared("reference", "hf_albert_tiny_heads", "AlbertForSequenceClassification")
    shutil.copytree(qa, tmp_path / "qa")
    tensors = safetensors.numpy.load_file(str(qa / "model.safetensors"))
    pooler = {k: v for k, v in safetensors.numpy.load_file(str(classifier / "model.safetensors")).items()
              if k.startswith("albert.pooler.")}
    assert sorted(pooler) == ["albert.pooler.bias", "albert.pooler.weight"]
    safetensors.numpy.save_file({**tensors, **pooler}, str(tmp_path / "qa" / "model.safetensors"),
                                metadata={"format": "pt"})
    model = albert_tf.from_pretrained(str(tmp_path / "qa"))
    assert model.load_report.missing_allowed == []
    np.testing.assert_array_equal(model.encoder.pooler.kernel.numpy(), pooler["albert.pooler.weight"].T)
    inputs, want = _io(qa)
    assert _max_diff(model(inputs)["start_logits"], want["start_logits"], want["input_mask"]) <= TOL


def test_multiple_choice_any_number_of_choices(shared):
    """Each choice is scored alone: 2 or 5 choices give the same per-choice scores as 3."""
    folder = shared("reference", "hf_albert_tiny_heads", "AlbertForMultipleChoice")
    inputs, want = _io(folder)
    model = albert_tf.from_pretrained(str(folder))
    for order in ([2, 0], [0, 1, 2, 1, 0]):
        picked = {k: v[order][None] for k, v in inputs.items()}
        logits = model(picked)["logits"].numpy()
        assert logits.shape == (1, len(order))
        assert _max_diff(logits[0], want["logits"][0][order]) <= TOL


def test_pretraining_folder_encoder_and_masked_lm(shared, tmp_path):
    """AlbertForPreTraining (transformers' own folder), and the AlbertModel / AlbertForMaskedLM folders
    written from it: every position's MLM logits without masked_lm_positions, as transformers returns them."""
    folder = shared("reference", "hf_albert_tiny_shared")
    inputs, want = _io(folder)
    mask = want["input_mask"]
    pretrainer = albert_tf.from_pretrained(str(folder))
    assert type(pretrainer).__name__ == "AlbertPretrainer"
    out = pretrainer(inputs)
    assert _max_diff(out["mlm_logits"], want["mlm_logits"], mask) <= TOL
    assert _max_diff(out["sop_logits"], want["sop_logits"]) <= TOL
    save_hf_checkpoint(pretrainer, str(tmp_path / "mlm"), "AlbertForMaskedLM")
    save_hf_checkpoint(pretrainer.encoder, str(tmp_path / "base"), "AlbertModel")
    masked_lm = albert_tf.from_pretrained(str(tmp_path / "mlm"))
    assert "cls/seq_relationship/output_weights" in masked_lm.load_report.missing_allowed  # it saves no SOP head
    assert _max_diff(masked_lm(inputs)["mlm_logits"], want["mlm_logits"], mask) <= TOL
    encoder = albert_tf.from_pretrained(str(tmp_path / "base"))
    assert type(encoder).__name__ == "AlbertModel"
    assert _max_diff(encoder(inputs)["sequence_output"], want["sequence_output"], mask) <= TOL
    assert _max_diff(encoder(inputs)["pooled_output"], want["pooled_output"]) <= TOL


def test_google_tf1_checkpoint_with_its_config(shared):
    folder = shared("reference", "albert_tiny_shared")
    inputs, want = _io(folder)
    for path in (folder, folder / "model.ckpt"):  # the folder, or the prefix with albert_config.json beside it
        model = albert_tf.from_pretrained(str(path))
        assert type(model).__name__ == "AlbertPretrainer" and model.load_report.format == "tf1"
        out = model(inputs)
        assert _max_diff(out["mlm_logits"], want["mlm_logits"], want["input_mask"]) <= TOL
        assert _max_diff(out["sop_logits"], want["sop_logits"]) <= TOL


@pytest.mark.parametrize("architectures", [[], None], ids=["empty", "null"])
def test_a_config_naming_no_architecture_opens_by_the_weights_heads(shared, tmp_path, architectures):
    """"architectures": [] or null says nothing, like an absent field: the heads in the weights decide."""
    source = shared("reference", "hf_albert_tiny_shared")
    shutil.copytree(source, tmp_path / "folder")
    config = json.loads((source / "config.json").read_text())
    config["architectures"] = architectures
    (tmp_path / "folder" / "config.json").write_text(json.dumps(config))
    inputs, want = _io(source)
    model = albert_tf.from_pretrained(str(tmp_path / "folder"))
    assert type(model).__name__ == "AlbertPretrainer"
    assert _max_diff(model(inputs)["sop_logits"], want["sop_logits"]) <= TOL


def test_errors_name_the_file(shared, tmp_path):
    source = shared("reference", "hf_albert_tiny_heads", "AlbertForQuestionAnswering")
    shutil.copytree(source, tmp_path / "tokens")
    config = json.loads((source / "config.json").read_text())
    config["architectures"] = ["AlbertForTokenClassification"]
    (tmp_path / "tokens" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"tokens/config.json: AlbertForTokenClassification has no albert_tf"):
        albert_tf.from_pretrained(str(tmp_path / "tokens"))
    shutil.copytree(shared("reference", "albert_tiny_shared"), tmp_path / "google",
                    ignore=shutil.ignore_patterns("albert_config.json"))
    with pytest.raises(CheckpointError, match=r"no albert_config.json found for .*google.*config_file="):
        albert_tf.from_pretrained(str(tmp_path / "google"))


def test_convert_checkpoint_hf_to_tf2_converts_every_task_folder(shared, tmp_path):
    """The driver itself (one process, three conversions), then the TF2 checkpoints opened again."""
    script = ("import json, sys\nfrom absl import flags\nimport convert_checkpoint\ncodes = []\n"
              "for argv in json.loads(sys.argv[1]):\n    flags.FLAGS.unparse_flags()\n"
              "    flags.FLAGS(['convert_checkpoint.py', *argv])\n    codes.append(convert_checkpoint.main([]))\n"
              "print(json.dumps(codes))\n")
    runs = [[f"--checkpoint_to_convert={shared('reference', 'hf_albert_tiny_heads', name)}",
             f"--converted_checkpoint={tmp_path / name / 'model.ckpt'}", "--direction=hf_to_tf2"] for name in HEADS]
    env = dict(os.environ, PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", script, json.dumps(runs)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, 0, 0], done.stdout
    assert "wrote squad checkpoint (hf_to_tf2)" in done.stdout
    for name in HEADS:
        inputs, want = _io(shared("reference", "hf_albert_tiny_heads", name))
        model = albert_tf.from_pretrained(str(tmp_path / name))
        if name == "AlbertForMultipleChoice":
            inputs = {k: v[None] for k, v in inputs.items()}
        key = "start_logits" if name == "AlbertForQuestionAnswering" else "logits"
        mask = want["input_mask"] if key == "start_logits" else None
        assert _max_diff(model(inputs)[key], want[key], mask) <= TOL, name
