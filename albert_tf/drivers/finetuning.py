"""What the fine-tuning drivers (GLUE, RACE, SQuAD) share: the checks and flag mappings of
the original's, and the one way a driver ends: flags → a task and a ``FineTuningJob`` →
``finetuning.run``."""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Callable

from absl import flags, logging

from albert_tf.cli import closing_summary, reports_errors, require_flags


def define_model_flags(max_seq_length: int, max_seq_length_help: str) -> None:
    """The original's flags naming the pre-trained model, its tokenizer and the input length."""
    flags.DEFINE_string("albert_config_file", None, "The albert_config.json of the pre-trained model.")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (only for models without --spm_model_file).")
    flags.DEFINE_string("spm_model_file", None, "The SentencePiece model the ALBERT model was trained with.")
    flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint: Google's TF1 ALBERT checkpoint or one of "
                        "this project's (prefix or directory).")
    flags.DEFINE_string("albert_hub_module_handle", None, "A TF-Hub ALBERT module, as a local directory (its "
                        "variables are used like --init_checkpoint; --albert_config_file is still needed).")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the input text (uncased models).")
    flags.DEFINE_integer("max_seq_length", max_seq_length, max_seq_length_help)


def define_serving_precision_flag() -> None:
    """What an export's graph computes in (new; the drivers that export define it)."""
    from albert_tf.modeling.serving_precision import DEFAULT_SERVING_PRECISION, SERVING_POLICIES

    flags.DEFINE_enum("serving_precision", DEFAULT_SERVING_PRECISION, list(SERVING_POLICIES),
                      "What the exported SavedModel computes in: float32, or bfloat16 for CPUs with bf16 "
                      "hardware (AVX512_BF16, AMX): its matmuls in bf16, LayerNorm, softmax and outputs in "
                      "float32, as exported (no serving options). Independent of --mixed_precision.")


def define_text_signature_flag(signature: str, without: str) -> None:
    """Whether an export holds its raw-text signature (new; the drivers that export one define it).
    ``signature``: its name; ``without``: what the export serves instead."""
    flags.DEFINE_bool("text_signature", True,
                      f"Export the raw-text signature ({signature}), which tokenizes in-graph with tensorflow-text "
                      f"ops: loading the export then needs `import tensorflow_text`. --notext_signature leaves it "
                      f"out ({without}) and every tensorflow-text op with it: stock TensorFlow Serving and plain "
                      f"TensorFlow load the export, and converters (LiteRT, TF.js) meet no custom op.")


def define_stage_flags(*, do_train: bool, do_eval: bool | None, do_predict: bool, learning_rate: float,
                       train_step: int | None = None, warmup_step: int | None = None) -> None:
    """The original's flags of what a run does and how it trains (``do_eval``/``train_step`` None:
    the driver has no such flag, as the original's run_squad)."""
    from albert_tf.training.optimizers import OPTIMIZERS

    flags.DEFINE_bool("do_train", do_train, "Whether to run training.")
    if do_eval is not None:
        flags.DEFINE_bool("do_eval", do_eval, "Whether to evaluate (every checkpoint) on the dev set.")
        flags.DEFINE_integer("eval_batch_size", 8, "Batch size for eval.")
    flags.DEFINE_bool("do_predict", do_predict, "Whether to predict the test set (with the best checkpoint).")
    flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training (all replicas).")
    flags.DEFINE_integer("predict_batch_size", 8, "Batch size for predict.")
    flags.DEFINE_float("learning_rate", learning_rate, "The initial learning rate.")
    if train_step is not None:
        flags.DEFINE_integer("train_step", train_step, "Total number of training steps.")
        flags.DEFINE_integer("warmup_step", warmup_step or 0, "Steps of linear learning-rate warmup.")
    flags.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS), "Optimizer: adamw or lamb.")
    define_length_flags()


def define_length_flags() -> None:
    """How long a batch is (new: the original padded every row to --max_seq_length)."""
    from albert_tf.data.batching import DEFAULT_MULTIPLE

    flags.DEFINE_bool("pad_to_max_length", False, "Pad every row to --max_seq_length, as the original (and "
                      "Hugging Face's flag of that name); default: each batch at its longest row's length.")
    flags.DEFINE_integer("seq_length_multiple", DEFAULT_MULTIPLE, "A batch's length is its longest row's rounded "
                         "up to this (CPU, GPU).")
    flags.DEFINE_list("seq_length_buckets", None, "TPU or --enable_xla: the static lengths batches take, e.g. "
                      "32,64,128 (the last must be --max_seq_length; default: 32 doubled up to it).")
    flags.DEFINE_bool("group_by_length", False, "Draw training batches of rows of similar length (a seeded, "
                      "resumable sampler): less padding, other batch composition.")


def stage_flag_problems(f: flags.FlagValues, unused: str | None) -> list[str]:
    """What is wrong with the flags of the stages the run asks for (the training flags, in every
    mode; each stage's batch size; the weights to start from), each problem naming the flag as typed;
    warns of a warmup longer than training. ``unused``: the run's ``unused_weights_flag`` (warned of here)."""
    from albert_tf.training.flags import count_flag_problems, training_flag_problems, warn_if_warmup_outlasts_training

    # The training flags are checked in every mode: an eval or predict run builds the same loop (its batch
    # and step settings) and optimizer, which refused a bad value only after the features were cached.
    problems = training_flag_problems(f)
    if f.do_train:
        warn_if_warmup_outlasts_training(f)
    if "do_eval" in f and f.do_eval:
        problems += count_flag_problems(f, "eval_batch_size")
    if f.do_predict:
        problems += count_flag_problems(f, "predict_batch_size")
    if "dropout_prob" in f and not 0 <= f.dropout_prob < 1:  # the model is built in every stage
        problems.append(f"--dropout_prob must be in [0, 1), got {f.dropout_prob}")
    if unused:  # a resumed run's: its own checkpoints make the flag's weights unused, whatever state they are in
        logging.warning("%s", unused)
        return problems
    try:  # here, before any split is read: the runner opens it only after the features are cached
        init_checkpoint_from_flags(f.init_checkpoint, f.albert_hub_module_handle)
    except ValueError as e:
        problems.append(str(e))
    return problems


def weights_flag(f: flags.FlagValues) -> str:
    """The name of the flag that gives the weights a run starts from, as ``init_checkpoint_from_flags`` picks
    them: ``init_checkpoint`` when given, else ``albert_hub_module_handle`` (the one place that decides it: each
    line about those weights names the flag the user gave)."""
    return "albert_hub_module_handle" if f.albert_hub_module_handle and not f.init_checkpoint else "init_checkpoint"


def unused_weights_flag(f: flags.FlagValues) -> str | None:
    """Why ``--init_checkpoint`` (or ``--albert_hub_module_handle``) is not used by this run, as a warning line;
    None when it is the weights a stage starts from, or when none is given.

    The rule (``runner.own_weights_ahead_of_init``, what the stages do): it is unused when ``--output_dir`` holds
    the run's own weights: with ``--do_train`` any ``model.ckpt-<step>`` (the run resumes from its newest intact
    one, or stops); without, also ``model.ckpt-best`` or a ``best_trial.txt`` naming a best step, and for an
    evaluation-only run the checkpoints the state file lists. Only then are the flag's weights left unchecked
    (``stage_flag_problems``, ``check_weights_fit``): a re-run of an interrupted run's command resumes even when
    they are gone, damaged or of another config. A fresh run's are checked, and refused in one line.
    A driver asks once a run (it looks into ``--output_dir``) and hands the answer to each check and the job."""
    from albert_tf.fileio import absolute
    from albert_tf.finetuning.runner import own_weights_ahead_of_init

    flag = weights_flag(f)
    if not f[flag].value or not f.output_dir:
        return None
    predicts_or_exports = bool(f.do_predict or ("export_dir" in f and f.export_dir))
    own = own_weights_ahead_of_init(absolute(f.output_dir), f.do_train, predicts_or_exports)
    if own is None:
        return None
    how = "resumes from its own checkpoints" if f.do_train else "uses its own weights"
    return f"--{flag}={f[flag].value} is not used: the run {how} in --output_dir (the newest: {own})"


def check_stage_flags(f: flags.FlagValues, unused: str | None) -> None:
    """``stage_flag_problems`` as one error line, before any work."""
    problems = stage_flag_problems(f, unused)
    if problems:
        raise ValueError("; ".join(problems))


def check_max_seq_length(max_seq_length: int, max_position_embeddings: int) -> None:
    """The original's refusal of a sequence longer than the model's position table."""
    if max_seq_length > max_position_embeddings:
        raise ValueError(
            f"Cannot use sequence length {max_seq_length} because the ALBERT model was only "
            f"trained up to sequence length {max_position_embeddings} (--max_seq_length)")


def init_checkpoint_from_flags(init_checkpoint: str | None, albert_hub_module_handle: str | None) -> str | None:
    """``--init_checkpoint``, else a local ``--albert_hub_module_handle`` folder (handles are not downloaded);
    one that names no checkpoint is refused naming its flag (it is first read after the features are built)."""
    if albert_hub_module_handle and "://" in albert_hub_module_handle:
        raise ValueError("--albert_hub_module_handle must be a local module directory (download and "
                         "unpack the module first)")
    if init_checkpoint:
        _check_weights("init_checkpoint", init_checkpoint)
        return init_checkpoint
    if albert_hub_module_handle:
        _check_weights("albert_hub_module_handle", albert_hub_module_handle)
    return albert_hub_module_handle or None


def _check_weights(flag: str, path: str) -> None:
    """That ``path`` names a checkpoint ``load_checkpoint`` can find (its tensors are read later)."""
    import tensorflow as tf

    from albert_tf.weights import CheckpointError, find_checkpoint
    from albert_tf.weights.hf import is_hf_checkpoint

    if is_hf_checkpoint(path) and tf.io.gfile.exists(path):
        return
    try:
        find_checkpoint(path)
    except CheckpointError as e:
        raise ValueError(f"--{flag}: {e}") from None


def albert_config_from_flags(f: flags.FlagValues, spm_model_file: str | None, vocab_file: str | None,
                             unused: str | None):
    """``--albert_config_file``, checked against the tokenizer's vocabulary, ``--max_seq_length`` and the
    weights to start from unless ``unused`` (``unused_weights_flag``; and ``--do_lower_case`` against the
    tokenizer's casing: a warning)."""
    from albert_tf.config import AlbertConfig
    from albert_tf.tokenization.spm import warn_if_capitals_become_unknown
    from albert_tf.vocab_check import check_tokenizer

    config = AlbertConfig.from_json_file(f.albert_config_file)
    check_tokenizer(spm_model_file, vocab_file, config.vocab_size, f.albert_config_file)
    warn_if_capitals_become_unknown(spm_model_file, f.do_lower_case)
    check_max_seq_length(f.max_seq_length, config.max_position_embeddings)
    check_weights_fit(f, config, unused)
    return config


def check_weights_fit(f: flags.FlagValues, config, unused: str | None) -> None:
    """That the encoder weights of ``--init_checkpoint`` (or ``--albert_hub_module_handle``) fit ``config`` when the
    run starts from them (not when it resumes from its own checkpoints: ``unused_weights_flag``), as one line naming
    the flag, the first weight that does not and --albert_config_file. They were first read after the features were
    cached, and a checkpoint of another size printed a line per weight (25 for ALBERT large with a base config).
    Only the encoder is checked: the task's head starts fresh when it is missing or of another number of labels
    (``fine_tuning_init``)."""
    import tensorflow as tf

    from albert_tf.modeling.encoder import AlbertModel
    from albert_tf.weights import CheckpointError, check_fits, load_checkpoint, resolve_checkpoint
    from albert_tf.weights.errors import another_config_line
    from albert_tf.weights.hf import is_hf_checkpoint

    if unused:  # the run starts from its own checkpoint (stage_flag_problems warned)
        return
    path = init_checkpoint_from_flags(f.init_checkpoint, f.albert_hub_module_handle)
    if not path:
        return
    flag = weights_flag(f)
    try:
        if is_hf_checkpoint(path):  # a Hugging Face folder has no index to check: its tensors are read (into
            # an encoder built by the check, outside any strategy's scope: it is thrown away)
            load_checkpoint(AlbertModel(config), path, allow_missing_heads=True)
        else:
            try:
                check_fits(_variables_without_values(config), path)  # the checkpoint's index only
            except (tf.errors.OpError, RuntimeError):  # TensorFlow's reader names no file (an empty index)
                resolve_checkpoint(path)  # the one line naming the damaged file
                raise
    except CheckpointError as e:
        line = another_config_line(e, f.albert_config_file)
        raise ValueError(f"--{flag}: {line}" if path in line else f"--{flag}={path}: {line}") from None


def _variables_without_values(config):
    """An ``AlbertModel`` of ``config`` whose variables have names and shapes but no values: made in a graph
    that is never run (traced by a ``tf.function`` in it, so the model's own checks make no unused ops).
    ``check_fits`` needs no more, and an eager one allocated every weight (0.9 GB for ALBERT xxlarge)
    only to be thrown away."""
    import tensorflow as tf

    from albert_tf.modeling.encoder import AlbertModel

    with tf.Graph().as_default():
        encoder = AlbertModel(config)
        tf.function(lambda: encoder(encoder.dummy_inputs())).get_concrete_function()
    return encoder


def job_from_flags(f: flags.FlagValues, config, unused: str | None, *, num_train_steps: int, warmup_steps: int,
                   do_eval: bool, eval_batch_size: int, export_dir: str | None = None):
    """The ``FineTuningJob`` of the flags every fine-tuning driver has (the stages, the weights to
    start from, unless ``unused``: ``unused_weights_flag``, the loop's settings and the optimizer)."""
    from albert_tf.data.batching import DEFAULT_MULTIPLE
    from albert_tf.fileio import absolute
    from albert_tf.finetuning import FineTuningJob
    from albert_tf.training import create_optimizer, train_config_from_flags

    output_dir = absolute(f.output_dir)
    if f.seq_length_multiple < 1:
        raise ValueError(f"--seq_length_multiple must be >= 1, got {f.seq_length_multiple}")
    if f.pad_to_max_length and (f.seq_length_buckets or f.seq_length_multiple != DEFAULT_MULTIPLE):
        given = "--seq_length_buckets" if f.seq_length_buckets else f"--seq_length_multiple={f.seq_length_multiple}"
        raise ValueError(f"--pad_to_max_length keeps every row at --max_seq_length, so {given} would be "
                         f"ignored: pass one or the other")
    train = train_config_from_flags(f, num_train_steps=num_train_steps, output_dir=output_dir)
    if f.do_train and not do_eval and not _given(f, "keep_checkpoint_max", "num_keep_checkpoint"):
        # The original's fine-tuning drivers kept every checkpoint whatever this flag said (their RunConfig
        # has keep_checkpoint_max=0), and its run_glue.sh scores them in a second, eval-only run: a run
        # that trains without scoring keeps them all, so that the later run chooses among the same ones.
        train = dataclasses.replace(train, keep_checkpoint_max=0)
    return FineTuningJob(
        output_dir=output_dir,
        albert_config=config,
        do_train=f.do_train,
        do_eval=do_eval,
        do_predict=f.do_predict,
        export_dir=export_dir,
        # Unused weights as given (the runner reads them only when the run has no checkpoint of its own)
        init_checkpoint=(f.init_checkpoint or f.albert_hub_module_handle or None) if unused
        else init_checkpoint_from_flags(f.init_checkpoint, f.albert_hub_module_handle),
        init_flag=f"--{weights_flag(f)}",
        train=train,
        optimizer_fn=lambda: create_optimizer(f.learning_rate, num_train_steps, warmup_steps, f.optimizer),
        eval_batch_size=eval_batch_size,
        predict_batch_size=f.predict_batch_size,
        pad_to_max_length=f.pad_to_max_length,
        seq_length_multiple=f.seq_length_multiple,
        seq_length_buckets=_buckets(f.seq_length_buckets, f.max_seq_length),
        group_by_length=f.group_by_length,
    )


def refuse_flags_of_another_mode(f: flags.FlagValues, names: tuple[str, ...], their_mode: str, why: str) -> None:
    """One line naming the flags of ``names`` given on the command line, which would be ignored in
    this run's mode (flags left at their defaults are fine)."""
    given = [f"--{name}" for name in names if f[name].present]
    if given:
        raise ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for {their_mode}; {why}")


def _given(f: flags.FlagValues, *names: str) -> bool:
    """Whether any of the flags ``names`` (a flag and its alias) is on the command line."""
    return any(name in f and f[name].present for name in names)


def _buckets(values: list[str] | None, max_seq_length: int) -> tuple[int, ...] | None:
    from albert_tf.data.batching import parse_bucket_lengths

    return parse_bucket_lengths(",".join(values), max_seq_length) if values else None


def run_and_report(task_and_job_from_flags: Callable[[], tuple], f: flags.FlagValues) -> dict[str, Any]:
    """Refuses training on in the original's run folder, builds the strategy from the flags, takes
    ``--output_dir``'s run lock (before anything is written there: the task may cache features into it),
    makes the task and job, runs it and prints where each output went."""
    from albert_tf.fileio import absolute
    from albert_tf.finetuning import run
    from albert_tf.training import strategy_from_flags
    from albert_tf.training.checkpoint_policy import refuse_resuming_the_original
    from albert_tf.training.distribution import JOB_MESSAGES, ending_together, worker_info
    from albert_tf.run_lock import output_dir_lock

    require_flags(f, "output_dir")
    if f.do_train:  # before the task, which may build its feature cache into --output_dir (SQuAD's)
        refuse_resuming_the_original(f.output_dir)
    strategy = strategy_from_flags(f)
    worker = worker_info(strategy)
    with ending_together(strategy):  # the other workers wait while the chief evaluates, predicts, exports
        with output_dir_lock(absolute(f.output_dir), worker.num_workers, worker.worker_index,
                             f.take_over_run_lock, JOB_MESSAGES):
            task, job = task_and_job_from_flags()
            produced = run(task, job, strategy)
        if produced:  # other workers than the chief produce nothing
            print(closing_summary(os.path.basename(sys.argv[0]), produced), flush=True)
    return produced


def finetuning_main(task_and_job_from_flags: Callable[[], tuple]) -> Callable[[list[str]], int]:
    """A driver's ``main``: flags → (task, job) → ``run``, each output's place logged."""

    def main(argv: list[str]) -> int:
        del argv
        logging.set_verbosity(logging.INFO)
        run_and_report(task_and_job_from_flags, flags.FLAGS)
        return 0

    main.__module__ = task_and_job_from_flags.__module__  # errors are reported under the driver's name
    return reports_errors(main)
