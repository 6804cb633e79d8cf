"""Distributed-mode releases through secure aggregation (issue 14, ``docs/privacy.md``).

In ``mode="distributed"`` the server may learn only Σ_{i∈A} u_i, each client's share u_i put
on secure aggregation's integer grid (:mod:`fedemstats.privacy.secagg`). The same functions
make the shares in-process (:class:`~.private.PrivateFedEM`, which sums them itself) and on a
Flower node (``fedemstats.flower.private_client``, where SecAgg+ sums them), and the same
:func:`sums_from_total` turns the sum into the round's direction on both sides, so the two runs
agree to the last bits of one division (``tests/test_flower_secagg.py``).

Units: a share is the client's contribution in the release's coordinates divided by the
released count Ñ, u_i = (c_i + ζ_i)/Ñ, so that Σ u_i is the noisy mean statistic (in P_k's
coordinates) and the grid's range does not grow with the data.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..privacy import noise_share_std
from ..privacy.secagg import COUNT_BOUND, NOISE_MARGIN, SecAggGrid, noisy_share, secagg_grid
from .private_stats import clipped_contributions

__all__ = ["Release", "count_grid", "count_sensitivity", "share_grid", "grid_sensitivity", "stats_shares",
           "count_share", "sums_from_total", "COUNT_STREAM"]

#: the "round" key of the clients' count-noise streams (apart from every real round)
COUNT_STREAM = 2 ** 32


@dataclasses.dataclass(frozen=True)
class Release:
    """What every party knows of one distributed release of statistics (all public).

    Attributes
    ----------
    sigma : float
        The noise multiplier.
    sensitivity : float
        Δ' of Σ c_i on the grid (:func:`grid_sensitivity`).
    count : float
        The released count Ñ.
    grid : SecAggGrid
    n_active : int
        Clients whose shares make the sum (each draws 1/n_active of the noise variance).
    stream : int
        The release's index in the clients' noise streams (round k + 1; 0 for round 0).
    """

    sigma: float
    sensitivity: float
    count: float
    grid: SecAggGrid
    n_active: int
    stream: int

    def share_std(self) -> float:
        """One client's noise standard deviation, in share units (/Ñ)."""
        return noise_share_std(self.sigma * self.sensitivity / self.count, self.n_active, "distributed")


def count_grid(sigma, n_clients) -> SecAggGrid:
    """The grid of the count shares: a count ≤ :data:`COUNT_BOUND` plus its noise."""
    return secagg_grid(COUNT_BOUND + NOISE_MARGIN * sigma, n_clients)


def count_sensitivity(grid) -> float:
    """The count release's sensitivity on ``grid``: 1 while integers lie on it (h ≤ 1, a power
    of two), else 1 + h (one count rounded to the nearest level)."""
    return 1.0 if grid.step <= 1.0 else 1.0 + grid.step


def share_grid(sigma, sensitivity, count, n_clients) -> SecAggGrid:
    """The grid of the statistic shares.

    A share's contribution c_i/Ñ is at most Δ/Ñ·(rows of the client) ≤ 2Δ per coordinate while a
    client holds fewer than 2Ñ rows (row level), and ≤ Δ/Ñ at client level; its noise share's
    std is at most σ·2Δ/Ñ (one active client). Larger values are clipped (and logged).
    """
    return secagg_grid(2.0 * sensitivity * (1.0 + NOISE_MARGIN * sigma / count), n_clients)


def grid_sensitivity(sensitivity, grid, count, q) -> float:
    """Δ' = Δ + √q h Ñ: the sensitivity of Σ round(c_i/Ñ) in contribution units (the one
    changed client's rounding moves each of its q coordinates by less than one step)."""
    return float(sensitivity) + np.sqrt(q) * grid.step * float(count)


def stats_shares(model, federation, theta, clients, streams_of, config, geometry, release, key):
    """The shares u_i = round(c_i/Ñ) + R(ζ_i/Ñ) of the listed clients.

    Parameters
    ----------
    model, federation, theta, config, geometry
        As :func:`.private_stats.clipped_contributions`.
    clients : ndarray of int of shape (m,)
        Clients of ``federation``.
    streams_of : ndarray of int of shape (m,)
        Their indices in the run (the noise stream of each; a node's one-client federation
        passes its run index).
    release : Release
    key : int
        The noise key (:func:`fedemstats.privacy.secagg.noisy_share`).

    Returns
    -------
    ndarray of shape (m, q)
    """
    if not len(clients):
        return np.empty((0, model.q))
    contrib, _ = clipped_contributions(model, federation, theta, clients, config, geometry)
    std = release.share_std()
    return np.vstack([noisy_share(c / release.count, std, release.grid, key, release.stream, int(i))
                      for c, i in zip(contrib, streams_of)])


def count_share(count, sigma, n_clients, grid, key, client) -> float:
    """Client ``client``'s share of the count release: its count (clipped at
    :data:`COUNT_BOUND`) plus N(0, (σ Δ_c)² / n), on ``grid``."""
    std = noise_share_std(sigma * count_sensitivity(grid), n_clients, "distributed")
    value = np.array([min(float(count), COUNT_BOUND)])
    return float(noisy_share(value, std, grid, key, COUNT_STREAM, client)[0])


def sums_from_total(total, geometry, s_hat, n_active, n_clients, inclusion):
    """The round's (Horvitz-Thompson, plain) sums from the securely aggregated Σ u_i.

    With S_i = n P⁻¹ u_i, weights 1/n and no memories, Σ_{i∈A} q_i = n P⁻¹(Σ u_i) − |A| Ŝ_k;
    the sums are that over n π and over n (:func:`.server.weighted_sums`).
    """
    q_sum = n_clients * geometry.inverse(np.asarray(total, dtype=np.float64)[None, :])[0] - n_active * s_hat
    return q_sum / (n_clients * inclusion), q_sum / n_clients
