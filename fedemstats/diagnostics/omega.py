"""Empirical compression constant ω (assumption A6 of paper 003) by Monte Carlo."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from .._validation import check_int, check_rng

__all__ = ["OmegaEstimate", "empirical_omega", "omega_test_vectors", "worst_case_omega"]

#: Largest number of float64 entries materialised at once when drawing Q(x) (≈ 32 MB)
_DRAW_CHUNK_ENTRIES = 4_000_000


@dataclass(frozen=True)
class OmegaEstimate:
    """Monte-Carlo estimate of ω(x) = E||Q(x)||² / ||x||² − 1 for one vector x.

    Attributes
    ----------
    estimate, ci_low, ci_high : float
        Sample mean and a two-sided normal confidence interval.
    bound : float
        The compressor's stated ``omega(q, blocks)``.
    n_draws : int
    """

    estimate: float
    ci_low: float
    ci_high: float
    bound: float
    n_draws: int

    @property
    def violates_bound(self) -> bool:
        """True when the bound lies below the whole confidence interval."""
        return self.ci_low > self.bound


def empirical_omega(compressor, x, rng, n_draws=1000, blocks=None, confidence=0.99) -> OmegaEstimate:
    """Estimate ω(x) by compressing ``x`` ``n_draws`` times (A6 of paper 003).

    Parameters
    ----------
    compressor : Compressor
    x : ndarray of shape (q,)
        Non-zero test vector.
    rng : numpy.random.Generator
    n_draws : int, default=1000
    blocks : ndarray of int, optional
        Statistic block boundaries passed to the compressor.
    confidence : float, default=0.99

    Returns
    -------
    OmegaEstimate
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    norm2 = float(x @ x)
    if norm2 == 0.0:
        raise ValueError("x must be non-zero to estimate omega.")
    n_draws = check_int(n_draws, "n_draws", minimum=2)
    rng = check_rng(rng)
    chunk = max(1, _DRAW_CHUNK_ENTRIES // x.size)
    ratios = []
    for start in range(0, n_draws, chunk):
        rows = np.broadcast_to(x, (min(chunk, n_draws - start), x.size))
        decoded = compressor.decompress(compressor.compress(rows, rng, blocks))
        ratios.append(np.einsum("ij,ij->i", decoded, decoded) / norm2 - 1.0)
    r = np.concatenate(ratios)
    half = norm.ppf(0.5 + confidence / 2.0) * r.std(ddof=1) / math.sqrt(r.size)
    mean = float(r.mean())
    return OmegaEstimate(mean, mean - half, mean + half, float(compressor.omega(x.size, blocks)), r.size)


def omega_test_vectors(q, rng) -> dict:
    """Test vectors of length ``q`` that stress the known compressors.

    ``"flat"`` (equal magnitudes, random signs: the worst case of dithering and
    block-p), ``"gaussian"``, ``"heavy"`` (Cauchy: a few dominant coordinates) and
    ``"spike"`` (one large coordinate on a small flat background).

    Returns
    -------
    dict of str -> ndarray of shape (q,)
    """
    q = check_int(q, "q")
    rng = check_rng(rng)
    spike = np.full(q, 1e-3) * rng.choice([-1.0, 1.0], q)
    spike[rng.integers(q)] = 1.0
    return {"flat": rng.choice([-1.0, 1.0], q), "gaussian": rng.standard_normal(q),
            "heavy": rng.standard_cauchy(q), "spike": spike}


def worst_case_omega(compressor, q, rng, n_draws=1000, blocks=None, confidence=0.99):
    """The largest :func:`empirical_omega` over :func:`omega_test_vectors`.

    Returns
    -------
    name : str
        The worst test vector.
    estimate : OmegaEstimate
    """
    rng = check_rng(rng)
    estimates = {name: empirical_omega(compressor, x, rng, n_draws, blocks, confidence)
                 for name, x in omega_test_vectors(q, rng).items()}
    name = max(estimates, key=lambda k: estimates[k].estimate)
    return name, estimates[name]
