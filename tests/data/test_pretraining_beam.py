"""--runner=beam: the Beam pipeline on the Python DirectRunner writes the local tool's bytes (in-memory and
multi-processing, 1 and 2 workers), its summary, and its errors; input ranges give the local documents."""
import json
import os
import random
import shutil
import subprocess
import sys

import pytest
from apache_beam.io.localfilesystem import LocalFileSystem

from albert_tf.pretraining_data.beam import create_pretraining_data_beam
from albert_tf.pretraining_data.beam_io import input_ranges, read_range
from albert_tf.pretraining_data.pipeline import PretrainingDataError, create_pretraining_data
from albert_tf.pretraining_data.outputs import check_outputs
from albert_tf.pretraining_data.reading import ReadCounters, iter_blocks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IN_MEMORY = "--runner=FnApiRunner --direct_running_mode=in_memory --direct_num_workers=1"
IN_MEMORY_2 = "--runner=FnApiRunner --direct_running_mode=in_memory --direct_num_workers=2"
ONE_PROCESS = "--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=1"
TWO_PROCESSES = "--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=2"
# Differ by design: how the order was made, the settings, timing and the file names.
NOT_COMPARED = ("shuffle", "settings", "elapsed_seconds", "instances_per_second", "output_files",
                "output_paths_from_summary", "summary_file")


def _messy_files(folder):
    """Two files with what the readers must agree on: a byte-order mark, blank and whitespace-only lines,
    runs of blank lines, lines that are not UTF-8 inside and between documents, long documents, CRLF, no
    final newline."""
    rng = random.Random(1)
    first = [b"\xef\xbb\xbfFirst line after a BOM.\n"]
    for doc in range(40):
        for s in range(rng.choice([1, 2, 5, 30])):
            first.append(f"doc {doc} sentence {s} ".encode() * rng.randint(1, 6) + b"\n")
            if rng.random() < 0.05:
                first.append(b"broken \xff line\n")
        first.append(rng.choice([b"\n", b"  \n", b"\n\n\n", b"\t\r\n", b"\xc3\x28\n\n"]))
    second = [b"\xef\xbb\xbf\n", b"\n", b"only doc, line one\r\n", b"line two without a newline"]
    paths = [folder / "one.txt", folder / "two.txt"]
    paths[0].write_bytes(b"".join(first))
    paths[1].write_bytes(b"".join(second))
    return [str(p) for p in paths]


@pytest.mark.parametrize("range_bytes", [1, 13, 200, 4096, 1 << 20])
def test_input_ranges_read_the_local_documents(tmp_path, range_bytes):
    files = _messy_files(tmp_path)
    local_counters, beam_counters = ReadCounters(), ReadCounters()
    local = [doc for block, _ in iter_blocks(tuple(files), 1 << 30, True, local_counters) for doc in block]
    ranges = input_ranges(files, [os.path.getsize(f) for f in files], range_bytes)
    beam = [doc for r in ranges for doc in read_range(r, True, beam_counters)]
    assert beam == local and len(local) > 40
    assert vars(beam_counters) == vars(local_counters) and local_counters.invalid_lines_skipped > 2


def _tagged_corpus(folder, num_docs=120):
    """Documents of 1..12 sentences, every token naming its document and sentence (WordPiece vocab)."""
    rng = random.Random(0)
    lines, words = [], ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    for doc in range(num_docs):
        for s in range(rng.randint(1, 12)):
            lines.append(" ".join([f"d{doc}s{s}"] * rng.randint(2, 9)))
            words.append(f"d{doc}s{s}")
        lines.append("")
    corpus, vocab = folder / "tagged.txt", folder / "vocab.txt"
    corpus.write_text("\n".join(lines), encoding="utf-8")
    vocab.write_text("\n".join(words) + "\n", encoding="utf-8")
    return corpus, vocab


_LOCAL = {}


def _local_run(tmp_path_factory, make_config, random_next_sentence):
    """The local tool's run on the tagged corpus (cached): (config factory, {shard: bytes}, summary)."""
    if random_next_sentence not in _LOCAL:
        folder = tmp_path_factory.mktemp("local")
        corpus, vocab = _tagged_corpus(folder)

        def config(outputs, **overrides):
            settings = dict(vocab_file=str(vocab), max_seq_length=48, max_predictions_per_seq=6, dupe_factor=3,
                            random_next_sentence=random_next_sentence, block_size_mb=0.003,
                            shuffle_bucket_mb=0.05)  # several ranges and several key ranges
            settings.update(overrides)
            return make_config(corpus, None, outputs, **settings)

        outputs = [folder / f"out-{j}" for j in range(3)]
        summary = create_pretraining_data(config(outputs))
        _LOCAL[random_next_sentence] = (config, [p.read_bytes() for p in outputs], summary)
    return _LOCAL[random_next_sentence]


@pytest.mark.parametrize(
    "random_next_sentence,options",
    [(True, IN_MEMORY), (False, IN_MEMORY_2), (True, ONE_PROCESS), (False, TWO_PROCESSES)],
    ids=["random-next-in-memory-1", "sop-in-memory-2", "random-next-multi-processing-1", "sop-multi-processing-2"])
def test_beam_writes_the_local_bytes(tmp_path, tmp_path_factory, make_config, random_next_sentence, options):
    config, local_shards, local_summary = _local_run(tmp_path_factory, make_config, random_next_sentence)
    outputs = [tmp_path / f"beam-{j}" for j in range(3)]
    summary = create_pretraining_data_beam(config(outputs), options)
    assert [p.read_bytes() for p in outputs] == local_shards
    assert all(local_shards) and summary["instances"] == local_summary["instances"] > 400
    assert summary["sop_sources"]["random_document"] > 30  # the fragments came through the joins
    assert summary["shuffle"]["buckets"] > 1
    written = json.loads((tmp_path / "beam-0.summary.json").read_text())
    for key in set(local_summary) | set(written):
        if key not in NOT_COMPARED:
            assert written[key] == local_summary[key], key
    assert sorted(os.listdir(tmp_path)) == ["beam-0", "beam-0.summary.json", "beam-1", "beam-2"]  # no temporaries
    assert written["output_paths_from_summary"] == ["beam-0", "beam-1", "beam-2"]


def test_a_tmp_dir_on_another_file_system_is_copied_beside_the_outputs(tmp_path, tmp_path_factory, make_config,
                                                                        monkeypatch):
    """A rename from --tmp_dir on another file system fails (EXDEV): every run failed at its very end,
    after writing a summary of outputs it then did not replace. The outputs are copied beside their
    final names first (what can fail, fails before the summary), then renamed."""
    import errno

    config, local_shards, _ = _local_run(tmp_path_factory, make_config, False)
    work = tmp_path / "scratch"
    work.mkdir()
    def across_devices(rename):
        def renamed(src, dst, *args, **kwargs):
            if os.fspath(src).startswith(str(work)):
                raise OSError(errno.EXDEV, "Invalid cross-device link", os.fspath(src))
            return rename(src, dst, *args, **kwargs)
        return renamed

    monkeypatch.setattr(os, "replace", across_devices(os.replace))
    monkeypatch.setattr(os, "rename", across_devices(os.rename))
    outputs = [tmp_path / "out" / f"beam-{j}" for j in range(3)]
    create_pretraining_data_beam(config(outputs, tmp_dir=str(work)), IN_MEMORY)
    monkeypatch.undo()
    assert [p.read_bytes() for p in outputs] == local_shards
    assert sorted(os.listdir(tmp_path / "out")) == ["beam-0", "beam-0.summary.json", "beam-1", "beam-2"]
    assert os.listdir(work) == []  # the work folder is removed


def test_beam_errors_are_the_local_tool_s(tmp_path, make_config, spm_model):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"A fine first sentence.\nAnother one here.\nBroken \xff\xfe bytes.\n\nNext doc.\nMore.\n")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n\t\n", encoding="utf-8")
    out = tmp_path / "out" / "data.tfrecord"
    messages = []
    for corpus, overrides in ((bad, {}), (blank, {}), (bad, {"max_seq_length": 4})):
        config = make_config(corpus, spm_model, [out], block_size_mb=0.00002, **overrides)
        with pytest.raises(PretrainingDataError) as local:
            create_pretraining_data(config)
        with pytest.raises(PretrainingDataError) as beam:
            create_pretraining_data_beam(config, IN_MEMORY)
        assert str(beam.value) == str(local.value)
        assert not out.parent.exists() or os.listdir(out.parent) == []  # nothing written, no temporaries
        messages.append(str(beam.value))
    assert "bad.txt:3: line is not valid UTF-8" in messages[0]
    assert messages[1].startswith("no text found") and "--max_seq_length=4 is too small" in messages[2]


def test_an_input_a_worker_cannot_read_keeps_its_own_error(tmp_path, make_config, spm_model, monkeypatch):
    """Beam checks no input before its workers read them: a worker refused reading one (EACCES, simulated
    as root cannot be refused) is named as that input's read error, as with the local runner, not as an
    output that cannot be written."""
    from albert_tf.pretraining_data import beam_io

    readable, unreadable = tmp_path / "a.txt", tmp_path / "b.txt"
    for path in (readable, unreadable):
        path.write_text("A first sentence here.\nAnother one there.\n\nNext document.\nIts end.\n", encoding="utf-8")
    refused = PermissionError(13, "Permission denied", str(unreadable))
    real_open = beam_io._open

    def worker_open(path):
        if os.path.abspath(path) == str(unreadable):
            raise PermissionError(refused.errno, refused.strerror, refused.filename)
        return real_open(path)
    monkeypatch.setattr(beam_io, "_open", worker_open)
    out = tmp_path / "out" / "data.tfrecord"
    config = make_config(readable, spm_model, [out], input_files=(str(readable), str(unreadable)))
    with pytest.raises(OSError) as caught:
        create_pretraining_data_beam(config, IN_MEMORY)
    assert not isinstance(caught.value, PretrainingDataError)
    assert str(caught.value) == str(refused)  # "[Errno 13] Permission denied: '.../b.txt'"
    assert not out.parent.exists() or os.listdir(out.parent) == []


def test_cli_runner_beam_writes_the_local_files(tmp_path, shared, spm_model):
    sample = shared("data", "corpus", "sample_text.txt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    shards = {}
    for runner in ("local", "beam"):
        prefix = tmp_path / runner / "out.tfrecord"
        result = subprocess.run(
            [sys.executable, os.path.join(REPO, "create_pretraining_data.py"), f"--input_file={sample}",
             f"--output_file={prefix}", f"--spm_model_file={spm_model}", "--max_seq_length=32",
             "--max_predictions_per_seq=5", "--dupe_factor=2", "--num_output_shards=2", "--random_seed=7",
             f"--runner={runner}"],
            capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "create_pretraining_data: done" in result.stdout
        assert result.stdout.splitlines()[-1] == f"  summary: {prefix}.summary.json"
        shards[runner] = {name: (prefix.parent / name).read_bytes() for name in sorted(os.listdir(prefix.parent))
                          if not name.endswith(".json")}
    assert list(shards["beam"]) == ["out.tfrecord-00000-of-00002", "out.tfrecord-00001-of-00002"]
    assert shards["beam"] == shards["local"]


class _FakeRemoteFileSystem(LocalFileSystem):
    """fake://<absolute path>: the local disk behind a scheme, so that the tool takes its remote paths (matching
    through FileSystems, tokenizer copies, temporaries and renames through FileSystems), as for gs://."""

    PREFIX = "fake://"

    @classmethod
    def scheme(cls):
        return "fake"

    def _local(self, path):
        return path[len(self.PREFIX):] if path.startswith(self.PREFIX) else path

    def join(self, basepath, *paths):
        return self.PREFIX + os.path.join(self._local(basepath), *paths)

    def split(self, path):
        head, tail = os.path.split(self._local(path))
        return self.PREFIX + head, tail

    def _url_dirname(self, url_or_path):
        return self.PREFIX + os.path.dirname(self._local(url_or_path))

    def _list(self, dir_or_prefix):
        from apache_beam.io.filesystem import FileMetadata

        for root, _, names in os.walk(self._local(dir_or_prefix)):
            for name in names:
                path = os.path.join(root, name)
                yield FileMetadata(self.PREFIX + path, os.path.getsize(path), os.path.getmtime(path))

    def metadata(self, path):
        from apache_beam.io.filesystem import FileMetadata

        local = self._local(path)
        return FileMetadata(self.PREFIX + local, os.path.getsize(local), os.path.getmtime(local))

    def mkdirs(self, path):
        return super().mkdirs(self._local(path))

    def create(self, path, *args, **kwargs):
        return super().create(self._local(path), *args, **kwargs)

    def open(self, path, *args, **kwargs):
        return super().open(self._local(path), *args, **kwargs)

    def rename(self, sources, destinations):
        return super().rename([self._local(p) for p in sources], [self._local(p) for p in destinations])

    def exists(self, path):
        return super().exists(self._local(path))

    def size(self, path):
        return super().size(self._local(path))

    def delete(self, paths):
        for path in map(self._local, paths):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def test_remote_paths_go_through_beam_file_systems(tmp_path, tmp_path_factory, make_config, spm_model,
                                                   botchan_corpus):
    from albert_tf.pretraining_data.beam_io import resolve_inputs

    remote = tmp_path / "bucket"
    (remote / "corpus").mkdir(parents=True)
    for k in range(2):
        (remote / "corpus" / f"part-{k}.txt").write_bytes(botchan_corpus.read_bytes()[k * 20000:(k + 1) * 20000])
    (remote / "model.spm").write_bytes(open(spm_model, "rb").read())
    files, sizes = resolve_inputs(f"fake://{remote}/corpus/*.txt")
    assert files == tuple(f"fake://{remote}/corpus/part-{k}.txt" for k in range(2)) and sizes == (20000, 20000)
    with pytest.raises(PretrainingDataError, match="no input file found at 'fake://"):
        resolve_inputs(f"fake://{remote}/nothing/*.txt")

    local_out = tmp_path / "local" / "out"
    local = create_pretraining_data(make_config(remote / "corpus" / "part-0.txt", spm_model, [local_out],
                                                input_files=tuple(str(remote / "corpus" / f"part-{k}.txt")
                                                                  for k in range(2))))
    (remote / "out").mkdir()
    (remote / "out" / "theirs").write_bytes(b"an object we did not write")
    theirs = make_config(None, f"fake://{remote}/model.spm", [f"fake://{remote}/out/theirs"], input_files=files)
    with pytest.raises(PretrainingDataError, match=f"fake://{remote}/out/theirs exists and create_pretraining"):
        create_pretraining_data_beam(theirs, IN_MEMORY)
    assert (remote / "out" / "theirs").read_bytes() == b"an object we did not write"
    os.remove(remote / "out" / "theirs")

    config = make_config(None, f"fake://{remote}/model.spm", [f"fake://{remote}/out/data"], input_files=files,
                         block_size_mb=0.01)
    summary = create_pretraining_data_beam(config, IN_MEMORY)
    assert (remote / "out" / "data").read_bytes() == local_out.read_bytes()
    assert summary["instances"] == local["instances"] > 0
    assert sorted(os.listdir(remote / "out")) == ["data", "data.summary.json"]  # temporaries removed
    check_outputs(config, "beam")  # a rerun may replace what this run wrote


def _cli(tmp_path, corpus, spm_model, *flags):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "create_pretraining_data.py"), f"--input_file={corpus}",
         f"--output_file={tmp_path / 'out' / 'data.tfrecord'}", f"--spm_model_file={spm_model}",
         "--max_seq_length=32", "--runner=beam", *flags],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


@pytest.mark.parametrize("options", [None, TWO_PROCESSES], ids=["default", "multi-processing-2"])
def test_cli_beam_data_error_is_one_line(tmp_path, spm_model, options):
    """A non-UTF-8 line under the runner the tool defaults to and under worker processes (which share its
    stderr): stderr is the local tool's file:line line and nothing else (no worker traceback, no Beam
    logs), exit 1, nothing written."""
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"A fine first sentence.\nAnother one here.\nBroken \xff\xfe bytes.\n\nNext doc.\nMore.\n")
    result = _cli(tmp_path, bad, spm_model, *([f"--beam_pipeline_options={options}"] if options else []))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"create_pretraining_data.py: error: {bad}:3: line is not valid UTF-8 (invalid start byte at byte 7); "
        f"fix the file or pass --skip_invalid_lines to count and skip such lines"], result.stderr[-3000:]
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_bad_pipeline_options_are_one_line_before_any_work(tmp_path, make_config, spm_model):
    """A value Beam's parser rejects, an option it does not know (a misspelt --runner would otherwise run
    the whole job on this machine) and unbalanced quotes: one line naming the option; in the CLI, exit 1
    instead of Beam's usage text and exit 2."""
    from albert_tf.pretraining_data.beam import checked_pipeline_options

    cases = {"--direct_num_workers=banana": "argument --direct_num_workers: invalid int value: 'banana'",
             "--runer=DataflowRunner --direct_num_workers=2": "Beam has no option --runer",
             "--runner='FnApiRunner": "No closing quotation"}
    for options, reason in cases.items():
        with pytest.raises(PretrainingDataError) as err:
            checked_pipeline_options(options)
        assert str(err.value) == f"--beam_pipeline_options={options!r}: {reason}"
    assert checked_pipeline_options(TWO_PROCESSES).get_all_options()["direct_num_workers"] == 2
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("One sentence here.\nAnd another.\n", encoding="utf-8")
    result = _cli(tmp_path, corpus, spm_model, "--beam_pipeline_options=--direct_num_workers=banana")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "create_pretraining_data.py: error: --beam_pipeline_options='--direct_num_workers=banana': "
        "argument --direct_num_workers: invalid int value: 'banana'"], result.stderr[-3000:]
    assert not (tmp_path / "out").exists()


def test_cli_beam_storage_out_of_room_is_the_local_line(tmp_path, shared, spm_model):
    """A write the storage refuses inside a Beam worker (here a file size limit: the worker's OSError
    reaches the runner as text) is the local runner's one line, not 115 lines of worker logs."""
    sample = shared("data", "corpus", "sample_text.txt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    command = " ".join([sys.executable, os.path.join(REPO, "create_pretraining_data.py"), f"--input_file={sample}",
                        f"--output_file={tmp_path / 'out' / 'data.tfrecord'}", f"--spm_model_file={spm_model}",
                        "--max_seq_length=128", "--dupe_factor=5", "--runner=beam"])
    # SIGXFSZ ignored, so that a write past 8 KiB fails with EFBIG instead of killing the process
    result = subprocess.run(["bash", "-c", f"trap '' XFSZ; ulimit -f 8; exec {command}"], capture_output=True,
                            text=True, timeout=300, cwd=REPO, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"create_pretraining_data.py: error: cannot write {tmp_path / 'out' / 'data.tfrecord'}")
    assert lines[0].endswith(": the file is larger than the file system allows")
