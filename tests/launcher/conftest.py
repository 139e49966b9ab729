"""Fixtures of the local pod's multi-host training tests (netns, liveness): the data, one
JAX compilation cache per module, and the reference parameters of an undisturbed run."""

from __future__ import annotations

import pathlib

import pytest

from support.local_job import Job


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> pathlib.Path:
    from support.lm import make_dataset

    path = tmp_path_factory.mktemp("netns-data") / "json"
    make_dataset(str(path))
    return path


@pytest.fixture(scope="module")
def jax_cache(tmp_path_factory) -> pathlib.Path:
    """One persistent compilation cache for the module's runs: the same executables, compiled once."""
    return tmp_path_factory.mktemp("jax-cache")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data, jax_cache) -> dict[int, pathlib.Path]:
    """Final parameters of the job on loopback, by process count (computed when first asked)."""
    out: dict[int, pathlib.Path] = {}

    def get(hosts: int) -> pathlib.Path:
        if hosts not in out:
            job = Job(tmp_path_factory.mktemp(f"loopback{hosts}"), data, jax_cache, f"loop{hosts}", hosts)
            job.run()
            assert job.status()["attempts"][0]["coordinator_address"].startswith("127.0.0.1:")
            out[hosts] = job.params
        return out[hosts]

    return get
