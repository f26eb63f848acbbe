"""Ctrl-C while a driver is outside its training loop (features, prediction, export, conversion): one line and
exit status 130, as the training loop's own stop; it was a KeyboardInterrupt traceback."""
import os
import signal

from albert_tf.cli import reports_errors


def test_ctrl_c_outside_training_is_one_line_and_130(capsys, sigint_raises):
    written = []

    def main(argv):
        written.append("started")
        os.kill(os.getpid(), signal.SIGINT)  # Python raises KeyboardInterrupt here, as at a terminal's Ctrl-C
        written.append("not reached")
        return 0

    status = reports_errors(main)(["driver"])
    assert status == 128 + signal.SIGINT and written == ["started"]
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "interrupted (SIGINT) before it finished" in err and "rerun the same command" in err


def test_other_errors_keep_their_ways(capsys):
    """A user error is still its one line with status 1; a bug still raises (its traceback shows)."""
    def bad_flag(argv):
        raise ValueError("--max_seq_length must be positive, got 0")

    assert reports_errors(bad_flag)(["driver"]) == 1
    assert capsys.readouterr().err.strip().endswith("error: --max_seq_length must be positive, got 0")

    def bug(argv):
        raise ZeroDivisionError("a bug")

    try:
        reports_errors(bug)(["driver"])
    except ZeroDivisionError:
        pass
    else:
        raise AssertionError("a bug's exception was swallowed")
