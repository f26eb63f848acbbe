"""GLUE fine-tuning: task readers, features (cached TFRecords), classifier head,
metrics, output files and SavedModel export; `task.GlueTask` puts them together as a
`finetuning.FineTuningTask`.

Light modules (processors, metrics, outputs) import without TensorFlow; the rest
is imported lazily on first use.
"""
from albert_tf.lazy import lazy_exports

_PUBLIC = {
    "InputExample": "albert_tf.glue.processors",
    "GlueDataError": "albert_tf.glue.processors",
    "GlueProcessor": "albert_tf.glue.processors",
    "TaskSpec": "albert_tf.glue.processors",
    "TASK_NAMES": "albert_tf.glue.processors",
    "get_processor": "albert_tf.glue.processors",
    "get_task_spec": "albert_tf.glue.processors",
    "compute_glue_metrics": "albert_tf.glue.metrics",
    "key_metric": "albert_tf.glue.metrics",
    "GlueClassifier": "albert_tf.glue.heads",
    "build_classifier": "albert_tf.glue.heads",
    "export_classifier": "albert_tf.glue.export",
    "compute_metrics": "albert_tf.glue.metrics",
    "GlueTask": "albert_tf.glue.task",
}

__all__, __getattr__ = lazy_exports(__name__, _PUBLIC)
