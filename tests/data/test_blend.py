"""Tests for roxxel.data.blend.BlendPlan.

The key oracle is ``simulate``: a row-by-row replay of the scheduling rule and of
exhaustion, the very thing the closed form exists to avoid.
"""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roxxel.data.blend import BlendPlan, Segment, _integer_weights, _pattern


def simulate(sizes, phases, repeat=False, max_rows=10**6):
    """Replay the blend row by row: returns [(dataset, position, seq_len), ...].

    Integer weights only, so the shares are exact. Each dataset's c-th row of a
    segment (0-based) may take slot t only once ``t >= floor(c S / w)`` and must
    by ``ceil((c + 1) S / w)``; of the ready datasets the earliest deadline wins.
    """
    k = len(sizes)
    pos = [0] * k
    out = []
    for rows, seq_len, weights in phases:
        in_phase = 0
        new_segment = True
        while rows is None or in_phase < rows:
            if len(out) >= max_rows:
                return out
            if new_segment:
                active = [i for i in range(k) if weights[i] > 0 and (repeat or sizes[i] - pos[i] >= seq_len)]
                if not active:
                    return out
                total = sum(weights[i] for i in active)
                count = dict.fromkeys(active, 0)
                t = 0
                new_segment = False
            ready = [i for i in active if count[i] * total // weights[i] <= t]
            i = min(ready, key=lambda i: (-(-(count[i] + 1) * total // weights[i]), i))
            out.append((i, pos[i], seq_len))
            pos[i] += seq_len
            count[i] += 1
            t += 1
            in_phase += 1
            if not repeat and sizes[i] - pos[i] < seq_len:
                new_segment = True
    return out


def consumed_before(sim, k):
    """(rows + 1, k) tokens taken from each dataset before each row."""
    take = np.zeros((len(sim) + 1, k), np.int64)
    for r, (d, _, seq_len) in enumerate(sim):
        take[r + 1, d] = seq_len
    return np.cumsum(take, axis=0)


@st.composite
def plans(draw, repeat=False):
    k = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(0, 3000), min_size=k, max_size=k))
    n_phases = draw(st.integers(1, 3))
    phases = []
    for j in range(n_phases):
        last = j == n_phases - 1
        rows = draw(st.one_of(st.none(), st.integers(0, 150)) if last else st.integers(0, 150))
        seq_len = draw(st.integers(4, 64))
        weights = draw(st.lists(st.integers(0, 9), min_size=k, max_size=k).filter(any))
        phases.append((rows, seq_len, weights))
    if repeat:
        sizes = [max(s, 1) for s in sizes]
    return sizes, phases


# --- (b), (c), (e): the closed form equals the replay --------------------------------


@settings(max_examples=120, deadline=None)
@given(plans())
def test_matches_simulation(plan_args):
    sizes, phases = plan_args
    plan = BlendPlan(sizes, phases)
    sim = simulate(sizes, phases)
    assert plan.total_rows == len(sim)
    rows = np.arange(len(sim), dtype=np.int64)
    dataset, position, seq_len = plan.locate(rows)
    np.testing.assert_array_equal(
        np.stack([dataset, position, seq_len], 1).reshape(-1, 3), np.array(sim, np.int64).reshape(-1, 3)
    )
    # Rows never run past a dataset's end without repeat.
    assert (position + seq_len <= np.array(sizes)[dataset]).all()
    expected = consumed_before(sim, len(sizes))
    for r in range(len(sim) + 1):
        np.testing.assert_array_equal(plan.positions_at(r), expected[r])
    with pytest.raises(IndexError, match=f"row {len(sim)} "):
        plan.locate(np.array([len(sim)]))


@settings(max_examples=40, deadline=None)
@given(plans(repeat=True))
def test_matches_simulation_repeat(plan_args):
    sizes, phases = plan_args
    plan = BlendPlan(sizes, phases, repeat=True)
    sim = simulate(sizes, phases, repeat=True, max_rows=300)
    if phases[-1][0] is None:
        assert plan.total_rows is None
    else:
        assert plan.total_rows == sum(p[0] for p in phases)
        assert len(sim) == min(plan.total_rows, 300)  # the simulation stops at 300 rows
    dataset, position, seq_len = plan.locate(np.arange(len(sim)))
    np.testing.assert_array_equal(
        np.stack([dataset, position, seq_len], 1).reshape(-1, 3), np.array(sim, np.int64).reshape(-1, 3)
    )
    expected = consumed_before(sim, len(sizes))
    for r in range(0, len(sim) + 1, 7):
        np.testing.assert_array_equal(plan.positions_at(r), expected[r])


@settings(max_examples=40, deadline=None)
@given(plans(), st.randoms(use_true_random=False))
def test_locate_any_order_and_shape(plan_args, rnd):
    sizes, phases = plan_args
    plan = BlendPlan(sizes, phases)
    n = plan.total_rows
    rows = np.array([rnd.randrange(n) for _ in range(24)] if n else [], np.int64)
    want = plan.locate(np.arange(n))
    got = plan.locate(rows.reshape(2, -1) if rows.size else rows)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.reshape(-1), w[rows])


@pytest.mark.parametrize("seed", range(6))
def test_matches_simulation_medium(seed):
    # Larger than hypothesis tends to draw: several exhaustions per phase.
    rng = np.random.default_rng(seed)
    k = 5
    sizes = rng.integers(0, 20_000, k).tolist()
    phases = [
        (int(rng.integers(50, 400)), int(rng.integers(16, 128)), rng.integers(0, 12, k).tolist()) for _ in range(3)
    ]
    phases = [(r, L, w if any(w) else [1] * k) for r, L, w in phases] + [(None, 8, [3, 1, 4, 1, 5])]
    plan = BlendPlan(sizes, phases)
    sim = simulate(sizes, phases)
    assert plan.total_rows == len(sim) and len(plan.segments) >= 2
    got = np.stack(plan.locate(np.arange(len(sim))), 1)
    np.testing.assert_array_equal(got, np.array(sim, np.int64))
    expected = consumed_before(sim, k)
    for r in rng.integers(0, len(sim) + 1, 200):
        np.testing.assert_array_equal(plan.positions_at(int(r)), expected[r])


# --- (a): low discrepancy ------------------------------------------------------------


def assert_within_one_row(weights, counts_by_prefix):
    """counts_by_prefix[m, i] = rows of dataset i among the first m."""
    w = np.array(weights, np.int64)
    period = w.sum()
    m = np.arange(len(counts_by_prefix), dtype=np.int64)[:, None]
    # |count - m w / W| < 1, in integers.
    assert (np.abs(counts_by_prefix * period - m * w) < period).all()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=9).filter(any))
def test_pattern_within_one_row(weights):
    pat = _pattern(tuple(weights))
    assert pat.period == sum(weights)
    assert_within_one_row(weights, pat.table)
    np.testing.assert_array_equal(pat.table[-1], weights)
    np.testing.assert_array_equal(pat.table[1:] - pat.table[:-1], np.eye(len(weights), dtype=np.int64)[pat.assign])
    # The periodic extension keeps the bound across periods.
    many = np.stack([pat.counts(m) for m in range(3 * pat.period + 1)])
    assert_within_one_row(weights, many)
    # row_of inverts counts.
    for i, w in enumerate(weights):
        for j in range(2 * w):
            r = pat.row_of(i, j)
            assert pat.assign[r % pat.period] == i and pat.counts(r)[i] == j


def test_largest_deficit_counterexample_is_handled():
    # The "largest deficit" rule reaches a full row of error on these weights.
    assert_within_one_row((55, 1, 10, 55), _pattern((55, 1, 10, 55)).table)


@settings(max_examples=40, deadline=None)
@given(plans())
def test_segments_within_one_row(plan_args):
    sizes, phases = plan_args
    plan = BlendPlan(sizes, phases)
    for seg in plan.segments:
        dataset, _, _ = plan.locate(np.arange(seg.start_row, seg.end_row))
        onehot = np.eye(len(sizes), dtype=np.int64)[dataset]
        prefix = np.concatenate([np.zeros((1, len(sizes)), np.int64), np.cumsum(onehot, 0)])
        assert_within_one_row(seg.weights, prefix)
        assert set(np.unique(dataset)) <= set(seg.active)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=6).filter(
        lambda w: sum(w) > 0 and min(x for x in w if x > 0) > 1e-3 * sum(w)
    ),
    st.sampled_from([7, 100, 10_000]),
)
def test_integer_weights_approximate_shares(weights, max_period):
    active = [i for i, w in enumerate(weights) if w > 0]
    if len(active) > max_period:
        return
    iw = _integer_weights(weights, active, max_period)
    period = sum(iw)
    assert period <= max_period
    assert all((iw[i] > 0) == (i in active) for i in range(len(weights)))
    shares = {i: weights[i] / sum(weights) for i in active}
    # Largest remainder is within a row of each quota; every share below one row is
    # raised to one, and each such row comes off another dataset.
    raised = sum(p * max_period < 1 for p in shares.values())
    for i in active:
        assert abs(iw[i] / period - shares[i]) <= (1 + raised) / max_period + 1e-12


def test_integer_weights_exact_fractions():
    assert _integer_weights([0.5, 0.3, 0.2], [0, 1, 2], 10_000) == (5, 3, 2)
    assert _integer_weights([1, 1, 1], [0, 1, 2], 10_000) == (1, 1, 1)
    assert _integer_weights([0.7, 0, 0.1], [0, 2], 10_000) == (7, 0, 1)
    assert _integer_weights([2.0, 6.0], [0, 1], 10_000) == (1, 3)
    # A tiny share still gets a row per period.
    assert _integer_weights([1e-9, 1.0], [0, 1], 10_000) == (1, 9999)


# --- (d): exhaustion re-normalises ---------------------------------------------------


def test_exhaustion_renormalises():
    seq_len = 10
    plan = BlendPlan([200, 10_000, 10_000], [(None, seq_len, [2, 1, 3])])
    first, second = plan.segments[:2]
    assert first.active == (0, 1, 2) and first.weights == (2, 1, 3)
    # Dataset 0 gives its 20 rows, then 1 and 2 share 1:3.
    assert plan.positions_at(first.end_row)[0] == 200
    assert second.active == (1, 2) and second.weights == (0, 1, 3)
    dataset, _, _ = plan.locate(np.arange(second.start_row, second.end_row))
    assert 0 not in dataset
    ones = np.cumsum(dataset == 1)
    m = np.arange(1, len(dataset) + 1)
    assert (np.abs(4 * ones - m) < 4).all()
    assert plan.total_rows == (200 + 10_000 + 10_000) // seq_len


def test_last_dataset_standing_then_stream_end():
    plan = BlendPlan([100, 100, 55], [(None, 10, [1, 1, 0])])
    assert plan.total_rows == 20
    # Dataset 0 wins the ties, so it runs out one row before dataset 1.
    assert [(s.start_row, s.end_row, s.active) for s in plan.segments] == [
        (0, 19, (0, 1)),
        (19, 20, (1,)),
    ]
    np.testing.assert_array_equal(plan.positions_at(20), [100, 100, 0])


def test_reactivated_by_shorter_seq_len():
    # 300 tokens: one row of 256 leaves 44, too few for 256 but enough for 32.
    plan = BlendPlan([300, 10_000], [(4, 256, [1, 1]), (None, 32, [1, 1])])
    phase1 = [s for s in plan.segments if s.phase == 1]
    assert phase1[0].active == (0, 1)
    assert plan.positions_at(phase1[0].start_row)[0] == 256
    dataset, position, seq_len = plan.locate(np.arange(plan.total_rows))
    zero = dataset == 0
    np.testing.assert_array_equal(position[zero], [0, 256])
    np.testing.assert_array_equal(seq_len[zero], [256, 32])


def test_stream_ends_when_nothing_is_active():
    plan = BlendPlan([100], [(None, 50, [1])])
    assert plan.total_rows == 2
    # Nothing fits the first phase, so later phases are never reached.
    empty = BlendPlan([10, 10], [(5, 64, [1, 1]), (5, 2, [1, 1])])
    assert empty.total_rows == 0 and empty.segments == ()
    np.testing.assert_array_equal(empty.positions_at(0), [0, 0])
    with pytest.raises(IndexError, match=r"row 0 is out of range \[0, 0\)"):
        empty.locate(np.array([0]))


def test_zero_row_phases_are_skipped():
    plan = BlendPlan([1000, 1000], [(0, 10, [1, 0]), (3, 10, [0, 1]), (0, 5, [1, 1])])
    assert plan.total_rows == 3
    assert [s.phase for s in plan.segments] == [1]


# --- (f): repeat mode ----------------------------------------------------------------


def test_repeat_positions_grow_past_sizes():
    sizes = [100, 30]
    plan = BlendPlan(sizes, [(None, 10, [1, 1])], repeat=True)
    assert plan.total_rows is None
    dataset, position, _ = plan.locate(np.arange(1000))
    for i in range(2):
        np.testing.assert_array_equal(position[dataset == i], 10 * np.arange(500))
    assert position.max() > max(sizes)
    far = 10**15
    np.testing.assert_array_equal(plan.positions_at(far), [5 * far, 5 * far])
    d, p, _ = plan.locate(np.array([far, far + 1]))
    assert sorted(d.tolist()) == [0, 1] and (p == 5 * far).all()


def test_repeat_with_finite_last_phase():
    plan = BlendPlan([7], [(5, 3, [1]), (6, 2, [1])], repeat=True)
    assert plan.total_rows == 11
    np.testing.assert_array_equal(plan.positions_at(11), [27])
    with pytest.raises(IndexError, match="row 11"):
        plan.locate(np.array([0, 11]))


# --- (g): cost does not grow with the number of rows --------------------------------


def test_billion_rows_is_cheap():
    sizes = [4 * 10**11, 15 * 10**10, 10**13]  # dataset 1 runs out in phase 2
    phases = [
        (2 * 10**8, 256, [0.5, 0.3, 0.2]),
        (3 * 10**8, 512, [0.2, 0.3, 0.5]),
        (5 * 10**8, 1024, [1, 1, 1]),
    ]
    BlendPlan(sizes, phases)  # warm the pattern cache
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        plan = BlendPlan(sizes, phases)
        best = min(best, time.perf_counter() - start)
    assert best < 5e-3
    assert plan.total_rows == 10**9
    assert [s.active for s in plan.segments][-2:] == [(0, 1, 2), (0, 2)]
    rows = np.arange(plan.total_rows - 4096, plan.total_rows, dtype=np.int64)
    plan.locate(rows[:8])
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        dataset, position, seq_len = plan.locate(rows)
        best = min(best, time.perf_counter() - start)
    assert best < 50e-3
    last = plan.positions_at(plan.total_rows)
    np.testing.assert_array_equal(last[dataset] > position, True)


def test_cold_pattern_of_max_period_is_built_quickly():
    _pattern.cache_clear()
    start = time.perf_counter()
    pat = _pattern((3, 3331, 6666))
    assert time.perf_counter() - start < 1.0
    assert pat.period == 10_000


# --- API --------------------------------------------------------------------------


def test_segments_are_read_only_and_repr():
    plan = BlendPlan([100, 100], [(None, 10, [1, 1])])
    assert isinstance(plan.segments, tuple) and isinstance(plan.segments[0], Segment)
    with pytest.raises(AttributeError):
        plan.segments = ()
    with pytest.raises(AttributeError):
        plan.segments[0].start_row = 5
    assert repr(plan) == (
        "BlendPlan(sizes=[100, 100], phases=1, segments=2, total_rows=20, repeat=False, max_period=10000)"
    )


def test_locate_errors():
    plan = BlendPlan([100], [(None, 10, [1])])
    with pytest.raises(IndexError, match=r"row 10 is out of range \[0, 10\)"):
        plan.locate(np.array([3, 10]))
    with pytest.raises(IndexError, match="row -1"):
        plan.locate(np.array([-1]))
    with pytest.raises(IndexError, match="row 11"):
        plan.positions_at(11)
    with pytest.raises(TypeError):
        plan.locate(np.array([1.5]))
    with pytest.raises(TypeError):
        plan.positions_at(1.5)


@pytest.mark.parametrize(
    "sizes, phases, kwargs, message",
    [
        ([-1], [(1, 1, [1])], {}, "sizes[0] must be an int >= 0, got -1"),
        ([1.5], [(1, 1, [1])], {}, "sizes[0] must be an int >= 0, got 1.5"),
        ([], [(1, 1, [])], {}, "sizes must name at least one dataset"),
        ([1], [], {}, "phases must hold at least one phase"),
        ([1], [(1, 1)], {}, "phases[0] must be (rows, seq_len, weights)"),
        ([1], [(None, 1, [1]), (1, 1, [1])], {}, "phases[0]: rows=None is only allowed"),
        ([1], [(-2, 1, [1])], {}, "phases[0] rows must be an int >= 0, got -2"),
        ([1], [(1, 0, [1])], {}, "phases[0] seq_len must be an int >= 1, got 0"),
        ([1, 1], [(1, 1, [1])], {}, "phases[0] has 1 weights for 2 datasets"),
        ([1, 1], [(1, 1, [1, -1])], {}, "weights must be finite and >= 0, got (1, -1)"),
        ([1, 1], [(1, 1, [1, float("nan")])], {}, "weights must be finite and >= 0"),
        ([1, 1], [(1, 1, [0, 0.0])], {}, "phases[0] needs a positive weight, got (0, 0.0)"),
        ([1], [(1, 1, [1])], {"max_period": 0}, "max_period must be an int >= 1, got 0"),
        ([1, 1], [(1, 1, [1, 1])], {"max_period": 1}, "max_period=1 is below the 2 datasets"),
        ([0, 1], [(1, 1, [1, 1])], {"repeat": True}, "dataset 0 has size 0"),
    ],
)
def test_validation(sizes, phases, kwargs, message):
    with pytest.raises(ValueError) as err:
        BlendPlan(sizes, phases, **kwargs)
    assert message in str(err.value)
