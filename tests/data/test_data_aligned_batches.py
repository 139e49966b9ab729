"""Batch buffers start on a 64-byte boundary (issue 15: jax.Array placement without a copy)."""

import numpy as np

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data.stream import empty_aligned


def test_empty_aligned_gives_the_shape_dtype_and_a_64_byte_boundary():
    """XLA's CPU client places a 64-byte aligned host array without copying it; numpy aligns to 16 only."""
    for dtype in (np.int32, np.uint16, np.float32):
        for shape in ((3, 5), (1, 1), (0, 7)):
            a = empty_aligned(shape, dtype)
            assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
            if a.size:  # an empty array has no data to align (numpy may point it anywhere)
                assert a.__array_interface__["data"][0] % 64 == 0


def test_every_streamed_batch_is_aligned(tmp_path):
    ds = Roxxel(str(tmp_path / "a.rox"))
    ds.write([np.random.default_rng(i).integers(1, 200, 3000).astype(np.uint16) for i in range(8)], separator=0)
    c = Curriculum(ds, [Phase(steps=4, global_batch_size=8, seq_len=64)])
    batches = list(c.stream(seed=0, to_device=False, prefetch_size=0))
    assert len(batches) == 4
    assert all(b.__array_interface__["data"][0] % 64 == 0 for b in batches)
