"""Fixtures shared by the LM example's tests."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO


@pytest.fixture(scope="session")
def lm_data(tmp_path_factory) -> Path:
    """The LM example's datasets (code, code-eval, text), packed once by examples/lm/prepare.py
    for every test that trains on them: the tests only read them."""
    data = tmp_path_factory.mktemp("lm") / "data"
    subprocess.run([sys.executable, "examples/lm/prepare.py", str(data)], cwd=REPO, check=True,
                   capture_output=True, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=600)
    return data
