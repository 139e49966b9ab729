"""Placer: the streamer's per-batch ``jax.device_put`` (one process), checked against device_put itself.

Runs on this process's CPU device(s); the multi-device case runs in a child with two CPU devices.
"""

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np

from roxxel.data.placement import Placer
from roxxel.data.stream import empty_aligned
from roxxel.sharding import default_batch_sharding


def same(a, b):
    return (
        a.sharding == b.sharding
        and a.dtype == b.dtype
        and a.committed == b.committed
        and np.array_equal(np.asarray(a), np.asarray(b))
    )


def test_a_placed_batch_is_what_device_put_gives_and_batches_do_not_share_memory():
    sharding = default_batch_sharding()
    placer = Placer(sharding)
    batches = []
    for k in range(3):
        rows = empty_aligned((8, 16), np.int32)
        rows[...] = np.arange(128).reshape(8, 16) + k
        batches.append((placer(rows), rows.copy()))
    assert placer._plans[((8, 16), np.dtype(np.int32), None, 0)] is not None  # the direct call is in use with this JAX
    for got, rows in batches:  # each batch kept its own values after the next ones were placed
        assert same(got, jax.device_put(rows, sharding))


def test_a_dtype_jax_would_canonicalise_goes_through_device_put():
    placer = Placer(default_batch_sharding())
    rows = np.arange(32, dtype=np.int64).reshape(4, 8)
    got = placer(rows)
    assert placer._plans[((4, 8), np.dtype(np.int64), None, 0)] is None
    assert same(got, jax.device_put(rows, default_batch_sharding()))


def test_rows_over_two_devices_land_where_device_put_puts_them():
    code = textwrap.dedent("""
        import jax, numpy as np
        from roxxel.data.placement import Placer
        from roxxel.sharding import default_batch_sharding
        sharding = default_batch_sharding()
        assert len(sharding.device_set) == 2
        placer = Placer(sharding)
        for k in range(2):
            rows = np.arange(64, dtype=np.int32).reshape(4, 16) + k
            got, want = placer(rows), jax.device_put(rows, sharding)
            assert got.sharding == want.sharding
            assert [(s.device, s.index) for s in got.addressable_shards] == [(s.device, s.index) for s in want.addressable_shards]
            assert all(np.array_equal(a.data, b.data) for a, b in zip(got.addressable_shards, want.addressable_shards))
        assert placer._plans[((4, 16), np.dtype(np.int32), None, 0)] is not None
        print("ok")
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
