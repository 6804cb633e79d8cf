"""E-steps of factor analysis and of a Gaussian with missing values from group moments.

Given the count ``n``, sum ``s`` and scatter ``M`` of the (standardised, zero-filled)
observed values of each (client, pattern) group (:mod:`._group_moments`), with ``o`` the
pattern's observed mask, ``m = 1 − o`` and ``y = o∘(x − μ)``:

``Σ y = s − n o∘μ``,  ``Σ (o∘x) yᵀ = M − s (o∘μ)ᵀ``,  ``Σ y yᵀ = M − s (o∘μ)ᵀ − (o∘μ) sᵀ + n (o∘μ)(o∘μ)ᵀ``,

and every statistic below is an exact function of these: the E-step of a round costs
a few (d × d) · (d × k) products per group, whatever the number of rows. Both
functions return per-client *sums* (not means) laid out as the models' statistics
(packed symmetric blocks, :mod:`fedemstats.layout`) followed by the log-likelihood.
"""
from __future__ import annotations

import numpy as np

from .._linalg import LOG_2PI
from ..layout import upper_indices
from ._conditionals import gaussian_blocks

__all__ = ["factor_group_sums", "gaussian_group_sums", "factor_pattern_blocks"]


def _centred(gm, mean):
    """Per group: ``o∘μ`` (G, d), ``Σ y`` (G, d) and ``Σ (o∘x) yᵀ`` (G, d, d)."""
    mu_o = gm.patterns[gm.pattern] * mean
    n = gm.count[:, None]
    return mu_o, gm.sums - n * mu_o, gm.scatter - gm.sums[:, :, None] * mu_o[:, None, :]


def _loglik(gm, logdet, quad, log_scale):
    """Per-group sums of ``log N(x_o)``, minus the Jacobian of the standardisation."""
    obs = gm.patterns[gm.pattern]
    n = gm.count
    return -0.5 * (n * obs.sum(axis=1) * LOG_2PI + n * logdet[gm.pattern] + quad) - n * (obs @ log_scale)


def factor_pattern_blocks(theta, patterns):
    """Per pattern: ``G = Cov[z | x_o]`` (P, k, k), ``log det Σ_oo`` (P,) and ``F = G⁻¹`` (P, k, k).

    ``F = I + Λ_oᵀ Ψ_o⁻¹ Λ_o`` (the Woodbury form of ``Σ_oo⁻¹``), factorised once per pattern.
    """
    W, psi = theta.components, theta.noise_variance
    ipsi = patterns / psi[None]
    F = np.einsum("kj,pj,lj->pkl", W, ipsi, W) + np.eye(W.shape[0])[None]
    Lf = np.linalg.cholesky(F)
    logdet_f = 2.0 * np.sum(np.log(np.diagonal(Lf, axis1=-2, axis2=-1)), axis=-1)
    Li = np.linalg.inv(Lf)
    G = np.swapaxes(Li, -1, -2) @ Li
    return G, patterns @ np.log(psi) + logdet_f, F


def _factor_pattern_terms(theta, patterns):
    """Per pattern: ``G = Cov[z | x_o]``, ``A = diag(o/ψ) Λ G`` (d, k), ``F = G⁻¹``, log det Σ_oo."""
    G, logdet, F = factor_pattern_blocks(theta, patterns)
    A = ((patterns / theta.noise_variance[None])[:, :, None] * theta.components.T[None]) @ G
    return G, A, F, logdet


def _factor_moments(gm, theta, A):
    """``Σ E[z]`` (G, k), ``Σ E[z]E[z]ᵀ`` (G, k, k) and ``Σ (o∘x) E[z]ᵀ`` (G, d, k)."""
    mu_o, sy, sxy = _centred(gm, theta.mean)
    Ag = A[gm.pattern]
    sxy_a = sxy @ Ag
    ez = np.einsum("gdk,gd->gk", Ag, sy)
    ezz = np.swapaxes(Ag, 1, 2) @ (sxy_a - mu_o[:, :, None] * ez[:, None, :])
    return ez, 0.5 * (ezz + np.swapaxes(ezz, 1, 2)), sxy_a, mu_o, sy


def factor_group_sums(gm, theta, log_scale):
    """Per-client sums of the factor-analysis statistics and log-likelihood.

    Parameters
    ----------
    gm : GroupMoments
        Of the standardised values ``(x − c) / σ``.
    theta : FactorParams
        In the same standardised units.
    log_scale : ndarray of shape (d,)
        ``log σ`` (the log-likelihood is reported in the original units).

    Returns
    -------
    sums : ndarray of shape (n_seg, q + 1)
        ``[E[x̃∘x̃] (d), E[x̃ z̃ᵀ] (d, k+1), E[z̃ z̃ᵀ] packed, loglik]`` summed over rows.
    """
    W, psi, mean = theta.components, theta.noise_variance, theta.mean
    k, d = W.shape
    Gp, A, F, logdet = _factor_pattern_terms(theta, gm.patterns)
    ez, ezz, sxy_a, mu_o, sy = _factor_moments(gm, theta, A)
    n, miss = gm.count, 1.0 - gm.patterns[gm.pattern]
    B = miss[:, :, None] * W.T[None]  # x̂ = o∘x + m∘μ + B E[z]
    b_ez, b_ezz = np.einsum("gdk,gk->gd", B, ez), B @ ezz
    wg = W.T[None] @ Gp  # Λ G per pattern, (P, d, k)
    sum_x = gm.sums + n[:, None] * miss * mean + b_ez
    sum_xz = sxy_a + (miss * mean)[:, :, None] * ez[:, None, :] + b_ezz + (n[:, None] * miss)[:, :, None] * wg[gm.pattern]
    cond_var = np.einsum("pdk,kd->pd", wg, W) + psi  # Var[x_j | x_o] for missing j
    sum_xx = (np.diagonal(gm.scatter, axis1=1, axis2=2) + miss * (n[:, None] * (mean ** 2 + cond_var[gm.pattern]))
              + 2.0 * miss * mean * b_ez + np.sum(b_ezz * B, axis=2))
    szz = np.empty((n.size, k + 1, k + 1))
    szz[:, :k, :k] = ezz + n[:, None, None] * Gp[gm.pattern]
    szz[:, :k, k] = szz[:, k, :k] = ez
    szz[:, k, k] = n
    syy_diag = np.diagonal(gm.scatter, axis1=1, axis2=2) - 2.0 * gm.sums * mu_o + n[:, None] * mu_o ** 2
    quad = syy_diag @ (1.0 / psi) - np.sum(ezz * F[gm.pattern], axis=(1, 2))
    iu, ju = upper_indices(k + 1)
    rows = np.concatenate([sum_xx, np.concatenate([sum_xz, sum_x[:, :, None]], axis=2).reshape(n.size, -1),
                           szz[:, iu, ju], _loglik(gm, logdet, quad, log_scale)[:, None]], axis=1)
    return gm.segment_sums(rows)


def gaussian_group_sums(gm, mean, cov, log_scale):
    """Per-client sums of the statistics and log-likelihood of a Gaussian with missing values.

    With ``P = Σ⁻¹`` and the pattern's ``C = Cov[x_m | x_o]`` (zero-padded), the completed
    centred row is ``R y`` with ``R = I − C P``, and ``y_oᵀ Σ_oo⁻¹ y_o = yᵀ (P − P C P) y``.

    Parameters
    ----------
    gm : GroupMoments
        Of the standardised values.
    mean : ndarray of shape (d,);  cov : ndarray of shape (d, d)
        In the same standardised units.
    log_scale : ndarray of shape (d,)

    Returns
    -------
    sums : ndarray of shape (n_seg, d + d (d + 1) / 2 + 1)
        ``[E[x̃] (d), E[x̃ x̃ᵀ] packed, loglik]`` summed over rows.
    """
    prec, C, logdet = gaussian_blocks(cov[None], gm.patterns)
    P, C, d = prec[0], C[0], mean.size
    R = np.eye(d)[None] - C @ P
    Q = P[None] - P[None] @ C @ P[None]
    mu_o, sy, sxy = _centred(gm, mean)
    syy = sxy - mu_o[:, :, None] * sy[:, None, :]
    n, Rg = gm.count, R[gm.pattern]
    r_sy = np.einsum("gij,gj->gi", Rg, sy)
    outer = r_sy[:, :, None] * mean[None, None, :]
    second = (Rg @ syy @ np.swapaxes(Rg, 1, 2) + outer + np.swapaxes(outer, 1, 2)
              + n[:, None, None] * (mean[:, None] * mean[None, :] + C[gm.pattern]))
    quad = np.sum(Q[gm.pattern] * syy, axis=(1, 2))
    iu, ju = upper_indices(d)
    rows = np.concatenate([r_sy + n[:, None] * mean, second[:, iu, ju],
                           _loglik(gm, logdet[0], quad, log_scale)[:, None]], axis=1)
    return gm.segment_sums(rows)
