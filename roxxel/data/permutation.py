"""A stateless, keyed pseudo-random permutation of ``[0, n)``.

The streamer shuffles fixed-size chunks of a token stream. Shuffling an
``arange(n)`` costs 8 bytes per chunk of host RAM and must be redone for every
epoch; a Feistel network computes the i-th element of the shuffled order
directly, in O(1) memory, from ``(seed, epoch)`` alone.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["FeistelPermutation"]

# splitmix64 constants (Steele et al.); the finaliser is a bijection of 64-bit words
# whose output bits each depend on every input bit.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

# Outputs are int64, so every index must be below 2**63.
_MAX_N = 2**63


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic, new array)."""
    # Arrays, never numpy scalars: scalar uint64 overflow warns, array overflow wraps.
    z = z ^ (z >> _S30)
    z *= _MUL1
    z ^= z >> _S27
    z *= _MUL2
    z ^= z >> _S31
    return z


def _check_key(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    value = int(value)
    if not 0 <= value < 2**64:
        raise ValueError(f"{name} must be a non-negative int below 2**64, got {value}")
    return value


class FeistelPermutation:
    """Pseudo-random bijection of ``[0, n)`` keyed by ``(seed, epoch)``.

    A balanced Feistel network over the smallest even number of bits ``2h``
    covering ``n`` permutes ``[0, 4**h)``; cycle-walking (re-applying it until
    the value falls below ``n``) restricts that to ``[0, n)``. Because
    ``4**h < 4 * n``, at most 4 applications are needed on average. Everything
    is computed in numpy ``uint64`` arithmetic, so the order is identical on
    every platform; nothing proportional to ``n`` is allocated.

    Args:
      n: domain size, ``1 <= n <= 2**63``.
      seed: non-negative int below ``2**64``.
      epoch: non-negative int below ``2**64``; each epoch gives a new order.
      rounds: Feistel rounds (>= 1); 6 gives well-mixed orders.

    Raises:
      ValueError: an argument is out of range or not an int.
    """

    n: int
    seed: int
    epoch: int
    rounds: int
    _half: np.uint64
    _mask: np.uint64
    _keys: np.ndarray

    def __init__(self, n: int, seed: int, epoch: int = 0, rounds: int = 6):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= _MAX_N:
            raise ValueError(f"n must be >= 1 (and <= 2**63), got {n!r}")
        if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds!r}")
        self.n = int(n)
        self.seed = _check_key("seed", seed)
        self.epoch = _check_key("epoch", epoch)
        self.rounds = int(rounds)
        bits = max(1, (self.n - 1).bit_length())
        self._half = np.uint64((bits + 1) // 2)
        self._mask = np.uint64((1 << int(self._half)) - 1)
        base = _mix64(_mix64(np.array([self.seed], np.uint64)) + np.uint64(self.epoch))
        self._keys = _mix64(base + _GOLDEN * np.arange(1, self.rounds + 1, dtype=np.uint64))

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return (
            f"FeistelPermutation(n={self.n}, seed={self.seed}, epoch={self.epoch}, "
            f"rounds={self.rounds})"
        )

    __str__ = __repr__

    def __call__(self, i):
        """Permuted index of ``i``.

        Args:
          i: Python/numpy int, or integer array of any shape, in ``[0, n)``.

        Returns:
          ``int`` for a scalar input, else an ``int64`` array of ``i``'s shape.

        Raises:
          TypeError: ``i`` is not integral.
          IndexError: an element lies outside ``[0, n)``.
        """
        return self._apply(i, self._encrypt)

    def inverse(self, j):
        """Index ``i`` with ``self(i) == j``; same input kinds, shapes and errors as ``__call__``."""
        return self._apply(j, self._decrypt)

    def _apply(self, x, step):
        scalar = not isinstance(x, np.ndarray)
        arr = np.asarray(x)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(f"indices must be integers, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n):
            bad = arr[(arr < 0) | (arr >= self.n)].flat[0]
            raise IndexError(f"index {int(bad)} out of range [0, {self.n})")
        y = step(arr.astype(np.uint64).reshape(-1))
        # Cycle-walk: values landing in [n, 4**h) are mapped again; the loop only
        # touches the shrinking set that is still out of range.
        todo = np.flatnonzero(y >= self.n)
        while todo.size:
            y[todo] = step(y[todo])
            todo = todo[y[todo] >= self.n]
        out = y.astype(np.int64).reshape(arr.shape)
        return int(out) if scalar and out.ndim == 0 else out

    def _round(self, key: np.uint64, half: np.ndarray) -> np.ndarray:
        return _mix64(half ^ key) & self._mask

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ self._round(key, right)
        return (left << self._half) | right

    def _decrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys[::-1]:
            left, right = right ^ self._round(key, left), left
        return (left << self._half) | right
