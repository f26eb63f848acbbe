"""Benchmark create_pretraining_data.py: wall time, instances/s, CPU seconds, peak memory, temporary disk.

Builds a corpus of about 10 MB by repeating Botchan (../shared/data/corpus/botchan.txt, turned into one
sentence per line, one document per chapter: 37 copies, 444 documents), then runs the real CLI at
sequence length 128, dupe_factor 2 (the setting of the original's measurement below):
  - 1x corpus with 1 and 2 workers (speed, peak RSS; the two outputs must be byte-identical),
  - 4x corpus with 2 workers (peak RSS must not grow with the corpus).
Peak RSS is sampled every 0.1 s over the whole process tree (main process + workers) and summed (shared
pages counted in each process: an upper bound). CPU seconds are all processes' user + system time: the
cost independent of the load of a shared machine.

Google's original cannot run here (TF 1.15). Its figure is the documented constant below: 57-68 s wall
for a 10 MB WikiText corpus (496 documents) at the same settings, one process, on an AMX Xeon
(../shared/docs/PERFORMANCE.md, 2026-12-01). The ratio uses the faster 57 s, scaled to this corpus's size.

With --runner=beam: the 1x corpus through the local tool (2 workers) and through --runner=beam on Beam's
Python DirectRunner (multi-processing, 2 workers; the pipeline's SDK worker processes are in the tree),
with both outputs' sha256 (they must be equal) and the pipeline's instances and input MB per CPU-second
(the per-core rate behind the README's cluster estimate).

  .venv/bin/python benchmarks/create_pretraining_data.py [--copies 37] [--seq 128] [--dupe 2] [--runner beam]
"""
import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from albert_tf.data.books import book_as_sentences

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import cpu_info  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ALBERT_TF_SHARED", os.path.join(os.path.dirname(REPO), "shared"))
# Google's create_pretraining_data.py, 10 MB corpus, seq 128, dupe_factor 2 (PERFORMANCE.md).
ORIGINAL_WALL_SECONDS = 57.0
ORIGINAL_CORPUS_MB = 10.0


def _children_map():
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss_kb(root: int, cpu_seen: dict | None = None) -> tuple[int, int]:
    """(sum of RSS over root and its descendants, RSS of root) in KiB; with `cpu_seen`, each process's
    CPU ticks so far are recorded in it (processes a runner never waits for are counted too)."""
    children = _children_map()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _rss_kb(pid)
        if cpu_seen is not None:
            cpu_seen[pid] = max(cpu_seen.get(pid, 0), _cpu_ticks(pid))
        stack.extend(children.get(pid, []))
    return total, _rss_kb(root)


def run(corpus: str, out_dir: str, workers: int, args, runner: str = "local") -> dict:
    output = os.path.join(out_dir, f"bench_{runner}_w{workers}.tfrecord")
    cmd = [sys.executable, os.path.join(REPO, "create_pretraining_data.py"), f"--input_file={corpus}",
           f"--output_file={output}", f"--spm_model_file={os.path.join(SHARED, 'data', 'spm', '30k-clean.model')}",
           f"--max_seq_length={args.seq}", f"--max_predictions_per_seq={args.max_predictions}",
           f"--dupe_factor={args.dupe}", f"--num_workers={workers}", "--random_seed=12345"]
    if args.block_size_mb:
        cmd.append(f"--block_size_mb={args.block_size_mb}")
    if runner == "beam":
        cmd += ["--runner=beam", "--beam_pipeline_options=--runner=FnApiRunner "
                f"--direct_running_mode=multi_processing --direct_num_workers={workers}"]
    # The pipeline's SDK worker processes import albert_tf: the checkout on their path.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    start = time.monotonic()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    peak_total = peak_main = 0
    cpu_seen: dict = {}
    while proc.poll() is None:
        total, main = tree_rss_kb(proc.pid, cpu_seen)
        peak_total, peak_main = max(peak_total, total), max(peak_main, main)
        time.sleep(0.1)
    wall = time.monotonic() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # includes the (waited-for) workers
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    cpu = max(cpu, sum(cpu_seen.values()) / os.sysconf("SC_CLK_TCK"))  # sampled: a lower bound
    stderr = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{stderr[-3000:]}")
    with open(output + ".summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    with open(output, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    output_mb = os.path.getsize(output) / 1e6
    os.remove(output)
    return {
        "workers": workers,
        "instances": summary["instances"],
        "wall": wall,  # the whole command: interpreter start-up, imports, workers, all three phases
        "rate": summary["instances"] / wall,
        "cpu_seconds": cpu,
        "peak_rss_mb": peak_total / 1024,
        "peak_main_rss_mb": peak_main / 1024,
        "tmp_mb": summary["shuffle"].get("temporary_bytes", 0) / 1e6,  # the local tool's (Beam: the runner's)
        "output_mb": output_mb,
        "sha": digest,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=37, help="book copies in the 1x corpus (37: ~10 MB)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--max_predictions", type=int, default=20)
    parser.add_argument("--dupe", type=int, default=2)
    parser.add_argument("--block_size_mb", type=float, default=0, help="0: the tool's default")
    parser.add_argument("--runner", choices=["local", "beam"], default="local",
                        help="beam: the local tool (2 workers) next to --runner=beam on the DirectRunner")
    args = parser.parse_args()
    if args.runner == "beam":
        return compare_beam(args)

    book = book_as_sentences(os.path.join(SHARED, "data", "corpus", "botchan.txt"))
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {}
        for scale in (1, 4):
            path = os.path.join(tmp, f"corpus_{scale}x.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(book * (args.copies * scale))
            corpora[scale] = path
        corpus_mb = os.path.getsize(corpora[1]) / 1e6
        print(f"{cpu_info()['model']}, {os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}")
        print(f"corpus 1x: {corpus_mb:.2f} MB ({args.copies} copies of Botchan), 4x: "
              f"{os.path.getsize(corpora[4]) / 1e6:.2f} MB; seq {args.seq}, dupe_factor {args.dupe}")
        rows = [("1x", run(corpora[1], tmp, 1, args)), ("1x", run(corpora[1], tmp, 2, args)),
                ("4x", run(corpora[4], tmp, 2, args))]
        print(f"load average at end {os.getloadavg()[0]:.1f}")
    original_wall = ORIGINAL_WALL_SECONDS * corpus_mb / ORIGINAL_CORPUS_MB
    print(f"{'corpus':>6} {'workers':>7} {'instances':>9} {'wall s':>7} {'inst/s':>7} {'vs orig':>7} {'CPU s':>6} "
          f"{'peak RSS MB':>11} {'main RSS MB':>11} {'tmp MB':>7} {'out MB':>7} {'sha256':>16}")
    for scale, r in rows:
        ratio = f"{original_wall / r['wall']:.1f}x" if scale == "1x" else "-"
        print(f"{scale:>6} {r['workers']:>7} {r['instances']:>9} {r['wall']:>7.1f} {r['rate']:>7.0f} {ratio:>7} "
              f"{r['cpu_seconds']:>6.1f} {r['peak_rss_mb']:>11.0f} {r['peak_main_rss_mb']:>11.0f} "
              f"{r['tmp_mb']:>7.1f} {r['output_mb']:>7.1f} {r['sha'][:16]:>16}")
    same = rows[0][1]["sha"] == rows[1][1]["sha"]
    print(f"original: {ORIGINAL_WALL_SECONDS:.0f} s per {ORIGINAL_CORPUS_MB:.0f} MB = {original_wall:.1f} s for this "
          f"corpus; 1 vs 2 workers byte-identical: {same}; peak RSS 4x/1x (2 workers): "
          f"{rows[2][1]['peak_rss_mb'] / rows[1][1]['peak_rss_mb']:.2f}")


def compare_beam(args) -> None:
    book = book_as_sentences(os.path.join(SHARED, "data", "corpus", "botchan.txt"))
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus_1x.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(book * args.copies)
        corpus_mb = os.path.getsize(corpus) / 1e6
        print(f"{cpu_info()['model']}, {os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}")
        print(f"corpus: {corpus_mb:.2f} MB ({args.copies} copies of Botchan); seq {args.seq}, dupe_factor {args.dupe}")
        rows = [("local", run(corpus, tmp, 2, args)), ("beam", run(corpus, tmp, 2, args, runner="beam"))]
        print(f"load average at end {os.getloadavg()[0]:.1f}")
    print(f"{'runner':>6} {'workers':>7} {'instances':>9} {'wall s':>7} {'CPU s':>6} {'peak RSS MB':>11} "
          f"{'inst/CPU-s':>10} {'MB/CPU-s':>8}  sha256")
    for runner, r in rows:
        print(f"{runner:>6} {r['workers']:>7} {r['instances']:>9} {r['wall']:>7.1f} {r['cpu_seconds']:>6.1f} "
              f"{r['peak_rss_mb']:>11.0f} {r['instances'] / r['cpu_seconds']:>10.0f} "
              f"{corpus_mb * args.dupe / r['cpu_seconds']:>8.3f}  {r['sha']}")
    print(f"outputs byte-identical: {rows[0][1]['sha'] == rows[1][1]['sha']} "
          "(MB/CPU-s: input MB times dupe_factor per CPU-second)")


if __name__ == "__main__":
    main()
