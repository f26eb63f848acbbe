"""`make demo`: the whole system on built-in data, in a few minutes on 2 CPU cores.

No data, checkpoint or network is needed (beyond installing packages). Each step
runs a real driver with flags, as a user would, and prints the command:

  1. write a synthetic corpus, an SST-2-format task and SQuAD-format files (albert_tf.demo_data);
  2. train a SentencePiece model with the original's spm_train settings, scaled down;
  3. create_pretraining_data.py -> TFRecords;
  4. run_pretraining.py: a tiny ALBERT (loss printed as it falls), with eval;
  5. convert_checkpoint.py: albert_tf -> Google TF1 format -> albert_tf;
  6. run_classifier.py on the sentiment task, starting from the TF1-format checkpoint;
  7. run_squad.py (SQuAD 1.1 head) train + predict;
  8. run_race.py (multiple choice) on RACE-format data (albert_tf.race.synthetic): a tiny model
     trained from scratch, eval, predict;
  9. export_model.py, then the SavedModel is queried with raw sentences.
It ends with a table of results and where every output went.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 64
NUM_STEPS = 9
TINY_CONFIG = {"embedding_size": 32, "hidden_size": 96, "num_hidden_layers": 4, "num_hidden_groups": 1,
               "inner_group_num": 1, "num_attention_heads": 4, "intermediate_size": 192, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
               "max_position_embeddings": SEQ, "type_vocab_size": 2, "initializer_range": 0.02}
# RACE's model, trained from scratch: with initializer_range 0.02 it stayed at chance (loss ln 4);
# the measurements are in tests/race/test_run_race.py's docstring.
RACE_CONFIG = {**TINY_CONFIG, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
               "initializer_range": 0.1}


def fresh_output_dir(output_dir: str) -> str:
    """``output_dir``, or when it holds anything (an earlier demo's outputs, a user's files) the first
    free ``<output_dir>-2``, ``-3``, ...: every run starts from nothing (a rerun into the same folder would
    resume its finished pretraining and meet its own converted checkpoint), and nothing is replaced."""
    candidate, number = os.path.abspath(output_dir), 1
    while os.path.exists(candidate) and (not os.path.isdir(candidate) or os.listdir(candidate)):
        number += 1
        candidate = f"{os.path.abspath(output_dir)}-{number}"
    return candidate


class Demo:
    def __init__(self, output_dir: str, quick: bool):
        self.out = fresh_output_dir(output_dir)
        if self.out != os.path.abspath(output_dir):
            print(f"{output_dir} is not empty (an earlier demo?): this run writes to {self.out}", flush=True)
        self.quick = quick
        self.started = time.time()
        self.step_number = 0
        os.makedirs(self.out, exist_ok=True)

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def step(self, title: str) -> None:
        self.step_number += 1
        print(f"\n== [{self.step_number}/{NUM_STEPS}, {time.time() - self.started:.0f}s] {title}", flush=True)

    def driver(self, script: str, **flags) -> str:
        """Runs a top-level driver; echoes its command and output; returns its stderr log."""
        args = [f"--{k}={v}" if not isinstance(v, bool) else (f"--{k}" if v else f"--no{k}")
                for k, v in flags.items()]
        print("$ python " + " ".join([script, *args]), flush=True)
        log_path = self.path("logs", os.path.splitext(script)[0] + ".log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        # The drivers start quietly themselves (albert_tf.startup; ALBERT_TF_VERBOSE=1 reaches them too).
        # Their own session: a SIGINT reaches the driver only as the demo forwards it (``interrupted``), once,
        # whether it came from the terminal (to the whole group) or from `kill -INT <demo pid>`. So does a
        # SIGTERM or SIGHUP (`timeout`, a closed terminal): outside the demo's group, the driver got none.
        process = subprocess.Popen([sys.executable, os.path.join(REPO, script), *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, cwd=self.out, start_new_session=True)
        lines = []
        with _stop_signals_raised():
            try:
                with open(log_path, "a", encoding="utf-8") as log:
                    summary = False  # inside the driver's closing summary (cli.closing_summary): shown whole
                    for line in process.stdout:
                        log.write(line)
                        lines.append(line)
                        summary = line.rstrip().endswith(": done") or (summary and line.startswith("  "))
                        if summary or _worth_showing(line):
                            print("   " + _shorten(line.rstrip()), flush=True)
                process.wait()
            except KeyboardInterrupt:
                self.interrupted(script, process, log_path, signal.SIGINT)
            except _Stopped as e:
                self.interrupted(script, process, log_path, e.signum)
        if process.returncode != 0:
            print("".join(lines[-30:]), file=sys.stderr)
            raise SystemExit(f"demo step failed: {script} exited with {process.returncode} (log: {log_path})")
        return "".join(lines)

    def interrupted(self, script: str, process: subprocess.Popen, log_path: str, signum: int) -> None:
        """SIGINT (Ctrl-C, or `kill -INT` of the demo alone), SIGTERM or SIGHUP: passes it on to the driver
        (SIGHUP as SIGTERM, which the drivers stop on cleanly), which stops after its step, writing a checkpoint.
        Waits for it (its output still goes to its log, so that it never blocks on a full pipe), then ends the
        demo in one line with the status of a process that signal ended. A second signal kills the driver."""
        process.send_signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
        _say(f"\ndemo: interrupted; waiting for {script} to stop after its current step "
             f"(Ctrl-C again aborts it at once)")
        try:
            with open(log_path, "a", encoding="utf-8") as log:
                for line in process.stdout:
                    log.write(line)
            process.wait()
        except (KeyboardInterrupt, _Stopped):
            process.kill()
            process.wait()
        _say(f"demo: interrupted during {script}: the outputs so far are in {self.out} (its log: {log_path}); "
             f"`make demo` again starts in a new folder")
        raise SystemExit(128 + signum)


class _Stopped(Exception):
    """SIGTERM or SIGHUP reached the demo while a driver ran."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_signals_raised():
    """SIGTERM and SIGHUP raise ``_Stopped`` (as SIGINT raises KeyboardInterrupt) while a driver runs;
    one the demo ignores (SIGHUP under nohup) stays ignored."""
    def stop(signum, frame):
        raise _Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say(text: str) -> None:
    """A line on stderr; nothing if it cannot be written (a terminal that hung up: SIGHUP)."""
    with contextlib.suppress(OSError):
        print(text, file=sys.stderr, flush=True)


def _worth_showing(line: str) -> bool:
    keep = ("step ", "loss", "wrote", "exported", "eval ", "Resumed", "accuracy", "exact", "f1", "saved",
            "training finished", "error", "instances", "loaded", "predictions", "best")
    noise = ("Sharding callback", "TFRecordDataset", "cuda", "absl::", "oneDNN")
    return any(k in line for k in keep) and not any(n in line for n in noise)


def _shorten(line: str) -> str:
    line = re.sub(r"^[IWE]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ", "", line)  # absl's log prefix
    return line if len(line) < 200 else line[:197] + "..."


def _rounded(value: str | None) -> str:
    """A SQuAD score (a float64's 16 digits in eval_results.txt) to two decimals, as the official script's
    percentages are quoted."""
    try:
        return f"{float(value):.2f}"
    except (TypeError, ValueError):
        return "?"


def _read_results(path: str) -> dict[str, str]:
    results = {}
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            if " = " in line:
                key, value = line.strip().split(" = ", 1)
                results[key] = value
    return results


def main(argv: list[str] | None = None) -> int:
    from albert_tf.startup import quiet_startup

    quiet_startup([])  # before _query_export imports TensorFlow; ALBERT_TF_VERBOSE=1 shows its start-up lines
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="demo_output")
    parser.add_argument("--quick", action="store_true", help="fewer steps (for tests): checks the plumbing only")
    args = parser.parse_args(argv)
    from albert_tf.fileio import expand_home

    # --output_dir=~/demo: the home folder, as in the drivers' path flags (no shell expands a ~ after =)
    demo = Demo(expand_home(args.output_dir), args.quick)
    scale = 0.2 if args.quick else 1.0
    steps = lambda n: max(10, int(n * scale))  # noqa: E731

    from albert_tf import demo_data
    from albert_tf.fileio import atomic_write_text

    demo.step("built-in data: corpus, SST-2-format task, SQuAD-format files")
    corpus = demo_data.write_corpus(demo.path("data", "corpus.txt"), num_documents=int(1500 * scale) or 50)
    glue_dir = os.path.dirname(demo_data.write_sentiment_task(demo.path("data", "glue")))
    squad_train = demo_data.write_squad(demo.path("data", "squad_train.json"), num_paragraphs=120, seed=3)
    squad_dev = demo_data.write_squad(demo.path("data", "squad_dev.json"), num_paragraphs=20, seed=4)
    print(f"   {corpus}\n   {glue_dir}/SST-2/{{train,dev,test}}.tsv\n   {squad_train}\n   {squad_dev}")

    demo.step("SentencePiece model (the original's spm_train settings, scaled down)")
    spm_model = demo_data.train_sentencepiece(corpus, demo.path("data", "spm"))
    import sentencepiece

    vocab_size = sentencepiece.SentencePieceProcessor(model_file=spm_model).get_piece_size()
    print(f"   {spm_model}: {vocab_size} pieces")
    config_file = demo.path("albert_config.json")
    atomic_write_text(config_file, json.dumps({"vocab_size": vocab_size, **TINY_CONFIG}, indent=2))

    demo.step("create_pretraining_data.py")
    records = demo.path("data", "pretrain.tfrecord")
    demo.driver("create_pretraining_data.py", input_file=corpus, output_file=records, spm_model_file=spm_model,
                max_seq_length=SEQ, max_predictions_per_seq=10, dupe_factor=3, num_workers=2, random_seed=12345)

    demo.step("run_pretraining.py (tiny ALBERT, LAMB)")
    pretrain_dir = demo.path("pretraining")
    # Even --quick pretrains 300 steps: before that the tiny model's [CLS] output hardly depends on
    # the input yet, and fine-tuning from it stays at one class (measured: 80 and 240 steps).
    train_steps = 400 if not args.quick else 300
    log = demo.driver("run_pretraining.py", albert_config_file=config_file, input_file=records,
                      output_dir=pretrain_dir, max_seq_length=SEQ, max_predictions_per_seq=10,
                      train_batch_size=32, eval_batch_size=32, num_train_steps=train_steps,
                      num_warmup_steps=max(1, train_steps // 10), learning_rate=0.01, optimizer="lamb",
                      save_checkpoints_steps=max(1, train_steps // 2), iterations_per_loop=25, log_steps=25,
                      do_eval=True, max_eval_steps=10)
    losses = [float(v) for v in re.findall(r"step \d+/\d+: loss = ([0-9.]+)", log)]
    pretrain_results = _read_results(os.path.join(pretrain_dir, "eval_results.txt"))

    demo.step("convert_checkpoint.py: albert_tf -> Google TF1 format -> albert_tf")
    google_dir = demo.path("google_format")
    demo.driver("convert_checkpoint.py", checkpoint_to_convert=pretrain_dir, albert_config_file=config_file,
                converted_checkpoint=os.path.join(google_dir, "model.ckpt"), direction="tf2_to_tf1")
    demo.driver("convert_checkpoint.py", checkpoint_to_convert=os.path.join(google_dir, "model.ckpt"),
                albert_config_file=config_file, converted_checkpoint=demo.path("albert_tf_format", "model.ckpt"),
                direction="tf1_to_tf2")

    demo.step("run_classifier.py on the sentiment task (GLUE SST-2 format)")
    classifier_dir = demo.path("classifier")
    demo.driver("run_classifier.py", task_name="sst-2", data_dir=glue_dir, albert_config_file=config_file,
                spm_model_file=spm_model, init_checkpoint=os.path.join(google_dir, "model.ckpt"),
                output_dir=classifier_dir, do_train=True, do_eval=True, do_predict=True, max_seq_length=32,
                train_batch_size=32, eval_batch_size=32, predict_batch_size=32, learning_rate=5e-4,
                train_step=steps(300), warmup_step=steps(30), save_checkpoints_steps=steps(150),
                iterations_per_loop=25, log_steps=25, export_dir=demo.path("classifier_export"))
    classifier_results = _read_results(os.path.join(classifier_dir, "eval_results.txt"))

    demo.step("run_squad.py (SQuAD 1.1 head): train, then predict")
    squad_dir = demo.path("squad")
    demo.driver("run_squad.py", albert_config_file=config_file, spm_model_file=spm_model,
                init_checkpoint=os.path.join(google_dir, "model.ckpt"), train_file=squad_train,
                predict_file=squad_dev, output_dir=squad_dir, do_train=True, do_predict=True,
                max_seq_length=SEQ, doc_stride=32, max_query_length=16, train_batch_size=32,
                predict_batch_size=32, learning_rate=1e-3, num_train_epochs=8.0 if not args.quick else 0.5,
                save_checkpoints_steps=1000, iterations_per_loop=25, log_steps=25)
    squad_results = _read_results(os.path.join(squad_dir, "eval_results.txt"))

    demo.step("run_race.py (multiple choice, RACE format): train from scratch, evaluate, predict")
    from albert_tf.race.synthetic import write_race

    # From scratch with RACE_CONFIG: fine-tuned from the pretrained tiny model (initializer_range 0.02,
    # other text) these stories stayed near chance; this recipe learns them (tests/race/test_run_race.py).
    # Articles keep only their questions' sentences: in the demo's 300-piece vocabulary (1.5x the pieces
    # of 30k-clean in a sample) whole stories were learned far more slowly (best dev 0.3125 at sequence
    # 64 and 0.345 at 128 after 1500 steps, against 0.42).
    race_data = write_race(demo.path("data", "race"), train=2000, dev=100, test=100, binding_share=0.0,
                           context_sentences=0)
    race_config = demo.path("race_config.json")
    atomic_write_text(race_config, json.dumps({"vocab_size": vocab_size, **RACE_CONFIG}, indent=2))
    race_dir = demo.path("race")
    demo.driver("run_race.py", data_dir=race_data, albert_config_file=race_config, spm_model_file=spm_model,
                output_dir=race_dir, do_train=True, do_eval=True, do_predict=True, max_seq_length=SEQ,
                max_qa_length=16, dropout_prob=0.0, train_batch_size=16, eval_batch_size=100,
                predict_batch_size=100, learning_rate=3e-4, train_step=steps(1500), warmup_step=steps(100),
                save_checkpoints_steps=steps(500), iterations_per_loop=100, log_steps=100)
    # the best checkpoint's dev accuracy (model.ckpt-best, which predict used)
    race_accuracy = _read_results(os.path.join(race_dir, "eval_results.txt")).get("best", "?")

    demo.step("export_model.py, then query the SavedModel with raw sentences")
    export_dir = demo.path("hub_export")
    demo.driver("export_model.py", albert_config_file=config_file, checkpoint=pretrain_dir,
                spm_model_file=spm_model, export_path=export_dir, max_seq_length=SEQ)
    query = _query_export(export_dir)

    rows = [
        ("pretraining loss (first -> last logged)", f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "?"),
        ("pretraining masked_lm_accuracy (eval)", pretrain_results.get("masked_lm_accuracy", "?")),
        ("pretraining sentence_order_accuracy (eval)", pretrain_results.get("sentence_order_accuracy", "?")),
        ("sentiment dev accuracy (run_classifier, best checkpoint)", classifier_results.get("best", "?")),
        ("demo-SQuAD exact / F1 (run_squad)", f"{_rounded(squad_results.get('exact_match'))} / "
                                              f"{_rounded(squad_results.get('f1'))}"),
        ("RACE-format dev accuracy (run_race, best checkpoint)", race_accuracy),
        ("SavedModel fill-in: 'alice lives in [MASK] .'", query),
    ]
    print(f"\n== results ({time.time() - demo.started:.0f}s)")
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")
    print("\noutputs:")
    for name, path in [("data, SentencePiece model", demo.path("data")), ("pretraining", pretrain_dir),
                       ("Google TF1-format checkpoint", google_dir),
                       ("albert_tf checkpoint, converted back", demo.path("albert_tf_format")),
                       ("classifier", classifier_dir),
                       ("classifier SavedModel", demo.path("classifier_export")), ("SQuAD", squad_dir),
                       ("RACE", race_dir),
                       ("hub-style SavedModel", export_dir), ("driver logs", demo.path("logs"))]:
        print(f"  {name.ljust(36)} {path}")
    return 0


def _query_export(export_dir: str) -> str:
    """Loads the exported SavedModel as a user would and asks it a couple of things."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    loaded = tf.saved_model.load(export_dir)
    text = loaded.signatures["serving_default"](text=tf.constant(["alice lives in paris .", "the film was superb ."]))
    print(f"   serving_default: pooled_output {tuple(text['pooled_output'].shape)}, "
          f"sequence_output {tuple(text['sequence_output'].shape)}")
    info = loaded.signatures["tokenization_info"]()
    tokenizer_file = info["vocab_file"].numpy().decode()
    from albert_tf.tokenization import FullTokenizer

    tokenizer = FullTokenizer(spm_model_file=tokenizer_file, do_lower_case=bool(info["do_lower_case"].numpy()))
    pieces = ["[CLS]", *tokenizer.tokenize("alice lives in"), "[MASK]", *tokenizer.tokenize("."), "[SEP]"]
    ids = np.array([tokenizer.convert_tokens_to_ids(pieces)], np.int32)
    position = pieces.index("[MASK]")
    out = loaded.signatures["mlm"](input_ids=tf.constant(ids), input_mask=tf.ones_like(ids),
                                   segment_ids=tf.zeros_like(ids), mlm_positions=tf.constant([[position]]))
    top = np.argsort(-out["mlm_logits"].numpy()[0, 0])[:3]
    guesses = ", ".join(tokenizer.convert_ids_to_tokens([int(i)])[0] for i in top)
    print(f"   mlm: top pieces for [MASK] in 'alice lives in [MASK] .': {guesses}")
    return guesses


def run() -> int:
    """``main``, with Ctrl-C between the drivers (the demo's own steps) and a failed write of its own files
    ended in one line, not a traceback."""
    try:
        return main()
    except KeyboardInterrupt:
        print("\ndemo: interrupted; the outputs so far stay in its folder", file=sys.stderr)
        return 128 + signal.SIGINT
    except OSError as e:  # its own files (a full disk, a folder it cannot write): one line, as the drivers
        print(f"demo: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
