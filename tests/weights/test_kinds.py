"""The model-kind registry: a kind a test registers (a tiny token-tagging head, declared
here only) is detected, converted both ways and loaded by the converter, with nothing
in albert_tf/weights/ or albert_tf/conversion.py knowing of it."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.conversion import convert, model_kinds
from albert_tf.keras import keras
from albert_tf.modeling.encoder import AlbertModel, TaskModel
from albert_tf.modeling.heads import OutputProjection
from albert_tf.modeling.models import build
from albert_tf.weights import CheckpointError, load_checkpoint, save_tf1_checkpoint
from albert_tf.weights.kinds import ModelKind, kinds, register, unregister
from albert_tf.weights.names import projection_names

CONFIG = dict(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=2, num_hidden_groups=2,
              num_attention_heads=3, intermediate_size=20, max_position_embeddings=16)


@keras.saving.register_keras_serializable(package="albert_tf_tests")
class TinyTagger(TaskModel):
    """Three tag scores per token."""

    def __init__(self, encoder, **kwargs):
        super().__init__(encoder, **kwargs)
        self.tagger = OutputProjection(3, self.config.initializer_range, name="tagger")

    def call(self, inputs, training=None):
        return {"logits": self.tagger(self.encoder(inputs, training=training)["sequence_output"])}


TAGGER = ModelKind("tagger", TinyTagger, build=lambda config: build(TinyTagger(AlbertModel(config))),
                   tf1_head_names=lambda model: projection_names("cls/tagger", model.tagger),
                   tf1_marker="cls/tagger/output_weights", tf2_marker="/tagger/output_weights/",
                   description="token tagger of a test")


@pytest.fixture
def tagger():
    register(TAGGER)
    yield TAGGER
    unregister(TAGGER.name)


def _tensors(prefix) -> dict:
    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def test_a_registered_kind_converts_both_ways(tmp_path, tagger):
    config = AlbertConfig(**CONFIG)
    config_file = str(tmp_path / "albert_config.json")
    config.to_json_file(config_file)
    model = tagger.build(config)
    model.tagger.output_bias.assign(np.random.default_rng(0).standard_normal([3]).astype(np.float32))
    save_tf1_checkpoint(model, str(tmp_path / "tf1" / "model.ckpt"))
    original = _tensors(tmp_path / "tf1" / "model.ckpt")
    assert {"cls/tagger/output_weights", "cls/tagger/output_bias"} <= set(original)

    assert "tagger" in model_kinds()
    done = convert(str(tmp_path / "tf1" / "model.ckpt"), str(tmp_path / "tf2" / "model.ckpt"), "tf1_to_tf2",
                   config_file=config_file)
    assert done.kind == "tagger"  # told by its TF1 marker
    back = convert(str(tmp_path / "tf2" / "model.ckpt"), str(tmp_path / "back" / "model.ckpt"), "tf2_to_tf1",
                   config_file=config_file)
    assert back.kind == "tagger"  # and by its attribute path in our checkpoints
    got = _tensors(tmp_path / "back" / "model.ckpt")
    assert sorted(got) == sorted(original)
    for name, value in original.items():
        assert np.array_equal(got[name], value), name

    # Our checkpoint loads into a fresh model, which then computes what the original does.
    fresh = tagger.build(config)
    load_checkpoint(fresh, str(tmp_path / "tf2" / "model.ckpt"))
    inputs = model.dummy_inputs(batch_size=2)
    np.testing.assert_array_equal(fresh(inputs)["logits"].numpy(), model(inputs)["logits"].numpy())

    with pytest.raises(CheckpointError, match="token tagger of a test has no counterpart in transformers"):
        convert(str(tmp_path / "tf1" / "model.ckpt"), str(tmp_path / "hf"), "tf1_to_hf", config_file=config_file)
    assert not (tmp_path / "hf").exists()


def test_an_unregistered_kind_is_unknown(tmp_path):
    assert "tagger" not in model_kinds()
    with pytest.raises(CheckpointError, match="unknown model kind tagger"):
        convert(str(tmp_path / "in"), str(tmp_path / "out"), "tf1_to_tf2", kind="tagger")


def test_register_refuses_what_another_kind_holds(tagger):
    with pytest.raises(ValueError, match="already registered"):
        register(TAGGER)
    with pytest.raises(ValueError, match="shares model class, TF1 marker with 'tagger'"):
        register(ModelKind("tagger2", TinyTagger, build=None, tf1_head_names=None,
                           tf1_marker="cls/tagger/output_weights"))
    with pytest.raises(ValueError, match="shares AlbertForMultipleChoice with 'race'"):
        register(ModelKind("race2", TinyTagger, build=None, tf1_head_names=None,
                           hf_architecture="AlbertForMultipleChoice"))
    with pytest.raises(ValueError, match="not Keras-serialisable"):
        register(ModelKind("plain", type("Plain", (TaskModel,), {}), build=None, tf1_head_names=None))
    assert [kind.name for kind in kinds()].count("tagger") == 1
