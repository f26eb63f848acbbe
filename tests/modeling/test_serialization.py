"""Every layer and model: get_config holds plain values (JSON) and from_config rebuilds an
equal object; a rebuilt model given the same weights computes the same outputs."""
import json

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.glue.heads import GlueClassifier
from albert_tf.modeling.dropout import StatelessDropout
from albert_tf.modeling.encoder import AlbertModel
from albert_tf.modeling.heads import MaskedLMHead, OutputProjection
from albert_tf.modeling.layers import AlbertEmbeddings, LayerNorm, SelfAttention, TransformerBlock
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.squad.heads import SquadV1Model, SquadV2Head, SquadV2Model

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


MODELS = [
    ("encoder", lambda: AlbertModel(CONFIG)),
    ("pretrainer", lambda: AlbertPretrainer(AlbertModel(CONFIG))),
    ("classifier", lambda: GlueClassifier(AlbertModel(CONFIG), 3, dropout_rate=0.2)),
    ("regression", lambda: GlueClassifier(AlbertModel(CONFIG), 1, regression=True)),
    ("squad_v1", lambda: SquadV1Model(AlbertModel(CONFIG))),
    ("squad_v2", lambda: SquadV2Model(AlbertModel(CONFIG), start_n_top=2, end_n_top=3, dropout_prob=0.2)),
]


@pytest.mark.parametrize("make", [m for _, m in MODELS], ids=[n for n, _ in MODELS])
def test_model_config_round_trip_computes_the_same(make):
    model = make()
    config = model.get_config()
    assert json.loads(json.dumps(config)) == config
    clone = type(model).from_config(config)
    assert clone.get_config() == config
    inputs = model.dummy_inputs(batch_size=2, seq_length=8)
    inputs["input_ids"] = tf.constant(np.arange(16).reshape(2, 8) % 40, tf.int32)
    model(inputs)
    clone(inputs)
    assert [w.shape for w in clone.weights] == [w.shape for w in model.weights]
    clone.set_weights(model.get_weights())
    want, got = model(inputs, training=False), clone(inputs, training=False)
    for key in ("sop_logits", "logits", "start_logits", "end_top_log_probs", "sequence_output"):
        if key in want:
            np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=0, atol=1e-6)


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
