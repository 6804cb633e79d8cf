"""The integer grid of secure aggregation, and a client's noisy share on it.

Flower's SecAgg+ (``flwr.client.mod.secaggplus_mod``) sums integers modulo 2³²: each
client's float vector is clipped to [−C, C] and mapped to an integer in [0, Q] with
stochastic rounding. A share already on the grid u = h k (h = 2C/Q, |k| ≤ Q/2, C and Q
powers of two) passes that map *exactly* (no rounding happens), so the server's sum is
Σ u_i to the last bit and an in-process run that puts the same shares on the same grid is
the Flower run (``docs/privacy.md``, "Secure aggregation").

A client's share is u_i = round(v_i) + R(ζ_i): its bounded contribution v_i rounded to the
nearest grid point, plus its Gaussian noise share stochastically rounded (unbiased) with the
same client stream. Rounding the two apart is what keeps the mechanism a Gaussian one: the
sum Σ round(v_i) is a function of the data whose sensitivity grows by at most √q h (the
rounding of the one client that changes), and Σ R(ζ_i) is data-independent noise whose
probabilities are, at every grid point, the density of N(0, σ²Δ² I) plus an independent
bounded term (the rounding errors) — a post-processing of the Gaussian mechanism — sampled
on the grid. The approximation is that of sampling a density of width s on a grid of step
h ≪ s; :data:`MIN_STEPS_PER_STD` keeps h/s small and a warning names a run where it is not.
"""
from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from .mechanism import client_noise_generator, gaussian_noise

__all__ = ["SecAggGrid", "secagg_grid", "noisy_share", "share_bits", "MODULUS_RANGE", "MODULUS_BITS", "COUNT_BOUND", "NOISE_MARGIN",
           "MIN_STEPS_PER_STD"]

logger = logging.getLogger(__name__)

#: SecAgg+'s modulus (Flower's default and largest): sums of the integers wrap at 2³²
MODULUS_BITS = 32
MODULUS_RANGE = 2 ** MODULUS_BITS
#: Flower casts the integers to int32 before masking: Q stays well inside it
MAX_TARGET_BITS = 30
#: a client's count (rows, or 1 at level="client") is clipped at this many before its share
COUNT_BOUND = 2.0 ** 20
#: the grid's range C covers a share's bound plus this many standard deviations of its noise
NOISE_MARGIN = 10.0
#: the share's noise should span at least this many grid steps (the grid approximation above)
MIN_STEPS_PER_STD = 8.0


@dataclasses.dataclass(frozen=True)
class SecAggGrid:
    """SecAgg+'s quantisation: values in [−C, C] on Q + 1 levels, step h = 2C / Q.

    Attributes
    ----------
    clip_range : float
        C, a power of two (Flower's ``clipping_range``).
    target_range : int
        Q, a power of two (Flower's ``quantization_range``).
    """

    clip_range: float
    target_range: int

    @property
    def step(self) -> float:
        """h = 2C / Q (a power of two, so grid values travel exactly)."""
        return 2.0 * self.clip_range / self.target_range

    def share(self, value, noise, rng):
        """round(value) + R(noise) on the grid, within [−C, C].

        Parameters
        ----------
        value : ndarray of shape (m,)
            The client's bounded contribution (rounded to the nearest grid point).
        noise : ndarray of shape (m,)
            Its noise share (stochastically rounded: E[R(ζ)] = ζ).
        rng : numpy.random.Generator
            The client's stream (the one its noise came from).

        Returns
        -------
        share : ndarray of shape (m,)
            Multiples of h.
        n_clipped : int
            Entries that left [−C, C] (0 unless the bound was wrong; the sum is then biased).
        """
        h = self.step
        scaled = np.asarray(noise, dtype=np.float64) / h
        floor = np.floor(scaled)
        levels = np.rint(np.asarray(value, dtype=np.float64) / h) + floor + (rng.random(scaled.shape) < scaled - floor)
        half = self.target_range // 2
        n_clipped = int(np.count_nonzero(np.abs(levels) > half))
        return np.clip(levels, -half, half) * h, n_clipped


def secagg_grid(bound, n_clients) -> SecAggGrid:
    """The grid for shares bounded by ``bound`` summed over up to ``n_clients`` clients.

    C is the smallest power of two ≥ ``bound``; Q the largest power of two with
    n_clients · Q < 2³² (the sum of the clients' levels in [0, Q] must not wrap).
    """
    if not (np.isfinite(bound) and bound > 0):
        raise ValueError(f"secure aggregation: the share bound must be finite and > 0; got {bound!r}.")
    n_clients = int(n_clients)
    if n_clients < 1:
        raise ValueError(f"secure aggregation needs at least one client; got {n_clients}.")
    bits = min(MAX_TARGET_BITS, math.floor(math.log2((MODULUS_RANGE - 1) / n_clients)))
    if bits < 1:
        raise ValueError(f"secure aggregation: {n_clients} clients leave no room on a 2^32 modulus.")
    return SecAggGrid(clip_range=2.0 ** math.ceil(math.log2(bound)), target_range=2 ** bits)


def share_bits(m) -> int:
    """Bits one client uploads for a share of ``m`` values: m integers modulo 2³² and SecAgg+'s
    weight factor (the key exchange's bytes are not counted)."""
    return (int(m) + 1) * MODULUS_BITS


def noisy_share(value, std, grid, key, stream, client):
    """Client ``client``'s share of one release: round(value) + R(ζ), ζ ~ N(0, std² I).

    Parameters
    ----------
    value : ndarray of shape (m,)
    std : float
        Its noise share's standard deviation (``noise_share_std``).
    grid : SecAggGrid
    key : int
        The noise key: the node's own secret on a deployment; the run's entropy in-process.
    stream, client : int
        The release (round) and the client's index: one independent stream each.

    Returns
    -------
    ndarray of shape (m,)
    """
    value = np.asarray(value, dtype=np.float64)
    if std > 0 and std < MIN_STEPS_PER_STD * grid.step:
        logger.warning("secure aggregation: the noise share (std %.3g) spans fewer than %g grid steps (%.3g); "
                       "the grid approximation of the Gaussian mechanism is coarse", std, MIN_STEPS_PER_STD,
                       grid.step)
    rng = client_noise_generator(key, stream, client)
    share, n_clipped = grid.share(value, gaussian_noise(value.shape, std, rng), rng)
    if n_clipped:
        logger.warning("secure aggregation: %d entries of client %d's share left [-%g, %g] and were clipped",
                       n_clipped, client, grid.clip_range, grid.clip_range)
    return share
