"""Checkpoint checksums: the values are pinned by an independent numpy definition (a
checkpoint saved by an earlier version must still verify), and arrays on different devices
are summed alike.

The sums are one small compiled program per array shape, reused by every array of that
shape (a model's layers repeat a few shapes). One program for the whole state was tried:
it compiles in time that grows faster than the number of arrays (200 arrays: 13 s), so a
large model's first save would wait far longer than for its few distinct shapes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

from roxxel.train import digest


def _reference(x) -> str:
    """The module docstring's definition, in numpy: both sums of the array's words, mod 2**32."""
    a = np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    words = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint32}[a.dtype.itemsize]
    w = np.ascontiguousarray(a).reshape(-1).view(words).astype(np.uint64)
    i = np.arange(w.size, dtype=np.uint64)
    first = int((w * (2 * i + 1)).sum() % 2**32)
    second = int((((w ^ ((i * 0x9E3779B1) % 2**32)) * 0x85EBCA6B) % 2**32).sum() % 2**32)
    return f"{first:08x}{second:08x}"


def _tree():
    rng = np.random.default_rng(0)
    return {
        "f32": jnp.asarray(rng.standard_normal((5, 7)), jnp.float32),
        "bf16": jnp.asarray(rng.standard_normal(9), jnp.bfloat16),
        "i8": np.arange(-5, 6, dtype=np.int8),
        "u16": np.arange(300, dtype=np.uint16),
        "bool": jnp.array([True, False, True]),
        "key": jax.random.key(3),
        "nested": {"scalar": np.float32(2.5), "ints": jnp.arange(12, dtype=jnp.int32).reshape(3, 4)},
        "python": 7,  # skipped: not an array
    }


def test_checksums_match_the_documented_definition():
    tree = _tree()
    got = digest.array_checksums(tree)
    want = {path: _reference(leaf) for path, leaf in digest.leaf_paths(tree) if path != "python"}
    assert got == want
    assert list(got) == list(want)  # in leaf order


def test_arrays_on_different_devices_are_summed_alike(tmp_path):
    """A state whose arrays live on different device sets (a step counter on one device, the
    weights sharded over a mesh): the same values give the same sums wherever they live."""
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from roxxel.train.digest import array_checksums
        mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
        tree = {"sharded": jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("data"))),
                "on_device_2": jax.device_put(jnp.arange(8.0), jax.devices()[2]),
                "host": np.arange(8, dtype=np.float32)}
        sums = array_checksums(tree)
        assert list(sums) == ["host", "on_device_2", "sharded"], sums  # leaf order (sorted keys)
        assert len(set(sums.values())) == 1, sums  # same values, wherever they live
        print(sums["host"])
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=3", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == _reference(np.arange(8, dtype=np.float32))
