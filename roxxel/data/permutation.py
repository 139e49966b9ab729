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
_M64 = 2**64 - 1
# Up to this many indices, Python ints beat numpy: a numpy call costs ~1-2 us whatever its
# size and a cycle-walked array needs ~60 per application, so small inputs (a resume's first
# batch asks for a few rows per dataset) are dominated by that overhead.
_SMALL = 24


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic, new array)."""
    # Arrays, never numpy scalars: scalar uint64 overflow warns, array overflow wraps.
    z = z ^ (z >> _S30)
    z *= _MUL1
    z ^= z >> _S27
    z *= _MUL2
    z ^= z >> _S31
    return z


def _mix64_int(z: int) -> int:
    """:func:`_mix64` of one word, in Python ints (same result)."""
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & _M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


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
    is computed in wrapping ``uint64`` arithmetic (numpy arrays; Python ints
    masked to 64 bits for up to ``_SMALL`` indices, the same values), so the
    order is identical on every platform; nothing proportional to ``n`` is
    allocated.

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
    _int_keys: list[int]
    _half_int: int
    _mask_int: int

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
        # Round keys in Python ints (a few words: numpy's per-call cost would dominate), wrapping as uint64.
        base = _mix64_int((_mix64_int(self.seed) + self.epoch) & _M64)
        self._int_keys = [_mix64_int((base + int(_GOLDEN) * r) & _M64) for r in range(1, self.rounds + 1)]
        self._keys = np.array(self._int_keys, np.uint64)
        self._half_int, self._mask_int = int(self._half), int(self._mask)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"FeistelPermutation(n={self.n}, seed={self.seed}, epoch={self.epoch}, rounds={self.rounds})"

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
        return self._apply(i, self._encrypt, self._encrypt_int)

    def inverse(self, j):
        """Index ``i`` with ``self(i) == j``; same input kinds, shapes and errors as ``__call__``."""
        return self._apply(j, self._decrypt, self._decrypt_int)

    def _apply(self, x, step, step_int):
        scalar = not isinstance(x, np.ndarray)
        arr = np.asarray(x)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(f"indices must be integers, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n):
            bad = arr[(arr < 0) | (arr >= self.n)].flat[0]
            raise IndexError(f"index {int(bad)} out of range [0, {self.n})")
        if arr.size <= _SMALL:
            out = np.array([self._walk_int(int(v), step_int) for v in arr.reshape(-1).tolist()], np.int64)
            return int(out[0]) if scalar and arr.ndim == 0 else out.reshape(arr.shape)
        y = step(arr.astype(np.uint64).reshape(-1))
        # Cycle-walk: values landing in [n, 4**h) are mapped again; the loop only
        # touches the shrinking set that is still out of range.
        todo = np.flatnonzero(y >= self.n)
        while todo.size:
            y[todo] = step(y[todo])
            todo = todo[y[todo] >= self.n]
        out = y.astype(np.int64).reshape(arr.shape)
        return int(out) if scalar and out.ndim == 0 else out

    def _walk_int(self, x: int, step_int) -> int:
        """One index through ``step_int``, cycle-walked into ``[0, n)`` (as :meth:`_apply` does on arrays)."""
        x = step_int(x)
        while x >= self.n:
            x = step_int(x)
        return x

    def _encrypt_int(self, x: int) -> int:
        half, mask = self._half_int, self._mask_int
        left, right = x >> half, x & mask
        for key in self._int_keys:
            left, right = right, left ^ (_mix64_int(right ^ key) & mask)
        return (left << half) | right

    def _decrypt_int(self, x: int) -> int:
        half, mask = self._half_int, self._mask_int
        left, right = x >> half, x & mask
        for key in reversed(self._int_keys):
            left, right = right ^ (_mix64_int(left ^ key) & mask), left
        return (left << half) | right

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
