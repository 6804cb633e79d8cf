"""Compression geometry of the Gaussian with missing values: whitening by the current μ, Σ.

The statistics are ``(S1, S2) = (E[x̃], E[x̃ x̃ᵀ])`` on standardised data ``x̃ = (x − c) / σ``.
With ``μ̃ = (μ − c) / σ``, ``Σ̃ = Σ / σσᵀ = L Lᵀ`` the natural whitening ``u = L⁻¹ (x̃ − μ̃)`` is
affine in the statistics because the count (always 1) is not a statistic. Differences
(what is compressed) have count 0, so P is its linear part:

* ``y1 = L⁻¹ S1``,  ``y2 = L⁻¹ (S2 − S1 μ̃ᵀ − μ̃ S1ᵀ) L⁻ᵀ``;

the affine part (count 1) enters only :meth:`GaussianGeometry.whiten_point`, which the
trust region uses: at θ = T(Ŝ) the point Ŝ whitens to ``(0, I − reg_covar L⁻¹ σ⁻² L⁻ᵀ)``.
This is one component of :class:`.gmm_geometry.MomentWhitening`.
"""
from __future__ import annotations

import numpy as np

from ._geometry import Geometry, build_geometry, whitening_factors
from ._geometry_blocks import split_blocks
from .gmm_geometry import MomentWhitening

__all__ = ["GaussianGeometry", "gaussian_geometry"]


class GaussianGeometry(Geometry):
    """Whitening of a single Gaussian's standardised moments (see module docstring).

    Parameters
    ----------
    model, theta : GaussianMissingModel, GaussianParams
        The model and ``T(s_hat)``, whose mean and covariance define the map.
    s_hat : ndarray of shape (q,), optional
        Not needed by this map (accepted for the common signature).

    Attributes
    ----------
    blocks : ndarray of int64 of shape (3,)
        ``sum_x``, ``sum_xx``.
    """

    def __init__(self, model, theta, s_hat=None):
        sd = model.scale
        mean = (np.asarray(theta.mean, dtype=np.float64) - model.shift) / sd
        L, L_inv, bad = whitening_factors((np.asarray(theta.covariance, dtype=np.float64) / np.outer(sd, sd))[None])
        if bad[0] or not np.all(np.isfinite(mean)):
            raise np.linalg.LinAlgError("the covariance cannot whiten (or the mean is not finite)")
        reg = model.reg_covar * np.matmul(L_inv / sd ** 2, np.swapaxes(L_inv, -1, -2))
        self.layout = model.layout
        self.map = MomentWhitening("full", mean[None], L, L[0], reg)
        self.blocks = split_blocks(model.layout, {})

    names = ("sum_x", "sum_xx")

    def _apply(self, x, count, inverse=False):
        s1, s2 = self._split(x)
        d0 = np.full((s1.shape[0], 1), float(count))
        y1, y2 = (self.map.inverse if inverse else self.map.forward)(d0, s1[:, None], s2[:, None])
        return self._join(y1[:, 0], y2[:, 0])

    def forward(self, x):
        """``P x`` (linear part, count 0) for rows x (m, q) -> (m, q)."""
        return self._apply(x, 0)

    def inverse(self, y):
        """``P⁻¹ y`` for rows y (m, q) -> (m, q)."""
        return self._apply(y, 0, inverse=True)

    def whiten_point(self, s):
        """Affine whitening of points (count 1), shape (m, q)."""
        return self._apply(s, 1)

    def unwhiten_point(self, y):
        """Inverse of :meth:`whiten_point` (count 1), shape (m, q)."""
        return self._apply(y, 1, inverse=True)

    def _margins(self, points):
        y1, y2 = self._split(self.whiten_point(points))
        return self.map.min_variance(np.ones((y1.shape[0], 1)), y1[:, None], y2[:, None])


def gaussian_geometry(model, theta, s_hat) -> Geometry:
    """:class:`GaussianGeometry`, or the identity if the covariance cannot whiten
    (:func:`._geometry.build_geometry`)."""
    return build_geometry(GaussianGeometry, model, theta, s_hat)
