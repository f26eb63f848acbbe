"""The fine-tuning layer: one task interface (``task.FineTuningTask``) and one runner
(``runner.run``) for every task: GLUE, RACE, SQuAD, a user's own classification data,
and any task added later (README "Adding a task")."""
from albert_tf.finetuning.runner import FineTuningJob, resolve_weights, run
from albert_tf.finetuning.task import FineTuningTask, PredictContext, Split

__all__ = ["FineTuningJob", "FineTuningTask", "PredictContext", "Split", "resolve_weights", "run"]
