"""A program that streams and exits leaves nothing on stderr at interpreter shutdown.

Shards still referenced when the interpreter tears its modules down (here by the finished
stream's prefetch state) close their descriptors in ``__del__``; that must not need module
globals the shutdown has already cleared (it printed ``Exception ignored in ...
MappedFile.__del__ ... TypeError: 'NoneType' object is not callable`` after the README's
streaming example).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from roxxel import Roxxel

PROGRAM = """
from roxxel import Curriculum, Phase, Roxxel
code, text = Roxxel("code"), Roxxel("text")
curriculum = Curriculum({"code": code, "text": text}, [
    Phase(steps=4, global_batch_size=4, seq_len=16, weights={"code": 0.8, "text": 0.2}),
    Phase(steps=2, global_batch_size=2, seq_len=32, weights={"code": 0.6, "text": 0.4}),
])
for batch in curriculum.stream(start_step=3, seed=42):
    ...
"""


def test_streaming_then_exiting_prints_nothing_at_shutdown(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("code", "text"):
        docs = [rng.integers(0, 256, 300) for _ in range(40)]
        Roxxel(str(tmp_path / name)).write(docs, vocab_size=257, eos_id=256, max_shard_bytes=4096)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr
