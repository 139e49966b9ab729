"""Tests for roxxel.data.permutation.FeistelPermutation."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roxxel.data.permutation import _GOLDEN, _SMALL, FeistelPermutation, _mix64


def assert_bijection(perm: FeistelPermutation) -> None:
    idx = np.arange(perm.n, dtype=np.int64)
    out = perm(idx)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(np.sort(out), idx)
    np.testing.assert_array_equal(perm.inverse(out), idx)
    np.testing.assert_array_equal(perm(perm.inverse(idx)), idx)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 1000, 1001, 1024, 2**16 + 3])
def test_bijection_fixed_sizes(n):
    assert_bijection(FeistelPermutation(n, seed=3, epoch=1))


@settings(max_examples=25, deadline=None)
@given(
    half=st.integers(0, 50_000),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 1000),
    rounds=st.integers(1, 8),
)
def test_bijection_random_odd_sizes(half, seed, epoch, rounds):
    assert_bijection(FeistelPermutation(2 * half + 1, seed, epoch, rounds))


def test_n_one_is_identity():
    perm = FeistelPermutation(1, seed=9)
    assert perm(0) == 0 and perm.inverse(0) == 0
    assert len(perm) == 1


def test_scalar_and_shape_kinds():
    perm = FeistelPermutation(1000, seed=1, epoch=2)
    grid = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = perm(grid)
    assert out.shape == (3, 4) and out.dtype == np.int64
    assert isinstance(perm(5), int) and perm(5) == out[1, 1]
    assert isinstance(perm(np.int64(5)), int) and perm(np.int64(5)) == perm(5)
    assert perm(np.array(5)).shape == ()
    assert perm(np.arange(5, dtype=np.uint64)).tolist() == perm(np.arange(5)).tolist()
    assert perm(np.array([], np.int64)).shape == (0,)
    assert isinstance(perm.inverse(perm(7)), int) and perm.inverse(perm(7)) == 7


def test_golden_values():
    # The order is part of the resume contract: any change to the mix or the key
    # schedule silently reshuffles every checkpointed run.
    assert FeistelPermutation(1000, seed=1, epoch=2)(np.arange(8)).tolist() == [
        323,
        359,
        572,
        220,
        341,
        387,
        912,
        679,
    ]
    big = FeistelPermutation(2**61 + 1, seed=42, epoch=7)
    assert big(np.array([0, 1, 2**61])).tolist() == [
        596465176868018695,
        375596881640259616,
        1405340211062864692,
    ]


def test_deterministic_for_same_key():
    a = FeistelPermutation(10_007, seed=123, epoch=4)
    b = FeistelPermutation(10_007, seed=123, epoch=4)
    idx = np.arange(10_007)
    np.testing.assert_array_equal(a(idx), b(idx))


def test_seeds_and_epochs_change_the_order():
    idx = np.arange(1000)
    orders = {
        (seed, epoch): tuple(FeistelPermutation(1000, seed, epoch)(idx)) for seed in range(4) for epoch in range(4)
    }
    assert len(set(orders.values())) == len(orders)
    identity = tuple(idx)
    assert identity not in set(orders.values())


def test_order_looks_shuffled():
    n = 10_000
    out = FeistelPermutation(n, seed=5)(np.arange(n))
    assert np.count_nonzero(out == np.arange(n)) < 10  # ~1 fixed point expected
    # Neighbours land far apart: consecutive chunks do not stay together.
    assert np.median(np.abs(np.diff(out))) > n / 10


@pytest.mark.parametrize("n", [2**61 + 12_345, 2**62, 2**63])
def test_huge_domains(n):
    perm = FeistelPermutation(n, seed=77, epoch=3)
    idx = np.array([0, 1, 2, 12345, n // 2, n - 2, n - 1], dtype=np.uint64)
    out = perm(idx)
    assert ((out >= 0) & (out.astype(np.uint64) < np.uint64(n))).all()
    assert len(set(out.tolist())) == len(idx)
    np.testing.assert_array_equal(perm.inverse(out).astype(np.uint64), idx)
    assert perm(n - 1) == int(out[-1])


def test_no_allocation_proportional_to_n():
    tracemalloc.start()
    try:
        perm = FeistelPermutation(2**60, seed=1, epoch=1)
        perm(np.arange(64))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n=0, seed=1), "n must be >= 1 (and <= 2**63), got 0"),
        (dict(n=-5, seed=1), "got -5"),
        (dict(n=2**63 + 1, seed=1), "got 9223372036854775809"),
        (dict(n=2.0, seed=1), "got 2.0"),
        (dict(n=10, seed=-1), "seed must be a non-negative int below 2**64, got -1"),
        (dict(n=10, seed=2**64), "seed must be a non-negative int below 2**64"),
        (dict(n=10, seed=1, epoch=-3), "epoch must be a non-negative int below 2**64, got -3"),
        (dict(n=10, seed="7"), "seed must be a non-negative int, got '7'"),
        (dict(n=10, seed=1, rounds=0), "rounds must be >= 1, got 0"),
    ],
)
def test_validation(kwargs, message):
    with pytest.raises(ValueError) as err:
        FeistelPermutation(**kwargs)
    assert message in str(err.value)


def test_index_errors():
    perm = FeistelPermutation(10, seed=1)
    with pytest.raises(IndexError, match=r"index 10 out of range \[0, 10\)"):
        perm(10)
    with pytest.raises(IndexError, match="index -1"):
        perm.inverse(np.array([3, -1]))
    with pytest.raises(TypeError, match="float64"):
        perm(np.array([1.0]))


def test_repr_names_parameters():
    perm = FeistelPermutation(100, seed=7, epoch=2)
    assert repr(perm) == "FeistelPermutation(n=100, seed=7, epoch=2, rounds=6)"
    assert str(perm) == repr(perm)
    assert len(perm) == 100


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 19_531, 65_536, 2**31 - 1, 2**40 + 7, 2**63])
def test_small_inputs_take_python_ints_to_the_same_order(n):
    """Up to _SMALL indices are permuted in Python ints (a resume's first batch): the same values
    as the numpy path, forward and inverse, for scalars and arrays; the order is part of resume."""
    rng = np.random.default_rng(n % 1000)
    for seed, epoch in ((0, 0), (7, 3), (2**64 - 1, 2**64 - 1)):
        perm = FeistelPermutation(n, seed, epoch)
        idx = rng.integers(0, n, size=3 * _SMALL, dtype=np.uint64).astype(np.int64)
        big_fwd, big_inv = perm(idx), perm.inverse(idx)  # numpy: more than _SMALL indices
        assert [perm(int(i)) for i in idx] == big_fwd.tolist()
        assert [perm.inverse(int(i)) for i in idx] == big_inv.tolist()
        small = idx[:_SMALL].reshape(2, -1)
        np.testing.assert_array_equal(perm(small), big_fwd[:_SMALL].reshape(2, -1))
        np.testing.assert_array_equal(perm.inverse(small), big_inv[:_SMALL].reshape(2, -1))
        assert perm(small).dtype == np.int64 and perm(np.array(idx[0])).shape == ()


@pytest.mark.parametrize("seed, epoch", [(0, 0), (1, 2), (2**64 - 1, 2**64 - 1), (2**63, 12345)])
def test_round_keys_are_the_uint64_derivation(seed, epoch):
    """The round keys (computed in Python ints) are splitmix64 in wrapping uint64 arithmetic, as first defined."""
    base = _mix64(_mix64(np.array([seed], np.uint64)) + np.uint64(epoch))
    want = _mix64(base + _GOLDEN * np.arange(1, 7, dtype=np.uint64))
    np.testing.assert_array_equal(FeistelPermutation(5, seed, epoch)._keys, want)
