"""Model configurations of the real-data benchmarks (``bench_real_data.py``, ``bench_bits.py``).

- :data:`MODELS`: GMM full / diag, factor analysis, Gaussian imputer (:class:`ModelConfig`).
- :func:`mcar_mask`: the imputer's missing cells.
- :data:`VARIANTS`: exact EM, the tight exact reference, FedEM at defaults with
  ``dither:s=4`` at participation 1.0 and 0.5 (estimator keyword arguments).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from _real_tables import SEED
from fedemstats.estimators import FederatedFactorAnalysis, FederatedGaussianMixture, FederatedImputer

__all__ = ["MCAR_FRACTION", "MAX_ITER", "TIGHT_TOL", "TIGHT_MAX_ITER", "COMPRESSOR", "PARTICIPATIONS",
           "GMM_COMPONENTS", "REG_COVAR", "ModelConfig", "MODELS", "VARIANTS", "mcar_mask", "factor_count"]

#: Share of cells masked completely at random for the imputer.
MCAR_FRACTION = 0.2
#: ``max_iter`` of every exact and compressed run: the estimators' default, ``"auto"`` (100 M-steps
#: for exact EM, 1,000 for factor analysis; five times that for a compressed or partial run), so the
#: benchmark measures the defaults and a fit which does not reach its criterion in them shows
#: ``converged_=False``.
MAX_ITER = "auto"
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
        """:data:`MAX_ITER`, the estimator's own default (checked, so that the benchmark follows it)."""
        default = self.estimator_class()().get_params()["max_iter"]
        if default != MAX_ITER:
            raise AssertionError(f"{self.name}: the estimator's default max_iter is {default!r}, not {MAX_ITER!r}")
        return MAX_ITER

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
