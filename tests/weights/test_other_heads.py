"""fine_tuning_init (--init_checkpoint of the fine-tuning drivers) from another task's fine-tuned model: the
paper fine-tunes RTE, MRPC and STS-B from MNLI's. A head of another number of labels starts fresh with one
warning, the encoder is loaded; an encoder that does not fit is still refused. The encoder is checked against
outputs computed without the loader: numpy's forward pass of the TF1 weights, transformers' recorded logits."""
import json

import numpy as np
import pytest
import safetensors.numpy
from absl import logging as absl_logging

from albert_tf import AlbertConfig
from albert_tf.glue.heads import build_classifier
from albert_tf.race.model import build_race_model
from albert_tf.weights import CheckpointError, fine_tuning_init

TOL = 1e-4
TINY = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
                    intermediate_size=20, max_position_embeddings=16)


@pytest.fixture
def warnings(monkeypatch):
    """The messages fine_tuning_init logs at WARNING, formatted."""
    logged = []
    monkeypatch.setattr(absl_logging, "warning", lambda msg, *args: logged.append(msg % args))
    return logged


def _inputs(vocab_size: int):
    rng = np.random.default_rng(3)
    ids = rng.integers(0, vocab_size, (2, 9)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    seg = np.zeros_like(ids)
    seg[:, 4:] = 1
    return ids, mask, seg


def _head_values(model) -> list[np.ndarray]:
    return [v.numpy().copy() for v in model.weights if not any(v is e for e in model.encoder.weights)]


@pytest.mark.parametrize("build,labels", [(lambda c: build_classifier(c, "mrpc"), 2),
                                          (lambda c: build_classifier(c, "sts-b"), 1),
                                          (build_race_model, 1)], ids=["mrpc", "sts-b", "race"])
def test_a_tf1_head_of_another_number_of_labels_starts_fresh(tmp_path, random_tf1_checkpoint, numpy_forward,
                                                           warnings, build, labels):
    """An MNLI model in Google's format (top-level output_weights [3, H], as the original run_classifier
    wrote): into MRPC's classifier, STS-B's regression head and RACE's choice scorer (also top-level)."""
    H = TINY.hidden_size
    prefix = tmp_path / "mnli" / "model.ckpt"
    prefix.parent.mkdir()
    rng = np.random.default_rng(5)
    head = {"output_weights": rng.standard_normal([3, H]).astype(np.float32),
            "output_bias": rng.standard_normal([3]).astype(np.float32)}
    weights = random_tf1_checkpoint(TINY, prefix, extra=head)
    model = build(TINY)
    before = _head_values(model)
    fine_tuning_init(str(prefix))(model)

    assert len(warnings) == 1, warnings
    assert warnings[0] == (f"--init_checkpoint {prefix}: the checkpoint's task head has 3 labels, this task {labels} "
                           f"(output_weights [3, {H}] for [{labels}, {H}], output_bias [3] for [{labels}]): "
                           f"it starts fresh; the encoder is loaded")
    for fresh, initial in zip(_head_values(model), before, strict=True):
        np.testing.assert_array_equal(fresh, initial)  # left as initialised, nothing of MNLI's
    ids, mask, seg = _inputs(TINY.vocab_size)
    want = numpy_forward(weights, TINY, ids, mask, seg, np.zeros([2, 1], np.int32))["pooled_output"]
    got = model.encoder({"input_ids": ids, "input_mask": mask, "segment_ids": seg})["pooled_output"].numpy()
    assert np.abs(got - want).max() < TOL


def test_a_hugging_face_head_of_another_number_of_labels_starts_fresh(shared, warnings):
    """transformers' 3-label AlbertForSequenceClassification folder into MRPC: the encoder's pooled output
    through the folder's own classifier gives the logits transformers recorded."""
    folder = shared("reference", "hf_albert_tiny_heads", "AlbertForSequenceClassification")
    config = AlbertConfig.from_hf_dict(json.loads((folder / "config.json").read_text()))
    model = build_classifier(config, "mrpc")
    fine_tuning_init(str(folder))(model)

    assert len(warnings) == 1 and "the checkpoint's task head has 3 labels, this task 2" in warnings[0], warnings
    tensors = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    io = dict(np.load(folder / "io.npz"))
    pooled = model.encoder({k: io[k] for k in ("input_ids", "input_mask", "segment_ids")})["pooled_output"].numpy()
    logits = pooled @ tensors["classifier.weight"].T + tensors["classifier.bias"]
    assert np.abs(logits - io["logits"]).max() < TOL


def test_an_encoder_that_does_not_fit_is_still_refused(tmp_path, random_tf1_checkpoint, warnings):
    other = AlbertConfig(**{**TINY.to_dict(), "intermediate_size": 24})
    prefix = tmp_path / "model.ckpt"
    random_tf1_checkpoint(other, prefix, extra={"output_weights": np.zeros([3, TINY.hidden_size], np.float32),
                                                "output_bias": np.zeros([3], np.float32)})
    with pytest.raises(CheckpointError, match="ffn_1/intermediate/dense/kernel: expected shape"):
        fine_tuning_init(str(prefix))(build_classifier(TINY, "mrpc"))
    assert warnings == []


def test_the_warning_names_the_flag_that_gave_the_weights(tmp_path, random_tf1_checkpoint, warnings):
    """Weights from --albert_hub_module_handle: the head's warning named --init_checkpoint, a flag not given."""
    prefix = tmp_path / "mnli" / "model.ckpt"
    prefix.parent.mkdir()
    random_tf1_checkpoint(TINY, prefix, extra={"output_weights": np.zeros([3, TINY.hidden_size], np.float32),
                                               "output_bias": np.zeros([3], np.float32)})
    fine_tuning_init(str(prefix), "--albert_hub_module_handle")(build_classifier(TINY, "mrpc"))
    assert len(warnings) == 1 and warnings[0].startswith(f"--albert_hub_module_handle {prefix}: the checkpoint's "
                                                         f"task head has 3 labels, this task 2"), warnings
