"""roxxel-worker: exit codes pass through, signals are forwarded, usage errors are clear."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from roxxel import exit_codes, worker

WORKER = [sys.executable, "-m", "roxxel.worker"]
TIMEOUT = 30  # seconds; a generous bound on each wait, not a synchronisation mechanism


def _child(tmp_path: Path, *parts: str) -> list[str]:
    """A small Python child script made of ``parts`` (each dedented); it may write ``READY``, ``MARK``."""
    script = tmp_path / "child.py"
    header = f"import os, signal, sys, time\nREADY = {str(tmp_path / 'ready')!r}\nMARK = {str(tmp_path / 'mark')!r}\n"
    script.write_text(header + "".join(textwrap.dedent(part) for part in parts))
    return [sys.executable, str(script)]


def _start(cmd: list[str], **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen(WORKER + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"worker exited with {proc.returncode} before {path.name} appeared:\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path.name} did not appear within {TIMEOUT}s")
        time.sleep(0.01)


WAIT_FOREVER = f"""
    open(READY, "w").close()
    deadline = time.monotonic() + {TIMEOUT}  # bounded, so that a lost signal fails instead of hanging
    while time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(99)
"""


@pytest.mark.parametrize("code", [0, 3, exit_codes.PREEMPTED_EXIT_CODE])
def test_exit_code_passes_through(tmp_path, code):
    proc = _start(_child(tmp_path, f"sys.exit({code})"))
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == code, err


def test_child_killed_by_sigkill_gives_137(tmp_path):
    proc = _start(_child(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)"))
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 128 + signal.SIGKILL == 137
    assert "killed by SIGKILL" in err


def test_sigterm_is_forwarded_to_a_child_that_checkpoints(tmp_path):
    cmd = _child(
        tmp_path,
        """
        def on_term(signo, frame):
            with open(MARK, "w") as f:
                f.write(signal.Signals(signo).name)
            sys.exit(42)
        signal.signal(signal.SIGTERM, on_term)
        """,
        WAIT_FOREVER,
    )
    proc = _start(cmd)
    _wait_for(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == exit_codes.PREEMPTED_EXIT_CODE, err
    assert (tmp_path / "mark").read_text() == "SIGTERM"
    assert "forwarding SIGTERM" in err


def test_sigterm_to_a_child_that_does_not_trap_it_gives_143(tmp_path):
    proc = _start(_child(tmp_path, WAIT_FOREVER))
    _wait_for(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 143, err


def test_a_child_that_ignores_sigterm_is_killed_at_the_end_of_its_grace_period(tmp_path):
    """A process blocked in a collective (its peer gone) never reaches the agreed step: JAX's
    notifier holds SIGTERM and the pod waited the whole grace period for the kubelet's SIGKILL
    (observed: over 30 s with the worker image). The worker now ends it at the grace period
    (ROXXEL_TERMINATION_GRACE_S, rendered from the spec) less 5 s (a quarter of a shorter one),
    and says so: 143."""
    cmd = _child(tmp_path, "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n", WAIT_FOREVER)
    proc = _start(cmd, env={**os.environ, "ROXXEL_TERMINATION_GRACE_S": "7"})
    _wait_for(tmp_path / "ready", proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TIMEOUT)
    took = time.monotonic() - sent
    assert proc.returncode == 143, err
    assert "did not exit within 5 s of SIGTERM" in err and "killing it (SIGKILL)" in err, err
    assert 4.5 < took < TIMEOUT - 5, took  # the bound (7 s less a quarter), not the child's own 30 s


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGHUP, signal.SIGUSR1])
def test_other_signals_are_forwarded(tmp_path, signo):
    cmd = _child(
        tmp_path,
        f"""
        def on_signal(signo, frame):
            with open(MARK, "w") as f:
                f.write(signal.Signals(signo).name)
            sys.exit(7)
        signal.signal({int(signo)}, on_signal)
        """,
        WAIT_FOREVER,
    )
    proc = _start(cmd)
    _wait_for(tmp_path / "ready", proc)
    proc.send_signal(signo)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 7, err
    assert (tmp_path / "mark").read_text() == signo.name


def test_child_gets_unbuffered_python_and_the_worker_logs_identity(tmp_path):
    cmd = _child(tmp_path, "print(os.environ.get('PYTHONUNBUFFERED'))")
    env = {
        **os.environ,
        "ROXXEL_NUM_PROCESSES": "2",
        "ROXXEL_PROCESS_ID": "1",
        "ROXXEL_COORDINATOR_ADDRESS": "host-0.svc:8476",
    }
    env.pop("PYTHONUNBUFFERED", None)
    proc = _start(cmd, env=env)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    assert out.strip() == "1"
    assert "process 1 of 2 (source=roxxel, coordinator=host-0.svc:8476)" in err


def test_inconsistent_environment_is_a_warning_not_a_failure(tmp_path):
    env = {**os.environ, "JOB_INDEX": "1"}
    proc = _start(_child(tmp_path, "sys.exit(0)"), env=env)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0
    assert "WARNING" in err and "ROXXEL_HOSTS_PER_SLICE" in err


@pytest.mark.parametrize("args", [[], ["--"], ["--bogus", "x"]])
def test_usage_error_exits_2(args):
    proc = subprocess.run(WORKER + args, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == exit_codes.USAGE_ERROR == 2
    assert "usage: roxxel-worker" in proc.stderr
    assert "error:" in proc.stderr


def test_double_dash_allows_a_command_that_looks_like_an_option(tmp_path):
    script = tmp_path / "-dash.py"
    script.write_text("import sys; sys.exit(5)")
    proc = subprocess.run(WORKER + ["--", sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 5, proc.stderr


def test_missing_command_is_a_configuration_error():
    # A shell would exit 127, which a pod failure policy retries: every gang restart of
    # the same image would fail alike, so the worker exits 78 and the job fails at once.
    proc = subprocess.run(
        WORKER + ["roxxel-no-such-command-xyz", "arg"], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == exit_codes.CONFIG_ERROR_EXIT_CODE == 78
    assert "roxxel-no-such-command-xyz: command not found; exit 78" in proc.stderr


@pytest.mark.parametrize("args", [["nope.py"], ["-u", "nope.py", "--lr", "1"], ["-W", "error", "nope.py"]])
def test_a_missing_python_script_is_a_configuration_error(args):
    """Python exits 2 for a script it cannot open; the launcher restarted the gang max_restarts times."""
    proc = subprocess.run(WORKER + [sys.executable, *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == exit_codes.CONFIG_ERROR_EXIT_CODE, proc.stderr
    assert "can't open file 'nope.py'" in proc.stderr and "not restarted" in proc.stderr


def test_python_without_a_script_file_still_runs(tmp_path):
    """-c, -m and a directory with __main__.py name no missing file: they run as before."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("raise SystemExit(4)")
    for args, code in (
        [["-c", "raise SystemExit(3)"], 3],
        [["-m", "json.tool", "--help"], 0],
        [[str(tmp_path / "app")], 4],
    ):
        proc = subprocess.run(WORKER + [sys.executable, *args], capture_output=True, text=True, timeout=TIMEOUT)
        assert proc.returncode == code, (args, proc.stderr)


def test_non_executable_command_is_a_configuration_error(tmp_path):
    target = tmp_path / "not-executable"
    target.write_text("#!/bin/sh\nexit 0\n")
    proc = subprocess.run(WORKER + [str(target)], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == exit_codes.CONFIG_ERROR_EXIT_CODE
    assert "cannot execute" in proc.stderr


def test_console_script_is_installed(tmp_path):
    script = Path(sys.executable).with_name("roxxel-worker")
    if not script.exists():
        script = shutil.which("roxxel-worker")
        if script is None:
            pytest.skip("roxxel-worker console script not installed")
    proc = subprocess.run(
        [str(script), sys.executable, "-c", "raise SystemExit(3)"], capture_output=True, timeout=TIMEOUT
    )
    assert proc.returncode == 3


# Makes stdin (the pty) the controlling terminal of the new session, then becomes the worker. A
# preexec_fn would do it in the forked child, but a preexec_fn makes subprocess run Python's
# fork hooks, and JAX's (loaded by other tests in this process) warns that fork() may deadlock.
_CONTROLLING_TERMINAL = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"
)


def test_terminal_sigint_is_not_delivered_twice(tmp_path):
    """Ctrl-C reaches the whole foreground process group; the worker must not resend it."""
    if not hasattr(signal, "sigwaitinfo"):
        pytest.skip("sigwaitinfo-based forwarding is Linux only")
    import pty

    cmd = _child(
        tmp_path,
        """
        count = 0
        def on_int(signo, frame):
            global count
            count += 1
            open(MARK, "w").close()
        signal.signal(signal.SIGINT, on_int)
        open(READY, "w").close()
        while not os.path.exists(MARK):  # polled: a SIGINT between the check and a pause() would be lost
            time.sleep(0.01)
        # Give a duplicate (forwarded) SIGINT time to arrive; it would be counted.
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(10 + count)
        """,
    )
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CONTROLLING_TERMINAL, *WORKER, *cmd],
            stdin=slave,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        _wait_for(tmp_path / "ready", proc)
        os.write(master, b"\x03")  # the terminal turns ^C into SIGINT for its foreground group
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 11, err
    assert "came from the terminal" in err


def test_as_pid_1_the_worker_reaps_orphans(tmp_path):
    """In a container the worker is PID 1: orphaned grandchildren must not stay zombies."""
    unshare = shutil.which("unshare")
    probe = unshare and subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=TIMEOUT
    )
    if not probe or probe.returncode != 0:
        pytest.skip("needs unshare --pid (root or user namespaces)")
    cmd = _child(
        tmp_path,
        """
        pid = os.fork()
        if pid == 0:  # middle process: start the grandchild and exit, orphaning it
            if os.fork() == 0:
                with open(MARK, "w") as f:
                    f.write(str(os.getpid()))
            os._exit(0)
        os.waitpid(pid, 0)
        while not os.path.exists(MARK) or not open(MARK).read():
            time.sleep(0.01)
        orphan = int(open(MARK).read())
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{orphan}") and time.monotonic() < deadline:
            time.sleep(0.01)  # a zombie keeps its /proc entry until its parent reaps it
        sys.exit(0 if not os.path.exists(f"/proc/{orphan}") else 1)
        """,
    )
    proc = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", *WORKER, *cmd], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr


def test_handler_fallback_forwards_signals(tmp_path, monkeypatch):
    """The path used where sigwaitinfo is missing (macOS), run in this process."""
    cmd = _child(tmp_path, "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n", WAIT_FOREVER)
    monkeypatch.delattr(signal, "sigwaitinfo")

    def send_when_ready():
        deadline = time.monotonic() + TIMEOUT
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)  # handled by the worker's handler, in the main thread

    previous = signal.getsignal(signal.SIGTERM)
    sender = threading.Thread(target=send_when_ready)
    sender.start()
    try:
        code = worker.run(cmd)
    finally:
        sender.join()
    assert code == exit_codes.PREEMPTED_EXIT_CODE
    assert signal.getsignal(signal.SIGTERM) is previous


def test_exit_code_helpers():
    assert exit_codes.from_returncode(0) == 0
    assert exit_codes.from_returncode(42) == 42
    assert exit_codes.from_returncode(-signal.SIGTERM) == 143
    assert exit_codes.describe(143) == "killed by SIGTERM"
    assert exit_codes.describe(42).startswith("preempted")
    assert exit_codes.describe(1) == "failed"


@pytest.mark.parametrize(
    "raised, code",
    [
        ("RunMismatchError('phases[0].batch_size: 32 -> 16', step=40, changes=[], saved=None, current=None)", 78),
        ("BatchShardingError('phase 0: each micro-batch of 31 rows must split evenly over the 2 data shards')", 78),
        ("CurriculumError('phase 0 asks for 2000 steps ... the data can give only 576 steps there')", 78),
        ("CheckpointOwnerError('checkpoint directory /c belongs to run lm, not to this run b')", 78),
        ("ConfigValueError('log_every must be a positive int, got 0')", 78),
        ("ValueError('an ordinary bug')", 1),
    ],
)
def test_an_uncaught_configuration_error_makes_the_worker_exit_78(tmp_path, raised, code):
    """Found by a new user's pass: a batch that does not split over the devices, or a resume with a
    changed batch size, exited 1 and the job was restarted (the whole gang, max_restarts times)
    for an error every attempt hits; the docs promise 78 (not restarted). Any uncaught
    ConfigurationError in the command now reaches roxxel-worker, which exits 78; other failures
    pass through as before, and outside roxxel-worker nothing changes."""
    child = _child(
        tmp_path,
        f"""
        from roxxel.sharding import BatchShardingError
        from roxxel.data.curriculum import CurriculumError
        from roxxel.exit_codes import ConfigValueError
        from roxxel.train.checkpoint import CheckpointOwnerError, RunMismatchError
        raise {raised}
    """,
    )
    proc = _start(child)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert ("configuration error (exit code 78, not restarted; the command exited with 1)" in err) == (code == 78), err
    assert "Traceback" in err  # the child's own report is kept
    alone = subprocess.run(child, capture_output=True, text=True, timeout=120)
    assert alone.returncode == 1  # a library error stays an exception: no hook without roxxel-worker


@pytest.mark.parametrize("damage", ["truncate", "remove"])
def test_a_damaged_or_missing_shard_makes_the_worker_exit_78(tmp_path, damage):
    """A truncated or missing shard is a property of the data: every attempt would meet it.
    It was a plain ValueError / FileNotFoundError (exit 1, a gang restart each time). Real
    shards, packed here, then damaged; the training command opens the dataset."""
    from support.lm import make_dataset

    data = tmp_path / "data"
    make_dataset(str(data))
    shard = sorted(data.glob("*.rox"))[0]
    if damage == "truncate":
        with open(shard, "r+b") as f:
            f.truncate(shard.stat().st_size // 2)
    else:
        shard.unlink()
    child = _child(
        tmp_path,
        f"""
        from roxxel import Roxxel
        for batch in Roxxel({str(data)!r}).stream(seq_len=64, batch_size=32, seed=0):
            pass
    """,
    )
    proc = _start(child)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 78, err
    assert "configuration error (exit code 78, not restarted" in err and shard.name in err, err
