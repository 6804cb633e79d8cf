"""Gaussian-mixture parameters: the container, its validation and covariance shapes.

Shapes follow scikit-learn's ``GaussianMixture`` for the four covariance types:
``covariances`` full (K, d, d), tied (d, d), diag (K, d), spherical (K,), and
``precisions_cholesky`` the same shapes (full/tied: upper-triangular ``U`` with
``U U^T = Sigma^{-1}``; diag/spherical: ``1 / sqrt(variance)``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._linalg import check_spd, inv_cholesky_upper, precision_cholesky_from_precision, scaled_cholesky

__all__ = ["GMMParams", "make_params", "COVARIANCE_TYPES", "check_covariance_type", "covariance_shape",
           "as_matrices", "precisions_from_cholesky", "shared_covariances", "full_covariances",
           "covariance_matrices", "MIXTURE_REL_FLOOR"]

COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")
#: The mixture T-map's relative eigenvalue floor, in the public scale's units (of a unit variance,
#: or of a repaired matrix's largest eigenvalue): a numerical guard, not a model choice. float64
#: eigenvalues carry a round-off of about d·eps·λ_max ≈ 1e-14 λ_max, and Cholesky needs a condition
#: number well below 1/eps. At :data:`fedemstats._linalg.EIG_REL_FLOOR` (1e-10) in original units the
#: floor bound valid statistics where scikit-learn's reg_covar does not: raw breast-cancer (column
#: variances 1e-6 to 1e5) fitted 4.7 (tied) to 5.9 (full) nats/row below scikit-learn's fixed point.
MIXTURE_REL_FLOOR = 1e-13
#: Tolerance on sum(weights) == 1 in make_params.
WEIGHTS_SUM_TOL = 1e-6


def check_covariance_type(covariance_type) -> str:
    """``covariance_type`` if it is one of :data:`COVARIANCE_TYPES`, else ``ValueError``."""
    if covariance_type not in COVARIANCE_TYPES:
        raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}; got {covariance_type!r}.")
    return covariance_type


def covariance_shape(covariance_type, K, d) -> tuple:
    """Shape of the covariances (and of the second-moment statistic) of K components in d dimensions."""
    return {"full": (K, d, d), "tied": (d, d), "diag": (K, d), "spherical": (K,)}[covariance_type]


def as_matrices(a, covariance_type):
    """View full as (K, d, d) and tied as (1, d, d) for per-matrix loops."""
    return a if covariance_type == "full" else a[None]


def precisions_from_cholesky(precisions_cholesky, covariance_type) -> np.ndarray:
    """Precision matrices (or inverse variances) from their factors, as scikit-learn's ``precisions_``."""
    pc = precisions_cholesky
    if covariance_type == "full":
        return np.einsum("kij,klj->kil", pc, pc)
    if covariance_type == "tied":
        return pc @ pc.T
    return pc ** 2


def shared_covariances(cov, covariance_type, K):
    """One (d, d) covariance given to all K components in the shape of ``covariance_type``."""
    if covariance_type == "full":
        return np.repeat(cov[None], K, axis=0)
    if covariance_type == "tied":
        return cov
    if covariance_type == "diag":
        return np.repeat(np.diag(cov)[None], K, axis=0)
    return np.full(K, np.mean(np.diag(cov)))


@dataclass(frozen=True, eq=False)
class GMMParams:
    """Gaussian-mixture parameters with scikit-learn's shapes (treat arrays as read-only).

    Attributes
    ----------
    weights : ndarray of shape (K,)
    means : ndarray of shape (K, d)
    covariances : ndarray
        full (K, d, d), tied (d, d), diag (K, d), spherical (K,).
    precisions_cholesky : ndarray
        Same shape; full/tied are upper-triangular ``U`` with ``U U^T = Sigma^{-1}``,
        diag/spherical are ``1 / sqrt(variance)``.
    covariance_type : {"full", "tied", "diag", "spherical"}
    """

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    precisions_cholesky: np.ndarray
    covariance_type: str

    @property
    def n_components(self) -> int:
        """K, the number of components."""
        return int(self.weights.shape[0])

    @property
    def precisions(self) -> np.ndarray:
        """Precision matrices (or inverse variances) as scikit-learn's ``precisions_``."""
        return precisions_from_cholesky(self.precisions_cholesky, self.covariance_type)

    @property
    def n_features(self) -> int:
        """d, the dimension of the rows."""
        return int(self.means.shape[1])


def covariance_matrices(cov, covariance_type, d) -> np.ndarray:
    """Covariances of any type as (K, d, d) matrices (tied: (1, d, d), as :func:`as_matrices`)."""
    cov = np.asarray(cov, dtype=np.float64)
    if covariance_type in ("full", "tied"):
        return as_matrices(cov, covariance_type)
    per_coordinate = cov if covariance_type == "diag" else cov[:, None] * np.ones(d)
    return per_coordinate[:, :, None] * np.eye(d)[None]


def full_covariances(theta: GMMParams) -> np.ndarray:
    """Covariances as (K, d, d) matrices for the per-component ``"full"`` and ``"diag"`` types."""
    return covariance_matrices(theta.covariances, theta.covariance_type, theta.n_features)


def make_params(weights, means, covariances=None, precisions=None, covariance_type="full", *,
                precisions_cholesky=None) -> GMMParams:
    """Validated :class:`GMMParams` from scikit-learn style arrays.

    Exactly one of ``covariances``, ``precisions`` (like ``precisions_init``: precision
    matrices, not their Cholesky factors) or ``precisions_cholesky`` must be given.

    Parameters
    ----------
    weights : array-like of shape (K,)
        Non-negative, summing to 1 (within 1e-6; renormalised).
    means : array-like of shape (K, d)
    covariances, precisions, precisions_cholesky : array-like, optional
        Shapes per ``covariance_type`` (see :class:`GMMParams`); symmetric positive definite.
    covariance_type : {"full", "tied", "diag", "spherical"}

    Returns
    -------
    GMMParams

    Raises
    ------
    ValueError
        On wrong shapes, non-finite values, weights not summing to one, or matrices that
        are not symmetric positive definite.
    """
    check_covariance_type(covariance_type)
    w = np.asarray(weights, dtype=np.float64)
    mu = np.asarray(means, dtype=np.float64)
    if w.ndim != 1 or mu.ndim != 2 or mu.shape[0] != w.shape[0]:
        raise ValueError(f"weights must be (K,) and means (K, d); got {w.shape} and {mu.shape}.")
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(mu))):
        raise ValueError("weights and means must be finite.")
    if (w < 0).any() or abs(w.sum() - 1.0) > WEIGHTS_SUM_TOL:
        raise ValueError(f"weights must be non-negative and sum to 1; got sum {w.sum():.6g}.")
    given = [a is not None for a in (covariances, precisions, precisions_cholesky)]
    if sum(given) != 1:
        raise ValueError("give exactly one of covariances, precisions or precisions_cholesky.")
    arr = np.asarray(next(a for a in (covariances, precisions, precisions_cholesky) if a is not None),
                     dtype=np.float64)
    shape = covariance_shape(covariance_type, *mu.shape)
    if arr.shape != shape:
        raise ValueError(f"{covariance_type!r} covariances/precisions must have shape {shape}; got {arr.shape}.")
    cov, pc = _complete(arr, given.index(True), covariance_type)
    return GMMParams(w / w.sum(), mu.copy(), cov, pc, covariance_type)


def _complete(arr, kind, ctype):
    """(covariances, precisions_cholesky) from covariances (0), precisions (1) or U (2)."""
    if ctype in ("diag", "spherical"):
        if not np.all(np.isfinite(arr)) or (arr <= 0).any():
            raise ValueError(f"{ctype!r} variances/precisions must be finite and > 0.")
        if kind == 0:
            return arr.copy(), 1.0 / np.sqrt(arr)
        pc = np.sqrt(arr) if kind == 1 else arr.copy()
        return 1.0 / pc ** 2, pc
    mats = as_matrices(arr, ctype)
    if kind == 2:
        if not np.all(np.isfinite(mats)) or (np.diagonal(mats, axis1=1, axis2=2) <= 0).any():
            raise ValueError("precisions_cholesky must be finite with a positive diagonal.")
        mats = precisions_from_cholesky(mats, "full")
        kind = 1
    for m in mats:
        check_spd(m, "precisions" if kind == 1 else "covariances")
    if kind == 0:
        pcs = np.array([inv_cholesky_upper(scaled_cholesky(c, np.sqrt(np.diag(c)), 0.0, MIXTURE_REL_FLOOR)[0])
                        for c in mats])
        covs = mats.copy()
    else:
        pcs = np.array([precision_cholesky_from_precision(p) for p in mats])
        covs = np.array([np.linalg.inv(p) for p in mats])
    if ctype == "tied":
        return covs[0], pcs[0]
    return covs, pcs
