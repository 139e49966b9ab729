"""Fixtures shared by the LM example's tests."""

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO


@pytest.fixture(scope="session")
def lm_data(tmp_path_factory) -> Path:
    """The LM example's tokenizer and datasets (code, code-eval, text), made once by
    examples/lm/prepare.py for every test that trains on them: the tests only read them.

    Made once for the whole run, not once per pytest-xdist worker: the workers share the
    directory above their own temporary roots, and a lock lets one pack (BPE packing takes
    ~20 s of both cores) while the other waits, then finds it packed.
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # pytest-xdist: each worker's basetemp is a folder of the run's
    data = shared / "lm-data"
    with open(shared / "lm-data.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on an error
        if not all((data / name / "dataset.json").exists() for name in ("code", "code-eval", "text")):
            subprocess.run([sys.executable, "examples/lm/prepare.py", str(data)], cwd=REPO, check=True,
                           capture_output=True, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=600)
    return data
