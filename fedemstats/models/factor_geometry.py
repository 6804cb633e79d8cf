"""Compression geometry of factor analysis (with or without missing values): residual whitening.

Statistics (standardised data ``x̃``, ``z̃ = (z, 1)``): ``S_xx = E[x̃∘x̃]`` (d,),
``S_xz = E[x̃ z̃ᵀ]`` (d, k+1), ``S_zz = E[z̃ z̃ᵀ]`` (k+1, k+1). With the current
``Λ̃ = [Λ, μ]`` and ``Ψ`` (standardised) and ``R R ᵀ = S_zz`` of the current Ŝ, P maps them to
the moments of the residual ``e = x̃ − Λ̃ z̃`` scaled by ``Ψ^{-1/2}`` and of ``w = R⁻¹ z̃``:

* ``y_xx,j = (S_xx,j − 2 Λ̃_j·S_xz,j + Λ̃_j S_zz Λ̃_jᵀ) / Ψ_j``,
* ``y_xz,j = R⁻¹ (S_xz,j − Λ̃_j S_zz)ᵀ / √Ψ_j``,
* ``y_zz = R⁻¹ S_zz R⁻ᵀ``.

All three are linear in the statistics (z̃'s constant 1 is inside S_xz and S_zz). At
θ = T(Ŝ) (Ψ not floored) Ŝ maps to ``(1…1, 0, I)``.
"""
from __future__ import annotations

import numpy as np

from ._geometry import MAX_CONDITION, Geometry, build_geometry, log_fallback, min_eigenvalue, whitening_factors
from ._geometry_blocks import split_blocks

__all__ = ["FactorGeometry", "factor_geometry"]


class FactorGeometry(Geometry):
    """Residual whitening of factor-analysis statistics (see module docstring).

    Parameters
    ----------
    model, theta, s_hat : FactorAnalysisModel, FactorParams, ndarray of shape (q,)
        The model, ``T(s_hat)`` and the iterate, whose ``S_zz`` gives the factor ``R``.

    Attributes
    ----------
    blocks : ndarray of int64 of shape (4,)
        ``sum_xx``, ``sum_xz``, ``sum_zz``.
    fallback : ndarray of bool of shape (d,)
        Coordinates not residualised nor scaled (``Λ̃_j = 0``, ``Ψ_j = 1``): ``Ψ_j`` or
        ``Λ̃_j`` not finite, or ``Ψ_j <= |S_xx,j| / MAX_CONDITION`` (a Heywood case at the
        T-map's floor). Their ``Ψ'_j`` is not checked by the trust region.
    """

    names = ("sum_xx", "sum_xz", "sum_zz")

    def __init__(self, model, theta, s_hat):
        sd = model.scale
        parts = model.layout.unpack(np.asarray(s_hat, dtype=np.float64))
        R, R_inv, bad = whitening_factors(parts["sum_zz"][None])
        if bad[0]:
            raise np.linalg.LinAlgError("S_zz cannot whiten")
        lam = np.concatenate([np.asarray(theta.components).T, (np.asarray(theta.mean) - model.shift)[:, None]],
                             axis=1) / sd[:, None]
        psi = np.asarray(theta.noise_variance, dtype=np.float64) / sd ** 2
        self.fallback = ~np.all(np.isfinite(lam), axis=1) | ~(psi > np.abs(parts["sum_xx"]) / MAX_CONDITION)
        log_fallback("factor geometry", "coordinates", self.fallback)
        self.lam = np.where(self.fallback[:, None], 0.0, lam)
        self.psi = np.where(self.fallback, 1.0, psi)
        self.R = R[0]
        self.R_inv = R_inv[0]
        self.layout = model.layout
        self.blocks = split_blocks(model.layout, {})

    def forward(self, x):
        """``P x`` for rows x (m, q) -> (m, q)."""
        sxx, sxz, szz = self._split(x)
        lam_szz = np.matmul(self.lam, szz)                                   # (n, d, k+1)
        exx = sxx - 2.0 * np.sum(self.lam * sxz, axis=-1) + np.sum(lam_szz * self.lam, axis=-1)
        exz = (sxz - lam_szz) / np.sqrt(self.psi)[:, None]
        return self._join(exx / self.psi, exz @ self.R_inv.T, self.R_inv @ szz @ self.R_inv.T)

    def inverse(self, y):
        """``P⁻¹ y`` for rows y (m, q) -> (m, q)."""
        yxx, yxz, yzz = self._split(y)
        szz = self.R @ yzz @ self.R.T
        lam_szz = np.matmul(self.lam, szz)
        sxz = (yxz @ self.R.T) * np.sqrt(self.psi)[:, None] + lam_szz
        sxx = self.psi * yxx + 2.0 * np.sum(self.lam * sxz, axis=-1) - np.sum(lam_szz * self.lam, axis=-1)
        return self._join(sxx, sxz, szz)

    def _margins(self, points):
        yxx, yxz, yzz = self._split(self.forward(points))
        z_min = min_eigenvalue(yzz)
        # a point whose S_z̃z̃ is not positive definite fails on z_min; its ratios use I instead
        Z = np.where((z_min > 0.0)[:, None, None], yzz, np.eye(yzz.shape[-1]))
        # Ψ'_j / Ψ_j: the residual variance of e_j given w, in units of the current Ψ_j
        ratio = yxx - np.sum(yxz * np.swapaxes(np.linalg.solve(Z, np.swapaxes(yxz, 1, 2)), 1, 2), axis=-1)
        return np.concatenate([z_min[:, None], np.where(self.fallback, np.inf, ratio)], axis=1)


def factor_geometry(model, theta, s_hat) -> Geometry:
    """:class:`FactorGeometry`, or the identity if ``s_hat`` is not finite or its ``S_zz`` cannot
    whiten (:func:`._geometry.build_geometry`)."""
    return build_geometry(FactorGeometry, model, theta, s_hat)
