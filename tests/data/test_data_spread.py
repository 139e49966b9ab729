"""Rows of a batch from independent places (``batch_rows="independent"``).

The data here is its own address: token ``t`` of the dataset is ``t`` (uint32), so a row's
first token says where in the dataset it was read.
"""

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data.curriculum import classify_changes
from roxxel.data.spread import lane_depth, spread_rows
from roxxel.train.checkpoint import describe_changes

CHUNK = 1024


@pytest.fixture(scope="module")
def addressed(tmp_path_factory):
    """200,704 tokens whose values are their own positions (196 chunks of 1024)."""
    path = tmp_path_factory.mktemp("spread") / "a"
    n = 196 * CHUNK
    Roxxel(str(path)).write([np.arange(n, dtype=np.uint32)], vocab_size=2**31, eos_id=2**31 - 1, dtype="uint32")
    return Roxxel(str(path))


def batches(ds, phases, **kwargs):
    c = Curriculum(ds, phases, chunk_tokens=CHUNK, **kwargs)
    return list(c.stream(seed=3, to_device=False, prefetch_size=0))


@pytest.mark.parametrize("lanes,depth", [(1, 1), (3, 1), (4, 5), (8, 8), (32, 16)])
def test_spread_rows_is_a_bijection_of_every_segment(lanes, depth):
    for count in [0, 1, 2, lanes, lanes * depth - 1, lanes * depth, lanes * depth + 7, 3 * lanes * depth + lanes + 1]:
        place = spread_rows(np.arange(count), lanes, depth, count)
        assert sorted(place.tolist()) == list(range(count)), count
    endless = spread_rows(np.arange(4 * lanes * depth), lanes, depth, None)
    assert sorted(endless.tolist()) == list(range(4 * lanes * depth))


def test_any_lanes_consecutive_rows_are_a_lane_apart():
    place = spread_rows(np.arange(10 * 32 * 8), 32, 8, None)
    for start in range(0, len(place) - 32, 5):
        lanes = place[start:start + 32] // 8  # the lane of each stream place
        assert len(set(lanes.tolist())) == 32
    assert lane_depth(16384, 2048) == 8 and lane_depth(16384, 3000) == 6 and lane_depth(100, 2048) == 1


def test_every_row_of_a_batch_comes_from_its_own_chunk(addressed):
    """32 x 128 rows over 1024-token chunks: consecutive rows take 8 rows of 4 chunks; independent rows 32
    chunks. The phase's last 4 steps are a short block (its rows span 16 chunks): there no two rows of a
    batch are adjacent in the dataset."""
    phases = [Phase(steps=20, global_batch_size=32, seq_len=128)]
    for step, b in enumerate(batches(addressed, phases, batch_rows="independent")):
        assert (b[:, 1:] == b[:, :-1] + 1).all()  # each row is still one contiguous range of the dataset
        chunks = b[:, 0] // CHUNK
        assert len(set(chunks.tolist())) == (32 if step < 16 else 16)
        assert (np.diff(np.sort(b[:, 0])) > 128).all()
    for b in batches(addressed, phases):
        assert len(set((b[:, 0] // CHUNK).tolist())) <= 5


def test_independent_rows_read_the_same_tokens_each_once(addressed):
    """A curriculum with a seq_len change, until the data runs out (in whole steps: 724 rows of 256
    tokens after phase 0): both ways read the same set of tokens, none twice (an epoch still
    visits every token once)."""
    phases = [Phase(steps=15, global_batch_size=16, seq_len=64), Phase(global_batch_size=4, seq_len=256)]
    seen = {}
    for rows in ("independent", "consecutive"):
        tokens = np.concatenate([b.reshape(-1) for b in batches(addressed, phases, batch_rows=rows)])
        assert len(np.unique(tokens)) == len(tokens)
        seen[rows] = np.sort(tokens)
    assert np.array_equal(seen["independent"], seen["consecutive"])


def test_a_longer_phase_keeps_the_batches_before_it_only_with_consecutive_rows(addressed, tmp_path):
    """Lengthening the phase a run resumes in is allowed with consecutive rows (its batches before the
    step stay) and refused with independent rows, whose last short block is dealt by the phase's
    length (the batches before the step would change). Blended, so that each dataset's rows of a
    batch are a share of it."""
    other = tmp_path / "b"
    Roxxel(str(other)).write([np.arange(10**6, 10**6 + 60 * CHUNK, dtype=np.uint32)], vocab_size=2**31,
                             eos_id=2**31 - 1, dtype="uint32")
    data = {"primary": addressed, "b": Roxxel(str(other))}

    def curriculum(steps, rows):
        return Curriculum(data, [Phase(steps=7, global_batch_size=8, seq_len=96, weights={"primary": 3, "b": 1}),
                                 Phase(steps=steps, global_batch_size=6, seq_len=160, weights={"primary": 1, "b": 1})],
                          chunk_tokens=CHUNK, batch_rows=rows)

    short, long = (list(curriculum(n, "consecutive").stream(seed=9, to_device=False, prefetch_size=0)) for n in (5, 13))
    assert all(np.array_equal(a, b) for a, b in zip(short, long))
    assert classify_changes(curriculum(5, "consecutive").describe(), curriculum(13, "consecutive").describe(), 12,
                            describe_changes)[1] == []
    short, long = (list(curriculum(n, "independent").stream(seed=9, to_device=False, prefetch_size=0)) for n in (5, 13))
    assert not all(np.array_equal(a, b) for a, b in zip(short, long))  # why it is refused
    refused = classify_changes(curriculum(5, "independent").describe(), curriculum(13, "independent").describe(), 12,
                               describe_changes)[1]
    assert len(refused) == 1 and "phases[1].steps: 5 -> 13 (with batch_rows='independent'" in refused[0]


def test_a_resume_is_the_same_batch_as_an_uninterrupted_stream(addressed):
    phases = [Phase(steps=12, global_batch_size=8, seq_len=96), Phase(steps=9, global_batch_size=4, seq_len=300)]
    c = Curriculum(addressed, phases, chunk_tokens=CHUNK, batch_rows="independent")
    whole = list(c.stream(seed=5, to_device=False, prefetch_size=0))
    for start in (1, 7, 12, 16):
        resumed = list(c.stream(start, seed=5, to_device=False, prefetch_size=0))
        assert all(np.array_equal(a, b) for a, b in zip(whole[start:], resumed))


def test_a_run_saved_with_consecutive_rows_refuses_to_resume_with_independent_ones(addressed):
    phases = [Phase(steps=10, global_batch_size=8, seq_len=64)]
    old = Curriculum(addressed, phases, chunk_tokens=CHUNK).describe()
    new = Curriculum(addressed, phases, chunk_tokens=CHUNK, batch_rows="independent").describe()
    assert "batch_rows" not in old  # fingerprints of runs saved before the option stay valid
    assert new["batch_rows"] == "independent"

    allowed, refused = classify_changes(old, new, 5, describe_changes)
    assert refused == ['batch_rows: "consecutive" -> "independent"']
    assert classify_changes(old, Curriculum(addressed, phases, chunk_tokens=CHUNK, batch_rows="consecutive").describe(),
                            5, describe_changes) == ([], [])


def test_an_unknown_batch_rows_value_is_refused(addressed):
    with pytest.raises(ValueError, match=r"batch_rows must be one of \('consecutive', 'independent'\), got 'random'"):
        Curriculum(addressed, [Phase(steps=1, global_batch_size=1, seq_len=8)], batch_rows="random")


@pytest.mark.parametrize("chunk", [0, -5, 1.5, True])
def test_a_bad_chunk_size_is_refused_in_one_line(addressed, chunk):
    """Found by a new user's pass: 0 divided by zero, -5 was called lane_tokens, 1.5 blamed the dataset's size."""
    with pytest.raises(ValueError, match=rf"chunk_tokens must be an int >= 1 \(tokens per shuffled chunk\), got {chunk!r}"):
        Curriculum(addressed, [Phase(global_batch_size=4, seq_len=64)], chunk_tokens=chunk)
