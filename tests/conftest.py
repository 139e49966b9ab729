import os
import pathlib

import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.fixture
def seed_dir() -> pathlib.Path:
    """Shards written by the original Roxxel 0.9.14 (see fixtures/README.md)."""
    return FIXTURES / "seed-format"


def pytest_configure(config):
    # Tests run JAX on the CPU; keep them off any accelerator and quiet.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
