"""Pinned batches: the read path's speed work must change no batch.

The SHA-256 of a few whole streams (blends, curricula, both orders, both outputs, several
chunk sizes, a multi-shard dataset) was recorded from the code before the read path was
vectorised; any later change to how rows are located, cut or copied must reproduce them
byte for byte for the same seed and curriculum. The pins recorded then are rows taken in
stream order (``batch_rows="consecutive"``); the default, independent rows
(tests/data/test_data_spread.py), was pinned when its blocks of lanes were laid out by the data
(data order version 2), and under ``repeat`` when an epoch's rows stopped depending on what
follows it (version 3). Pins are keyed by the version a curriculum records, so a change to the
order must bump ``DATA_ORDER_VERSION`` (and a checkpoint of the old order is then refused).
"""

import hashlib

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data.curriculum import DATA_ORDER_VERSION


def make(path, n_tokens, base, doc_len, shard_tokens=None):
    """A dataset whose token t is (base + t * 7919) mod 60000, documents of ``doc_len`` ending in EOS 65535."""
    ids = (base + np.arange(n_tokens, dtype=np.int64) * 7919) % 60000
    docs = [np.append(ids[i : i + doc_len - 1], 65535) for i in range(0, n_tokens, doc_len)]
    max_bytes = None if shard_tokens is None else shard_tokens * 2
    Roxxel(str(path)).write(docs, vocab_size=65536, eos_id=65535, dtype="uint16", max_shard_bytes=max_bytes)
    return Roxxel(str(path))


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("pins")
    return {
        "self": make(root / "a", 40_003, 0, 131, shard_tokens=9_000),
        "code": make(root / "b", 9_001, 11, 57),
        "math": make(root / "c", 5_000, 23, 300),
    }


def digest(batches) -> str:
    h = hashlib.sha256()
    for b in batches:
        for k, v in sorted(b.items()) if isinstance(b, dict) else [("tokens", b)]:
            h.update(k.encode())
            h.update(str(v.dtype).encode() + str(v.shape).encode())
            h.update(np.ascontiguousarray(v).tobytes())
    return h.hexdigest()


PHASES = [
    Phase(steps=6, global_batch_size=8, seq_len=64, weights={"primary": 2, "code": 1, "math": 1}),
    Phase(steps=4, global_batch_size=4, seq_len=200, weights={"primary": 1, "math": 3}),
    Phase(steps=5, global_batch_size=6, seq_len=48, weights={"primary": 1, "code": 2}),
]
REPEATING = [  # reads ``code`` and ``math`` about three times over (with ``repeat=True``)
    Phase(steps=25, global_batch_size=8, seq_len=64, weights={"primary": 1, "math": 3}),
    Phase(steps=15, global_batch_size=6, seq_len=96, weights={"code": 2, "math": 1}),
]


def curriculum(ds, chunk, order="chunks", batch_rows="consecutive", phases=PHASES, repeat=False):
    return Curriculum(
        {"primary": ds["self"], "code": ds["code"], "math": ds["math"]},
        phases,
        chunk_tokens=chunk,
        order=order,
        batch_rows=batch_rows,
        repeat=repeat,
    )


PINS = {
    # (data order version, batch_rows, order, chunk_tokens, outputs) -> SHA-256 of the 15 batches.
    (1, "consecutive", "chunks", 64, "tokens"): "24385b89db023daef0c1ce6ce9337c57ec7cf85713d45bc903f0f5032e5ccb55",
    (1, "consecutive", "chunks", 64, "documents"): "a95e323403529567f9526373d7d9756249b021f3b07debe1d91ac335d83ee1ff",
    (1, "consecutive", "chunks", 1000, "tokens"): "7b466b8bfead0f3d02a1c1bbec807f55cbee4dffd5484acf20844f7bb9c33a6f",
    (1, "consecutive", "chunks", 16384, "tokens"): "16fcb5fcf5dadb638fe7fdd5bde768702d7dbf224d8c806a6e8d1946c484931f",
    (1, "consecutive", "documents", 0, "tokens"): "3d47537e76a6b3857a9bf6ccd35ebfbf1197c1bedf5374e42f516b1558528148",
    (1, "consecutive", "documents", 0, "documents"): "dabeaa27c7217457f96142f697b9d758324e742da32c91bb104567a04cf92ba3",
    (2, "independent", "chunks", 64, "tokens"): "c9ee7ebbb1a995814f33299c881a706de2ae39c553e9502720b86a2697c16cd9",
    (2, "independent", "chunks", 1000, "tokens"): "7553cb92c3f906c9574ae4e95bc395cc4b8fbc607f2726040a8b9ef3e1b97a68",
    (2, "independent", "chunks", 16384, "tokens"): "8df3b7da3b6f1d7f5cf6badbd3fd166d81c983ab15fa8e42e01d627648613011",
    (2, "independent", "documents", 0, "documents"): "b126134acae107d28d1e14de87a017c90c939fba5a141a7df440c5f1acde6dac",
}
"""The pinned streams of :func:`curriculum`, keyed by the data order version the curriculum
records (``describe()['data_order_version']``, :func:`roxxel.data.curriculum.order_version`). A
version's pins never change: a change that gives another batch bumps ``DATA_ORDER_VERSION`` and
adds the new version's pins beside the old ones, so that a checkpoint saved under the old order
is refused on resume. A changed order under an unchanged version fails here."""

PINS_REPEAT = {
    # (data order version, batch_rows, order, chunk_tokens) -> SHA-256 of the 40 batches of
    # :data:`REPEATING` under ``repeat``, which reads the small datasets three times over.
    (1, "consecutive", "chunks", 64): "5c63c72c5d7da8a085185ba1eb4c2ff903252ad108eee4deb257ac685c99dede",
    (3, "independent", "chunks", 64): "fdcecd931911a03df134bb37e3fec30826af6af5a0dd1ca14ab6e7b27e616668",
    (3, "independent", "documents", 0): "9ae2254d4587a94ef1eb1bf08c4fb1b68d02627669e3c8f90c488e2b0af9461d",
}
"""Pins under ``repeat`` (epochs after the first), keyed as :data:`PINS`."""


def recorded_version(c) -> int:
    return c.describe()["data_order_version"]


@pytest.mark.parametrize("key", [k[1:] for k in PINS], ids=lambda k: "-".join(map(str, k)))
def test_batches_match_the_pinned_hashes(datasets, key):
    rows, order, chunk, outputs = key
    c = curriculum(datasets, chunk or 64, order, rows)
    version = recorded_version(c)
    assert (version, *key) in PINS, f"no pin for data order version {version}: record this version's pins in PINS"
    batches = list(c.stream(seed=12345, to_device=False, prefetch_size=0, outputs=outputs))
    assert len(batches) == 15
    assert digest(batches) == PINS[(version, *key)], f"the batches changed under data order version {version}"


@pytest.mark.parametrize("key", [k[1:] for k in PINS_REPEAT], ids=lambda k: "-".join(map(str, k)))
def test_repeated_epochs_match_the_pinned_hashes(datasets, key):
    rows, order, chunk = key
    c = curriculum(datasets, chunk or 64, order, rows, REPEATING, repeat=True)
    version = recorded_version(c)
    assert (version, *key) in PINS_REPEAT, f"no pin for data order version {version}: record it in PINS_REPEAT"
    batches = list(c.stream(seed=12345, to_device=False, prefetch_size=0))
    assert len(batches) == 40
    assert digest(batches) == PINS_REPEAT[(version, *key)], f"the batches changed under data order version {version}"


def test_the_newest_data_order_version_has_pins():
    """Bumping DATA_ORDER_VERSION without recording the new order's pins fails here."""
    assert max(k[0] for k in (*PINS, *PINS_REPEAT)) == DATA_ORDER_VERSION


def test_original_api_stream_with_a_far_start_matches_the_pin(datasets):
    ds = datasets["self"]
    s = ds.stream(
        seq_len=128,
        batch_size=4,
        seed=7,
        start_step=30,
        total_steps=20,
        to_device=False,
        prefetch_size=0,
        batch_rows="consecutive",
    )
    assert digest(list(s)) == PIN_ORIGINAL_API


PIN_ORIGINAL_API = "2c6d908ba4a0ef8644fa7a87a82644f2a2178721f24301d75fc05b30bff69ff6"
