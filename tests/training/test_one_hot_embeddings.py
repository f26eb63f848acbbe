"""On TPUs the fine-tuning encoders look embeddings up by one-hot matmul, as the original's
drivers did (use_one_hot_embeddings=FLAGS.use_tpu); no TPU here, so a TPUStrategy stand-in."""
import numpy as np
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.finetuning import FineTuningJob
from albert_tf.finetuning.runner import _Runner
from albert_tf.glue.processors import get_processor
from albert_tf.glue.task import GlueTask
from albert_tf.squad.task import SquadSettings, SquadTask
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


def _model(task, strategy):
    """The task's model as the one fine-tuning runner builds it on ``strategy``."""
    model = _Runner(task, FineTuningJob(output_dir="", albert_config=CONFIG), strategy).new_model()
    model(model.dummy_inputs(seq_length=task.dummy_seq_length()))
    return model


def test_every_task_model_gets_it_from_the_runners_strategy():
    on_tpu, on_cpu = _StandInTPUStrategy(), tf.distribute.get_strategy()
    for v2 in (False, True):
        task = SquadTask(SquadSettings("unused.model", version_2=v2), output_dir="")
        assert _looks_up_by_matmul(_model(task, on_tpu).encoder)
        assert not _looks_up_by_matmul(_model(task, on_cpu).encoder)
    glue = GlueTask(processor=get_processor("MRPC"), data_dir="", features_dir="", tokenizer=None, tokenizer_id="",
                    max_seq_length=16)
    on, off = _model(glue, on_tpu), _model(glue, on_cpu)
    assert _looks_up_by_matmul(on.encoder) and not _looks_up_by_matmul(off.encoder)
    # Same weights, same outputs either way (the lookup changes, not the model).
    off.set_weights(on.get_weights())
    inputs = on.dummy_inputs()
    np.testing.assert_allclose(on(inputs)["logits"].numpy(), off(inputs)["logits"].numpy(), atol=1e-5)
