"""Checkpoint names, loading and saving (Google TF1 format and ours)."""
from albert_tf.checkpoints.loading import CheckpointError, LoadReport, load_checkpoint, resolve_checkpoint
from albert_tf.checkpoints.saving import save_model_checkpoint, save_tf1_checkpoint

__all__ = ["CheckpointError", "LoadReport", "load_checkpoint", "resolve_checkpoint",
           "save_model_checkpoint", "save_tf1_checkpoint"]
