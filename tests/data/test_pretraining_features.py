"""The one feature spec: hand-encoded Examples equal TensorFlow's (bytes), and parse back as int32/float32."""
import numpy as np
import tensorflow as tf

from albert_tf.pretraining_data.features import (
    FEATURE_NAMES,
    ExampleSerializer,
    feature_spec,
    parse_example,
    serialize_example,
)

SEQ, PRED = 8, 3


def _features():
    return {
        "input_ids": [2, 29999, 16384, 127, 128, 3, 7, 3],
        "input_mask": [1] * 8,
        "segment_ids": [0, 0, 0, 0, 0, 0, 1, 1],
        "token_boundary": [1, 1, 0, 1, 1, 1, 1, 1],
        "masked_lm_positions": [1, 4, 0],
        "masked_lm_ids": [29999, 128, 0],
        "masked_lm_weights": [1.0, 1.0, 0.0],
        "next_sentence_labels": [1],
    }


def _tf_example(features):
    feature = {}
    for name, values in features.items():
        if name == "masked_lm_weights":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def test_names_and_spec():
    assert FEATURE_NAMES == ("input_ids", "input_mask", "segment_ids", "token_boundary", "masked_lm_positions",
                             "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
    spec = feature_spec(128, 20)
    assert spec["input_ids"].shape == [128] and spec["input_ids"].dtype == tf.int64
    assert spec["masked_lm_weights"].shape == [20] and spec["masked_lm_weights"].dtype == tf.float32
    assert spec["next_sentence_labels"].shape == [1]


def test_hand_encoding_equals_tensorflow_message():
    features = _features()
    ours = serialize_example(features, SEQ, PRED)
    assert tf.train.Example.FromString(ours) == _tf_example(features)
    assert ours == _tf_example(features).SerializeToString(deterministic=True)
    fast = ExampleSerializer(SEQ, PRED, 30000).serialize_instance(
        features["input_ids"], features["segment_ids"], features["token_boundary"], [1, 4], [29999, 128], 1
    )
    assert fast == ours


def test_fast_serializer_pads():
    fast = ExampleSerializer(SEQ, PRED, 30000).serialize_instance([2, 5, 3, 6, 3], [0, 0, 0, 1, 1],
                                                                 [1, 1, 1, 1, 1], [3], [6], 0)
    parsed = tf.train.Example.FromString(fast).features.feature
    assert list(parsed["input_ids"].int64_list.value) == [2, 5, 3, 6, 3, 0, 0, 0]
    assert list(parsed["input_mask"].int64_list.value) == [1, 1, 1, 1, 1, 0, 0, 0]
    assert list(parsed["masked_lm_positions"].int64_list.value) == [3, 0, 0]
    assert list(parsed["masked_lm_weights"].float_list.value) == [1.0, 0.0, 0.0]
    assert list(parsed["next_sentence_labels"].int64_list.value) == [0]


def test_parse_single_and_batch():
    serialized = _tf_example(_features()).SerializeToString()
    single = parse_example(tf.constant(serialized), SEQ, PRED)
    assert single["input_ids"].dtype == tf.int32 and single["input_ids"].shape == [SEQ]
    assert single["masked_lm_weights"].dtype == tf.float32
    np.testing.assert_array_equal(single["input_ids"].numpy(), _features()["input_ids"])
    batch = parse_example(tf.constant([serialized, serialized]), SEQ, PRED)
    assert batch["masked_lm_ids"].shape == [2, PRED] and batch["next_sentence_labels"].shape == [2, 1]
    assert batch["next_sentence_labels"].dtype == tf.int32
