"""What the fine-tuning drivers (GLUE, RACE, SQuAD) share: the checks and flag mappings of
the original's, and the one way a driver ends: flags → a task and a ``FineTuningJob`` →
``finetuning.run``."""
from __future__ import annotations

from typing import Any

from absl import flags, logging


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


def albert_config_from_flags(f: flags.FlagValues, spm_model_file: str | None, vocab_file: str | None):
    """``--albert_config_file``, checked against the tokenizer's vocabulary and ``--max_seq_length``."""
    from albert_tf.config import AlbertConfig
    from albert_tf.vocab_check import check_tokenizer

    config = AlbertConfig.from_json_file(f.albert_config_file)
    check_tokenizer(spm_model_file, vocab_file, config.vocab_size, f.albert_config_file)
    check_max_seq_length(f.max_seq_length, config.max_position_embeddings)
    return config


def job_from_flags(f: flags.FlagValues, config, *, num_train_steps: int, warmup_steps: int, do_eval: bool,
                   eval_batch_size: int, export_dir: str | None = None):
    """The ``FineTuningJob`` of the flags every fine-tuning driver has (the stages, the weights to
    start from, the loop's settings and the optimizer)."""
    import os

    from albert_tf.finetuning import FineTuningJob
    from albert_tf.training import create_optimizer, train_config_from_flags

    output_dir = os.path.abspath(f.output_dir)
    return FineTuningJob(
        output_dir=output_dir,
        albert_config=config,
        do_train=f.do_train,
        do_eval=do_eval,
        do_predict=f.do_predict,
        export_dir=export_dir,
        init_checkpoint=init_checkpoint_from_flags(f.init_checkpoint, f.albert_hub_module_handle),
        train=train_config_from_flags(f, num_train_steps=num_train_steps, output_dir=output_dir),
        optimizer_fn=lambda: create_optimizer(f.learning_rate, num_train_steps, warmup_steps, f.optimizer),
        eval_batch_size=eval_batch_size,
        predict_batch_size=f.predict_batch_size,
    )


def run_and_report(task, job, f: flags.FlagValues) -> dict[str, Any]:
    """Builds the strategy from the flags, runs the job and logs where each output went."""
    from albert_tf.finetuning import run
    from albert_tf.training import strategy_from_flags

    produced = run(task, job, strategy_from_flags(f))
    for name, value in produced.items():
        logging.info("%s: %s", name, value)
    return produced
