"""Compression geometry of the Gaussian mixtures (all covariance types; also with missing values).

Per component k the affine whitening ``u = L_k⁻¹ (x − m_k)`` (``m_k = μ_k − shift``,
``L_k L_kᵀ = Σ_k``) turns the statistics ``(r, r x, r x xᵀ)`` of a row into
``(r, r u, r u uᵀ)``, a *linear* function of them:

* ``y0 = S0``,
* ``y1 = L⁻¹ (S1 − S0 m)``,
* ``y2 = L⁻¹ (S2 − S1 mᵀ − m S1ᵀ + S0 m mᵀ) L⁻ᵀ``.

At θ = T(Ŝ) a component reads ``(π_k, 0, π_k (I − reg_covar L_k⁻¹ L_k⁻ᵀ))``. diag: the same per
coordinate; spherical: ``y2 = (S2 − 2 mᵀ S1 + S0 |m|²) / σ_k²``; tied: the shared second
moment ``Σ_k r_k (x − m_k)(x − m_k)ᵀ`` whitened by the tied factor. The moment algebra is
:class:`MomentWhitening`, which :mod:`.gaussian_geometry` reuses for one Gaussian.
"""
from __future__ import annotations

import numpy as np

from ._geometry import (MIN_WEIGHT, Geometry, as_rows, build_geometry, log_fallback,
                        min_eigenvalue, whitening_factors)
from ._geometry_blocks import split_blocks
from ._mixture import RESP_FLOOR, mass_gain_weights
from ._whiten_kernels import MAX_PACKED_FEATURES, PackedWhitening
from .gmm_params import covariance_matrices

__all__ = ["MomentWhitening", "GMMGeometry", "gmm_geometry"]


def _matvec(W, v):
    """``W_k v_k`` for W (K, d, d), v (n, K, d) -> (n, K, d)."""
    return np.matmul(W, v[..., None])[..., 0]


def _sandwich(B, C):
    """``B C Bᵀ`` over the last two axes (B broadcast against C)."""
    return np.matmul(np.matmul(B, C), np.swapaxes(B, -1, -2))


def _outer(a, b):
    return a[..., :, None] * b[..., None, :]


class MomentWhitening:
    """Affine whitening of (count, first, second moment) statistics of K Gaussian components.

    Parameters
    ----------
    covariance_type : {"full", "tied", "diag", "spherical"}
        Shape of the second moment: (n, K, d, d), (n, d, d), (n, K, d), (n, K).
    m : ndarray of shape (K, d)
        Centres (zero for a component on the identity map).
    L : ndarray of shape (K, d, d)
        Whitening factors of the first moments (identity for a component on the identity map).
    L2 : ndarray of shape (K, d, d) or (d, d)
        Factor of the second moments (tied: the shared factor).
    reg : ndarray
        The regularisation added to a raw covariance, in whitened units: (K, d, d) full,
        (d, d) tied, (K, d) diag, (K,) spherical.
    """

    def __init__(self, covariance_type, m, L, L2, reg):
        self.ct, self.m, self.reg = covariance_type, m, reg
        self.L, self.L_inv = L, np.linalg.inv(L)
        self.L2, self.L2_inv = L2, (self.L_inv if L2 is L else np.linalg.inv(L2))
        if covariance_type in ("diag", "spherical"):
            var = np.diagonal(L2, axis1=-2, axis2=-1) ** 2
            self.var = var if covariance_type == "diag" else var[:, 0]

    def _cross(self, d0, d1):
        """``S1 mᵀ + m S1ᵀ − S0 m mᵀ`` in the second moment's shape (its diag / trace / sum over k)."""
        m, ct = self.m, self.ct
        if ct in ("diag", "spherical"):
            c = 2.0 * m * d1 - d0[..., None] * m * m
            return c if ct == "diag" else c.sum(axis=-1)
        c = _outer(d1, m) + _outer(m, d1) - d0[..., None, None] * _outer(m, m)
        return c if ct == "full" else c.sum(axis=1)

    def forward(self, d0, d1, d2):
        """Whitened ``(y1, y2)`` of statistics ``(d0 (n, K), d1 (n, K, d), d2)``."""
        y1 = _matvec(self.L_inv, d1 - d0[..., None] * self.m)
        c2 = d2 - self._cross(d0, d1)
        y2 = c2 / self.var if self.ct in ("diag", "spherical") else _sandwich(self.L2_inv, c2)
        return y1, y2

    def inverse(self, y0, y1, y2):
        """Raw ``(d1, d2)`` of whitened statistics ``(y0, y1, y2)`` (y0 = d0)."""
        d1 = _matvec(self.L, y1) + y0[..., None] * self.m
        c2 = y2 * self.var if self.ct in ("diag", "spherical") else _sandwich(self.L2, y2)
        return d1, c2 + self._cross(y0, d1)

    def min_variance(self, w, y1, y2):
        """Smallest eigenvalue of each whitened raw covariance (``reg`` included).

        Parameters
        ----------
        w : ndarray of shape (n, K)
            Counts (clipped positive, as the T-map does).
        y1, y2 : whitened statistics of points

        Returns
        -------
        ndarray of shape (n, K) (tied: (n, 1))
        """
        ct = self.ct
        if ct == "tied":
            # a component on the identity map has y1 = S1 raw: whiten its mean offset too
            mu = _matvec(np.matmul(self.L2_inv[None], self.L), y1 / w[..., None])
            C = (y2 - np.einsum("nk,nki,nkj->nij", w, mu, mu)) / w.sum(axis=1)[:, None, None] + self.reg
            return min_eigenvalue(C)[:, None]
        mu = y1 / w[..., None]
        if ct == "full":
            return min_eigenvalue(y2 / w[..., None, None] - _outer(mu, mu) + self.reg)
        if ct == "diag":
            return np.min(y2 / w[..., None] - mu * mu + self.reg, axis=-1)
        return (y2 / w - np.sum(mu * mu, axis=-1)) / mu.shape[-1] + self.reg


class GMMGeometry(Geometry):
    """Per-component whitening of a Gaussian mixture's statistics (see module docstring).

    Parameters
    ----------
    model : GaussianMixtureModel or GaussianMixtureMissingModel
    theta : GMMParams
        ``T(s_hat)``: the weights, means and covariances that define the map.
    s_hat : ndarray of shape (q,)
        Its ``resp`` gives the current masses of the trust region.

    Attributes
    ----------
    blocks : ndarray of int64
        ``resp``; then ``sum_x`` per component; then ``sum_xx`` per component (tied and
        spherical: one block).
    unchecked : ndarray of bool of shape (K,)
        Components with weight < :data:`MIN_WEIGHT` (or a non-finite mean): identity map,
        not checked by the trust region.
    fallback : ndarray of bool of shape (K,)
        All components on the identity map (``unchecked`` and those whose covariance cannot
        whiten, see :func:`._geometry.whitening_factors`); their covariance is not checked.
    """

    names = ("resp", "sum_x", "sum_xx")

    def __init__(self, model, theta, s_hat):
        K, d, ct = model.n_components, model.n_features, model.covariance_type
        self.layout, self.ct = model.layout, ct
        self.s0 = np.maximum(model.layout.unpack(np.asarray(s_hat, dtype=np.float64))["resp"], RESP_FLOOR)
        means = np.asarray(theta.means, dtype=np.float64) - model.shift
        self.unchecked = ~(np.asarray(theta.weights) >= MIN_WEIGHT) | ~np.all(np.isfinite(means), axis=1)
        cov = covariance_matrices(theta.covariances, ct, d)
        if ct == "tied":
            L2, L2_inv, bad = whitening_factors(cov)
            if bad[0]:
                raise np.linalg.LinAlgError("the tied covariance cannot whiten")
            L2, L2_inv = L2[0], L2_inv[0]
            self.fallback = self.unchecked.copy()
            L = np.where(self.fallback[:, None, None], np.eye(d), L2)
        else:
            L, L2_inv, bad = whitening_factors(cov, ~self.unchecked)
            self.fallback = self.unchecked | bad
            L2 = L
        log_fallback("GMM geometry", "components", self.fallback)
        m = np.where(self.fallback[:, None], 0.0, means)
        self.map = MomentWhitening(ct, m, L, L2, _whitened_reg(ct, L2_inv, model.reg_covar))
        self.cov_checked = np.ones(1, bool) if ct == "tied" else ~self.fallback
        self.blocks = split_blocks(model.layout, {"sum_x": K, "sum_xx": K if ct in ("full", "diag") else 1})
        self.weights = np.asarray(theta.weights, dtype=np.float64)
        # packed full / tied second moments: the map as matrices on the stored rows (the
        # moment algebra unpacks them to (m, K, d, d) temporaries; see _whiten_kernels)
        self._packed = None
        if ct in ("full", "tied") and model.layout.is_symmetric("sum_xx") and d <= MAX_PACKED_FEATURES:
            mw = self.map
            self._packed = PackedWhitening(ct == "tied", mw.m, mw.L, mw.L_inv, mw.L2, mw.L2_inv)

    def forward(self, x):
        """``P x`` for rows x (m, q) -> (m, q)."""
        if self._packed is not None:
            return self._whiten(x, True)
        d0, d1, d2 = self._split(x)
        return self._join(d0, *self.map.forward(d0, d1, d2))

    def inverse(self, y):
        """``P⁻¹ y`` for rows y (m, q) -> (m, q)."""
        if self._packed is not None:
            return self._whiten(y, False)
        y0, y1, y2 = self._split(y)
        return self._join(y0, *self.map.inverse(y0, y1, y2))

    def gain_weights(self):
        """1 / π_k on component k's coordinates (the tied second moment and the components on
        the identity map: 1); :func:`._mixture.mass_gain_weights`."""
        return mass_gain_weights(self.layout, self.weights, self.fallback, ("sum_xx",) if self.ct == "tied" else ())

    def _whiten(self, x, forward):
        x = as_rows(x)
        if x.shape[-1] != self.layout.size:
            raise ValueError(f"expected last axis of length {self.layout.size}; got shape {x.shape}.")
        return self._packed.apply(x, forward)

    def _margins(self, points):
        y0, y1, y2 = self._split(self.forward(points))
        weights = np.where(self.unchecked, np.inf, y0 / self.s0)
        lam = self.map.min_variance(np.maximum(y0, RESP_FLOOR), y1, y2)
        return np.concatenate([weights, np.where(self.cov_checked, lam, np.inf)], axis=1)


def _whitened_reg(ct, L_inv, reg):
    """``reg_covar I`` in whitened units: ``reg L⁻¹ L⁻ᵀ`` (diag: ``reg / σ²``), from ``L⁻¹``."""
    P = reg * np.matmul(L_inv, np.swapaxes(L_inv, -1, -2))
    if ct == "diag":
        return np.diagonal(P, axis1=-2, axis2=-1)
    return P[:, 0, 0] if ct == "spherical" else P


def gmm_geometry(model, theta, s_hat) -> Geometry:
    """:class:`GMMGeometry`, or the identity when no map can be built (non-finite ``s_hat``,
    a tied covariance that cannot whiten; :func:`._geometry.build_geometry`)."""
    return build_geometry(GMMGeometry, model, theta, s_hat)
