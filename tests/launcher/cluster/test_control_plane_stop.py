"""Stopping the control plane from a process that did not start it (tests/support/control_plane:
the last pytest-xdist worker to leave stops what the first one started). The components end as
zombies until their parent reaps them, and a zombie still answers ``kill(pid, 0)``: stop()
waited for them for ever (a fresh-clone .ci/run hung at the end of the suite)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from support.control_plane import ControlPlane

PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.argv[1], "600"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)  # alive, and never reaping its child
"""


@pytest.mark.timeout(60)
def test_stop_returns_when_another_process_is_the_components_parent(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "component").symlink_to(shutil.which("sleep"))  # one of "this build's programs"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "bin" / "component")], stdout=subprocess.PIPE, text=True
    )
    try:
        pid = int(parent.stdout.readline())
        plane = ControlPlane(tmp_path, tmp_path, pids={"component": pid})
        assert plane._alive("component")
        started = time.monotonic()
        plane.stop()
        assert time.monotonic() - started < 10
        assert not plane._alive("component") and plane.pids == {}
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.timeout(60)
def test_stop_leaves_alone_a_recorded_pid_that_runs_another_program(tmp_path):
    """After a reboot a recorded pid may be another program's: stop() does not signal it."""
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        plane = ControlPlane(tmp_path, tmp_path, pids={"component": other.pid})
        plane.stop()
        assert other.poll() is None  # still running
    finally:
        other.kill()
        other.wait()
