"""Cholesky, log-determinant, log-sum-exp and PSD-repair helpers shared by the models.

One place for each piece of dense linear algebra that the models' T-maps need
(SPEC §1, §2): a T-map must be *total*, so covariance matrices built from noisy,
quantised statistics are symmetrised and, only when a Cholesky factorisation
fails, projected onto the positive-definite cone by an eigenvalue floor.
"""
from __future__ import annotations

import numpy as np
from scipy import linalg
from scipy.linalg import lapack

__all__ = [
    "LOG_2PI",
    "EIG_REL_FLOOR",
    "EIG_ABS_FLOOR",
    "symmetrize",
    "logsumexp",
    "eigen_floor",
    "eig_floor_value",
    "safe_cholesky",
    "scaled_cholesky",
    "REPAIR_RIDGE_FRACTION",
    "empirical_floor",
    "inv_cholesky_upper",
    "precision_cholesky_from_precision",
    "log_det_triangular",
    "check_spd",
]

#: log(2 pi), the constant of every Gaussian log-density
LOG_2PI = float(np.log(2.0 * np.pi))
#: Repaired eigenvalues are at least this fraction of the largest |eigenvalue|, so the
#: repaired matrix has a condition number <= 1 / EIG_REL_FLOOR and Cholesky succeeds.
EIG_REL_FLOOR = 1e-10
#: An eigenvalue within this relative distance below the floor counts as on it (:func:`safe_cholesky`
#: keeps the matrix): a component on one point has Σ = 0 + reg_covar up to the rounding of
#: S2/r − m mᵀ, and that rounding must not choose between the fast path and a repair (results
#: would then depend on the data's units at 1e-13). The repair is continuous up to this slack.
FLOOR_SLACK = 1e-8
#: Absolute eigenvalue floor used when the matrix is (numerically) zero and no
#: regularisation is configured (reg_covar = 0).
EIG_ABS_FLOOR = 1e-12
#: A repaired covariance keeps at least this fraction of reg_covar I (every exact one has all of it):
#: no direction is sharper than half scikit-learn's regularisation (flooring the total at the public
#: scale's floor left exactly collinear raw columns at 1e-5 reg_covar), while quantisation noise on a
#: direction reg_covar dominates is left unbiased down to the other half (clipping it at the full
#: reg_covar biased reg-dominated mixtures by 1e-3 to 1e-2 nats/row). Used by the mixture and the
#: Gaussian model with missing values.
REPAIR_RIDGE_FRACTION = 0.5


def symmetrize(A: np.ndarray) -> np.ndarray:
    """``(A + A^T) / 2`` over the last two axes, shape unchanged (..., d, d)."""
    return 0.5 * (A + np.swapaxes(A, -1, -2))


def logsumexp(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable ``log(sum(exp(a), axis))``; rows of ``-inf`` give ``-inf``.

    Parameters
    ----------
    a : ndarray
    axis : int, default=-1

    Returns
    -------
    ndarray with ``axis`` removed
    """
    a = np.asarray(a, dtype=np.float64)
    amax = np.max(a, axis=axis, keepdims=True)
    amax = np.where(np.isfinite(amax), amax, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - amax), axis=axis, keepdims=True)) + amax
    return np.squeeze(out, axis=axis)


def eig_floor_value(scale: float, reg: float = 0.0, rel: float = EIG_REL_FLOOR) -> float:
    """Eigenvalue floor ``max(reg, rel * scale)``, or ``EIG_ABS_FLOOR`` when both are
    zero (a zero matrix without regularisation).

    ``scale`` is the largest absolute eigenvalue (or variance) of the matrix being
    repaired; ``reg`` the model's ``reg_covar``; ``rel`` the relative floor
    (:data:`EIG_REL_FLOOR` by default). No absolute unit enters otherwise, so a
    repair is equivariant to rescaling the data (with ``reg_covar`` in data units²).
    """
    floor = max(reg, rel * abs(scale))
    return float(floor if floor > 0.0 else EIG_ABS_FLOOR)


def eigen_floor(A: np.ndarray, reg: float = 0.0, rel: float = EIG_REL_FLOOR) -> np.ndarray:
    """Nearest (Frobenius) symmetric matrix with eigenvalues >= the floor.

    Parameters
    ----------
    A : ndarray of shape (d, d)
        Symmetrised first; must be finite.
    reg, rel : float
        Lower bound of the floor and its fraction of the largest |eigenvalue|
        (see :func:`eig_floor_value`).

    Returns
    -------
    ndarray of shape (d, d), symmetric positive definite
    """
    w, V = np.linalg.eigh(symmetrize(A))
    floor = eig_floor_value(np.max(np.abs(w)), reg, rel)
    out = (V * np.maximum(w, floor)) @ V.T
    return symmetrize(out)


def safe_cholesky(A: np.ndarray, reg: float = 0.0, rel: float = EIG_REL_FLOOR):
    """Lower Cholesky factor of ``A`` once every eigenvalue is at least the floor
    ``max(reg, rel max|λ|)`` (:func:`eig_floor_value`; within :data:`FLOOR_SLACK`).

    ``A`` itself when it already is (bit-exact: the fast path of valid input), else
    :func:`eigen_floor` ``(A, reg)``, which raises only the eigenvalues below the floor. The
    result is a continuous function of ``A``: a repair triggered by a failed factorisation or
    a small pivot used to jump the smallest eigenvalue up to the floor (twice it and more, on
    columns duplicated in raw units), so an iterate crossing that line saw its log-likelihood
    drop by 0.17 nats per row, and a compressed fit's watchdog undid every step across it.

    Parameters
    ----------
    A : ndarray of shape (d, d)
    reg : float
        Lower bound of the eigenvalue floor.
    rel : float
        The floor's fraction of the largest |eigenvalue| (:func:`eig_floor_value`).

    Returns
    -------
    L : ndarray of shape (d, d), lower triangular
    A_used : ndarray of shape (d, d)
        ``A`` itself on the fast path (bit-exact), else the repaired matrix.
    repaired : bool
    """
    try:
        L = linalg.cholesky(A, lower=True)
        # λ_min >= 1 / ||L⁻¹||_F² and max|λ| <= trace A: when the bound clears the largest floor
        # possible, no eigenvalue is below it and no eigendecomposition is needed
        L_inv, info = lapack.dtrtri(L, lower=1)
        if info == 0 and 1.0 / np.sum(L_inv ** 2) >= eig_floor_value(np.trace(A), reg, rel) * (1.0 - FLOOR_SLACK):
            return L, A, False
    except (linalg.LinAlgError, ValueError):
        L = None
    w = np.linalg.eigvalsh(symmetrize(A)) if np.all(np.isfinite(A)) else None
    if L is not None and w is not None and w[0] >= eig_floor_value(np.max(np.abs(w)), reg, rel) * (1.0 - FLOOR_SLACK):
        return L, A, False
    fixed = eigen_floor(A, reg, rel)
    return linalg.cholesky(fixed, lower=True), fixed, True


def scaled_cholesky(A: np.ndarray, sd: np.ndarray, ridge: float = 0.0, rel: float = EIG_REL_FLOOR):
    """Cholesky factor of a covariance ``A = E + ridge I`` whose *empirical* part ``E`` is floored in
    units standardised by ``sd``.

    With ``D = diag(sd)`` the floor holds for ``E_std = D⁻¹ E D⁻¹``: its eigenvalues are raised to
    ``e0 = max(0, f − ridge / max sd²)``, where ``f = max(ridge / max sd², rel max(1, max|λ(E_std)|))``
    bounds the standardised total from below, and ``ridge I`` is added back. So whether and how ``A``
    is repaired does not depend on each column's unit, and a repaired ``A`` is never below
    ``ridge I``, the bound every exact covariance meets: flooring the total instead left a direction
    of exactly collinear columns at ``f σ_j²`` (1e-11 on raw wine), 1e5 times below ``ridge``, where a
    compressed fit ended 0.03 to 0.19 nats/row below exact EM with ``converged_`` True. A floor
    relative to the largest eigenvalue in original units bound the valid statistics of a unit-scale
    column next to one of scale 1e6.

    ``E_std`` within ``tol`` (``FLOOR_SLACK f`` plus its eigenvalues' float64 round-off,
    ``d eps ‖E_std‖_F``, at most ``f / 2``) below ``e0`` counts as valid and keeps the exact fast path:
    an exact covariance of collinear columns has ``λ_min(E) = 0`` up to that round-off. The repair is
    continuous up to ``tol``.

    Parameters
    ----------
    A : ndarray of shape (d, d)
        Finite, symmetric.
    sd : ndarray of shape (d,)
        Positive column scales (e.g. a model's public scale).
    ridge : float, default=0.0
        The ``reg_covar`` already on ``A``'s diagonal, in original units.
    rel : float
        The floor's fraction of a unit variance and of the largest standardised eigenvalue.

    Returns
    -------
    L : ndarray of shape (d, d), lower triangular
        ``A``'s own factor when ``A`` is valid (bit-exact), or ``D L_std`` when it is too
        ill-conditioned to factorise in original units.
    A_used : ndarray of shape (d, d)
        ``A`` itself when valid, else the repaired matrix.
    repaired : bool
    """
    sd = np.asarray(sd, dtype=np.float64)
    d = sd.shape[0]
    inv = 1.0 / sd
    E = A * np.outer(inv, inv)
    E.flat[:: d + 1] -= ridge * inv ** 2
    base = ridge * float(np.min(inv)) ** 2
    bound = float(np.linalg.norm(E))  # >= max|λ(E)|
    e0, tol = empirical_floor(base, rel, bound, d)
    try:
        linalg.cholesky(E + (tol - e0) * np.eye(d), lower=True)
        valid = True
    except linalg.LinAlgError:
        w, V = np.linalg.eigh(symmetrize(E))
        e0, tol = empirical_floor(base, rel, float(np.max(np.abs(w))), d)
        valid = w[0] >= e0 - tol
    fixed = A
    if not valid:
        fixed = symmetrize((V * np.maximum(w, e0)) @ V.T * np.outer(sd, sd))
        fixed.flat[:: d + 1] += ridge
    try:
        return linalg.cholesky(fixed, lower=True), fixed, not valid
    except linalg.LinAlgError:  # too ill-conditioned in original units: factorise in the scale's
        return sd[:, None] * linalg.cholesky(fixed * np.outer(inv, inv), lower=True), fixed, not valid


def empirical_floor(base: float, rel: float, lam_max: float, d: int):
    """(e0, tol) of :func:`scaled_cholesky`: the floor of a standardised empirical part of spectral
    radius ``lam_max`` (``d`` × ``d``; 1 for a variance) next to a ridge whose smallest standardised
    eigenvalue is ``base``, and how far below it still counts as on it."""
    f = eig_floor_value(max(1.0, lam_max), base, rel)
    tol = min(FLOOR_SLACK * f + d * np.finfo(np.float64).eps * lam_max, 0.5 * f)
    return max(0.0, f - base), tol


def inv_cholesky_upper(L: np.ndarray) -> np.ndarray:
    """``U = L^{-T}`` (upper triangular) so that ``U U^T = (L L^T)^{-1}``.

    This is scikit-learn's ``precisions_cholesky_`` convention for one matrix. LAPACK
    ``trtri`` rather than ``solve_triangular(L, I)``: the latter goes through OpenBLAS's
    threaded ``trsm`` and, right after a numba parallel region, measured 5-20 ms per
    10 x 10 matrix on a loaded 2-core machine (``trtri``: 20 us).
    """
    inv, info = lapack.dtrtri(np.asarray(L, dtype=np.float64), lower=1)
    if info != 0:
        raise ValueError(f"singular triangular factor (LAPACK trtri info={info}).")
    return inv.T


def precision_cholesky_from_precision(P: np.ndarray) -> np.ndarray:
    """Upper-triangular ``U`` with ``U U^T = P`` (scikit-learn's flip trick).

    Parameters
    ----------
    P : ndarray of shape (d, d), symmetric positive definite

    Returns
    -------
    U : ndarray of shape (d, d)
    """
    flipped = np.flipud(np.fliplr(P))
    return np.flipud(np.fliplr(linalg.cholesky(flipped, lower=True)))


def log_det_triangular(T: np.ndarray) -> np.ndarray:
    """``sum(log(diag(T)))`` over the last two axes: log|det T| of triangular factors."""
    return np.sum(np.log(np.diagonal(T, axis1=-2, axis2=-1)), axis=-1)


def check_spd(A: np.ndarray, name: str, rtol: float = 1e-8) -> None:
    """Raise ``ValueError`` unless ``A`` (d, d) is finite, symmetric and positive definite."""
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} must be finite.")
    scale = max(np.max(np.abs(A)), np.finfo(float).tiny)
    if np.max(np.abs(A - A.T)) > rtol * scale:
        raise ValueError(f"{name} must be symmetric.")
    try:
        linalg.cholesky(A, lower=True)
    except linalg.LinAlgError as exc:
        raise ValueError(f"{name} must be positive definite.") from exc
