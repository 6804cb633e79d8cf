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
release cannot tell from empty) is raised to it first, which bounds t_k and shrinks that
component's mean towards the geometry's centre. Raising rather than discarding is the
likelihood's asymmetry: under-estimating a variance costs x²/λ, over-estimating log λ.

In whitened coordinates (G the iterate's whitening L_k) the raw covariance is L_k C_k L_kᵀ,
so the floor is *relative*: no direction shrinks below ``NOISE_FLOOR · t_k · √d`` times the
previous covariance in one release, whatever the component's scale.

This is post-processing: the result depends only on the released iterate, the public
geometry and τ = σΔ / (π Ñ), all public.
"""
from __future__ import annotations

import numpy as np

from .._linalg import symmetrize
from ._mixture import RESP_FLOOR

__all__ = ["NOISE_FLOOR", "floor_noisy_covariances"]

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


def floor_noisy_covariances(model, s, geometry, noise_std):
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

    Returns
    -------
    ndarray of shape (q,)
        Same first moments and counts (those below ``NOISE_FLOOR · noise_std`` raised to
        it); second moments whose M-step covariances (in the
        geometry's coordinates) have no eigenvalue below the floor.
    """
    layout, ct, d = model.layout, model.covariance_type, model.n_features
    y = layout.unpack(geometry.forward(np.asarray(s, dtype=np.float64))[0])
    # a mass below the noise level cannot be told from zero: raised to it, which also
    # shrinks that component's mean towards the geometry's centre (the previous mean)
    y0 = np.maximum(y["resp"], max(NOISE_FLOOR * noise_std, RESP_FLOOR))
    mu = y["sum_x"] / y0[:, None]
    y2, t = y["sum_xx"], noise_std / y0  # t: the noise of one covariance entry per component
    if ct == "full":
        C = y2 / y0[:, None, None] - mu[:, :, None] * mu[:, None, :]
        y2 = y0[:, None, None] * (_floor_eigenvalues(C, NOISE_FLOOR * t * np.sqrt(d))
                                  + mu[:, :, None] * mu[:, None, :])
    elif ct == "tied":
        total = y0.sum()
        between = np.einsum("k,ki,kj->ij", y0, mu, mu)
        C = (y2 - between) / total
        y2 = total * _floor_eigenvalues(C, np.asarray(NOISE_FLOOR * noise_std / total * np.sqrt(d))) + between
    elif ct == "diag":
        y2 = y0[:, None] * (np.maximum(y2 / y0[:, None] - mu ** 2, NOISE_FLOOR * t[:, None]) + mu ** 2)
    else:
        var = (y2 / y0 - np.sum(mu ** 2, axis=1)) / d
        y2 = y0 * (d * np.maximum(var, NOISE_FLOOR * t / d) + np.sum(mu ** 2, axis=1))
    y["resp"], y["sum_xx"] = y0, y2
    return geometry.inverse(layout.pack(y))[0]
