"""embedding_size == hidden_size: Google's ALBERT has no embedding-to-hidden projection,
transformers always has one; the faithful HF form is the identity (weight I, bias 0)."""
import shutil

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer, load_checkpoint
from albert_tf.weights import CheckpointError, save_hf_checkpoint

TOL = 1e-4
MAPPING = "albert.encoder.embedding_hidden_mapping_in."


@pytest.fixture
def equal_sizes(shared):
    folder = shared("reference", "hf_albert_tiny_equal_sizes")
    return folder, dict(np.load(folder / "io.npz"))


def _load(folder):
    model = AlbertPretrainer(AlbertConfig.from_json_file(str(folder / "config.json")))
    report = load_checkpoint(model, str(folder))
    return model, report


def test_reading_transformers_folder_gives_its_outputs(equal_sizes):
    folder, io = equal_sizes
    assert not np.array_equal(*(safetensors.numpy.load_file(str(folder / "model.safetensors"))[n]
                                for n in ("albert.embeddings.LayerNorm.weight", "albert.embeddings.LayerNorm.bias")))
    model, report = _load(folder)
    assert model.encoder.embedding_hidden_mapping_in is None
    assert {MAPPING + "weight", MAPPING + "bias"} <= set(report.skipped)
    inputs = {k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    inputs["masked_lm_positions"] = tf.constant(np.tile(np.arange(17), (3, 1)), tf.int32)
    out = model(inputs)
    real = io["input_mask"].astype(bool)
    for key in ("sequence_output", "mlm_logits"):
        assert np.abs(out[key].numpy() - io[key])[real].max() < TOL, key
    for key in ("pooled_output", "sop_logits"):
        assert np.abs(out[key].numpy() - io[key]).max() < TOL, key


def test_writing_puts_the_identity_in_the_file_and_round_trips(equal_sizes, tmp_path):
    folder, _ = equal_sizes
    model, _ = _load(folder)
    save_hf_checkpoint(model, str(tmp_path / "hf"), "AlbertForPreTraining")
    written = safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    np.testing.assert_array_equal(written[MAPPING + "weight"], np.eye(32, dtype=np.float32))
    np.testing.assert_array_equal(written[MAPPING + "bias"], np.zeros(32, np.float32))
    # The whole file is transformers' own (it wrote the identity too).
    theirs = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    assert sorted(written) == sorted(theirs)
    for name, value in theirs.items():
        assert np.array_equal(written[name], value), name
    again, _ = _load(tmp_path / "hf")
    for a, b in zip(model.weights, again.weights):
        assert a.name == b.name and np.array_equal(a.numpy(), b.numpy()), a.name


def test_a_trained_projection_is_refused_in_one_line(equal_sizes, tmp_path):
    folder, _ = equal_sizes
    perturbed = tmp_path / "perturbed"
    shutil.copytree(folder, perturbed)
    tensors = safetensors.numpy.load_file(str(perturbed / "model.safetensors"))
    tensors[MAPPING + "weight"] = tensors[MAPPING + "weight"].copy()
    tensors[MAPPING + "weight"][3, 5] = 1e-3
    safetensors.numpy.save_file(tensors, str(perturbed / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as err:
        _load(perturbed)
    message = str(err.value)
    assert "\n" not in message and MAPPING + "weight" in message and "identity" in message
    # A non-zero bias is refused too.
    tensors = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    tensors[MAPPING + "bias"] = np.full(32, 0.5, np.float32)
    safetensors.numpy.save_file(tensors, str(perturbed / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="identity"):
        _load(perturbed)


def test_written_to_and_read_from_a_remote_filesystem(equal_sizes, tmp_path, monkeypatch):
    """gs:// folders go through tf.io.gfile; TensorFlow's ram:// filesystem stands in for a bucket
    (and nothing lands on the local disk, as a local `ram:` folder would with os calls)."""
    import uuid

    folder, _ = equal_sizes
    model, _ = _load(folder)
    monkeypatch.chdir(tmp_path)
    remote = f"ram://hf-{uuid.uuid4().hex}/model"
    save_hf_checkpoint(model, remote, "AlbertForPreTraining")
    assert sorted(tf.io.gfile.listdir(remote)) == ["config.json", "model.safetensors"]
    again = AlbertPretrainer(model.config)
    assert load_checkpoint(again, remote).format == "hf"
    for a, b in zip(model.weights, again.weights):
        assert np.array_equal(a.numpy(), b.numpy()), a.name
    assert not list(tmp_path.iterdir())
