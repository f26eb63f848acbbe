"""Inputs that cannot be read, and outputs that cannot be written, are one line naming the file:
a damaged SentencePiece model, a vocab.txt or albert_config.json that is not UTF-8, a full disk
under an output (the error of a write names no file by itself)."""
import errno

import pytest

from albert_tf.cli import error_line
from albert_tf.config import AlbertConfig, ConfigError
from albert_tf.fileio import atomic_write_text, atomic_write_texts
from albert_tf.vocab_check import check_tokenizer


def test_a_damaged_sentencepiece_model_is_named(shared, tmp_path):
    damaged = tmp_path / "30k-clean.model"
    damaged.write_bytes(shared("data", "spm", "30k-clean.model").read_bytes()[:1000])  # a cut download
    with pytest.raises(ValueError) as err:
        check_tokenizer(str(damaged), None, 30000, "albert_config.json")
    assert error_line(err.value).startswith(f"{damaged} is not a SentencePiece model")
    assert "\n" not in error_line(err.value)


def test_a_vocab_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(b"[PAD]\n[UNK]\ncaf\xe9\n")  # Latin-1
    with pytest.raises(ValueError, match=f"--vocab_file={vocab}:3: not UTF-8 text"):
        check_tokenizer(None, str(vocab), 3, "albert_config.json")


def test_a_config_that_is_not_utf8_is_named(tmp_path):
    config = tmp_path / "albert_config.json"
    config.write_bytes(b'{"vocab_size": 30000, "note": "\xff"}')
    with pytest.raises(ConfigError, match=f"{config}: not UTF-8 text .* at byte offset 31"):
        AlbertConfig.from_json_file(str(config))


@pytest.mark.parametrize("write", ["one", "together"])
def test_a_full_disk_names_the_output(tmp_path, monkeypatch, write):
    target = tmp_path / "test_results.tsv"
    real_open = open

    def open_on_a_full_disk(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if "w" in mode:
            f.write = lambda text: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
        return f

    monkeypatch.setattr("builtins.open", open_on_a_full_disk)
    with pytest.raises(OSError) as err:
        if write == "one":
            atomic_write_text(target, "x\n")
        else:
            atomic_write_texts({target: "x\n"})
    monkeypatch.undo()
    assert err.value.errno == errno.ENOSPC
    assert error_line(err.value) == f"[Errno 28] No space left on device: '{target}'"
    assert list(tmp_path.iterdir()) == []  # no temporary left behind


def _replace_refused_for(refused):
    """os.replace, refusing (as for an immutable file) to replace ``refused``."""
    import os

    real_replace = os.replace

    def replace(src, dst):
        if os.fspath(dst) == str(refused):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        real_replace(src, dst)
    return replace


@pytest.mark.parametrize("before", ["both there", "none there"])
def test_a_refused_rename_leaves_every_file_of_the_set_as_it_was(tmp_path, monkeypatch, before):
    """test_results.tsv immutable (chattr +i), or another user's in a sticky folder: its rename fails after
    submit_results.tsv's was done, which left one file new and one old. Now both stay as they were."""
    import os

    first, second = tmp_path / "test_results.tsv", tmp_path / "submit_results.tsv"
    if before == "both there":
        first.write_text("old test\n")
        second.write_text("old submit\n")
    monkeypatch.setattr(os, "replace", _replace_refused_for(first))
    with pytest.raises(OSError) as err:
        atomic_write_texts({first: "new test\n", second: "new submit\n"})
    monkeypatch.undo()
    assert error_line(err.value) == f"[Errno 1] Operation not permitted: '{first}'"
    if before == "both there":
        assert (first.read_text(), second.read_text()) == ("old test\n", "old submit\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["submit_results.tsv", "test_results.tsv"]
    else:
        assert list(tmp_path.iterdir()) == []  # no half of the set, no temporary, no second name left


def test_a_refused_rename_puts_back_files_on_a_file_system_without_hard_links(tmp_path, monkeypatch):
    """exFAT, SMB or a FUSE mount refuse a hard link (EPERM), which was the only way an earlier file was kept
    for putting back: a refused rename left submit_results.tsv new beside an old test_results.tsv. A copy
    keeps it there; a file never renamed stays the very file it was (not its copy); a successful write leaves
    no copy behind."""
    import os

    first, second = tmp_path / "test_results.tsv", tmp_path / "submit_results.tsv"
    untouched = tmp_path / "null_odds.json"  # renamed after the refused one: never replaced
    first.write_text("old test\n")
    second.write_text("old submit\n")
    untouched.write_text("old odds\n")
    second.chmod(0o640)
    untouched_inode = untouched.stat().st_ino

    def no_hard_links(src, dst, *args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    real_replace = os.replace
    monkeypatch.setattr(os, "link", no_hard_links)
    monkeypatch.setattr(os, "replace", _replace_refused_for(first))
    with pytest.raises(OSError):  # the last written is renamed first
        atomic_write_texts({untouched: "new odds\n", first: "new test\n", second: "new submit\n"})
    monkeypatch.setattr(os, "replace", real_replace)
    assert (first.read_text(), second.read_text(), untouched.read_text()) == ("old test\n", "old submit\n",
                                                                              "old odds\n")
    assert second.stat().st_mode & 0o777 == 0o640
    assert untouched.stat().st_ino == untouched_inode
    names = ["null_odds.json", "submit_results.tsv", "test_results.tsv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    atomic_write_texts({untouched: "new odds\n", first: "new test\n", second: "new submit\n"})
    assert (first.read_text(), second.read_text()) == ("new test\n", "new submit\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == names
