"""Vectorisable exp and log-sum of the mixture kernels (numba).

libm's scalar ``exp`` and ``log`` were about a third of a full-covariance GMM pass
(one exp per row and component, one log per row): :func:`exp_shifted` computes
``exp(a - b)`` to 1 ulp in a loop LLVM turns into SIMD code, and :func:`sum_log_norm`
takes one log per :data:`LOG_GROUP` rows.
"""
from __future__ import annotations

from math import factorial

import numpy as np
from numba import njit

from ._gmm_tiles import FAST_SUMS

__all__ = ["exp_shifted", "sum_log_norm", "EXP_MIN", "LOG_GROUP"]

#: exp: log2(e), ln 2 in two parts (fdlibm's; k * LN2_HI is exact for |k| < 2^20), the
#: Taylor coefficients 1/j! and the argument below which exp underflows to (almost) 0.
LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
EXP_POLY = np.array([1.0 / factorial(j) for j in range(14)])
EXP_MIN = -708.0
#: Rows whose normalisers are multiplied before one log (K**LOG_GROUP < 1e308 for K < 1e19).
LOG_GROUP = 16


@njit(cache=True, fastmath={"contract"})
def exp_shifted(lp, mx, n, bits, out):
    """out[t] = exp(lp[t] - mx[t]) for t < n, to 1 ulp, in a loop LLVM vectorises.

    Cody-Waite reduction ``x = k ln 2 + r`` (|r| <= ln 2 / 2, no reassociation: the two
    parts of ln 2 must be subtracted in order), a degree-13 Taylor polynomial of
    ``exp(r)`` (truncation < 1e-17) and ``2^k`` built from its exponent bits. Arguments
    below EXP_MIN (including -inf: an empty component) give exactly 0. libm's scalar
    exp was a third of a full-covariance round.
    """
    scale = bits.view(np.float64)
    for t in range(n):
        x = max(lp[t] - mx[t], EXP_MIN)
        k = np.floor(x * LOG2E + 0.5)
        r = (x - k * LN2_HI) - k * LN2_LO
        p = EXP_POLY[13]
        for j in range(12, -1, -1):
            p = p * r + EXP_POLY[j]
        bits[t] = (np.int64(k) + 1023) << 52
        out[t] = p
    for t in range(n):
        out[t] = out[t] * scale[t] if lp[t] - mx[t] >= EXP_MIN else 0.0


@njit(cache=True, fastmath=FAST_SUMS)
def sum_log_norm(mx, sm, n, start=0):
    """sum_t (mx[t] + log sm[t]) over rows start <= t < n with one log per LOG_GROUP rows:
    sm[t] is in [1, K], so a product of LOG_GROUP of them cannot overflow, and a log costs
    ten multiply-adds. ``start`` lets a chunk holding several clients sum each one's rows."""
    # unsigned bounds and reassociated sums: a signed start kept both loops scalar
    start, n = np.uint64(start), np.uint64(n)
    total = 0.0
    for t in range(start, n):
        total += mx[t]
    for t0 in range(start, n, np.uint64(LOG_GROUP)):
        p = 1.0
        for t in range(t0, min(n, t0 + np.uint64(LOG_GROUP))):
            p *= sm[t]
        total += np.log(p)
    return total
