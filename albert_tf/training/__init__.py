"""Training machinery shared by every driver: optimizers, schedule, strategies, input, the loop.

Importing this package builds nothing; see ``loop.Trainer`` for the entry point.
"""
from albert_tf.modeling.dropout import StatelessDropout, dropout_seed_scope  # what task models drop with
from albert_tf.training.checkpointing import BestCheckpointKeeper, write_eval_results
from albert_tf.training.data import expand_file_patterns, make_tfrecord_dataset
from albert_tf.training.distribution import (
    create_strategy,
    define_flags,
    set_mixed_precision,
    split_cpu_into_logical_devices,
    strategy_from_flags,
    worker_info,
)
from albert_tf.training.loop import (
    NonFiniteLossError,
    Task,
    TrainConfig,
    Trainer,
    TrainingInterrupted,
    TrainResult,
)
from albert_tf.training.optimizers import LAMB, AdamWeightDecay, create_optimizer
from albert_tf.training.schedule import AlbertLearningRateSchedule

__all__ = [
    "AdamWeightDecay",
    "AlbertLearningRateSchedule",
    "BestCheckpointKeeper",
    "LAMB",
    "NonFiniteLossError",
    "StatelessDropout",
    "Task",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingInterrupted",
    "create_optimizer",
    "create_strategy",
    "define_flags",
    "dropout_seed_scope",
    "expand_file_patterns",
    "make_tfrecord_dataset",
    "set_mixed_precision",
    "split_cpu_into_logical_devices",
    "strategy_from_flags",
    "worker_info",
    "write_eval_results",
]
