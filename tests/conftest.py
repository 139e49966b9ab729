import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

from support.shared import made_once

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def seed_dir() -> pathlib.Path:
    """Shards written by the original Roxxel 0.9.14 (see fixtures/README.md)."""
    return FIXTURES / "seed-format"


@pytest.fixture(scope="module")
def gcs_emulator(tmp_path_factory):
    """A GCS emulator (tests/support/gcs_emulator.py) serving the bucket ``roxxel-test``
    for this module: the environment a process needs to reach it (``client_env``)."""
    pytest.importorskip("gcp_storage_emulator", reason="gcp-storage-emulator is not installed")
    pytest.importorskip("gcsfs", reason="gcsfs (epath's gs:// backend without TensorFlow) is not installed")
    import support.gcs_emulator as wrapper

    try:
        proc, url = wrapper.start(tmp_path_factory.mktemp("gcs") / "emulator.log", wrapper.TEST_BUCKET)
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        yield wrapper.client_env(url)
    finally:
        wrapper.stop(proc)


_JAX_CACHE: tempfile.TemporaryDirectory | None = None


@pytest.fixture(scope="session")
def lm_data(tmp_path_factory) -> pathlib.Path:
    """The LM example's tokenizer and datasets (code, code-eval, text), made once by
    examples/lm/prepare.py for every test that trains on them: the tests only read them.

    Made once for the whole run, not once per pytest-xdist worker: the workers share the
    directory above their own temporary roots, and a lock lets one pack (BPE packing takes
    ~20 s of both cores) while the other waits, then finds it packed.
    """
    with made_once(tmp_path_factory, "lm-data") as data:
        if not all((data / name / "dataset.json").exists() for name in ("code", "code-eval", "text")):
            subprocess.run(
                [sys.executable, "examples/lm/prepare.py", str(data)],
                cwd=REPO,
                check=True,
                capture_output=True,
                env=dict(os.environ, JAX_PLATFORMS="cpu"),
                timeout=600,
            )
    return data


def pytest_configure(config):
    # Tests run JAX on the CPU; keep them off any accelerator and quiet.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _share_jax_compilations()


def _share_jax_compilations() -> None:
    """One persistent compilation cache for this test run, in a fresh temporary directory:
    the suite compiles the same few programs (the tiny LM's train step, mostly) hundreds of
    times, in this process and in the workers it spawns (they inherit the environment).
    Cached executables are the compiled code itself, so results stay bitwise the same; a
    fresh directory per run keeps runs independent. JAX reads these variables when imported;
    ``jax.config`` covers a JAX already imported by a plugin."""
    global _JAX_CACHE
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:  # the caller chose one
        return
    _JAX_CACHE = tempfile.TemporaryDirectory(prefix="roxxel-tests-jax-cache-")
    settings = {
        "JAX_COMPILATION_CACHE_DIR": _JAX_CACHE.name,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    os.environ.update(settings)
    if "jax" in sys.modules:
        import jax

        jax.config.update("jax_compilation_cache_dir", _JAX_CACHE.name)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_unconfigure(config):
    if _JAX_CACHE is not None:
        _JAX_CACHE.cleanup()
