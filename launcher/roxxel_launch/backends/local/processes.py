"""Process groups of local workers: signal them, tell them apart, tie them to their supervisor.

Every worker runs in its own process group (see :mod:`roxxel_launch.backends.local.runtime`),
so a whole pod, with whatever its command started, is signalled as one.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path
from typing import IO

__all__ = ["LogEcho", "group_alive", "is_local_worker", "kill_group", "with_parent_death_signal"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def group_alive(pgid: int) -> bool:
    """True while process group ``pgid`` has a member (one we may not signal counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, signo: int = signal.SIGKILL) -> bool:
    """Signal a whole process group; False if it has no member left."""
    try:
        os.killpg(pgid, signo)
    except ProcessLookupError:
        return False
    return True


def is_local_worker(pid: int) -> bool:
    """True when ``pid`` is (still) a roxxel worker process (Linux: its command line); a pid
    recorded earlier may have been reused by an unrelated process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except OSError:
        return False
    return b"roxxel.worker" in cmdline or any(os.path.basename(arg) == b"roxxel-worker" for arg in cmdline)


# Run by each new worker process before it becomes ``python -m roxxel.worker``: ask Linux to
# SIGTERM it when the supervisor dies (PR_SET_PDEATHSIG survives execve), then exec. This
# runs in the new process rather than as a Popen preexec_fn, which would force a plain
# fork() of the supervisor, unsafe when the supervisor is multi-threaded (e.g. a process
# that has imported JAX and runs a foreground job).
_PDEATHSIG_SHIM = (
    "import ctypes, os, signal, sys\n"
    f"ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, int(signal.SIGTERM), 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"  # the supervisor died before prctl took effect
    "    os.kill(os.getpid(), signal.SIGTERM)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def with_parent_death_signal(python: str, cmd: list[str]) -> list[str]:
    """``cmd`` (starting with an absolute path) behind the parent-death shim, run by
    ``python``, on Linux; unchanged elsewhere."""
    if not sys.platform.startswith("linux"):
        return cmd
    return [python, "-S", "-c", _PDEATHSIG_SHIM, str(os.getpid()), *cmd]


# Gloo (JAX's CPU collectives) writes this to stdout from C++, with no switch to turn it off,
# once per communicator it sets up: start-up chatter when every peer answered (N == N).
_GLOO_ALL_CONNECTED = re.compile(
    rb"\[Gloo\] Rank \d+ is connected to (\d+) peer ranks\. Expected number of connected peer ranks is : \1"
)


class LogEcho:
    """Copies new complete lines of a growing log file to a stream, with a prefix.

    Gloo's line saying that a rank reached all its peers is left out (the log keeps it);
    one saying that some are missing is echoed.
    """

    def __init__(self, path: Path, prefix: str, out: IO[str]):
        self.path, self.prefix, self.out = path, prefix, out
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""

    def pump(self, *, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        lines = [line for line in lines if not _GLOO_ALL_CONNECTED.fullmatch(line.rstrip(b"\r"))]
        if lines:
            self.out.write("".join(f"{self.prefix}{line.decode('utf-8', errors='replace')}\n" for line in lines))
            self.out.flush()
