"""Checks and flag mappings that the fine-tuning drivers (GLUE, RACE) share with the original's."""
from __future__ import annotations


def check_max_seq_length(max_seq_length: int, max_position_embeddings: int) -> None:
    """The original's refusal of a sequence longer than the model's position table."""
    if max_seq_length > max_position_embeddings:
        raise ValueError(
            f"Cannot use sequence length {max_seq_length} because the ALBERT model was only "
            f"trained up to sequence length {max_position_embeddings} (--max_seq_length)")


def init_checkpoint_from_flags(init_checkpoint: str | None, albert_hub_module_handle: str | None) -> str | None:
    """``--init_checkpoint``, else a local ``--albert_hub_module_handle`` folder (handles are not downloaded)."""
    if albert_hub_module_handle:
        if "://" in albert_hub_module_handle:
            raise ValueError("--albert_hub_module_handle must be a local module directory (download and "
                             "unpack the module first)")
        return init_checkpoint or albert_hub_module_handle
    return init_checkpoint
