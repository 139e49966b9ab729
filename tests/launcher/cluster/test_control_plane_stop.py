"""Stopping the control plane from a process that did not start it (tests/support/control_plane:
the last pytest-xdist worker to leave stops what the first one started). The components end as
zombies until their parent reaps them, and a zombie still answers ``kill(pid, 0)``: stop()
waited for them for ever (a fresh-clone .ci/run hung at the end of the suite)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from support.control_plane import ControlPlane

PARENT = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "600"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)  # alive, and never reaping its child
"""


@pytest.mark.timeout(60)
def test_stop_returns_when_another_process_is_the_components_parent(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        plane = ControlPlane(tmp_path, tmp_path, pids={"component": pid})
        assert plane._alive("component")
        started = time.monotonic()
        plane.stop()
        assert time.monotonic() - started < 10
        assert plane.pids == {}
    finally:
        parent.kill()
        parent.wait()
