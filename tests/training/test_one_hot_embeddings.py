"""On TPUs the fine-tuning encoders look embeddings up by one-hot matmul, as the original's
drivers did (use_one_hot_embeddings=FLAGS.use_tpu); no TPU here, so a TPUStrategy stand-in."""
import dataclasses

import numpy as np
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.glue import runner
from albert_tf.squad import pipeline
from albert_tf.training import one_hot_embeddings

CONFIG = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)


class _StandInTPUStrategy(tf.distribute.TPUStrategy):
    def __init__(self):  # no TPU to connect to: only the type matters
        pass


def test_only_a_tpu_strategy_asks_for_one_hot():
    assert one_hot_embeddings(_StandInTPUStrategy()) is True
    assert one_hot_embeddings(tf.distribute.get_strategy()) is False
    assert one_hot_embeddings(tf.distribute.OneDeviceStrategy("/cpu:0")) is False


def _looks_up_by_matmul(encoder) -> bool:
    """Traces the embedding lookup and looks for the one-hot op (not a gather) on the table."""
    fn = tf.function(lambda ids: encoder(
        {"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)}))
    graph = fn.get_concrete_function(tf.TensorSpec([1, 4], tf.int32)).graph
    return any(op.type == "OneHot" for op in graph.get_operations())


def test_squad_and_glue_models_get_it_from_their_settings():
    for v2 in (False, True):
        on = pipeline.new_model(CONFIG, pipeline.SquadSettings("unused.model", version_2=v2,
                                                                use_one_hot_embeddings=True))
        off = pipeline.new_model(CONFIG, pipeline.SquadSettings("unused.model", version_2=v2))
        assert _looks_up_by_matmul(on.encoder) and not _looks_up_by_matmul(off.encoder)
    job = runner.GlueJob(task_name="MRPC", data_dir="", output_dir="", albert_config=CONFIG, tokenizer=None,
                         tokenizer_id="", max_seq_length=16, eval_batch_size=1, predict_batch_size=1)
    on = runner.build_model(dataclasses.replace(job, use_one_hot_embeddings=True))
    off = runner.build_model(job)
    assert _looks_up_by_matmul(on.encoder) and not _looks_up_by_matmul(off.encoder)
    # Same weights, same outputs either way (the lookup changes, not the model).
    off.set_weights(on.get_weights())
    inputs = on.dummy_inputs()
    np.testing.assert_allclose(on(inputs)["logits"].numpy(), off(inputs)["logits"].numpy(), atol=1e-5)
