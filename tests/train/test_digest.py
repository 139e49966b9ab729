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
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_save_sums_arrays_on_cpu_devices_with_numpy_to_the_same_values():
    """A save's layout (``host=True``) sums the arrays on CPU devices in numpy from views
    taken at plan time: the values are the device programs' (and the definition's), and no
    device program is dispatched for them. PRNG keys and numpy leaves stay with the device
    programs (numpy leaves are summed as JAX converts them, as the restore sums them)."""
    tree = _tree()
    want = digest.array_checksums(tree)
    layout = digest.ChecksumLayout(tree, host=True)
    calls = []
    real = digest._checksums

    def counted(*xs):
        calls.append(len(xs))
        return real(*xs)

    digest._checksums, saved = counted, digest._checksums
    try:
        got = layout.plan(jax.tree.leaves(tree)).dispatch().read()
    finally:
        digest._checksums = saved
    assert got == want and list(got) == list(want)
    assert sorted(calls) == [1, 3]  # the PRNG key; the numpy leaves i8, u16 and nested/scalar


def _block_reference(global_array: np.ndarray, index) -> tuple[int, int]:
    """The block's share by the definition: the global array's terms, zero outside the block."""
    a = global_array.astype(np.uint8) if global_array.dtype == np.bool_ else global_array
    words = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint32}[a.dtype.itemsize]
    per_item = 2 if a.dtype.itemsize == 8 else 1
    inside = np.zeros(a.shape, bool)
    inside[index] = True
    w = np.ascontiguousarray(a).reshape(-1).view(words).astype(np.uint64)
    keep = np.repeat(inside.reshape(-1), per_item)
    i = np.arange(w.size, dtype=np.uint64)
    first = int((w * (2 * i + 1))[keep].sum() % 2**32)
    second = int((((w ^ ((i * 0x9E3779B1) % 2**32)) * 0x85EBCA6B) % 2**32)[keep].sum() % 2**32)
    return first, second


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 7), min_size=0, max_size=4),
    dtype=st.sampled_from([np.float32, np.int8, np.uint16, np.float16, np.bool_, np.int64, np.float64, np.int32]),
    cut=st.data(),
)
def test_block_shares_add_up_to_the_definition(shape, dtype, cut):
    """Any block of any array (every axis cut anywhere) gets the definition's share of it,
    positions counted in the global array: 8-byte items give two words each, a 0-d array is
    one item, an empty block gives nothing."""
    rng = np.random.default_rng(len(shape))
    a = (rng.standard_normal(shape) * 1000).astype(dtype)
    index = []
    for n in shape:
        lo = cut.draw(st.integers(0, n))
        index.append(slice(lo, cut.draw(st.integers(lo, n))))
    index = tuple(index)
    assert digest.block_sums(a[index], a.shape, index) == _block_reference(a, index)


def test_long_rows_are_summed_in_sub_rows_and_a_tail(monkeypatch):
    """Rows longer than the sub-row width (a 1-D array, a wide matrix) are cut into sub-rows
    and a tail, each word still at its global position."""
    monkeypatch.setattr(digest, "_HOST_ROW_WORDS", 8)
    monkeypatch.setattr(digest, "_HOST_CHUNK_WORDS", 16)
    rng = np.random.default_rng(7)
    for shape, index in [
        ((100,), (slice(3, 91),)),
        ((5, 37), (slice(1, 4), slice(2, 35))),
        ((3, 9), (slice(0, 3), slice(0, 9))),
    ]:
        a = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
        for dt in (np.uint32, np.float64):
            b = a.astype(dt)
            assert digest.block_sums(b[index], b.shape, index) == _block_reference(b, index), (shape, dt)


def test_sharded_arrays_on_cpu_devices_are_summed_per_block_alike(tmp_path):
    """Arrays sharded over 4 CPU devices (rows, the last axis, both, replicated, partly
    replicated, bfloat16): each replica-0 block summed on the host adds up to the devices'
    sums over the global array."""
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from roxxel.train import digest
        mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
        x = jnp.asarray(np.random.default_rng(1).standard_normal((8, 10, 8)), jnp.float32)
        specs = {"rows": P("a"), "last": P(None, None, "b"), "both": P("a", None, "b"), "replicated": P(),
                 "part": P(None, "b"), "flat": P(("a", "b"))}
        tree = {k: jax.device_put(x, NamedSharding(mesh, s)) for k, s in specs.items()}
        tree["bf16"] = jax.device_put(x[0].astype(jnp.bfloat16), NamedSharding(mesh, P("a", "b")))
        want = digest.array_checksums(tree)
        got = digest.ChecksumLayout(tree, host=True).plan(jax.tree.leaves(tree)).dispatch().read()
        assert got == want, {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        print("OK", len(got))
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "OK 7"


def test_only_what_the_restore_sums_alike_is_summed_on_the_host():
    """The host takes arrays on CPU devices of whole-word dtypes in the devices' memory; the
    rest stays with the device programs, which refuse what no restore could check (complex,
    int4, pinned_host: a save of them fails instead of recording sums on the host)."""
    host = [jnp.ones(3, d) for d in (jnp.float32, jnp.bfloat16, jnp.bool_, jnp.int8, jnp.float8_e4m3fn, jnp.uint16)]
    assert all(digest._host_summable(x.dtype, x.sharding) for x in host)
    pinned = jax.device_put(jnp.ones(3), jax.sharding.SingleDeviceSharding(jax.devices()[0], memory_kind="pinned_host"))
    device = [jnp.ones(3, jnp.complex64), jnp.ones(3, jnp.int4), jax.random.key(0), pinned]
    assert not any(digest._host_summable(x.dtype, x.sharding) for x in device)
