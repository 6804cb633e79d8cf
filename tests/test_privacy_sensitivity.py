"""Issue 14 acceptance: the stated sensitivity holds empirically, for each model.

Over 1,000 random neighbouring pairs per model (one row added or removed; a third of the
added rows adversarial: far outside the clip ball, so that they land on its boundary), the
change of the clipped aggregate Σ_i c_i never exceeds the model's stated Δ, in the
coordinates where the noise is added (the Gaussian mixtures in both ``DPConfig.geometry``
settings: their whitening at θ, or the raw statistics of publicly clipped rows); at client
level, removing a whole client never moves it more than C.
"""
from __future__ import annotations

import numpy as np
import pytest

from fedemstats.algorithms.private_stats import (clipped_contributions, public_federation, public_model,
                                                 row_bound, sensitivity)
from fedemstats.federation import Federation
from fedemstats.models import FactorAnalysisModel, GaussianMixtureModel
from fedemstats.models.gaussian_missing import GaussianMissingModel
from fedemstats.models.gmm_missing import GaussianMixtureMissingModel
from fedemstats.models.poisson_mixture import PoissonMixtureModel
from fedemstats.privacy import DPConfig

D, N_PAIRS, N_THETAS, ROWS, CLIENTS = 3, 1000, 20, 24, 4
#: relative float slack on a norm comparison (sums of a few dozen rows)
FLOAT_SLACK = 1e-9

MODELS = {
    "gmm-full": lambda: GaussianMixtureModel(2, D, "full"),
    "gmm-tied": lambda: GaussianMixtureModel(2, D, "tied"),
    "gmm-diag": lambda: GaussianMixtureModel(2, D, "diag"),
    "gmm-spherical": lambda: GaussianMixtureModel(2, D, "spherical"),
    "gmm-missing": lambda: GaussianMixtureMissingModel(2, D),
    "gaussian-missing": lambda: GaussianMissingModel(D),
    "factor": lambda: FactorAnalysisModel(D, 2),
    "poisson": lambda: PoissonMixtureModel(2, D),
}


def _rows(model, n, rng, adversarial=False):
    if isinstance(model, PoissonMixtureModel):
        X = rng.poisson(40.0 if adversarial else 2.0, (n, D)).astype(float)
    else:
        X = rng.standard_normal((n, D)) * (50.0 if adversarial else 1.5) + 0.3
        if model.allow_nan:
            X[rng.random((n, D)) < 0.2] = np.nan
            X[np.all(np.isnan(X), axis=1), 0] = 1.0
    return X


def _thetas(model, cfg, rng):
    """Random parameters (the bound must hold whatever θ): inits on random data."""
    out = []
    for _ in range(N_THETAS):
        X = _rows(model, 200, rng) * rng.uniform(0.3, 3.0)
        fed = Federation(np.abs(X) if isinstance(model, PoissonMixtureModel) else X,
                         np.arange(0, 201, 50), allow_nan=model.allow_nan)
        out.append(model.init_theta(fed, rng=rng))
    return out


def _aggregate(model, X, offsets, theta, cfg):
    fed = public_federation(Federation(X, offsets, allow_nan=model.allow_nan), model, cfg)
    contrib, _ = clipped_contributions(model, fed, theta, np.arange(len(offsets) - 1), cfg)
    return contrib.sum(axis=0)


@pytest.mark.parametrize("geometry", ["model", "public"])
@pytest.mark.parametrize("name", list(MODELS))
def test_one_row_moves_the_clipped_aggregate_by_at_most_the_sensitivity(name, geometry):
    """In the coordinates where the noise is added: the Gaussian mixtures' whitening at θ
    (``geometry="model"``, rows unclipped) or the raw statistics of publicly clipped rows."""
    rng = np.random.default_rng(14)
    cfg = DPConfig(epsilon=1.0, clip=2.0, center=0.3, scale=1.5, geometry=geometry)
    model = public_model(MODELS[name](), cfg)
    delta = sensitivity(model, cfg)
    thetas = _thetas(model, cfg, rng)
    offsets = np.linspace(0, ROWS, CLIENTS + 1).astype(int)
    worst = 0.0
    for pair in range(N_PAIRS):
        theta = thetas[pair % N_THETAS]
        X = _rows(model, ROWS, rng)
        base = _aggregate(model, X, offsets, theta, cfg)
        client = int(rng.integers(CLIENTS))
        if pair % 2:  # add one row (a third of them adversarial) to a random client
            row = _rows(model, 1, rng, adversarial=pair % 3 == 0)
            X2 = np.insert(X, offsets[client + 1], row, axis=0)
            off2 = offsets + (np.arange(CLIENTS + 1) > client)
        else:  # remove one row of a client that keeps at least one
            j = int(rng.integers(offsets[client], offsets[client + 1]))
            X2, off2 = np.delete(X, j, axis=0), offsets - (np.arange(CLIENTS + 1) > client)
        change = np.linalg.norm(_aggregate(model, X2, off2, theta, cfg) - base)
        worst = max(worst, change / delta)
    assert worst <= 1.0 + FLOAT_SLACK, f"{name}: a neighbour moved the aggregate by {worst:.6g} Δ"
    assert worst > 0.3, "the test never came near the bound (it could not fail)"


@pytest.mark.parametrize("name", ["gmm-full", "gmm-tied", "gmm-diag", "gmm-spherical"])
def test_the_gmm_bound_holds_without_the_statistic_clip(name):
    """B = √(1 + ρ² + ρ⁴) is analytic for every θ: rows on the public clip boundary never exceed it."""
    rng = np.random.default_rng(5)
    cfg = DPConfig(epsilon=1.0, clip=2.0, scale=1.5, geometry="public")
    model = public_model(MODELS[name](), cfg)
    bound = row_bound(model, cfg)
    worst = 0.0
    for theta in _thetas(model, cfg, rng):
        X = public_federation(Federation(_rows(model, 300, rng, adversarial=True), [0, 300]), model, cfg).X
        per_row, _ = model.segment_stats(X, np.arange(301), theta)
        worst = max(worst, np.linalg.norm(per_row, axis=1).max() / bound)
    assert 0.5 < worst <= 1.0 + FLOAT_SLACK


def test_removing_a_client_moves_the_aggregate_by_at_most_c():
    rng = np.random.default_rng(3)
    cfg = DPConfig(epsilon=1.0, clip=2.0, level="client", client_clip=4.0)
    model = public_model(MODELS["gmm-full"](), cfg)
    thetas = _thetas(model, cfg, rng)
    offsets = np.linspace(0, ROWS, CLIENTS + 1).astype(int)
    worst = 0.0
    for pair in range(N_PAIRS // 4):
        X = _rows(model, ROWS, rng, adversarial=pair % 2 == 0)
        fed = public_federation(Federation(X, offsets), model, cfg)
        contrib, counts = clipped_contributions(model, fed, thetas[pair % N_THETAS], np.arange(CLIENTS), cfg)
        worst = max(worst, np.linalg.norm(contrib, axis=1).max() / sensitivity(model, cfg))
        assert np.all(counts == 1.0)
    assert sensitivity(model, cfg) == 4.0
    assert 0.5 < worst <= 1.0 + FLOAT_SLACK
