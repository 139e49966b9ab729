"""./dev.sh refuses what it would misread, before it installs or runs anything."""

from __future__ import annotations

import subprocess

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
