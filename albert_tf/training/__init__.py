"""Training machinery shared by every driver: the loop, its checkpoint policy, the one
evaluation path, optimizers, schedule, strategies, input pipelines and flags.

Names are imported lazily (as ``albert_tf`` does), so that light modules such as
``training.results`` load no TensorFlow; see ``loop.Trainer`` for the entry point.
"""
from albert_tf.lazy import lazy_exports

_PUBLIC = {
    "AdamWeightDecay": "albert_tf.training.optimizers",
    "AlbertLearningRateSchedule": "albert_tf.training.schedule",
    "BatchRunner": "albert_tf.training.evaluation",
    "BestCheckpointKeeper": "albert_tf.training.checkpoint_evaluation",
    "CheckpointEvaluator": "albert_tf.training.checkpoint_evaluation",
    "LAMB": "albert_tf.training.optimizers",
    "NonFiniteLossError": "albert_tf.training.loop",
    "ResultsLayout": "albert_tf.training.results",
    "StatelessDropout": "albert_tf.modeling.dropout",  # what task models drop with
    "Task": "albert_tf.training.loop",
    "TrainConfig": "albert_tf.training.loop",
    "TrainResult": "albert_tf.training.loop",
    "Trainer": "albert_tf.training.loop",
    "TrainingInterrupted": "albert_tf.training.signals",
    "create_optimizer": "albert_tf.training.optimizers",
    "create_strategy": "albert_tf.training.distribution",
    "define_flags": "albert_tf.training.flags",
    "dropout_seed_scope": "albert_tf.modeling.dropout",
    "expand_file_patterns": "albert_tf.data.input_pipeline",
    "make_tfrecord_dataset": "albert_tf.data.input_pipeline",
    "set_mixed_precision": "albert_tf.training.distribution",
    "split_cpu_into_logical_devices": "albert_tf.training.distribution",
    "strategy_from_flags": "albert_tf.training.flags",
    "train_config_from_flags": "albert_tf.training.flags",
    "worker_info": "albert_tf.training.distribution",
    "one_hot_embeddings": "albert_tf.training.distribution",
    "write_eval_results": "albert_tf.training.results",
}

__all__, __getattr__ = lazy_exports(__name__, _PUBLIC)
