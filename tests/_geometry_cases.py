"""Models, data and a packed layout shared by the geometry tests (tests/test_geometry.py,
tests/test_trust_region.py).

``make_case(name)`` gives a model of each family, a small federation (nearly collinear
columns; NaN for the missing-value models), θ = T(Ŝ) and Ŝ the mean statistics after a
few EM steps. The models store symmetric blocks as upper triangles; :func:`plain_model` gives the same model on
full matrices, so the geometries are tested on both layouts.
"""
from __future__ import annotations

import copy

import numpy as np

from fedemstats.federation import Federation
from fedemstats.layout import StatLayout
from fedemstats.models import (FactorAnalysisModel, GaussianMissingModel, GaussianMixtureMissingModel,
                               GaussianMixtureModel, PoissonMixtureModel)


def _data(n=240, d=4, missing=0.0, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
    base[:, -1] = base[:, 0] + 0.1 * rng.normal(size=n)      # a nearly collinear column
    base += np.repeat(rng.normal(scale=3.0, size=(3, d)), [n // 3, n // 3, n - 2 * (n // 3)], axis=0)
    if missing:
        base[rng.random(base.shape) < missing] = np.nan
        base[np.all(np.isnan(base), axis=1), 0] = 0.0
    return Federation(base, np.linspace(0, n, 7).astype(int), allow_nan=bool(missing))


def _counts(n=240, d=5, missing=0.0, seed=0):
    rng = np.random.default_rng(seed)
    lam = np.repeat(rng.gamma(2.0, 3.0, size=(3, d)), [80, 80, n - 160], axis=0)
    Y = rng.poisson(lam).astype(float)
    if missing:
        Y[rng.random(Y.shape) < missing] = np.nan
        Y[np.all(np.isnan(Y), axis=1), 0] = 1.0
    return Federation(Y, np.linspace(0, n, 7).astype(int), allow_nan=True)


def _gmm(ct, missing=False, reg=1e-6):
    cls = GaussianMixtureMissingModel if missing else GaussianMixtureModel
    fed = _data(missing=0.15 if missing else 0.0)
    return cls.from_federation(fed, n_components=3, covariance_type=ct, reg_covar=reg), fed


def _factor(missing):
    fed = _data(missing=0.15 if missing else 0.0)
    return FactorAnalysisModel.from_federation(fed, n_factors=2), fed


def _gaussian(reg):
    fed = _data(missing=0.15)
    return GaussianMissingModel.from_federation(fed, reg_covar=reg), fed


def _poisson(missing):
    fed = _counts(missing=0.2 if missing else 0.0)
    return PoissonMixtureModel(3, fed.n_features), fed


#: case name -> builder(reg_covar) -> (model, federation)
BUILDERS = {
    "gmm-full": lambda reg: _gmm("full", reg=reg),
    "gmm-tied": lambda reg: _gmm("tied", reg=reg),
    "gmm-diag": lambda reg: _gmm("diag", reg=reg),
    "gmm-spherical": lambda reg: _gmm("spherical", reg=reg),
    "gmm-missing-full": lambda reg: _gmm("full", True, reg),
    "gmm-missing-diag": lambda reg: _gmm("diag", True, reg),
    "fa": lambda reg: _factor(False),
    "fa-missing": lambda reg: _factor(True),
    "gaussian-missing": _gaussian,
    "poisson": lambda reg: _poisson(False),
    "poisson-missing": lambda reg: _poisson(True),
}
CASES = sorted(BUILDERS)


def make_case(name, reg=1e-6, em_steps=3):
    """(model, federation, theta, s_hat) with s_hat the mean statistics after a few EM steps
    and theta = T(s_hat), the public iterate of a round."""
    model, fed = BUILDERS[name](reg)
    theta = model.init_theta(fed, rng=0)
    for _ in range(em_steps):
        s_hat = model.mean_stats(fed, theta)
        theta = model.t_map(s_hat)
    return model, fed, theta, s_hat


def symmetric_rows(model, rng, m=5):
    """Random statistic rows whose symmetric blocks are symmetric (so packing loses nothing)."""
    parts = model.layout.unpack(rng.normal(size=(m, model.q)))
    out = {k: (0.5 * (v + np.swapaxes(v, -1, -2)) if is_symmetric_block(model, k) else v) for k, v in parts.items()}
    return model.layout.pack(out)


def is_symmetric_block(model, name):
    shape = model.layout.shape(name)
    return name in ("sum_xx", "sum_zz") and len(shape) >= 2 and shape[-1] == shape[-2]


def canonical(name, model, s_hat):
    """Expected whitened current point (reg_covar = 0, no floor active)."""
    if name.startswith("fa"):
        d, k1 = model.n_features, model.n_factors + 1
        return model.layout.pack({"sum_xx": np.ones(d), "sum_xz": np.zeros((d, k1)), "sum_zz": np.eye(k1)})
    if name.startswith("gaussian"):
        d = model.n_features
        return model.layout.pack({"sum_x": np.zeros(d), "sum_xx": np.eye(d)})
    p = model.layout.unpack(s_hat)
    s0 = p["resp"]
    if name.startswith("poisson"):  # scaled by the standard deviations sqrt(λ_kj), floored per column
        from fedemstats.models.poisson_geometry import SCALE_FLOOR_FRACTION
        theta = model.t_map(s_hat)
        scale = np.sqrt(np.maximum(theta.rates, SCALE_FLOOR_FRACTION * (theta.weights @ theta.rates)))
        return model.layout.pack({"resp": s0, "sum_y": s0[:, None] * theta.rates / scale})
    d, ct = model.n_features, model.covariance_type
    second = {"full": s0[:, None, None] * np.eye(d), "tied": s0.sum() * np.eye(d),
              "diag": s0[:, None] * np.ones(d), "spherical": s0 * d}[ct]
    return model.layout.pack({"resp": s0, "sum_x": np.zeros((len(s0), d)), "sum_xx": second})


PACKABLE = ["gmm-full", "gmm-tied", "gmm-missing-full", "gaussian-missing", "fa", "fa-missing"]


def plain_model(model):
    """A copy of ``model`` whose layout stores its symmetric blocks as full matrices."""
    assert model.layout.symmetric, "the model's layout has no packed block"
    plain = copy.copy(model)
    plain.layout = StatLayout(model.layout.blocks)
    assert plain.layout.size > model.layout.size
    return plain


def expected_parts(name, model):
    K = getattr(model, "n_components", 1)
    if name.startswith("gmm"):
        return {"sum_x": K, "sum_xx": K if model.covariance_type in ("full", "diag") else 1}
    return {"sum_y": K} if name.startswith("poisson") else {}


def raw_min_eigenvalue(model, s):
    p = model.layout.unpack(s)
    s0 = np.maximum(p["resp"], 1e-300)
    mu = p["sum_x"] / s0[:, None]
    C = p["sum_xx"] / s0[:, None, None] - mu[:, :, None] * mu[:, None, :]
    return np.linalg.eigvalsh(0.5 * (C + np.swapaxes(C, 1, 2)))[:, 0].min()


def shrink_step(name, model, s_hat):
    """A direction whose full step shrinks every weight (mixtures) or variance by 10x (step = -0.9 x this)."""
    if name.startswith("gaussian"):
        p = model.layout.unpack(s_hat)
        return model.layout.pack({"sum_x": np.zeros_like(p["sum_x"]),
                                  "sum_xx": p["sum_xx"] - np.outer(p["sum_x"], p["sum_x"])})
    return s_hat


def assert_edge(t, t_star, width):
    """``t`` is inside the trust region (never beyond its edge ``t_star``, where a margin linear in
    t reaches its floor; cases built with ``reg=0``) and within the search's bracket ``width`` below it."""
    assert t_star - width <= t <= t_star * (1.0 + 1e-12), (t, t_star, width)
