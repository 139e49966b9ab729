"""Rows of a batch from independent places (``batch_rows="independent"``).

The data here is its own address: token ``t`` of the dataset is ``t`` (uint32), so a row's
first token says where in the dataset it was read.
"""

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data.blend import BlendPlan
from roxxel.data.identity import classify_changes
from roxxel.data.spread import lane_depth, spread_rows

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
        lanes = place[start : start + 32] // 8  # the lane of each stream place
        assert len(set(lanes.tolist())) == 32
    assert lane_depth(16384, 2048) == 8 and lane_depth(16384, 3000) == 6 and lane_depth(100, 2048) == 1


def test_every_row_of_a_batch_comes_from_its_own_chunk(addressed):
    """32 x 128 rows over 1024-token chunks: consecutive rows take 8 rows of 4 chunks; independent rows 32
    chunks in every step, the phase's last ones too (blocks are laid out by the data, not the phase)."""
    phases = [Phase(steps=20, global_batch_size=32, seq_len=128)]
    for b in batches(addressed, phases, batch_rows="independent"):
        assert (b[:, 1:] == b[:, :-1] + 1).all()  # each row is still one contiguous range of the dataset
        assert len(set((b[:, 0] // CHUNK).tolist())) == 32
        assert (np.diff(np.sort(b[:, 0])) > 128).all()
    for b in batches(addressed, phases, batch_rows="consecutive"):
        assert len(set((b[:, 0] // CHUNK).tolist())) <= 5


def test_independent_rows_read_each_token_at_most_once(addressed):
    """A curriculum with a seq_len change, until the data runs out: no token is read twice. Consecutive
    rows read every token up to the last whole row; independent rows skip only each lane's unread rest
    shorter than the new row (16 lanes x 64 tokens here: the block phase 0 ended in had 15 of its 16
    rows per lane read), so they give one 4 x 256 step fewer."""
    phases = [Phase(steps=15, global_batch_size=16, seq_len=64), Phase(global_batch_size=4, seq_len=256)]
    seen = {}
    for rows in ("independent", "consecutive"):
        tokens = np.concatenate([b.reshape(-1) for b in batches(addressed, phases, batch_rows=rows)])
        assert len(np.unique(tokens)) == len(tokens)
        seen[rows] = tokens
    assert len(seen["consecutive"]) - len(seen["independent"]) == 4 * 256
    missing = np.setdiff1d(seen["consecutive"], seen["independent"])
    assert len(missing) == 16 * 64 and np.isin(seen["independent"], seen["consecutive"]).all()
    assert len(np.unique(missing // 64)) == 16  # one 64-token row per lane


def test_a_longer_phase_keeps_the_batches_before_it(addressed, tmp_path):
    """Lengthening the phase a run resumes in is allowed with either batch_rows: the batches before the
    step stay (independent rows lay blocks out by the data, not by where the phase ends). Blended, so
    that each dataset's rows of a batch are a share of it; the second phase changes seq_len and batch
    size, so its rows start with the rests of the first phase's lanes."""
    other = tmp_path / "b"
    Roxxel(str(other)).write(
        [np.arange(10**6, 10**6 + 60 * CHUNK, dtype=np.uint32)], vocab_size=2**31, eos_id=2**31 - 1, dtype="uint32"
    )
    data = {"primary": addressed, "b": Roxxel(str(other))}

    def curriculum(steps, rows):
        return Curriculum(
            data,
            [
                Phase(steps=7, global_batch_size=8, seq_len=96, weights={"primary": 3, "b": 1}),
                Phase(steps=steps, global_batch_size=6, seq_len=160, weights={"primary": 1, "b": 1}),
            ],
            chunk_tokens=CHUNK,
            batch_rows=rows,
        )

    for rows in ("consecutive", "independent"):
        short, long = (list(curriculum(n, rows).stream(seed=9, to_device=False, prefetch_size=0)) for n in (5, 13))
        assert len(short) == 12 and all(np.array_equal(a, b) for a, b in zip(short, long))
        assert classify_changes(curriculum(5, rows).describe(), curriculum(13, rows).describe(), 12)[1] == []


@pytest.mark.parametrize("seed", range(40))
def test_lanes_keep_every_earlier_row_and_read_no_token_twice(seed):
    """Random blends of small and large datasets, phases changing seq_len and batch size, with and
    without repeat: every row lies inside its dataset (or its epochs), no token of a dataset is read
    twice, and lengthening any phase changes no row before that phase's old end."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 4))
    sizes = [int(rng.choice([0, 50, 700, 5_000, 40_000])) for _ in range(k)]
    sizes[0] = max(sizes[0], 700)
    repeat = bool(rng.integers(0, 2))
    if repeat:
        sizes = [max(s, 50) for s in sizes]
    phases, lanes = [], []
    for _ in range(int(rng.integers(1, 4))):
        seq_len = int(rng.choice([3, 8, 16, 40]))
        phases.append((int(rng.integers(1, 60)), seq_len, [float(rng.integers(0, 4)) for _ in range(k - 1)] + [1.0]))
        lanes.append(int(rng.choice([1, 3, 8, 16])))
    lane_tokens = int(rng.choice([1, 32, 100]))

    def locate(phases):
        plan = BlendPlan(sizes, phases, repeat=repeat, lanes=lanes, lane_tokens=lane_tokens)
        rows = np.arange(plan.total_rows)
        return plan, plan.locate(rows)

    plan, (dataset, position, seq_len) = locate(phases)
    for i, size in enumerate(sizes):
        mine = dataset == i
        tokens = position[mine][:, None] + np.arange(seq_len[mine].max(initial=0))[None, :]
        tokens = tokens[np.arange(tokens.shape[1])[None, :] < seq_len[mine][:, None]]
        assert len(np.unique(tokens)) == len(tokens)
        if not repeat:
            assert tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < size)
    for j in range(len(phases)):
        longer = [(rows + 25 if q == j else rows, L, w) for q, (rows, L, w) in enumerate(phases)]
        end = min(sum(rows for rows, _, _ in phases[: j + 1]), plan.total_rows)
        _, again = locate(longer)
        for before, after in zip((dataset, position, seq_len), again):
            np.testing.assert_array_equal(before[:end], after[:end])


def test_a_resume_is_the_same_batch_as_an_uninterrupted_stream(addressed):
    phases = [Phase(steps=12, global_batch_size=8, seq_len=96), Phase(steps=9, global_batch_size=4, seq_len=300)]
    c = Curriculum(addressed, phases, chunk_tokens=CHUNK, batch_rows="independent")
    whole = list(c.stream(seed=5, to_device=False, prefetch_size=0))
    for start in (1, 7, 12, 16):
        resumed = list(c.stream(start, seed=5, to_device=False, prefetch_size=0))
        assert all(np.array_equal(a, b) for a, b in zip(whole[start:], resumed))


def test_a_run_saved_with_consecutive_rows_refuses_to_resume_with_independent_ones(addressed):
    phases = [Phase(steps=10, global_batch_size=8, seq_len=64)]
    old = Curriculum(addressed, phases, chunk_tokens=CHUNK, batch_rows="consecutive").describe()
    new = Curriculum(addressed, phases, chunk_tokens=CHUNK).describe()  # the default
    assert "batch_rows" not in old  # fingerprints of runs saved before the option stay valid
    assert new["batch_rows"] == "independent"

    allowed, refused = classify_changes(old, new, 5)
    assert refused == ['batch_rows: "consecutive" -> "independent"', "data_order_version: 1 -> 2"]
    assert classify_changes(
        old, Curriculum(addressed, phases, chunk_tokens=CHUNK, batch_rows="consecutive").describe(), 5
    ) == ([], [])


@pytest.mark.parametrize("rows", ["independent", "consecutive"])
def test_the_first_epoch_is_the_same_whatever_follows_it(addressed, rows):
    """Issue #52: with independent rows, repeat=True (or a second phase) changed the last batch
    of epoch 0, whose last block of lanes was dealt as part of an endless stream. The epoch's
    rows are now dealt as if the dataset ended there, so one epoch, the same epoch followed by
    more epochs, and the same epoch followed by another phase give the same batches."""
    seq, batch = 96, 8
    steps = addressed.num_tokens // seq // batch  # one epoch: 261 steps, its last block short
    one = Phase(steps=steps, global_batch_size=batch, seq_len=seq)
    alone = batches(addressed, [one], batch_rows=rows)
    more = batches(
        addressed, [Phase(steps=steps + 30, global_batch_size=batch, seq_len=seq)], batch_rows=rows, repeat=True
    )
    phase = batches(addressed, [one, Phase(steps=20, global_batch_size=4, seq_len=64)], batch_rows=rows, repeat=True)
    assert len(alone) == steps
    assert [i for i in range(steps) if not np.array_equal(alone[i], more[i])] == []
    assert [i for i in range(steps) if not np.array_equal(alone[i], phase[i])] == []
    # The epoch reads every row once; the second epoch starts where the first ended.
    firsts = np.sort(np.concatenate([b[:, 0] for b in alone]))
    assert len(np.unique(firsts)) == len(firsts) and firsts.max() < addressed.num_tokens


def test_a_run_with_independent_rows_of_order_version_1_is_refused(addressed):
    """Version 1 dealt a phase's last block of lanes by the phase's length: its batches differ from
    version 2's, so its checkpoints are refused by the version line (consecutive rows stay version 1)."""
    phases = [Phase(steps=10, global_batch_size=8, seq_len=64)]
    new = Curriculum(addressed, phases, chunk_tokens=CHUNK).describe()
    old = {**new, "data_order_version": 1}
    assert classify_changes(old, new, 5)[1] == ["data_order_version: 1 -> 2"]
    assert (
        Curriculum(addressed, phases, chunk_tokens=CHUNK, batch_rows="consecutive").describe()["data_order_version"]
        == 1
    )


def test_a_dataset_with_fewer_chunks_than_rows_of_a_batch_is_named(addressed, caplog):
    """196 chunks cannot give 256 rows of a batch 256 different chunks: said in one line, not silently."""
    phases = [Phase(steps=2, global_batch_size=64, seq_len=64), Phase(steps=1, global_batch_size=256, seq_len=64)]
    with caplog.at_level("WARNING", logger="roxxel.data.curriculum"):
        Curriculum(addressed, phases, chunk_tokens=CHUNK)
        Curriculum(addressed, phases, chunk_tokens=CHUNK, batch_rows="consecutive")
        Curriculum(addressed, phases[:1], chunk_tokens=CHUNK)
    assert [r.getMessage() for r in caplog.records] == [
        "dataset 'primary' holds 196 chunks of 1,024 tokens, fewer than the 256 rows of phase 1's global batch: with "
        "batch_rows='independent' some rows of a batch share a chunk; a smaller chunk_tokens spreads them"
    ]


def test_an_unknown_batch_rows_value_is_refused(addressed):
    with pytest.raises(ValueError, match=r"batch_rows must be one of \('independent', 'consecutive'\), got 'random'"):
        Curriculum(addressed, [Phase(steps=1, global_batch_size=1, seq_len=8)], batch_rows="random")


@pytest.mark.parametrize("chunk", [0, -5, 1.5, True])
def test_a_bad_chunk_size_is_refused_in_one_line(addressed, chunk):
    """Found by a new user's pass: 0 divided by zero, -5 was called lane_tokens, 1.5 blamed the dataset's size."""
    with pytest.raises(
        ValueError, match=rf"chunk_tokens must be an int >= 1 \(tokens per shuffled chunk\), got {chunk!r}"
    ):
        Curriculum(addressed, [Phase(global_batch_size=4, seq_len=64)], chunk_tokens=chunk)


def _closest(plan, gbs, steps, first_row=0):
    """Per step (of ``gbs`` rows from ``first_row``): the least distance in tokens between the first
    tokens of two rows of one dataset."""
    out = []
    for step in range(steps):
        dataset, position, _ = plan.locate(first_row + np.arange(step * gbs, (step + 1) * gbs))
        gaps = [np.diff(np.sort(position[dataset == i])).min(initial=10**18) for i in np.unique(dataset)]
        out.append(int(min(gaps)))
    return out


def test_a_batch_size_ramp_reads_its_first_batch_from_as_many_places_as_rows():
    """Found by a new user's pass: a ramp from 8 to 64 rows read the new phase's first batch from 16
    places, as the rests of the 8 lanes carried into it were read in turn before any fresh lane. The
    rests are now dealt level by level together with the new block's lanes (fresh lanes first), so
    every batch of both phases has its rows at least a lane's depth less one row apart."""
    depth = lane_depth(CHUNK, 128)
    plan = BlendPlan([10**7], [(8 * 3, 128, [1.0]), (64 * 12, 128, [1.0])], lanes=[8, 64], lane_tokens=CHUNK)
    assert min(_closest(plan, 8, 3)) >= (depth - 1) * 128
    first = plan.locate(np.arange(24, 24 + 64))[1]
    assert len(np.unique(first // CHUNK)) == 64 or min(np.diff(np.sort(first))) >= CHUNK
    gaps = [min(np.diff(np.sort(plan.locate(np.arange(24 + 64 * s, 24 + 64 * (s + 1)))[1]))) for s in range(12)]
    assert min(gaps) >= (depth - 1) * 128, gaps


@pytest.mark.parametrize("weights", [(3.0, 2.0), (1.0, 1.0, 5.0)])
def test_a_datasets_share_of_a_batch_across_two_blocks_has_no_adjacent_rows(weights):
    """Found by a new user's pass: in a 3:2 blend of 32 x 1000 rows, the last row of one block of lanes
    and the first of the next were adjacent in the stream and fell into one batch. Successive blocks are
    now dealt in alternating lane order, so rows across a block boundary are a lane apart too."""
    k = len(weights)
    depth = lane_depth(16384, 1000)
    plan = BlendPlan([10**8] * k, [(32 * 400, 1000, list(weights))], lanes=[32], lane_tokens=16384)
    closest = _closest(plan, 32, 400)
    assert min(closest) >= (depth - 1) * 1000, sorted(closest)[:5]


@pytest.mark.parametrize("seed", range(12))
def test_rows_of_a_batch_stay_a_lane_apart_through_ramps_blends_and_seq_len_changes(seed):
    """Random blends (repeat: no dataset's last block) whose phases change batch size, seq_len and
    weights: a dataset's rows in any batch are at least a lane less one row apart (the rests of
    neighbouring lanes re-cut to a new seq_len are the closest). Before blocks alternated and rests
    were read with the next block, rows of a batch could be adjacent."""
    rng = np.random.default_rng(seed)
    k, lane_tokens = int(rng.integers(1, 4)), int(rng.choice([256, 1024]))
    phases = []
    for _ in range(int(rng.integers(2, 4))):
        gbs, seq_len = int(rng.choice([4, 8, 16, 32])), int(rng.choice([32, 64, 100, 128]))
        phases.append((gbs, seq_len, [float(rng.integers(1, 4)) for _ in range(k)], int(rng.integers(1, 30))))
    plan = BlendPlan(
        [10**9] * k,
        [(g * n, L, w) for g, L, w, n in phases],
        repeat=True,
        lanes=[g for g, *_ in phases],
        lane_tokens=lane_tokens,
    )
    bound = lane_tokens - max(L for _, L, _, _ in phases)
    row = 0
    for gbs, _, _, steps in phases:
        assert min(_closest(plan, gbs, steps, row)) >= bound
        row += gbs * steps
