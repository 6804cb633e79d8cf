"""Rand-k sparsification with indices from a shared seed (SPEC §6).

Q(x) = (q/k) Σ_{j∈J} x_j e_j with J a uniform k-subset of {0..q-1}: E[Q(x)] = x and
E||Q(x)||² = (q/k)||x||², so omega = q/k - 1 exactly. Wire format of one row: a
64-bit seed, then the k scaled values (float64, or float32 with unbiased
stochastic rounding). The receiver regenerates J from the seed with the same
kernel (splitmix64 + partial Fisher-Yates, independent of the NumPy version).
"""
from __future__ import annotations

import numbers

import numpy as np
from numba import njit

from .base import Compressor, Message, _as_rows, row_sq_norms, seed_rows, uniform_rows
from .streams import GOLDEN, fmix64
from ..ledger import FLOAT32_BITS, FLOAT64_BITS

__all__ = ["RandK"]

#: the per-row seed is one uint64
SEED_BITS = 64
_SEED_HIGH = 2 ** SEED_BITS
_WIRE = {"float64": ("<f8", FLOAT64_BITS), "float32": ("<f4", FLOAT32_BITS)}
_ONE = np.uint64(1)


@njit(cache=True)
def _splitmix(state):
    # splitmix64 (Steele, Lea & Flood 2014): a Weyl step, then the finaliser
    state = state + GOLDEN
    return state, fmix64(state)


@njit(cache=True)
def _below(state, bound):
    # rejection on the smallest covering bit mask: exactly uniform on [0, bound)
    mask = bound - _ONE
    for sh in (1, 2, 4, 8, 16, 32):
        mask |= mask >> np.uint64(sh)
    while True:
        state, z = _splitmix(state)
        v = z & mask
        if v < bound:
            return state, v


@njit(cache=True)
def _indices_kernel(seeds, q, k, out):
    perm = np.arange(q)
    swaps = np.empty(k, dtype=np.int64)
    for i in range(seeds.size):
        state = seeds[i]
        for t in range(k):
            state, r = _below(state, np.uint64(q - t))
            j = t + np.int64(r)
            perm[t], perm[j] = perm[j], perm[t]
            swaps[t] = j
            out[i, t] = perm[t]
        for t in range(k - 1, -1, -1):  # undo the swaps: O(k) reset instead of O(q)
            j = swaps[t]
            perm[t], perm[j] = perm[j], perm[t]


def shared_indices(seeds, q: int, k: int) -> np.ndarray:
    """The k distinct coordinates of each row from its seed, int64 (n_rows, k)."""
    out = np.empty((seeds.size, k), dtype=np.int64)
    _indices_kernel(np.ascontiguousarray(seeds, dtype=np.uint64), int(q), int(k), out)
    return out


def round_float32_unbiased(v, u) -> np.ndarray:
    """Stochastic rounding of float64 ``v`` to one of its two float32 neighbours.

    Picks the upper neighbour with probability (v - lo)/(hi - lo) using uniforms
    ``u`` of the same shape, so E[result] = v (up to float64 rounding).
    """
    f = v.astype(np.float32)
    if not np.all(np.isfinite(f)):
        raise ValueError("a rand-k value exceeds the float32 range; use dtype='float64'.")
    f64 = f.astype(np.float64)
    lo = np.where(f64 > v, np.nextafter(f, np.float32(-np.inf)), f)
    hi = np.where(f64 < v, np.nextafter(f, np.float32(np.inf)), f)
    gap = hi.astype(np.float64) - lo.astype(np.float64)
    p_hi = np.divide(v - lo, gap, out=np.zeros_like(v), where=gap > 0)
    return np.where(u < p_hi, hi, lo).astype(np.float32)


class RandK(Compressor):
    """Unbiased rand-k sparsification, omega = q/k - 1.

    Parameters
    ----------
    k : int
        Coordinates kept per row, ``1 <= k <= q`` (``k > q`` fails at compress time).
    dtype : {"float64", "float32"}, default="float64"
        Wire dtype of the kept values. float32 uses unbiased stochastic rounding,
        so E[Q(x)] = x still holds exactly for what is decoded.

    Notes
    -----
    Block boundaries are ignored. Bits per row: 64 (seed) + k * 64 (or 32).
    """

    name = "randk"

    def __init__(self, k, dtype="float64"):
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"rand-k needs an integer k >= 1 coordinates to keep; got k={k!r}.")
        if dtype not in _WIRE:
            raise ValueError(f"rand-k dtype must be 'float64' or 'float32'; got {dtype!r}.")
        self.k = int(k)
        self.dtype = dtype

    def _check_q(self, q):
        if self.k > q:
            raise ValueError(f"rand-k keeps k={self.k} coordinates but the model's statistic has only q={q} "
                             f"(model.layout lists its blocks); choose k <= {q}, e.g. 'randk:k={max(1, q // 4)}'.")

    def check_size(self, q):
        self._check_q(int(q))

    def _check_codec(self, message):
        if message.codec != self.name:
            raise ValueError(f"RandK cannot decode a {message.codec!r} message.")

    def compress(self, x, rng, blocks=None) -> Message:
        """Sparsify rows; ``arrays``: ``seeds`` uint64 (n_rows,), ``values`` (n_rows, k) float64/float32."""
        x = _as_rows(x)
        n, q = x.shape
        self._check_q(q)
        seeds = seed_rows(rng, n, _SEED_HIGH)
        idx = shared_indices(seeds, q, self.k)
        values = np.take_along_axis(x, idx, axis=1) * (q / self.k)
        if self.dtype == "float32":
            values = round_float32_unbiased(values, uniform_rows(rng, *values.shape))
        return Message(self.name, n, q, {"seeds": seeds, "values": values},
                       {"k": self.k, "value_bits": _WIRE[self.dtype][1]})

    def decompress(self, message: Message) -> np.ndarray:
        """Scatter the values back at the indices regenerated from the seeds, float64 (n_rows, q)."""
        self._check_codec(message)
        out = np.zeros((message.n_rows, message.q), dtype=np.float64)
        idx = shared_indices(message.arrays["seeds"], message.q, int(message.meta["k"]))
        np.put_along_axis(out, idx, message.arrays["values"].astype(np.float64), axis=1)
        return out

    def omega(self, q, blocks=None) -> float:
        """q/k - 1."""
        self._check_q(int(q))
        return float(q) / self.k - 1.0

    def noise_estimate(self, message: Message) -> tuple:
        """``(signal_sq, noise_sq)`` of each row, both unbiased; see :meth:`Compressor.noise_estimate`.

        E||Q(x)||² = (q/k)||x||² exactly, so signal_sq = (k/q)||q||² and
        noise_sq = (q/k − 1) signal_sq = (1 − k/q)||q||² estimate ||x||² and
        E||Q(x) − x||² = (q/k − 1)||x||² without bias. With float32 values the
        stochastic rounding adds a variance R <= 2**-48 ||q||² to both E||Q(x)||²
        and the noise; the estimates then miss a relative 2**-48 at most.
        """
        self._check_codec(message)
        sq = row_sq_norms(message.arrays["values"])
        keep = int(message.meta["k"]) / message.q
        return keep * sq, (1.0 - keep) * sq

    def row_bits(self, message: Message) -> np.ndarray:
        """64 (seed) + k * value bits for each row."""
        self._check_codec(message)
        per_row = SEED_BITS + int(message.meta["k"]) * int(message.meta["value_bits"])
        return np.full(message.n_rows, per_row, dtype=np.int64)

    def encode(self, message: Message) -> list:
        """One ``bytes`` per row: little-endian uint64 seed, then the k values."""
        self._check_codec(message)
        fmt = "<f8" if message.meta["value_bits"] == FLOAT64_BITS else "<f4"
        seeds = message.arrays["seeds"].astype("<u8")
        values = message.arrays["values"].astype(fmt)
        return [s.tobytes() + v.tobytes() for s, v in zip(seeds, values)]

    def decode(self, payloads, q, blocks=None) -> Message:
        """Inverse of :meth:`encode` for this compressor's ``k`` and ``dtype``."""
        q = int(q)
        self._check_q(q)
        fmt, vbits = _WIRE[self.dtype]
        size = (SEED_BITS + self.k * vbits) // 8
        if any(len(p) != size for p in payloads):
            raise ValueError(f"rand-k payloads must be {size} bytes for k={self.k}, dtype={self.dtype}.")
        seed_bytes = SEED_BITS // 8
        seeds = np.array([np.frombuffer(p[:seed_bytes], "<u8")[0] for p in payloads], dtype=np.uint64)
        values = np.array([np.frombuffer(p[seed_bytes:], fmt) for p in payloads],
                          dtype=np.dtype(fmt).newbyteorder("=")).reshape(len(payloads), self.k)
        return Message(self.name, len(payloads), q, {"seeds": seeds, "values": values},
                       {"k": self.k, "value_bits": vbits})
