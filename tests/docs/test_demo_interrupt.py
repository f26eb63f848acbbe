"""Ctrl-C during `make demo`: the running driver stops after its step, then the demo ends in one line with
the status of a process SIGINT ended (130), not a KeyboardInterrupt traceback; a folder it cannot write is
one line too."""
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A stand-in driver: stops cleanly on the first SIGINT as the real ones do (a checkpoint, then 130).
SLOW_DRIVER = textwrap.dedent("""
    import signal, sys, time
    stopped = []
    signal.signal(signal.SIGINT, lambda *_: stopped.append(1))
    print("step 1/100: loss = 1.0", flush=True)
    while not stopped:
        time.sleep(0.05)
    time.sleep(0.5)  # finishing its step and writing a checkpoint
    open("stopped-cleanly", "w").close()
    sys.exit(130)
""")


def _start_demo_step(tmp_path, driver: str, default_signal: int) -> tuple[subprocess.Popen, str]:
    """Runs the demo's ``driver`` step (a stand-in script in ``tmp_path``) in its own session, with
    ``default_signal`` at its default handler (also when the suite runs under nohup, which ignores SIGHUP),
    and reads its output up to the driver's first step line (returned; empty if the demo ended first)."""
    script = tmp_path / "demo_step.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {REPO!r})  # this checkout's albert_tf
        from albert_tf import demo
        demo.REPO = {str(tmp_path)!r}
        demo.Demo({str(tmp_path / "out")!r}, quick=True).driver({driver!r})
    """))
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(default_signal, signal.SIG_DFL))
    line = process.stdout.readline()
    while line and "step 1/100" not in line:
        line = process.stdout.readline()
    return process, line


def test_ctrl_c_waits_for_the_driver_and_ends_in_one_line(tmp_path):
    (tmp_path / "slow_driver.py").write_text(SLOW_DRIVER)
    script = tmp_path / "demo_step.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {REPO!r})  # this checkout's albert_tf
        from albert_tf import demo
        demo.REPO = {str(tmp_path)!r}
        runner = demo.Demo({str(tmp_path / "out")!r}, quick=True)
        try:
            runner.driver("slow_driver.py")
        except KeyboardInterrupt:
            sys.exit("KeyboardInterrupt escaped")
    """))
    # Its own group, as a terminal's job: Ctrl-C reaches the demo and its driver. SIGINT at its default, so
    # that Python turns it into KeyboardInterrupt even when this test runs in a background job (which ignores it).
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = process.stdout.readline()
    deadline = time.time() + 120
    while "step 1/100" not in line and time.time() < deadline:
        line = process.stdout.readline()
    assert "step 1/100" in line, process.stderr.read()
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert (tmp_path / "out" / "stopped-cleanly").exists()  # the demo waited for the driver's own stop
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"demo: interrupted during slow_driver.py: the outputs so far are in {tmp_path / 'out'}")


def test_sigint_to_the_demo_alone_is_passed_on_to_its_driver(tmp_path):
    """`kill -INT <demo pid>` from a script or a scheduler reaches the demo only, not its process group: the
    demo passes it on, so the driver stops after its step (instead of running to its end) and the demo ends in
    one line with 130."""
    (tmp_path / "slow_driver.py").write_text(
        "import os\nopen('driver.pid', 'w').write(str(os.getpid()))\n" + SLOW_DRIVER)
    process, line = _start_demo_step(tmp_path, "slow_driver.py", signal.SIGINT)
    try:
        assert "step 1/100" in line, process.stderr.read()
        os.kill(process.pid, signal.SIGINT)  # the demo's pid only
        stdout, stderr = process.communicate(timeout=120)  # the driver alone never ends: a hang fails here
    except BaseException:  # leave no demo or driver running
        driver = tmp_path / "out" / "driver.pid"
        for pid in (process.pid, *([int(driver.read_text())] if driver.exists() else [])):
            os.kill(pid, signal.SIGKILL)
        raise
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert (tmp_path / "out" / "stopped-cleanly").exists()  # the driver's own stop, after its step
    assert stderr.strip().splitlines()[-1].startswith(
        f"demo: interrupted during slow_driver.py: the outputs so far are in {tmp_path / 'out'}"), stderr


# A stand-in driver that stops cleanly on SIGTERM, as the real ones do (a checkpoint, then 143).
TERM_DRIVER = textwrap.dedent("""
    import os, signal, sys, time
    open("driver.pid", "w").write(str(os.getpid()))
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
    print("step 1/100: loss = 1.0", flush=True)
    while not stopped:
        time.sleep(0.05)
    open("stopped-cleanly", "w").close()
    sys.exit(143)
""")


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_to_the_demos_group_stops_its_driver_too(tmp_path, sent):
    """`timeout`, a scheduler's group kill or a closed terminal signal the demo's process group. The driver
    runs in its own session (so that Ctrl-C reaches it once, through the demo): the demo died and the driver
    went on training, orphaned. Now the demo passes it on (SIGHUP as SIGTERM, the drivers' clean stop), waits
    for the driver's stop and ends with the status of a process that signal ended."""
    (tmp_path / "term_driver.py").write_text(TERM_DRIVER)
    process, line = _start_demo_step(tmp_path, "term_driver.py", sent)
    driver = tmp_path / "out" / "driver.pid"
    try:
        assert "step 1/100" in line, process.stderr.read()
        os.killpg(process.pid, sent)
        stdout, stderr = process.communicate(timeout=120)
        assert (tmp_path / "out" / "stopped-cleanly").exists(), stderr  # the driver stopped, not orphaned
    finally:  # leave no demo or driver running
        for pid in (process.pid, *([int(driver.read_text())] if driver.exists() else [])):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert process.returncode == 128 + sent, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith(
        f"demo: interrupted during term_driver.py: the outputs so far are in {tmp_path / 'out'}"), stderr


def test_an_output_folder_it_cannot_create_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    done = subprocess.run([sys.executable, "-m", "albert_tf.demo", f"--output_dir={tmp_path / 'a_file' / 'out'}"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("demo: error: [Errno 20] Not a directory"), done.stderr
    assert "Traceback" not in done.stderr
