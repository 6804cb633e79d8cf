"""Covariances from noisy statistics: an eigenvalue floor at the noise level (issue 14).

A private release adds N(0, τ² I) to the mean statistic in the coordinates of a geometry G
(the whitening of the iterate that computed it, or the raw coordinates). Per component, in
those coordinates, the M-step's covariance C_k = y2_k / y0_k − μ_k μ_kᵀ (μ_k = y1_k / y0_k) then
carries a symmetric noise matrix E_k / y0_k whose entries have standard deviation
t_k = τ / y0_k. Its eigenvalues spread over about ±2 t_k √d (Wigner's semicircle), so an
eigenvalue of C_k below the noise level is not distinguishable from zero, or from a negative
value; the plain T-map would keep it (or raise it only to ``reg_covar``) and a held-out row
off that direction then costs thousands of nats. The floor raises every eigenvalue of C_k to
``NOISE_FLOOR · t_k · √d`` (diagonal: every variance to ``NOISE_FLOOR · t_k``, the noise of one
entry; spherical: ``NOISE_FLOOR · t_k / d``, the noise of the averaged variance), keeping the
eigenvectors, the counts and the means. A count y0_k below ``NOISE_FLOOR · τ`` (a component the
release cannot tell from empty) is raised to it first, which bounds t_k; that component's
mean and covariance are the iterate's own (E_θ[s], public), since the release says nothing about
them: floored instead, at t_k √d ≥ 2 times the previous covariance, an empty component's
covariance grew every round, and at 100 rounds a private 2-component fit diverged on every
seed (round 53–65). Raising rather than discarding is the
likelihood's asymmetry: under-estimating a variance costs x²/λ, over-estimating log λ.

In whitened coordinates (G the iterate's whitening L_k) the raw covariance is L_k C_k L_kᵀ,
so the floor is *relative*: no direction shrinks below ``NOISE_FLOOR · t_k · √d`` times the
previous covariance in one release, whatever the component's scale.

The mean's own noise e (std τ per coordinate of y1) also enters C = y2 − μ̂ μ̂ᵀ (written for y0 = 1;
a count y0 divides τ into t = τ / y0; μ̂ = μ + e):
C − C_true = E − (e μᵀ + μ eᵀ) − e eᵀ. The cross term has eigenvalues e·μ ± |e||μ| ≈ ±τ√d |μ|
and −e eᵀ lowers one direction by |e|² ≈ τ²d, so by Weyl's inequality the noise's lower edge
is about −τ√d (2 + |μ| + τ√d). ``floor_full_second_moments(..., mean_noise=True)`` takes the
same quarter of that edge, with |μ|² estimated by |μ̂|² − t²d (E|μ̂|² = |μ|² + t²d), released
values only. The single Gaussian (:meth:`.gaussian_missing.GaussianMissingModel.dp_denoise`)
counts it: its public geometry is centred at a public point, so |μ| need not be small. The
mixtures do not (their floor, and :data:`NOISE_FLOOR`, were measured without it): in their
whitened geometry (the default) μ_k is the step from the previous mean, of the order of the
noise, and only the τ²d term would add (≈ 15 % of the floor at the benchmarks' t √d ≈ 0.3);
under ``geometry="public"`` their floor undercounts (left as it is: counting it would move their fits).

This is post-processing: the result depends only on the released iterate, the public
geometry and τ = σΔ / (π Ñ), all public.
"""
from __future__ import annotations

import numpy as np

from .._linalg import symmetrize
from ._mixture import RESP_FLOOR

__all__ = ["NOISE_FLOOR", "floor_full_second_moments", "floor_noisy_covariances"]

#: eigenvalue floor in units of the noise's spectral scale t √d (diag: of one entry's noise t).
#: Half of it: the noise's eigenvalues reach ±2 t √d, but the M-step averages the signal's
#: own spread in, so a direction is kept down to a quarter of that edge. Measured on
#: ``benchmarks/bench_privacy.py``'s tables at ε = 1 (3 seeds): 0.25 to 1 are within the
#: seeds' spread of each other; no floor loses 0.5 to 2.5 nats per held-out row, 2 up to 1.
NOISE_FLOOR = 0.5


def _floor_eigenvalues(C, floor):
    """Symmetric matrices C (..., d, d) with their eigenvalues raised to ``floor`` (...,)."""
    w, V = np.linalg.eigh(symmetrize(C))
    w = np.maximum(w, floor[..., None])
    return np.matmul(V * w[..., None, :], np.swapaxes(V, -1, -2))


def floor_full_second_moments(y0, y1, y2, noise_std, mean_noise=False):
    """Second moments whose full covariances have no eigenvalue below their noise level.

    The floor of the module docstring for full covariances, on counts, first and second
    moments already in the release's coordinates; shared by the mixtures and the single
    Gaussian (whose count is the constant 1, not a statistic).

    Parameters
    ----------
    y0 : ndarray of shape (K,)
        Counts, positive (floored by the caller).
    y1 : ndarray of shape (K, d)
    y2 : ndarray of shape (K, d, d)
    noise_std : float
        τ, the noise's standard deviation on each coordinate of the mean statistic.
    mean_noise : bool, default=False
        Also count the noise of the mean μ = y1 / y0 in C (module docstring): the floor is
        multiplied by ``1 + (|μ| + t √d) / 2``, |μ| estimated from the released μ and t.

    Returns
    -------
    ndarray of shape (K, d, d)
        ``y0 (C⁺ + μ μᵀ)`` with C = y2 / y0 − μ μᵀ and C⁺ its eigenvalues raised to
        ``NOISE_FLOOR · t · √d`` (times the factor above), t = τ / y0.
    """
    d = y1.shape[-1]
    mu = y1 / y0[:, None]
    outer = mu[:, :, None] * mu[:, None, :]
    C = y2 / y0[:, None, None] - outer
    t = noise_std / y0
    floor = NOISE_FLOOR * t * np.sqrt(d)
    if mean_noise:
        # the released |μ̂|² overstates |μ|² by the mean's noise, t² d in expectation
        mean_norm = np.sqrt(np.maximum(np.sum(mu ** 2, axis=-1) - t ** 2 * d, 0.0))
        floor = floor * (1.0 + (mean_norm + t * np.sqrt(d)) / 2.0)
    return y0[:, None, None] * (_floor_eigenvalues(C, floor) + outer)


def floor_noisy_covariances(model, s, geometry, noise_std, previous=None):
    """``s`` with each covariance's eigenvalues floored at its noise level (module docstring).

    Parameters
    ----------
    model : GaussianMixtureModel
    s : ndarray of shape (q,)
        A noisy mean statistic.
    geometry : Geometry
        The coordinates in which the noise was added (``forward`` / ``inverse``).
    noise_std : float
        τ, the noise's standard deviation per coordinate of the mean statistic there.
    previous : ndarray of shape (q,), optional
        E_θ[s] of the iterate θ the release was made at (public). A component whose released
        count is below the noise level then keeps θ's mean and covariance (module docstring);
        without it, its covariance is floored as the others'.

    Returns
    -------
    ndarray of shape (q,)
        Same first moments and counts (those below ``NOISE_FLOOR · noise_std`` raised to
        it); second moments whose M-step covariances (in the
        geometry's coordinates) have no eigenvalue below the floor.
    """
    layout, ct, d = model.layout, model.covariance_type, model.n_features
    y = layout.unpack(geometry.forward(np.asarray(s, dtype=np.float64))[0])
    # a mass below the noise level cannot be told from zero: raised to it; given ``previous``,
    # that component keeps θ's mean and covariance (without it, its mean shrinks towards the
    # geometry's centre, the previous mean, by the raised count)
    y0 = np.maximum(y["resp"], max(NOISE_FLOOR * noise_std, RESP_FLOOR))
    empty = (y["resp"] < y0) if previous is not None else np.zeros(y0.shape, dtype=bool)
    if empty.any():
        first, second = _previous_moments(layout.unpack(geometry.forward(previous)[0]), empty, y0, ct == "tied")
        y["sum_x"][empty] = first
        if second is not None:
            y["sum_xx"][empty] = second
    mu = y["sum_x"] / y0[:, None]
    y2, t = y["sum_xx"], noise_std / y0  # t: the noise of one covariance entry per component
    if ct == "full":
        floored = floor_full_second_moments(y0, y["sum_x"], y2, noise_std)
    elif ct == "tied":
        total = y0.sum()
        between = np.einsum("k,ki,kj->ij", y0, mu, mu)
        C = (y2 - between) / total
        floored = total * _floor_eigenvalues(C, np.asarray(NOISE_FLOOR * noise_std / total * np.sqrt(d))) + between
    elif ct == "diag":
        floored = y0[:, None] * (np.maximum(y2 / y0[:, None] - mu ** 2, NOISE_FLOOR * t[:, None]) + mu ** 2)
    else:
        var = (y2 / y0 - np.sum(mu ** 2, axis=1)) / d
        floored = y0 * (d * np.maximum(var, NOISE_FLOOR * t / d) + np.sum(mu ** 2, axis=1))
    if ct != "tied":
        # an empty component's covariance is θ's, which no noise touched: floored at its noise level
        # (NOISE_FLOOR t √d = √d times θ's, full, at the count's floor) it would grow every round
        floored[empty] = y2[empty]
    y["resp"], y["sum_xx"] = y0, floored
    return geometry.inverse(layout.pack(y))[0]


def _previous_moments(prev, empty, y0, tied):
    """First and second moments of the ``empty`` components at θ's mean and covariance (the
    blocks of E_θ[s] in the release's coordinates, ``prev``), scaled to the counts ``y0``; no
    second moments for a tied covariance (one block, shared)."""
    scale = y0[empty] / prev["resp"][empty]
    first = prev["sum_x"][empty] * scale[:, None]
    if tied:
        return first, None
    return first, prev["sum_xx"][empty] * scale.reshape((-1,) + (1,) * (prev["sum_xx"].ndim - 1))
