"""Every layer and model: get_config holds plain values (JSON) and from_config rebuilds an
equal object; a rebuilt model given the same weights computes the same outputs. The models
are every registered model kind's (so a new task is covered once it registers), rebuilt
both by from_config and by Keras' own serialisation."""
import functools
import json

import numpy as np
import pytest
import tensorflow as tf

import albert_tf.conversion  # noqa: F401  (imports every task's model module, registering its kind)
from albert_tf.config import AlbertConfig
from albert_tf.glue.heads import GlueClassifier
from albert_tf.keras import keras
from albert_tf.modeling.dropout import StatelessDropout
from albert_tf.modeling.encoder import AlbertModel
from albert_tf.modeling.heads import MaskedLMHead, OutputProjection
from albert_tf.modeling.layers import AlbertEmbeddings, LayerNorm, SelfAttention, TransformerBlock
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.squad.heads import SquadV1Model, SquadV2Head, SquadV2Model
from albert_tf.weights import kinds

CONFIG = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=2, num_hidden_groups=2,
                      num_attention_heads=3, intermediate_size=20, max_position_embeddings=16,
                      hidden_act="gelu_erf", initializer_range=0.05)

LAYERS = [
    lambda: LayerNorm(epsilon=1e-6, name="norm"),
    lambda: StatelessDropout(0.25, name="drop"),
    lambda: AlbertEmbeddings(40, 8, 3, 16, 0.05, 0.1, True, name="embeddings"),
    lambda: SelfAttention(12, 3, 0.05, 0.1, name="attention"),
    lambda: TransformerBlock(12, 3, 20, "relu", 0.1, 0.2, 0.05, name="block"),
    lambda: OutputProjection(3, 0.05, name="output"),
    lambda: MaskedLMHead(40, 8, "tanh", 0.05, name="predictions"),
    lambda: SquadV2Head(12, 0.05, 4, 3, 0.2, name="squad_v2_head"),
]


@pytest.mark.parametrize("make", LAYERS, ids=lambda make: type(make()).__name__)
def test_layer_config_round_trip(make):
    layer = make()
    config = layer.get_config()
    assert json.loads(json.dumps(config)) == config  # plain values only
    clone = type(layer).from_config(config)
    assert clone.get_config() == config and clone is not layer
    # The rebuilt layer, not only its config, is the same: every setting the layer and its sublayers
    # hold (a field get_config forgot would come back as the constructor's default here).
    settings = _settings(layer)
    assert settings and _settings(clone) == settings


def _settings(layer) -> dict:
    """(position among the layer and its sublayers, class, attribute) -> plain value."""
    def plain(value):
        if isinstance(value, (list, tuple)):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (bool, int, float, str))

    found = {}
    for index, module in enumerate([layer, *layer.submodules]):
        for name, value in vars(module).items():
            if not name.startswith("_") and plain(value):
                found[(index, type(module).__name__, name)] = value
    return found


# Each kind's default build, and options beyond it.
MODELS = [(kind.name, functools.partial(kind.build, CONFIG)) for kind in kinds.kinds()] + [
    ("classifier_dropout", lambda: GlueClassifier(AlbertModel(CONFIG), 3, dropout_rate=0.2)),
    ("regression", lambda: GlueClassifier(AlbertModel(CONFIG), 1, regression=True)),
    ("squad_v2_beam", lambda: SquadV2Model(AlbertModel(CONFIG), start_n_top=2, end_n_top=3, dropout_prob=0.2)),
]


def test_every_task_registers_its_kind():
    assert {"encoder", "pretrainer", "classifier", "squad", "squad_v2", "race"} <= {n for n, _ in MODELS}


def _inputs(model) -> dict:
    inputs = model.dummy_inputs(batch_size=2, seq_length=8)
    shape = inputs["input_ids"].shape
    inputs["input_ids"] = tf.constant(np.arange(np.prod(shape)).reshape(shape) % 40, tf.int32)
    return inputs


def _assert_computes_the_same(model, clone):
    inputs = _inputs(model)
    model(inputs)
    clone(inputs)
    assert type(clone) is type(model) and clone is not model
    assert [w.shape for w in clone.weights] == [w.shape for w in model.weights]
    clone.set_weights(model.get_weights())
    want, got = model(inputs, training=False), clone(inputs, training=False)
    assert sorted(got) == sorted(want)
    for key in want:
        for w, g in zip(tf.nest.flatten(want[key]), tf.nest.flatten(got[key])):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=0, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("make", [m for _, m in MODELS], ids=[n for n, _ in MODELS])
def test_model_config_round_trip_computes_the_same(make):
    model = make()
    config = model.get_config()
    assert json.loads(json.dumps(config)) == config
    clone = type(model).from_config(config)
    assert clone.get_config() == config
    _assert_computes_the_same(model, clone)


@pytest.mark.parametrize("make", [m for _, m in MODELS], ids=[n for n, _ in MODELS])
def test_keras_serialisation_rebuilds_the_model(make):
    model = make()
    model(_inputs(model))
    serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(model)))
    assert serialized["registered_name"] == f"albert_tf>{type(model).__name__}"
    clone = keras.saving.deserialize_keras_object(serialized)  # found by its registered name
    assert clone.built and clone.get_config() == model.get_config()
    _assert_computes_the_same(model, clone)


def test_task_models_are_handed_their_encoder():
    encoder = AlbertModel(CONFIG)
    pretrainer = AlbertPretrainer(encoder)
    classifier = GlueClassifier(encoder, 2)
    assert classifier.encoder is pretrainer.encoder is encoder  # one set of encoder weights, shared
    classifier(classifier.dummy_inputs())
    encoder_ids = {id(v) for v in encoder.weights}
    assert {id(v) for v in classifier.weights} - encoder_ids == {id(classifier.classifier.output_weights),
                                                                 id(classifier.classifier.output_bias)}
    with pytest.raises(TypeError, match="expected an AlbertModel"):
        SquadV1Model({"vocab_size": 40})
