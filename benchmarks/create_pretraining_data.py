"""Benchmark create_pretraining_data.py: instances/s and peak memory.

Builds a corpus by repeating Botchan (../shared/data/corpus/botchan.txt, turned into one
sentence per line, one document per chapter), then runs the real CLI at sequence length
128, dupe_factor 5:
  - 1x corpus with 1 and 2 workers (speed, peak RSS),
  - 4x corpus with 2 workers (peak RSS must not grow with the corpus).
Peak RSS is sampled over the whole process tree (main process + workers), summed. The
machine may be shared: CPU seconds (all processes) show the cost independent of load.
For scale: Google's original made ~310 instances/s (seq 128, one process); the aim is >= 5x
that with 2 workers.

  .venv/bin/python benchmarks/create_pretraining_data.py [--copies 16] [--seq 128] [--dupe 5]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from albert_tf.data.books import book_as_sentences

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ALBERT_TF_SHARED", os.path.join(os.path.dirname(REPO), "shared"))
ORIGINAL_RATE = 310.0


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


def tree_rss_kb(root: int) -> tuple[int, int]:
    """(sum of RSS over root and its descendants, RSS of root) in KiB."""
    children = _children_map()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _rss_kb(pid)
        stack.extend(children.get(pid, []))
    return total, _rss_kb(root)


def run(corpus: str, out_dir: str, workers: int, args) -> dict:
    output = os.path.join(out_dir, f"bench_w{workers}.tfrecord")
    cmd = [sys.executable, os.path.join(REPO, "create_pretraining_data.py"), f"--input_file={corpus}",
           f"--output_file={output}", f"--spm_model_file={os.path.join(SHARED, 'data', 'spm', '30k-clean.model')}",
           f"--max_seq_length={args.seq}", f"--max_predictions_per_seq={args.max_predictions}",
           f"--dupe_factor={args.dupe}", f"--num_workers={workers}", "--random_seed=12345"]
    if args.block_size_mb:
        cmd.append(f"--block_size_mb={args.block_size_mb}")
    start = time.monotonic()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak_total = peak_main = 0
    while proc.poll() is None:
        total, main = tree_rss_kb(proc.pid)
        peak_total, peak_main = max(peak_total, total), max(peak_main, main)
        time.sleep(0.1)
    wall = time.monotonic() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # includes the (waited-for) workers
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    stderr = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{stderr[-3000:]}")
    with open(output + ".summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    with open(output, "rb") as f:
        digest = __import__("hashlib").sha256(f.read()).hexdigest()[:16]
    os.remove(output)
    return {
        "workers": workers,
        "instances": summary["instances"],
        "rate": summary["instances_per_second"],  # from the start of the pipeline (after imports)
        "wall_rate": summary["instances"] / wall,  # whole command, including TensorFlow import
        "wall": wall,
        "cpu_seconds": cpu,  # all processes, including the ~4 s TensorFlow import
        "peak_rss_mb": peak_total / 1024,
        "peak_main_rss_mb": peak_main / 1024,
        "sha": digest,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=16, help="book copies in the 1x corpus")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--max_predictions", type=int, default=20)
    parser.add_argument("--dupe", type=int, default=5)
    parser.add_argument("--block_size_mb", type=float, default=0, help="0: the tool's default")
    args = parser.parse_args()

    book = book_as_sentences(os.path.join(SHARED, "data", "corpus", "botchan.txt"))
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {}
        for scale in (1, 4):
            path = os.path.join(tmp, f"corpus_{scale}x.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(book * (args.copies * scale))
            corpora[scale] = path
        print(f"corpus 1x: {os.path.getsize(corpora[1]) / 1e6:.2f} MB ({args.copies} copies of Botchan), "
              f"4x: {os.path.getsize(corpora[4]) / 1e6:.2f} MB; seq {args.seq}, dupe_factor {args.dupe}; "
              f"{os.cpu_count()} CPUs")
        rows = [("1x", run(corpora[1], tmp, 1, args)), ("1x", run(corpora[1], tmp, 2, args)),
                ("4x", run(corpora[4], tmp, 2, args))]
    print(f"{'corpus':>6} {'workers':>7} {'instances':>9} {'inst/s':>8} {'inst/s(wall)':>12} {'x310':>5} "
          f"{'CPU s':>6} {'peak RSS MB':>11} {'main RSS MB':>11} {'sha256':>16}")
    for scale, r in rows:
        print(f"{scale:>6} {r['workers']:>7} {r['instances']:>9} {r['rate']:>8.0f} {r['wall_rate']:>12.0f} "
              f"{r['rate'] / ORIGINAL_RATE:>5.1f} {r['cpu_seconds']:>6.1f} {r['peak_rss_mb']:>11.0f} {r['peak_main_rss_mb']:>11.0f} "
              f"{r['sha']:>16}")
    same = rows[0][1]["sha"] == rows[1][1]["sha"]
    print(f"1 vs 2 workers byte-identical: {same}; peak RSS 4x/1x (2 workers): "
          f"{rows[2][1]['peak_rss_mb'] / rows[1][1]['peak_rss_mb']:.2f}")


if __name__ == "__main__":
    main()
