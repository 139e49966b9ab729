"""bench/run.py behaves like a normal CLI: --help lists the benchmarks, an unknown name is a usage error."""

import subprocess
import sys

from support.paths import REPO

RUN = REPO / "bench" / "run.py"


def run(*args):
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True, timeout=60)


def test_help_lists_the_benchmarks_and_runs_nothing():
    r = run("--help")
    assert r.returncode == 0
    assert "stream" in r.stdout and "pack" in r.stdout and "===" not in r.stdout


def test_an_unknown_benchmark_is_a_usage_error_naming_the_choices():
    r = run("stream", "nosuch")
    assert r.returncode == 2
    assert "unknown benchmark 'nosuch'" in r.stderr and "stream" in r.stderr and "===" not in r.stdout
