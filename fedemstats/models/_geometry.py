"""Compression geometry: an invertible linear map P(θ) on statistic vectors (issue 11, item 1).

A client compresses ``P Δ_i`` instead of its raw statistic difference ``Δ_i``; server and
client both decode ``q_i = P⁻¹ Quant(P Δ_i)``, unbiased by linearity. ``P`` is computed
from the public iterate (θ = T(Ŝ), Ŝ), so both sides build the same map. Each model
provides its own (``Model.geometry``); this module holds the contract, the identity map
and what the model geometries share: the batched whitening factors with their fallback
rule and the trust region's search (block boundaries: :mod:`._geometry_blocks`). See
``docs/geometry.md``.
"""
from __future__ import annotations

import logging

import numpy as np

from .._linalg import symmetrize

__all__ = ["Geometry", "IdentityGeometry", "TRUST_RATIO", "MAX_HALVINGS", "REFINE_BISECTIONS", "MIN_WEIGHT",
           "MAX_CONDITION", "whitening_factors", "as_rows", "step_fractions", "refinements", "min_eigenvalue",
           "build_geometry", "log_fallback"]

log = logging.getLogger(__name__)

#: A step is inside the trust region if, in the current model's whitened coordinates, every
#: margin (a weight over its current value, a whitened variance, ...; 1 at the model's own
#: statistics) stays >= TRUST_RATIO x its value at the current iterate (capped at 1). This is
#: the region at the default compression; the server shrinks the ratio with the step's noise
#: (``StepController.trust_ratio``), since a noiseless EM step needs no region.
TRUST_RATIO = 0.25
#: step_fraction tries t = 1, 1/2, ..., 2**-MAX_HALVINGS ...
MAX_HALVINGS = 12
#: ... and, when the round's ratio r is below TRUST_RATIO, bisects the bracket above the largest
#: halving inside ceil(log2(TRUST_RATIO / r)) times, at most this many (the region is an
#: interval of t). The search's slack is thus proportional to the ratio: at the default noise
#: (r = TRUST_RATIO) it is the halvings' factor 2, a damping the noisy steps need (bisecting there
#: too lost 3 rows of ``bench_real_data``), and as the noise vanishes the step reaches the
#: region's edge. Halvings alone cut a step whose target sits on the edge (a component
#: collapsing onto the zeros of a count column) to t = 1/2 at any precision: on Portal with a
#: full-covariance GMM, dithering at 64 to 1024 levels ended 0.385 nats/row below exact EM, at
#: another stationary point.
REFINE_BISECTIONS = 16
#: Components with a mixture weight below this use the identity map and are not checked.
MIN_WEIGHT = 1e-8
#: Covariances (and S_z̃z̃) whose correlation matrix has a larger condition number are not
#: whitened (identity map): 1 / EIG_REL_FLOOR, the worst conditioning a T-map repair produces.
MAX_CONDITION = 1e10


def as_rows(x) -> np.ndarray:
    """``x`` as float64 rows of shape (m, q) (a single vector becomes one row)."""
    x = np.asarray(x, dtype=np.float64)
    return x[None] if x.ndim == 1 else x


def whitening_factors(cov, usable=None):
    """Batched Cholesky factors of covariances, with the identity where they cannot whiten.

    A matrix falls back to the identity if it has a non-finite entry, is not positive
    definite (after symmetrisation), or its correlation matrix has a condition number above
    :data:`MAX_CONDITION` (scale-free: columns on very different scales whiten exactly, so
    results stay equivariant to rescaling a column): a deterministic function of ``cov``.

    Parameters
    ----------
    cov : ndarray of shape (K, d, d)
    usable : ndarray of bool of shape (K,), optional
        False for components to put on the identity whatever their covariance (e.g. a
        weight below :data:`MIN_WEIGHT`); they are not reported in ``fallback``.

    Returns
    -------
    L : ndarray of shape (K, d, d)
        Lower Cholesky factors (identity where not usable).
    L_inv : ndarray of shape (K, d, d)
        Their inverses.
    fallback : ndarray of bool of shape (K,)
        Components given the identity because of their covariance.
    """
    K, d = cov.shape[0], cov.shape[-1]
    eye = np.broadcast_to(np.eye(d), (K, d, d))
    finite = np.all(np.isfinite(cov), axis=(1, 2))
    mats = symmetrize(np.where(finite[:, None, None], cov, eye))
    # conditioning of the correlation matrix: columns on scales 1 and 1e7 whiten exactly
    # (Cholesky is equivariant to diagonal scaling), only near-collinearity does not
    diag = np.diagonal(mats, axis1=1, axis2=2)
    positive = np.all(diag > 0, axis=1)
    inv_sd = 1.0 / np.sqrt(np.where(positive[:, None], diag, 1.0))
    ev = np.linalg.eigvalsh(mats * inv_sd[:, :, None] * inv_sd[:, None, :])
    fallback = ~finite | ~positive | ~(ev[:, 0] > 0) | ~(ev[:, -1] <= MAX_CONDITION * ev[:, 0])
    skip = fallback | (np.zeros(K, bool) if usable is None else ~usable)
    mats = np.where(skip[:, None, None], eye, mats)
    L = np.linalg.cholesky(mats)
    return L, np.linalg.inv(L), fallback


def min_eigenvalue(C) -> np.ndarray:
    """Smallest eigenvalue of each symmetrised matrix of C (..., d, d); ``-inf`` where C is not finite."""
    finite = np.all(np.isfinite(C), axis=(-2, -1))
    safe = np.where(finite[..., None, None], C, 0.0)
    return np.where(finite, np.linalg.eigvalsh(symmetrize(safe))[..., 0], -np.inf)


def log_fallback(owner, what, mask) -> None:
    """Log at DEBUG the indices of ``owner``'s units (components, coordinates, rates) where
    ``mask`` puts the identity map."""
    if np.any(mask):
        log.debug("%s: %s %s on the identity map", owner, what, np.argwhere(mask).tolist())


def step_fractions() -> np.ndarray:
    """The candidate fractions ``1, 1/2, ..., 2**-MAX_HALVINGS``, largest first, shape (MAX_HALVINGS + 1,)."""
    return 0.5 ** np.arange(MAX_HALVINGS + 1)


def refinements(ratio) -> int:
    """Bisections of the trust region's search at ``ratio``: ceil(log2(TRUST_RATIO / ratio)),
    0 at or above TRUST_RATIO, at most REFINE_BISECTIONS (see there)."""
    if not ratio < TRUST_RATIO:
        return 0
    if ratio <= TRUST_RATIO * 2.0 ** -REFINE_BISECTIONS:
        return REFINE_BISECTIONS
    return int(np.ceil(np.log2(TRUST_RATIO / ratio)))


class Geometry:
    """Invertible linear map P on statistic vectors (flat, layout order), from public θ and Ŝ.

    Subclasses implement :meth:`forward`, :meth:`inverse` and :meth:`_margins`.

    Attributes
    ----------
    layout : StatLayout
    blocks : ndarray of int64 of shape (n_blocks + 1,)
        Block boundaries in P-coordinates for per-block quantisation (``blocks[-1] == q``).
    """

    layout = None
    blocks: np.ndarray
    #: the layout's block names, in the order :meth:`_split` returns them
    names: tuple = ()

    def _split(self, x) -> tuple:
        """The named blocks of rows ``x`` (full matrices for packed symmetric blocks)."""
        parts = self.layout.unpack(as_rows(x))
        return tuple(parts[n] for n in self.names)

    def _join(self, *blocks) -> np.ndarray:
        """Rows (m, q) from the named blocks, in :attr:`names` order."""
        return self.layout.pack(dict(zip(self.names, blocks)))

    def forward(self, x) -> np.ndarray:
        """``P x`` for each row; x of shape (m, q) or (q,), returns (m, q)."""
        raise NotImplementedError

    def inverse(self, y) -> np.ndarray:
        """``P⁻¹ y`` for each row; y of shape (m, q) or (q,), returns (m, q)."""
        raise NotImplementedError

    def gain_weights(self):
        """Weights c (q,) such that ½ Σ_j c_j y_j² approximates the log-likelihood per row an EM
        step gains when the mean field is y = P h; None when all are 1 (one component;
        :func:`._mixture.mass_gain_weights` gives a mixture's)."""
        return None

    def gain_ratio(self, y) -> float:
        """Σ_j c_j y_j² / Σ_j y_j² of a direction y (q,) in P-coordinates (:meth:`gain_weights`;
        1.0 without weights or for y = 0): the factor from ½ ‖P h‖² to an EM step's gain."""
        c, total = self.gain_weights(), float(y @ y)
        return 1.0 if c is None or not total > 0.0 else float(np.sum(c * y * y)) / total

    def whiten_point(self, s) -> np.ndarray:
        """Whitened coordinates of *points* (not differences), shape (m, q).

        Equal to :meth:`forward` unless the natural whitening is affine (a single
        Gaussian, whose implicit count 1 is not a statistic). At θ = T(Ŝ) the point Ŝ
        maps to the model's canonical form (e.g. a GMM component to (π_k, 0, π_k I)).
        """
        return self.forward(s)

    def unwhiten_point(self, y) -> np.ndarray:
        """The points whose :meth:`whiten_point` is ``y`` (m, q): :meth:`inverse` unless the
        whitening is affine."""
        return self.inverse(y)

    def _margins(self, points) -> np.ndarray:
        """Trust-region margins of each row of ``points`` (n, q), finite: shape (n, m).

        Each is 1 at the current model's own statistics E_θ[s] (a weight over its current
        value, a whitened variance, a rate ratio, ...) and ``inf`` where nothing is checked.
        """
        raise NotImplementedError

    def margins(self, points) -> np.ndarray:
        """The trust region's margins of ``points`` (m, q) or (q,), finite: shape (m, n_margins).

        Each margin is 1 at the current model's own statistics E_θ[s] and says how far a point
        shrinks what the region protects (a component's weight over its current value, the
        smallest whitened variance, a noise-variance or rate ratio, ...); ``inf`` where nothing
        is checked (:meth:`shrink` compares two points).
        """
        return self._margins(as_rows(points))

    def shrink(self, s_hat, point) -> float:
        """The largest trust-region ratio at which ``point`` (q,) is inside the region around
        ``s_hat`` (q,): min over margins of margin(point) / min(1, margin(s_hat)), the bound
        :meth:`contains` checks (``inf`` when no margin is checked or bounded).

        Of exact EM's next iterate it is bench_continuity's ρ: ρ = 1e-4 means the round takes a
        weight or a whitened variance to 1e-4 of its value.
        """
        before = self._floor(np.asarray(s_hat, dtype=np.float64), 1.0)
        after = self.margins(point)[0]
        return float(np.min(np.divide(after, before, out=np.full_like(after, np.inf), where=before > 0.0)))

    def _inside(self, points, floor) -> np.ndarray:
        """Whether each row of ``points`` (n, q), finite, keeps every margin >= ``floor`` (m,); (n,) bool."""
        return np.all(self._margins(points) >= floor, axis=1)

    def _floor(self, s_hat, ratio) -> np.ndarray:
        """The region's bound on each margin: ``ratio`` times its value at ``s_hat``, capped at 1; (m,)."""
        return ratio * np.clip(self._margins(s_hat[None])[0], 0.0, 1.0)

    def project_step(self, s_hat, step, ratio=TRUST_RATIO) -> np.ndarray:
        """The step with the coordinates that alone would leave the region pulled back, before
        :meth:`step_fraction` scales what remains; shape (q,). The default changes nothing:
        a margin that mixes coordinates (an eigenvalue) has no per-coordinate projection."""
        return step

    def contains(self, s_hat, step, ratio=TRUST_RATIO) -> bool:
        """Whether the whole step ``s_hat + step`` is inside the trust region (finite included):
        ``step_fraction(s_hat, step, ratio) == 1.0`` without the search below 1."""
        s_hat = np.asarray(s_hat, dtype=np.float64)
        point = s_hat + np.asarray(step, dtype=np.float64)
        return bool(np.all(np.isfinite(point)) and self._inside(point[None], self._floor(s_hat, ratio))[0])

    def step_fraction(self, s_hat, step, ratio=TRUST_RATIO) -> float:
        """Largest t in {1, 1/2, ..., 2**-MAX_HALVINGS} with ``s_hat + t step`` inside the trust
        region, moved toward the region's edge when ``ratio`` is below TRUST_RATIO.

        Parameters
        ----------
        s_hat : ndarray of shape (q,)
            The current iterate (θ = T(s_hat) is the current model).
        step : ndarray of shape (q,)
        ratio : float, default=TRUST_RATIO
            How far a margin may shrink, relative to its value at ``s_hat``.

        Returns
        -------
        float
            The fraction, or 0.0 if no candidate is inside (or the step is not finite).

        Notes
        -----
        The halvings t = 1, 1/2, ..., 2**-MAX_HALVINGS are tried in one batch. If the largest
        inside, t_h, is below 1 and ``ratio`` below TRUST_RATIO, :func:`refinements` bisections of
        [t_h, 2 t_h] move t toward the region's edge (never below t_h): a search whose slack
        shrinks with the ratio, so that a noiseless step is cut only where it must be.

        The region is relative to the current iterate: a margin may fall to ``ratio`` times
        its value at ``s_hat`` (capped at 1), not below. At Ŝ = E_θ[s] every margin is 1 and
        the region is ``ratio`` itself. Where T repaired Ŝ (a floored eigenvalue, noise
        variance or rate: a constant column, exactly collinear columns, a count column of
        zeros) Ŝ's own margin is below 1, and an absolute bound would refuse every step that
        does not lift it, so a fit froze there; a margin that is not positive at Ŝ gives a
        floor of 0 (Ŝ itself is then outside, see ``Algorithm._safe_step``).
        """
        s_hat = np.asarray(s_hat, dtype=np.float64)
        step = np.asarray(step, dtype=np.float64)
        t = step_fractions()
        points = s_hat[None] + t[:, None] * step[None]
        finite = np.all(np.isfinite(points), axis=1)
        if not finite.any():
            return 0.0
        floor = self._floor(s_hat, ratio)
        ok = np.zeros(t.size, dtype=bool)
        ok[finite] = self._inside(points[finite], floor)
        if not ok.any():
            return 0.0
        lo = float(t[np.argmax(ok)])
        hi = 2.0 * lo
        for _ in range(refinements(ratio) if lo < 1.0 else 0):
            mid = 0.5 * (lo + hi)
            point = s_hat + mid * step
            if np.all(np.isfinite(point)) and self._inside(point[None], floor)[0]:
                lo = mid
            else:
                hi = mid
        return lo


def build_geometry(cls, model, theta, s_hat, *args) -> Geometry:
    """``cls(model, theta, s_hat, *args)``, or :class:`IdentityGeometry` (logged at DEBUG) if
    ``s_hat`` is not finite or the constructor finds nothing to whiten with (``LinAlgError``)."""
    s_hat = np.asarray(s_hat, dtype=np.float64)
    if not np.all(np.isfinite(s_hat)):
        return IdentityGeometry(model.layout, f"{cls.__name__}: s_hat is not finite")
    try:
        return cls(model, theta, s_hat, *args)
    except np.linalg.LinAlgError as exc:
        return IdentityGeometry(model.layout, f"{cls.__name__}: {exc}")


class IdentityGeometry(Geometry):
    """P = I: raw statistic coordinates, the layout's blocks, no trust region (t = 1).

    Parameters
    ----------
    layout : StatLayout
    reason : str, optional
        Why a model fell back to it (logged at DEBUG).
    """

    def __init__(self, layout, reason=None):
        self.layout = layout
        self.blocks = np.asarray(layout.offsets, dtype=np.int64)
        self.reason = reason
        if reason is not None:
            log.debug("compression geometry: identity map (%s)", reason)

    def forward(self, x):
        return as_rows(x).copy()

    def inverse(self, y):
        return as_rows(y).copy()

    def _margins(self, points):
        return np.full((points.shape[0], 1), np.inf)

    def step_fraction(self, s_hat, step, ratio=TRUST_RATIO) -> float:
        """Always 1.0: the identity map has no model geometry to protect."""
        return 1.0

    def contains(self, s_hat, step, ratio=TRUST_RATIO) -> bool:
        """Always True, as :meth:`step_fraction`."""
        return True
