"""./dev.sh refuses what it would misread, before it installs or runs anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from support.paths import REPO


@pytest.mark.parametrize("args", [["main", "--help"], ["main", "x"], ["lint", "--fix"], ["mian"], []])
def test_unknown_or_extra_arguments_are_a_usage_error(args, tmp_path):
    """`./dev.sh main --help` trained afresh and deleted the previous run (extra words were ignored)."""
    out = subprocess.run(
        ["bash", str(REPO / "dev.sh"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "PYTHON": "/nonexistent"},
    )  # a start would fail loudly
    assert out.returncode == 2, out.stdout + out.stderr
    assert "usage: ./dev.sh main" in out.stderr and out.stdout == ""


def test_help_prints_the_usage():
    out = subprocess.run(["bash", str(REPO / "dev.sh"), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("usage: ./dev.sh main")


def test_main_while_the_job_runs_suggests_suspend_which_keeps_the_resume(tmp_path):
    """Issue 51: it suggested `delete`, which removes what `resume` needs."""
    shutil.copy(REPO / "dev.sh", tmp_path)
    for name in ("pyproject.toml", "setup.py", "roxxel/format/_mapread.c", "examples/lm/prepare.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    os.symlink(sys.executable, bin_dir / "python")
    (bin_dir / "roxxel-launch").write_text('#!/bin/sh\necho "$*" >> calls\necho \'{"state": "Running"}\'\n')
    (bin_dir / "roxxel-launch").chmod(0o755)
    (tmp_path / ".venv" / ".roxxel-installed-main").write_text("")  # installed: no pip
    out = subprocess.run(["bash", str(tmp_path / "dev.sh"), "main"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "already running" in out.stderr and "roxxel-launch suspend lm --local" in out.stderr
    assert "delete" not in out.stderr
    assert (tmp_path / "calls").read_text() == "status lm --local --json\n"  # nothing stopped or removed
