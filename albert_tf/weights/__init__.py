"""Checkpoint names, loading and saving (Google TF1 format, ours and Hugging Face's)."""
from albert_tf.weights.errors import CheckpointError
from albert_tf.weights.loading import (LoadReport, check_fits, checkpoint_step, find_checkpoint, fine_tuning_init,
                                      load_checkpoint, resolve_checkpoint)
from albert_tf.weights.saving import save_hf_checkpoint, save_model_checkpoint, save_tf1_checkpoint

__all__ = ["CheckpointError", "LoadReport", "check_fits", "checkpoint_step", "find_checkpoint", "fine_tuning_init",
           "load_checkpoint", "resolve_checkpoint", "save_hf_checkpoint", "save_model_checkpoint",
           "save_tf1_checkpoint"]
