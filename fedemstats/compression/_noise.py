"""Estimates of ||x||² and of the quantisation noise E||Q(x) − x||² from a message alone.

Quantisers that scale block b by a sent norm N_b (dithering, block-p) decode
q_j = c_b·l_j with an integer level l_j, and E[q_j] = x_j. Their noise is a sum
over coordinates of a Bernoulli variance:

* dithering, u_j = s|x_j|/N_b = a_j + p_j (a_j integer, p_j ∈ [0, 1)):
  E||Q_b(x) − x_b||² = (N_b/s)² Σ_j p_j(1 − p_j);
* block-p, p_j = |x_j|/N_b: E||Q_b(x) − x_b||² = N_b² Σ_j p_j(1 − p_j)
  = N_b||x_b||₁ − ||x_b||².

In both, E||Q(x)||² = ||x||² + noise (unbiasedness), so noise = E||q||² − ||x||².
With the 2-norm (dithering r = 2, block-p p = 2) ||x_b||² is sent: it is N_b², up
to N_b's round-up to float32, and ``||q||² − Σ_b N_b²`` is unbiased. With the max
norm, p(1 − p) is not a linear function of one Bernoulli draw, so no unbiased
estimate exists; :func:`max_norm_estimate` gives upper estimates.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .base import row_sq_norms

__all__ = ["norm2_estimate", "max_norm_estimate"]

#: upper-estimate weight of a dithering level |l| in units of (N/s)² (see _level_weight_noise)
_WEIGHT_LEVEL_ONE = 1.0
_WEIGHT_HIGHER_LEVEL = 0.25


@njit(cache=True)
def _block_sums(values, blocks, out):
    for i in range(values.shape[0]):
        for b in range(blocks.size - 1):
            acc = 0.0
            for j in range(blocks[b], blocks[b + 1]):
                acc += values[i, j]
            out[i, b] = acc


def block_sums(values, blocks) -> np.ndarray:
    """Sum of each block of each row, float64 (n_rows, n_blocks)."""
    out = np.empty((values.shape[0], blocks.size - 1), dtype=np.float64)
    _block_sums(np.ascontiguousarray(values), blocks, out)
    return out


def _norms_sq(norms) -> np.ndarray:
    return np.asarray(norms, dtype=np.float64) ** 2


def norm2_estimate(decoded, norms) -> tuple:
    """(signal_sq, noise_sq) of a 2-norm-scaled quantiser, each (n_rows,).

    signal_sq = Σ_b N_b², noise_sq = ||q||² − Σ_b N_b² (unbiased given ||x||²).
    Since N_b is ||x_b|| rounded up to float32 (N_b(1 − 2**-23) < ||x_b|| <= N_b),
    signal_sq over-states ||x||² and noise_sq under-states the noise by less than
    ``2**-22 ||x||²``.
    """
    signal = _norms_sq(norms).sum(axis=1)
    return signal, row_sq_norms(decoded) - signal


def _bernoulli_noise(levels, blocks) -> np.ndarray:
    # Levels in {-1, 0, 1} drawn with p_j = |x_j|/N: noise/N² = Σ_j p_j − Σ_j p_j².
    # The arg-max coordinate has p* >= 1 − 2**-23 (N is |x*| rounded up), so it is
    # sent almost surely; n' = n − 1 counts the others and is unbiased for their
    # P' = Σ' p_j. Σ' p_j² needs a lower estimate: E[n'(n' − 1)] = P'² − Σ' p_j²,
    # and Cauchy-Schwarz over the d − 1 others, (d − 1) Σ' p_j² >= P'², gives
    # Σ' p_j² >= (P'² − Σ' p_j²)/(d − 2). So n' − n'(n' − 1)/(d − 2) =
    # n'(d − 1 − n')/(d − 2) over-estimates the noise in expectation (for d = 2
    # the bound is Σ' p_j² >= 0: n'). Exact for a spiky (n' = 0) or flat (n' = d − 1) block.
    size = np.diff(blocks).astype(np.float64)
    # n' >= 0: the arg-max coordinate is missed with probability < 2**-23 (or the block is 0)
    others = np.maximum(block_sums(levels != 0, blocks) - 1.0, 0.0)
    spread = np.divide(size - 1.0 - others, size - 2.0, out=np.ones_like(others), where=size > 2)
    return others * np.where(size > 1, spread, 0.0)


def _level_weight_noise(levels, blocks) -> np.ndarray:
    # A weight g(|l|) per coordinate with E[g(l)] >= p(1 − p) for every u = a + p:
    # l is a (prob. 1 − p) or a + 1 (prob. p), so E[g] = (1 − p) g(a) + p g(a + 1),
    # a line above the parabola p(1 − p) on [0, 1] iff sqrt(g(a)) + sqrt(g(a + 1)) >= 1.
    # g(0) = 0 (zero and small coordinates cost nothing; for u < 1, E[g] = p is
    # tight as p -> 0) forces g(1) = 1; g = 1/4 on higher levels then satisfies
    # every pair and over-states p(1 − p) (mean 1/6 over a uniform p) 1.5x on average.
    mag = np.abs(levels)
    weight = np.where(mag == 1, _WEIGHT_LEVEL_ONE, np.where(mag >= 2, _WEIGHT_HIGHER_LEVEL, 0.0))
    return block_sums(weight, blocks)


def max_norm_estimate(decoded, levels, norms, blocks, s=1) -> tuple:
    """(signal_sq, noise_sq) of a max-norm-scaled quantiser: noise_sq an upper estimate.

    Dithering with r = inf (``s`` levels) and block-p with p = inf (``s = 1``,
    levels = symbols). Block b's noise is (N_b/s)² Σ_j p_j(1 − p_j); p(1 − p) is
    not linear in one draw, so no unbiased estimate exists. With ``s = 1`` (levels
    in {-1, 0, 1}) the Cauchy-Schwarz bound n'(d − 1 − n')/(d − 2) per block (n' the
    non-zero levels but one, d the block size); with ``s >= 2`` the level weights
    g = (0, 1, 1/4, 1/4, ...) summed over the block (derivations inline).
    signal_sq = ||q||² − noise_sq is then a lower estimate of ||x||².
    """
    per_block = _bernoulli_noise(levels, blocks) if s == 1 else _level_weight_noise(levels, blocks)
    noise = (per_block * _norms_sq(norms)).sum(axis=1) / float(s) ** 2
    return row_sq_norms(decoded) - noise, noise
