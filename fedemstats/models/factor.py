"""Factor analysis ``x = μ + Λz + ε``, ``z ~ N(0, I_k)``, ``ε ~ N(0, Ψ)`` with Ψ diagonal,
on rows that may hold missing values (SPEC §5).

With ``z̃ = (z, 1)`` and, for the observed block ``o`` of a row,
``G_o = (I + Λ_oᵀ Ψ_o⁻¹ Λ_o)⁻¹``: ``E[z | x_o] = G_o Λ_oᵀ Ψ_o⁻¹ (x_o − μ_o)``,
``Cov[z | x_o] = G_o``. A missing coordinate ``x_j = μ_j + Λ_j z + ε_j`` contributes
its conditional moments. Rows are grouped by missingness pattern: each pattern's
``G_o`` (k × k, the Woodbury form of Σ_oo⁻¹) and ``log det Σ_oo`` are computed once.
Statistics (means over rows, on standardised data ``x̃ = (x − c) / σ``, SPEC §2):
``E[x̃∘x̃]`` (d,), ``E[x̃ z̃ᵀ]`` (d, k+1), ``E[z̃ z̃ᵀ]`` (k+1, k+1) (symmetric: sent as its
packed upper triangle, :mod:`fedemstats.layout`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .._linalg import LOG_2PI, safe_cholesky, symmetrize
from .._validation import check_int
from ..layout import SYMMETRIC, StatLayout, upper_indices
from ._group_moments import moments_or_rows
from ._moment_estep import factor_group_sums, factor_pattern_blocks
from ._patterns import missing_patterns, rows_per_chunk, segment_sums
from ._summaries import check_shift_scale, nan_moments, standardising_shift_scale
from .base import Model
from .factor_geometry import factor_geometry
from .gmm_denoise import NOISE_FLOOR, floor_full_second_moments

__all__ = ["FactorParams", "FactorAnalysisModel", "factor_posterior", "factor_log_likelihood",
           "factor_transform", "init_factor", "init_factor_from_moments", "NOISE_REL_FLOOR"]

#: Noise variances are floored at NOISE_REL_FLOOR times the square of the coordinate's
#: public scale (its standard deviation; the data's scale for a constant column), so
#: results are equivariant to rescaling. scikit-learn floors at an absolute 1e-12; at a
#: relative 1e-12 a Heywood case (Ψ_j → 0: a duplicated or exactly collinear column) made
#: 1/Ψ_j ~ 1e12 amplify the loadings' rounding into log-likelihoods of -4e5 per row and a
#: non-monotone EM (wine with two columns duplicated); at 1e-6 EM stays monotone and
#: converges to the Heywood boundary. (R's ``factanal`` bounds uniquenesses at 0.005.)
NOISE_REL_FLOOR = 1e-6
#: Relative slack of :meth:`FactorAnalysisModel.at_noise_floor` (the variance went through σ² and back).
FLOOR_MATCH_RTOL = 1e-9


def _noise_floor(sxx):
    """Floor of each Ψ_j in standardised units: NOISE_REL_FLOOR max(|S_xx,j|, 1)."""
    return NOISE_REL_FLOOR * np.maximum(np.abs(sxx), 1.0)


#: Floor on the initial loading scale (λ - 1 in units of Ψ): a zero loading column is a
#: fixed point of EM, so the initial loadings must not vanish.
INIT_LOADING_FLOOR = 1e-2


@dataclass(frozen=True, eq=False)
class FactorParams:
    """Factor-analysis parameters in scikit-learn's layout (treat as read-only).

    Attributes
    ----------
    components : ndarray of shape (k, d)
        ``Λᵀ`` (scikit-learn's ``components_``).
    noise_variance : ndarray of shape (d,)
    mean : ndarray of shape (d,)
    """

    components: np.ndarray
    noise_variance: np.ndarray
    mean: np.ndarray

    @property
    def covariance(self) -> np.ndarray:
        """``ΛΛᵀ + Ψ``, shape (d, d)."""
        return self.components.T @ self.components + np.diag(self.noise_variance)


def factor_posterior(X, observed, pat, theta, blocks):
    """Posterior of the factors given the observed block.

    Parameters
    ----------
    X : ndarray of shape (c, d), NaN where missing
    observed : ndarray of bool of shape (c, d)
    pat : ndarray of int of shape (c,)
    theta : FactorParams
    blocks : tuple (G, logdet, F) from the row patterns (:func:`._moment_estep.factor_pattern_blocks`)

    Returns
    -------
    Ez : ndarray of shape (c, k)
    G : ndarray of shape (c, k, k)
        ``Cov[z | x_o]``.
    logp : ndarray of shape (c,)
        ``log N(x_o; μ_o, Σ_oo)``.
    """
    W, psi = theta.components, theta.noise_variance
    y = np.where(observed, X - theta.mean, 0.0)
    w = (y / psi) @ W.T
    G = blocks[0][pat]
    Ez = np.einsum("nkl,nl->nk", G, w)
    quad = np.sum(y * y / psi, axis=1) - np.sum(w * Ez, axis=1)
    logp = -0.5 * (observed.sum(axis=1) * LOG_2PI + blocks[1][pat] + quad)
    return Ez, G, logp


def _row_stats(X, observed, pat, theta, blocks, shift):
    """Per-row ``[E[x̃∘x̃], E[x̃ z̃ᵀ], E[z̃ z̃ᵀ], loglik]`` with ``x̃ = x − c``."""
    Ez, G, logp = factor_posterior(X, observed, pat, theta, blocks)
    W, psi = theta.components, theta.noise_variance
    c, k = Ez.shape
    miss = ~observed
    xhat = np.where(observed, X - shift, (theta.mean - shift) + Ez @ W)
    WG = np.einsum("kj,nkl->njl", W, G) * miss[:, :, None]  # Λ_j Cov[z] for missing j
    sxx = xhat ** 2 + miss * (np.einsum("njl,lj->nj", WG, W) + psi)
    sxz = np.concatenate([xhat[:, :, None] * Ez[:, None, :] + WG, xhat[:, :, None]], axis=2)
    szz = np.empty((c, k + 1, k + 1))
    szz[:, :k, :k] = G + Ez[:, :, None] * Ez[:, None, :]
    szz[:, :k, k] = szz[:, k, :k] = Ez
    szz[:, k, k] = 1.0
    iu, ju = upper_indices(k + 1)
    return np.concatenate([sxx, sxz.reshape(c, -1), szz[:, iu, ju], logp[:, None]], axis=1)


def _chunked(X, theta, row_fn, width, seg=None):
    observed = ~np.isnan(X)
    patterns, pat = missing_patterns(observed)
    blocks = factor_pattern_blocks(theta, patterns)
    seg = np.array([0, X.shape[0]]) if seg is None else seg
    k = theta.components.shape[0]
    fn = lambda a, b: row_fn(X[a:b], observed[a:b], pat[a:b], blocks)  # noqa: E731
    return segment_sums(fn, seg, width, rows_per_chunk(X.shape[1] * (k + 2) + k * k))


def _all_rows(X, theta):
    """Posterior of every row at once (memory O(n k²), no per-row d × d temporaries)."""
    X = np.asarray(X, dtype=np.float64)
    observed = ~np.isnan(X)
    patterns, pat = missing_patterns(observed)
    return factor_posterior(X, observed, pat, theta, factor_pattern_blocks(theta, patterns))


def factor_log_likelihood(X, theta):
    """Observed-data log-density of each row under ``N(μ, ΛΛᵀ + Ψ)``, shape (n,)."""
    return _all_rows(X, theta)[2]


def factor_transform(X, theta):
    """Posterior means ``E[z | x_o]`` of the factors, shape (n, k)."""
    return _all_rows(X, theta)[0]


def init_factor(federation, n_factors, noise_variance_init=None, scale=None):
    """Initial :class:`FactorParams` from global pairwise moments (the clients' sums only,
    see :func:`._summaries.nan_moments`): :func:`init_factor_from_moments` on them."""
    mean, cov = nan_moments(federation)
    return init_factor_from_moments(mean, cov, n_factors, noise_variance_init, scale)


def init_factor_from_moments(mean, cov, n_factors, noise_variance_init=None, scale=None):
    """Initial :class:`FactorParams` from a global mean and covariance (a Flower server has
    these from the nodes' descriptions, ``fedemstats.flower.nodes.pooled_moments``).

    Like scikit-learn's first iteration: ``Ψ₀ = diag(S)`` (or the user's, capped at diag(S)), loadings from
    the leading eigenpairs ``(ℓ, v)`` of ``Ψ₀^{-1/2} S Ψ₀^{-1/2}``:
    ``Λ = Ψ₀^{1/2} v sqrt(max(ℓ − 1, INIT_LOADING_FLOOR))``.

    Parameters
    ----------
    mean : ndarray of shape (d,)
    cov : ndarray of shape (d, d)
        Symmetric (pairwise-complete moments need not be positive definite).
    n_factors : int
    noise_variance_init : ndarray of shape (d,), optional
    scale : ndarray of shape (d,), optional
        Public scales ``σ``: ``Ψ₀`` is floored at ``NOISE_REL_FLOOR σ²`` (default the
        largest variance as every ``σ``).

    Returns
    -------
    FactorParams
    """
    mean, cov = np.array(mean, dtype=np.float64), np.asarray(cov, dtype=np.float64)
    var = np.diag(cov).copy()
    unit = np.full_like(var, max(var.max(), 0.0) or 1.0) if scale is None else np.asarray(scale) ** 2
    floor = np.maximum(var, NOISE_REL_FLOOR * unit)
    # capped at the variances: at a maximum-likelihood solution diag(ΛᵀΛ + Ψ) = diag(S), so Ψ_j <= S_jj;
    # above them every ℓ < 1, the loadings start on INIT_LOADING_FLOOR, and the first M-step shrinks
    # them by Ψ₀⁻¹ S: from Ψ₀ = 1e6 × var EM crawled out of Λ ≈ 0 slower than its convergence test
    # could see, and stopped at the saddle (standardised wine: 3 iterations, -18.45 against -15.08)
    psi = floor if noise_variance_init is None else np.minimum(np.asarray(noise_variance_init, dtype=np.float64),
                                                                floor)
    scale = np.sqrt(psi)
    ell, V = np.linalg.eigh(cov / np.outer(scale, scale))
    ell, V = ell[::-1][:n_factors], V[:, ::-1][:, :n_factors]
    loadings = scale[:, None] * V * np.sqrt(np.maximum(ell - 1.0, INIT_LOADING_FLOOR))
    return FactorParams(loadings.T.copy(), psi.copy(), mean)


class FactorAnalysisModel(Model):
    """Factor analysis with missing values as a FedEM model.

    Parameters
    ----------
    n_features : int
    n_factors : int
    shift : array-like of shape (n_features,), optional
        Public centring point ``c`` (default zeros).
    scale : array-like of shape (n_features,), optional
        Public positive scales ``σ`` (default ones), e.g. the global standard deviations.

    Notes
    -----
    Statistics are computed on standardised data ``(x − c) / σ``: factor analysis is
    scale equivariant, and commensurate blocks keep one quantisation norm from drowning
    the small ones (SPEC §2 numerical care, extended from a shift to a scale). The
    T-map works in those units and maps back (Λ_j σ_j, Ψ_j σ_j², c + σ μ̃).
    T-map: ``Λ̃ = S_xz̃ S_z̃z̃⁻¹ = [Λ, μ − c]``, ``Ψ = diag(S_xx − Λ̃ S_xz̃ᵀ)``. Projection for
    noisy ``s``: ``S_z̃z̃`` is symmetrised and its eigenvalues below the floor are raised
    (:func:`fedemstats._linalg.safe_cholesky`); each ``Ψ_j`` is
    floored at ``NOISE_REL_FLOOR max(|S_xx,j|, 1)`` in standardised units (relative to
    the column's scale, see :data:`NOISE_REL_FLOOR`).
    """

    allow_nan = True

    def __init__(self, n_features, n_factors, shift=None, scale=None):
        self.n_features = check_int(n_features, "n_features")
        self.n_factors = check_int(n_factors, "n_factors")
        d, k = self.n_features, self.n_factors
        self.shift, self.scale = check_shift_scale(shift, scale, d)
        self.layout = StatLayout([("sum_xx", (d,)), ("sum_xz", (d, k + 1)), ("sum_zz", (k + 1, k + 1), SYMMETRIC)])

    #: public shift and scale from the round-1 moments of the observed values
    public_centring = staticmethod(standardising_shift_scale)

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None):
        """:meth:`Model.client_stats`: statistics on ``(x − c) / σ``, log-likelihood in the original units.

        From the moments of each (client, missingness pattern) group (a few products per
        group, :mod:`._moment_estep`) when they pay off, else row by row.
        """
        std = self._standardised(theta)
        moments, rows = moments_or_rows(federation, self.shift, self.scale, clients, batch, rng)
        if moments is not None:
            sums, counts = factor_group_sums(moments, std, np.log(self.scale)), moments.n_rows
        else:
            sums, counts = self._row_sums(*rows, std), np.diff(rows[1])
        sums /= counts[:, None]
        return sums[:, :self.q], sums[:, self.q].copy()

    def _row_sums(self, X, seg, std):
        """Per-client sums of the statistics and log-likelihood, row by row (many patterns)."""
        log_scale = np.log(self.scale)

        def fn(Xa, obs, pat, blocks):
            rows = _row_stats(Xa, obs, pat, std, blocks, np.zeros(self.n_features))
            rows[:, -1] -= obs @ log_scale  # Jacobian of the standardisation
            return rows

        return _chunked((X - self.shift) / self.scale, std, fn, self.q + 1, seg)

    def _standardised(self, theta):
        """``theta`` in the units of ``(x − c) / σ`` (factor analysis is scale equivariant)."""
        return FactorParams(theta.components / self.scale, theta.noise_variance / self.scale ** 2,
                            (theta.mean - self.shift) / self.scale)

    def t_map(self, s) -> FactorParams:
        """Total M-step (see class Notes); ValueError if ``s`` is misshapen or not finite."""
        parts = self.unpack_stats(s)
        L, _, _ = safe_cholesky(symmetrize(parts["sum_zz"]))
        lam = linalg.cho_solve((L, True), parts["sum_xz"].T).T
        sxx = parts["sum_xx"]
        psi = np.maximum(sxx - np.sum(lam * parts["sum_xz"], axis=1), _noise_floor(sxx))
        k, sd = self.n_factors, self.scale
        return FactorParams((lam[:, :k] * sd[:, None]).T.copy(), psi * sd ** 2, lam[:, k] * sd + self.shift)

    def at_noise_floor(self, theta, s) -> np.ndarray:
        """Which noise variances of ``theta = T(s)`` sit at their floor (a Heywood case, or a
        constant column), bool of shape (n_features,)."""
        sxx = self.unpack_stats(s)["sum_xx"]
        return theta.noise_variance / self.scale ** 2 <= _noise_floor(sxx) * (1.0 + FLOOR_MATCH_RTOL)

    def expected_stats(self, theta) -> np.ndarray:
        """E_θ[s] in standardised units: (diag(ΛΛᵀ) + Ψ + μ², [Λ, μ], I ⊕ 1) (E[z] = 0,
        E[zzᵀ] = I), which ``t_map`` maps back to θ."""
        std = self._standardised(theta)
        lam, psi, mu = std.components.T, std.noise_variance, std.mean
        k = self.n_factors
        zz = np.eye(k + 1)
        return self.layout.pack({"sum_xx": np.sum(lam ** 2, axis=1) + psi + mu ** 2,
                                 "sum_xz": np.concatenate([lam, mu[:, None]], axis=1), "sum_zz": zz})

    def geometry(self, theta, s_hat):
        """Residual whitening (:func:`.factor_geometry.factor_geometry`, ``docs/geometry.md``)."""
        return factor_geometry(self, theta, s_hat)

    def dp_row_bound(self, radius) -> float:
        """B = √(ρ⁴ + ρ²(1 + ρ²) + (1 + ρ²)²): (x∘x, x z̃ᵀ, z̃z̃ᵀ) with ‖x‖ ≤ ρ and the
        standardised factors ‖z‖ ≤ ρ as well; E[z | x] depends on θ, so the per-row clip
        to B enforces it."""
        z2 = 1.0 + radius ** 2
        return float(np.sqrt(radius ** 4 + radius ** 2 * z2 + z2 ** 2))

    def dp_denoise(self, s, geometry, noise_std, previous=None) -> np.ndarray:
        """The factors' design floored at the release's noise level.

        T regresses x̃ on z̃: Λ̃ = S_xz S_zz⁻¹. S_zz holds a Gaussian's moments (count S_zz[k, k],
        E z, E zzᵀ), so the factors' covariance gets the mixtures' eigenvalue floor
        (:func:`.gmm_denoise.floor_full_second_moments`). Without it a release that made S_zz
        nearly singular gave loadings of 1e9 on Ψ's floor, whose E-step failed (client-level DP
        over 20 clients, ε = 10: every seed). Ψ is not floored at the noise level as well: on
        6,000 rows at ε = 1 (20 rounds, 4 seeds) that lost up to 0.3 nats per held-out row, and
        the design's floor alone ended every run. Post-processing: ``s``, ``geometry`` and τ only.

        Parameters
        ----------
        s : ndarray of shape (q,)
        geometry : Geometry
            The release's coordinates.
        noise_std : float
            τ, per stored coordinate of ``s`` there.

        Returns
        -------
        ndarray of shape (q,)
        """
        y = self.layout.unpack(geometry.forward(np.asarray(s, dtype=np.float64))[0])
        k, zz = self.n_factors, symmetrize(y["sum_zz"])
        count = np.array([max(zz[k, k], NOISE_FLOOR * noise_std)])
        zz[k, k] = count[0]
        zz[:k, :k] = floor_full_second_moments(count, zz[None, :k, k], zz[None, :k, :k], noise_std)[0]
        y["sum_zz"] = zz
        return geometry.inverse(self.layout.pack(y))[0]

    def log_likelihood(self, X, theta) -> np.ndarray:
        """Observed-data log-density of each row, shape (n,)."""
        return factor_log_likelihood(X, theta)

    def n_parameters(self, theta) -> int:
        """Loadings (less the rotation), noise variances and mean."""
        d, k = self.n_features, self.n_factors
        return int(d * k - k * (k - 1) // 2 + 2 * d)

    def init_theta(self, federation, rng=None, noise_variance_init=None) -> FactorParams:
        """Initial parameters from global moments; see :func:`init_factor`."""
        return init_factor(federation, self.n_factors, noise_variance_init, self.scale)
