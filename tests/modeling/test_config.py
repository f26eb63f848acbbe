import json

import pytest

from albert_tf import AlbertConfig, AlbertModel
from albert_tf.config import ConfigError
from albert_tf.modeling.models import build

SPEC_PARAMS = {"base": 11_683_584, "large": 17_683_968, "xlarge": 58_724_864, "xxlarge": 222_595_584}


def test_round_trip_keeps_unknown_keys(tmp_path, shared):
    data = json.loads(shared("reference", "albert_tiny_shared", "albert_config.json").read_text())
    data["net_structure_type"] = 0
    data["gap_size"] = 0
    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps(data))
    config = AlbertConfig.from_json_file(str(path))
    assert config.to_dict() == data
    assert AlbertConfig.from_dict(json.loads(config.to_json_string())) == config


@pytest.mark.parametrize("name", list(SPEC_PARAMS))
def test_release_parameter_counts(name):
    model = build(AlbertModel(AlbertConfig.preset(name, 2)))
    assert model.count_params() == SPEC_PARAMS[name]


def test_dropout_differs_by_version():
    assert AlbertConfig.preset("base", 1).hidden_dropout_prob == 0.1
    assert AlbertConfig.preset("base", 2).hidden_dropout_prob == 0.0
    assert AlbertConfig.preset("xxlarge", 1).attention_probs_dropout_prob == 0.0


def _tiny(**changes):
    data = dict(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=32)
    data.update(changes)
    return data


def test_missing_field_named():
    data = _tiny()
    del data["hidden_size"]
    with pytest.raises(ConfigError, match="hidden_size"):
        AlbertConfig.from_dict(data)


def test_wrong_type_named():
    with pytest.raises(ConfigError, match="num_hidden_layers.*int"):
        AlbertConfig.from_dict(_tiny(num_hidden_layers="12"))


def test_unknown_activation_named():
    with pytest.raises(ConfigError, match="hidden_act.*swish"):
        AlbertConfig.from_dict(_tiny(hidden_act="swish"))


def test_heads_must_divide_hidden():
    with pytest.raises(ConfigError, match="num_attention_heads"):
        AlbertConfig.from_dict(_tiny(num_attention_heads=3))


def test_bad_json_names_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="c.json"):
        AlbertConfig.from_json_file(str(path))


def test_a_misspelt_field_is_warned_of_and_others_are_not(caplog):
    """The original kept unknown keys silently, so 'hidden_dropout_porb' ran with the default dropout.
    Near misses of a field left at its default get a warning naming both; Hugging Face's and other
    unrelated extra keys do not."""
    import logging

    base = {"vocab_size": 30, "embedding_size": 4, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 16}
    with caplog.at_level(logging.WARNING):
        config = AlbertConfig(**base, hidden_dropout_porb=0.3, max_position_embedding=128, layers_to_keep=[],
                              classifier_dropout_prob=0.1, layer_norm_eps=1e-12, id2label={"0": "a"})
    warned = [r.getMessage() for r in caplog.records if "is not a field" in r.getMessage()]
    assert len(warned) == 2, warned
    assert "'hidden_dropout_porb'" in warned[0] and "did you mean 'hidden_dropout_prob'" in warned[0]
    assert "'max_position_embedding'" in warned[1] and "default, 512" in warned[1]
    assert config.extra["hidden_dropout_porb"] == 0.3 and config.max_position_embeddings == 512
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the real field given too: the extra is deliberate, no warning
        AlbertConfig(**base, hidden_dropout_prob=0.1, hidden_dropout_porb=0.3)
    assert not [r for r in caplog.records if "is not a field" in r.getMessage()]


def test_a_group_no_layer_uses_gets_no_variables_like_the_original(tmp_path, tf1_shapes):
    """22 layers in 22 groups: the original's int(l / L * G) gives layer 15 group 14 and no layer group 15,
    so its checkpoint has no group_15. Ours builds none either: its checkpoint loads, and ours saves the
    same names."""
    import numpy as np
    import tensorflow as tf

    from albert_tf import load_checkpoint
    from albert_tf.weights import save_tf1_checkpoint

    config = AlbertConfig(vocab_size=40, embedding_size=4, hidden_size=8, num_hidden_layers=22, num_hidden_groups=22,
                          num_attention_heads=2, intermediate_size=8, max_position_embeddings=16)
    assert int(15 / 22 * 22) == 14 and int(16 / 22 * 22) == 16
    original = {name: shape for name, shape in tf1_shapes(config).items()
                if "/group_15/" not in name and name.startswith("bert/")}
    rng = np.random.default_rng(0)
    names = sorted(original)
    values = [tf.constant(rng.standard_normal(original[n]).astype(np.float32)) for n in names]
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "google.ckpt"), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=values)
    model = AlbertModel(config)
    report = load_checkpoint(model, str(tmp_path / "google.ckpt"))
    assert sorted(report.loaded) == names
    save_tf1_checkpoint(model, str(tmp_path / "ours" / "model.ckpt"))
    assert sorted(tf.train.load_checkpoint(str(tmp_path / "ours" / "model.ckpt")).get_variable_to_shape_map()) == names
    assert model.groups[15] == [] and len(model.groups[16]) == 1
    from albert_tf.weights import save_model_checkpoint

    save_model_checkpoint(model, str(tmp_path / "tf2" / "model.ckpt"))
    again = AlbertModel(config)
    assert load_checkpoint(again, str(tmp_path / "tf2")).format == "tf2"
    np.testing.assert_array_equal(again.groups[16][0].attention.query.kernel.numpy(),
                                  model.groups[16][0].attention.query.kernel.numpy())
