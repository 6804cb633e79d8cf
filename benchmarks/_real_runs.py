"""Runner and comparisons of the real-data benchmark (``bench_real_data.py``).

- :func:`run_config`: fit one (table, split, model, estimator kwargs) and return a
  :class:`RunResult` with its ``history`` (``history_`` of the estimator), final
  log-likelihood, imputation RMSE, rounds, bits, wall time and status.
- :func:`collapse_reasons`, :func:`check_same_start`: comparisons against exact EM.

Only the public estimator API is used (constructor parameters, ``fit``, ``score``,
``transform`` and fitted attributes).
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from _real_models import MODELS, REG_COVAR, TIGHT_MAX_ITER, TIGHT_TOL, VARIANTS, mcar_mask
from _real_splits import Split
from _real_tables import SEED, Table
from fedemstats.federation import partition_iid

__all__ = ["WEIGHT_COLLAPSE", "EIG_FLOOR_FACTOR", "EIG_RATIO_COLLAPSE", "EIG_RATIO_BLOWUP", "PSI_FLOOR",
           "START_ATOL", "START_ROUNDING_ATOL", "RunResult", "run_config", "collapse_reasons", "check_same_start",
           "StartMismatchError", "gaussian_observed_loglik", "warm_up", "exact_em_from_end", "factor_em",
           "factor_loglik"]

logger = logging.getLogger("benchmarks.real_data")

#: Collapse: a mixture weight below this which exact EM does not have.
WEIGHT_COLLAPSE = 1e-3
#: Collapse: a covariance eigenvalue (diag: variance) <= EIG_FLOOR_FACTOR * reg_covar,
#: i.e. floored by the T-map's repair, which exact EM does not have.
EIG_FLOOR_FACTOR = 1.01
#: Collapse: smallest covariance eigenvalue (FA: noise variance) below this fraction of
#: exact EM's smallest (a component squeezed onto a subspace without hitting the floor).
EIG_RATIO_COLLAPSE = 1e-2
#: Blow-up: largest covariance eigenvalue (FA: noise variance) above this multiple of
#: exact EM's (divergent iterates; reported with the collapses).
EIG_RATIO_BLOWUP = 1e2
#: Collapse (factor analysis): a noise variance at or below this (standardised units;
#: the package floors at 1e-12 of the coordinate's second moment) which exact EM does not have.
PSI_FLOOR = 1e-8
#: Same start: round-0 log-likelihoods per row of two runs that both start from θ_0 agree to this ...
START_ATOL = 1e-10
#: ... and compressed FedEM's to this (the accuracy unit, bench_real_data's GAP_TOL): its quantised
#: start sends θ_0 as short-float statistics rounded to a tenth of the start quantiser's resolution
#: in the model's geometry (``docs/fedem.md``, round 0) and starts from what it sent. On these
#: tables that moves the round-0 log-likelihood by up to 2.1e-4 nats per row (college's imputer,
#: q = 170; 2.6e-5 at most when θ_0 went in float32), less than the start's own quantisation moves
#: round 1's (standard deviation 1.2-3.2e-4 over dither streams there). A larger difference is
#: another start.
START_ROUNDING_ATOL = 1e-3
#: Step of the damped deterministic EM of :func:`damped_exact_em` (the trust region's first halving).
DAMPED_STEP = 0.5


@dataclass
class RunResult:
    """Outcome of one fit (``status`` "ok" or the caught exception).

    ``loglik``: mean log-likelihood per row of the fitted data at the final parameters
    (``score``; imputer: observed-data log-likelihood of the masked table).
    ``rmse``: imputer only, RMSE on the masked cells in standardised units.
    ``diagnostics``: ``min_weight`` (GMM), ``min_eig`` / ``max_eig`` (extreme covariance
    eigenvalues over components; diag: variances), ``n_floored`` (eigenvalues <=
    EIG_FLOOR_FACTOR * reg_covar), ``min_psi`` / ``max_psi`` and ``n_psi_floor`` (FA noise
    variances).
    """

    table: str
    split: str
    model: str
    params: dict
    status: str = "ok"
    history: pd.DataFrame | None = None
    estimator: object = None
    loglik: float = np.nan
    rmse: float = np.nan
    n_iter: int | None = None
    converged: bool | None = None
    mbit: float = np.nan
    wall_s: float = np.nan
    diagnostics: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)

    @property
    def ok(self):
        return self.status == "ok"

    @property
    def capped(self):
        """True when the run stopped at its ``max_iter`` without converging."""
        return self.converged is False

    @property
    def loglik0(self):
        """Round-0 log-likelihood per row (the start's), or NaN."""
        return float(self.history["loglik"].iloc[0]) if self.history is not None else np.nan


def gaussian_observed_loglik(X, mean, cov):
    """Mean observed-data log-likelihood per row of rows with NaNs under N(mean, cov)."""
    obs = ~np.isnan(X)
    total = 0.0
    patterns, inverse = np.unique(obs, axis=0, return_inverse=True)
    for p, pattern in enumerate(patterns):
        rows = X[inverse.ravel() == p][:, pattern] - mean[pattern]
        L = np.linalg.cholesky(cov[np.ix_(pattern, pattern)])
        z = np.linalg.solve(L, rows.T)
        total += (-0.5 * np.sum(z ** 2) - rows.shape[0] * (np.log(np.diag(L)).sum()
                                                          + 0.5 * pattern.sum() * np.log(2 * np.pi)))
    return float(total / X.shape[0])


def _diagnostics(model, est):
    if model.kind == "gmm":
        cov = est.covariances_
        eig = cov if model.covariance_type == "diag" else np.linalg.eigvalsh(cov)
        return {"min_weight": float(est.weights_.min()), "min_eig": float(eig.min()), "max_eig": float(eig.max()),
                "n_floored": int((eig <= EIG_FLOOR_FACTOR * REG_COVAR).sum())}
    if model.kind == "fa":
        psi = est.noise_variance_
        return {"min_psi": float(psi.min()), "max_psi": float(psi.max()), "n_psi_floor": int((psi <= PSI_FLOOR).sum())}
    eig = np.linalg.eigvalsh(est.theta_.covariance)
    return {"min_eig": float(eig.min()), "max_eig": float(eig.max()),
            "n_floored": int((eig <= EIG_FLOOR_FACTOR * REG_COVAR).sum())}


def run_config(table, split, model, *, seed=SEED, **estimator_kwargs):
    """Fit ``model`` on ``table`` split by ``split`` with ``estimator_kwargs``; never raises.

    ``random_state=seed`` unless given, so runs that differ only in the compressor or the
    participation start from the same parameters; ``max_iter=model.max_iter`` unless given. The imputer sees the table with
    ``mcar_mask(table.X.shape, seed)`` cells missing.

    Returns
    -------
    RunResult
        ``history`` is the estimator's ``history_`` (per round: ``loglik``, bits, ...).
    """
    if isinstance(model, str):
        model = MODELS[model]
    params = {"random_state": seed, "max_iter": model.max_iter, **estimator_kwargs}
    res = RunResult(table.name, split.name, model.name, params)
    X = table.X
    if model.kind == "imputer":
        mask = mcar_mask(X.shape, seed)
        X = np.where(mask, np.nan, table.X)
    t0 = time.perf_counter()
    try:
        est = model.estimator(table, **params)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X, groups=split.groups)
        res.warnings = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
        res.wall_s = time.perf_counter() - t0
        res.estimator, res.history = est, est.history_
        res.n_iter, res.converged = int(est.n_iter_), bool(est.converged_)
        res.mbit = float(est.history_["cumulative_bits"].iloc[-1]) / 1e6
        if model.kind == "imputer":
            res.loglik = gaussian_observed_loglik(X, est.theta_.mean, est.theta_.covariance)
            res.rmse = float(np.sqrt(np.mean((est.transform(X)[mask] - table.X[mask]) ** 2)))
        else:
            res.loglik = est.score(X)
        res.diagnostics = _diagnostics(model, est)
        if not np.isfinite(res.loglik) or (model.kind == "imputer" and not np.isfinite(res.rmse)):
            res.status = "non-finite result"
    except Exception as exc:  # noqa: BLE001 - a failing run is a benchmark row, not an abort
        res.wall_s = time.perf_counter() - t0
        res.status = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}" if str(exc) else type(exc).__name__
        logger.warning("%s/%s/%s %s: %s", table.name, split.name, model.name, estimator_kwargs, res.status)
    return res


def exact_em_from_end(table, split, model, run, *, seed=SEED):
    """Mean log-likelihood per row that tightly converged exact EM reaches when started from
    ``run``'s fitted parameters (GMM and factor analysis; None otherwise or if ``run`` failed).

    Tells a compressed fit that stopped early (exact EM climbs on from its end) from one that
    converged to another stationary point than exact EM from the common start (exact EM stays).
    Factor analysis runs :func:`factor_em`, textbook EM independent of the package.
    """
    if isinstance(model, str):
        model = MODELS[model]
    if model.kind not in ("gmm", "fa") or not run.ok:
        return None
    est = run.estimator
    if model.kind == "fa":
        return factor_em(table.X, est.components_, est.noise_variance_, est.mean_)[0]
    init = dict(weights_init=est.weights_, means_init=est.means_, precisions_init=est.precisions_)
    ref = model.estimator(table, algorithm="em", tol=TIGHT_TOL, max_iter=TIGHT_MAX_ITER, random_state=seed, **init)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.fit(table.X, groups=split.groups)
    return float(ref.score(table.X))


def factor_loglik(X, components, noise_variance, mean):
    """Mean log-likelihood per row of complete rows X (n, d) under N(mean, WᵀW + diag(Ψ)),
    W = ``components`` (k, d)."""
    L = np.linalg.cholesky(components.T @ components + np.diag(noise_variance))
    z = np.linalg.solve(L, (X - mean).T)
    return float(-0.5 * np.mean(np.sum(z ** 2, axis=0)) - np.log(np.diag(L)).sum()
                 - 0.5 * X.shape[1] * np.log(2 * np.pi))


def factor_em(X, components, noise_variance, mean, *, tol=TIGHT_TOL, max_iter=TIGHT_MAX_ITER):
    """Textbook factor-analysis EM (Rubin & Thayer, 1982) from (W (k, d), Ψ (d,), μ (d,)) on
    complete rows X (n, d), until a step gains less than ``tol`` nats per row or ``max_iter``
    steps: ``(final mean log-likelihood per row, steps)``."""
    W, psi = np.asarray(components, dtype=float), np.asarray(noise_variance, dtype=float)
    Xc = X - mean
    S = Xc.T @ Xc / X.shape[0]
    ll = factor_loglik(X, W, psi, mean)
    for step in range(1, max_iter + 1):
        Wp = W / psi
        G = np.linalg.inv(np.eye(W.shape[0]) + Wp @ W.T)       # Cov(z | x)
        Ezx = G @ Wp @ S                                        # E[z xᵀ] per row
        Ezz = G + G @ Wp @ S @ Wp.T @ G                         # E[z zᵀ] per row
        W = np.linalg.solve(Ezz, Ezx)
        psi = np.diag(S) - np.sum(W * Ezx, axis=0)
        new = factor_loglik(X, W, psi, mean)
        if new - ll < tol:
            return new, step
        ll = new
    return ll, max_iter


def damped_exact_em(table, split, model, *, seed=SEED):
    """Mean log-likelihood per row of deterministic EM damped to γ = DAMPED_STEP (identity
    compression, everyone, no noise) from the common start (GMM only; None otherwise).

    Tells basin selection from damage: where exact EM's own fixed point is degenerate
    (components squeezed onto the ``reg_covar`` floor, e.g. onto the exact zeros of a count
    column), the local optimum EM reaches depends on its path. If damped EM, which has no
    noise at all, also ends away from exact EM, a compressed fit (whose steps are below 1) ending
    elsewhere says nothing about compression.
    """
    if isinstance(model, str):
        model = MODELS[model]
    if model.kind != "gmm":
        return None
    run = run_config(table, split, model, seed=seed, compressor="identity", step_size=DAMPED_STEP)
    return run.loglik if run.ok else None


class StartMismatchError(AssertionError):
    """Exact and compressed runs did not start from the same parameters."""


def check_same_start(exact, other, atol=START_ATOL):
    """Raise :class:`StartMismatchError` unless both runs' round-0 log-likelihoods (the
    log-likelihood of the initial parameters, all clients) agree to ``atol``
    (:data:`START_ATOL`; :data:`START_ROUNDING_ATOL` for a compressed run's transmitted θ_0)."""
    a, b = exact.loglik0, other.loglik0
    if not abs(a - b) <= atol:
        raise StartMismatchError(f"round-0 loglik {b:.10g} != exact EM's {a:.10g}")


def collapse_reasons(model, run, exact):
    """Why ``run`` counts as collapsed against ``exact`` (same start), as short strings.

    GMM and imputer: a weight < WEIGHT_COLLAPSE (GMM), more eigenvalues (diag: variances)
    at the ``reg_covar`` floor, or a smallest eigenvalue < EIG_RATIO_COLLAPSE × exact's.
    FA: more noise variances <= PSI_FLOOR, or a smallest one < EIG_RATIO_COLLAPSE × exact's.
    All models, reported as "blow-up": a largest eigenvalue (FA: noise variance) above
    EIG_RATIO_BLOWUP × exact's (divergent iterates).
    Empty list: no collapse (or one of the runs failed).
    """
    if isinstance(model, str):
        model = MODELS[model]
    if not (run.ok and exact.ok):
        return []
    r, e = run.diagnostics, exact.diagnostics
    out = []
    if model.kind == "gmm" and r["min_weight"] < WEIGHT_COLLAPSE <= e["min_weight"]:
        out.append(f"weight {r['min_weight']:.1e}")
    if model.kind in ("gmm", "imputer"):
        if r["n_floored"] > e["n_floored"]:
            out.append(f"{r['n_floored']} eig at floor")
        elif r["min_eig"] < EIG_RATIO_COLLAPSE * e["min_eig"]:
            out.append(f"min eig {r['min_eig']:.1e} vs {e['min_eig']:.1e}")
    if model.kind == "fa":
        if r["n_psi_floor"] > e["n_psi_floor"]:
            out.append(f"{r['n_psi_floor']} psi at floor")
        elif r["min_psi"] < EIG_RATIO_COLLAPSE * e["min_psi"]:
            out.append(f"min psi {r['min_psi']:.1e} vs {e['min_psi']:.1e}")
    big = "max_psi" if model.kind == "fa" else "max_eig"
    if r[big] > EIG_RATIO_BLOWUP * e[big]:
        out.append(f"blow-up: {big.replace('_', ' ')} {r[big]:.1e} vs {e[big]:.1e}")
    return out


def warm_up(seed=SEED):
    """Fit every model once on a tiny table so numba compilation is not timed."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 4))
    table = Table("warm-up", X, ("a", "b", "c", "d"), None, None, "synthetic", "")
    split = Split("iid", partition_iid(120, 4, rng), "")
    for model in MODELS.values():
        for variant in VARIANTS.values():
            run_config(table, split, model, seed=seed, **{**variant, "max_iter": 3})
