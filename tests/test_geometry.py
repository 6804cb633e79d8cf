"""Compression in the model's own geometry (issue 11 item 1; docs/geometry.md).

Every model's map P(θ, Ŝ) is checked for: exact inversion, the canonical form of the
current point, block boundaries from the *stored* layout (packed symmetric blocks
included), unbiased decoding P⁻¹ Quant(P Δ), why it prevents the collapse on a real
table, the trust region, the fallbacks and determinism.
"""
from __future__ import annotations

import copy
import logging
import math

import numpy as np
import pytest

from fedemstats.compression import RandomDithering
from fedemstats.federation import Federation
from fedemstats.layout import StatLayout
from fedemstats.models import (FactorAnalysisModel, GaussianMissingModel, GaussianMixtureMissingModel,
                               GaussianMixtureModel, GMMParams, Model, PoissonMixtureModel)
from fedemstats.models._geometry import (MAX_HALVINGS, TRUST_RATIO, IdentityGeometry, split_blocks)
from fedemstats.models.gaussian_missing import GaussianParams

N_SE = 4.0       # Monte Carlo tolerance in standard errors
N_MC = 4000      # Monte Carlo draws
ROUND_TRIP = 1e-12


# ---------------------------------------------------------------------- fixtures
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


BUILDERS = {
    "gmm-full": lambda reg: _gmm("full", reg=reg),
    "gmm-tied": lambda reg: _gmm("tied", reg=reg),
    "gmm-diag": lambda reg: _gmm("diag", reg=reg),
    "gmm-spherical": lambda reg: _gmm("spherical", reg=reg),
    "gmm-missing-full": lambda reg: _gmm("full", True, reg),
    "gmm-missing-diag": lambda reg: _gmm("diag", True, reg),
    "fa": lambda reg: (lambda f: (FactorAnalysisModel.from_federation(f, n_factors=2), f))(_data()),
    "fa-missing": lambda reg: (lambda f: (FactorAnalysisModel.from_federation(f, n_factors=2), f))(
        _data(missing=0.15)),
    "gaussian-missing": lambda reg: (lambda f: (GaussianMissingModel.from_federation(f, reg_covar=reg), f))(
        _data(missing=0.15)),
    "poisson": lambda reg: (lambda f: (PoissonMixtureModel(3, f.n_features), f))(_counts()),
    "poisson-missing": lambda reg: (lambda f: (PoissonMixtureModel(3, f.n_features), f))(_counts(missing=0.2)),
}
CASES = sorted(BUILDERS)


def setup(name, reg=1e-6, em_steps=3):
    """(model, federation, theta, s_hat) with s_hat the mean statistics after a few EM steps
    and theta = T(s_hat), the public iterate of a round."""
    model, fed = BUILDERS[name](reg)
    theta = model.init_theta(fed, rng=0) if "fa" not in name and "gaussian" not in name else model.init_theta(fed)
    for _ in range(em_steps):
        s_hat = model.mean_stats(fed, theta)
        theta = model.t_map(s_hat)
    return model, fed, theta, s_hat


def _symmetric_rows(model, rng, m=5):
    """Random statistic rows whose symmetric blocks are symmetric (so packing loses nothing)."""
    parts = model.layout.unpack(rng.normal(size=(m, model.q)))
    out = {k: (0.5 * (v + np.swapaxes(v, -1, -2)) if _is_symmetric_block(model, k) else v) for k, v in parts.items()}
    return model.layout.pack(out)


def _is_symmetric_block(model, name):
    shape = model.layout.shape(name)
    return name in ("sum_xx", "sum_zz") and len(shape) >= 2 and shape[-1] == shape[-2]


# ---------------------------------------------------------------------- inversion
@pytest.mark.parametrize("name", CASES)
def test_inverse_of_forward_is_identity(name):
    model, _, theta, s_hat = setup(name)
    G = model.geometry(theta, s_hat)
    assert not isinstance(G, IdentityGeometry), "the test setup should whiten"
    x = np.random.default_rng(1).normal(size=(7, model.q))
    for a, b in ((G.inverse(G.forward(x)), x), (G.forward(G.inverse(x)), x)):
        assert a.shape == x.shape and a.dtype == np.float64
        assert np.max(np.abs(a - b)) <= ROUND_TRIP * np.max(np.abs(b)) * 10
    assert np.allclose(G.forward(x[0]), G.forward(x)[:1])  # a single vector is one row


@pytest.mark.parametrize("name", CASES)
def test_map_is_linear_and_not_the_identity(name):
    model, _, theta, s_hat = setup(name)
    G = model.geometry(theta, s_hat)
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, model.q))
    assert np.allclose(G.forward(2.0 * a - 3.0 * b), 2.0 * G.forward(a) - 3.0 * G.forward(b), rtol=1e-10, atol=1e-10)
    assert not np.allclose(G.forward(a), a)


# ---------------------------------------------------------------------- canonical form
def _canonical(name, model, s_hat):
    """Expected whitened current point (reg_covar = 0, no floor active)."""
    if name.startswith("fa"):
        d, k1 = model.n_features, model.n_factors + 1
        return model.layout.pack({"sum_xx": np.ones(d), "sum_xz": np.zeros((d, k1)), "sum_zz": np.eye(k1)})
    if name.startswith("gaussian"):
        d = model.n_features
        return model.layout.pack({"sum_x": np.zeros(d), "sum_xx": np.eye(d)})
    p = model.layout.unpack(s_hat)
    s0 = p["resp"]
    if name.startswith("poisson"):
        return model.layout.pack({"resp": s0, "sum_y": s0[:, None] * np.ones(model.n_features)})
    d, ct = model.n_features, model.covariance_type
    second = {"full": s0[:, None, None] * np.eye(d), "tied": s0.sum() * np.eye(d),
              "diag": s0[:, None] * np.ones(d), "spherical": s0 * d}[ct]
    return model.layout.pack({"resp": s0, "sum_x": np.zeros((len(s0), d)), "sum_xx": second})


@pytest.mark.parametrize("name", CASES)
def test_current_point_maps_to_canonical_form(name):
    model, _, theta, s_hat = setup(name, reg=0.0)
    G = model.geometry(theta, s_hat)
    y = G.whiten_point(s_hat)[0]
    assert np.allclose(y, _canonical(name, model, s_hat), rtol=1e-8, atol=1e-8)


def test_canonical_form_with_reg_covar():
    """With reg_covar the whitened second moment is π_k (I − reg L⁻¹L⁻ᵀ), Σ_k = L Lᵀ."""
    model, _, theta, s_hat = setup("gmm-full", reg=1e-3)
    y = model.layout.unpack(model.geometry(theta, s_hat).forward(s_hat)[0])
    L_inv = np.linalg.inv(np.linalg.cholesky(theta.covariances))
    s0 = model.layout.unpack(s_hat)["resp"]
    expected = s0[:, None, None] * (np.eye(model.n_features) - 1e-3 * L_inv @ np.swapaxes(L_inv, 1, 2))
    assert np.allclose(y["sum_xx"], expected, atol=1e-10)


# ---------------------------------------------------------------------- blocks and the stored layout
class PackedLayout(StatLayout):
    """A layout that stores the named (..., d, d) blocks as upper triangles, as the packed
    layout will: ``unpack`` returns full symmetric matrices, ``pack`` keeps the upper part."""

    def __init__(self, blocks, packed):
        super().__init__(blocks)
        object.__setattr__(self, "packed", frozenset(packed))

    def _stored(self, name, shape):
        if name in self.packed:
            return math.prod(shape[:-2]) * shape[-1] * (shape[-1] + 1) // 2
        return math.prod(shape)

    @property
    def offsets(self):
        sizes = [self._stored(n, s) for n, s in self.blocks]
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def unpack(self, s):
        s = np.asarray(s)
        lead, out = s.shape[:-1], {}
        for n, shape in self.blocks:
            flat = s[..., self.slice(n)]
            if n in self.packed:
                iu = np.triu_indices(shape[-1])
                full = np.zeros(lead + shape)
                full[..., iu[0], iu[1]] = flat.reshape(lead + shape[:-2] + (-1,))
                full[..., iu[1], iu[0]] = flat.reshape(lead + shape[:-2] + (-1,))
                out[n] = full
            else:
                out[n] = flat.reshape(lead + shape)
        return out

    def pack(self, parts):
        first = np.asarray(parts[self.names[0]])
        lead = first.shape[: first.ndim - len(self.blocks[0][1])]
        out = np.empty(lead + (self.size,))
        for n, shape in self.blocks:
            block = np.asarray(parts[n], dtype=np.float64)
            if n in self.packed:
                iu = np.triu_indices(shape[-1])
                block = block[..., iu[0], iu[1]]
            out[..., self.slice(n)] = block.reshape(lead + (-1,))
        return out


PACKABLE = ["gmm-full", "gmm-tied", "gmm-missing-full", "gaussian-missing", "fa", "fa-missing"]


def _packed(model):
    names = [n for n in model.layout.names if _is_symmetric_block(model, n)]
    packed = copy.copy(model)
    packed.layout = PackedLayout(model.layout.blocks, names)
    assert packed.layout.size < model.layout.size
    return packed


def _expected_parts(name, model):
    K = getattr(model, "n_components", 1)
    if name.startswith("gmm"):
        return {"sum_x": K, "sum_xx": K if model.covariance_type in ("full", "diag") else 1}
    return {"sum_y": K} if name.startswith("poisson") else {}


@pytest.mark.parametrize("name", CASES)
def test_blocks_follow_the_stored_layout(name):
    model, _, theta, s_hat = setup(name)
    G = model.geometry(theta, s_hat)
    assert G.blocks.dtype == np.int64 and G.blocks[0] == 0 and G.blocks[-1] == model.layout.size
    assert np.all(np.diff(G.blocks) > 0)
    assert set(model.layout.offsets.tolist()) <= set(G.blocks.tolist())  # never straddles a statistic
    assert np.array_equal(G.blocks, split_blocks(model.layout, _expected_parts(name, model)))
    assert len(G.blocks) - 1 == sum(_expected_parts(name, model).values()) + len(model.layout.names) \
        - len(_expected_parts(name, model))


@pytest.mark.parametrize("name", PACKABLE)
def test_geometry_works_on_packed_symmetric_blocks(name):
    model, _, theta, s_hat = setup(name)
    pmodel = _packed(model)
    lay, plain = pmodel.layout, model.layout
    to_packed = lambda v: lay.pack(plain.unpack(v))  # noqa: E731
    s_packed = to_packed(s_hat)
    G, P = model.geometry(theta, s_hat), pmodel.geometry(theta, s_packed)
    assert P.blocks[-1] == lay.size
    assert np.array_equal(P.blocks, split_blocks(lay, _expected_parts(name, model)))
    for b, name_ in enumerate(lay.names):  # per-block sizes are the stored sizes split per component
        inside = P.blocks[(P.blocks >= lay.offsets[b]) & (P.blocks <= lay.offsets[b + 1])]
        assert inside[0] == lay.offsets[b] and inside[-1] == lay.offsets[b + 1], name_
    x = _symmetric_rows(model, np.random.default_rng(3))
    assert np.allclose(P.forward(to_packed(x)), to_packed(G.forward(x)), rtol=1e-10, atol=1e-10)
    xp = np.random.default_rng(4).normal(size=(5, lay.size))
    assert np.allclose(P.inverse(P.forward(xp)), xp, rtol=1e-10, atol=1e-10)
    step = -0.9 * _shrink_step(name, model, s_hat)
    assert P.step_fraction(s_packed, to_packed(step)) == G.step_fraction(s_hat, step) == 0.5


# ---------------------------------------------------------------------- unbiasedness
def _mc_decode(G, delta, comp, seed, inverse=None):
    rows = np.repeat(G.forward(delta), N_MC, axis=0)
    decoded = comp.decompress(comp.compress(rows, np.random.default_rng(seed), G.blocks))
    return (inverse or G.inverse)(decoded)


def _assert_unbiased(samples, x):
    se = samples.std(axis=0, ddof=1) / math.sqrt(samples.shape[0])
    err = np.abs(samples.mean(axis=0) - x)
    bad = err > N_SE * se + 1e-12 * np.max(np.abs(x))  # round-off of P⁻¹ is relative to the whole row
    assert not bad.any(), f"biased coordinates {np.flatnonzero(bad)}: err {err[bad]}, se {se[bad]}"


@pytest.mark.parametrize("name", CASES)
def test_decoding_in_the_geometry_is_unbiased(name):
    model, fed, theta, s_hat = setup(name)
    G = model.geometry(theta, s_hat)
    delta = model.client_stats(fed, theta, [2])[0][0] - s_hat
    _assert_unbiased(_mc_decode(G, delta, RandomDithering(s=4), seed=5), delta)


def test_unbiasedness_check_has_power():
    """Decoding with the inverse of another iterate's map is biased, and the check sees it."""
    model, fed, theta, s_hat = setup("gmm-full")
    other = model.geometry(*setup("gmm-full", em_steps=1)[2:])
    G = model.geometry(theta, s_hat)
    delta = model.client_stats(fed, theta, [2])[0][0] - s_hat
    with pytest.raises(AssertionError, match="biased"):
        _assert_unbiased(_mc_decode(G, delta, RandomDithering(s=4), 5, inverse=other.inverse), delta)


# ---------------------------------------------------------------------- why: the collapse on real data
def _raw_min_eigenvalue(model, s):
    p = model.layout.unpack(s)
    s0 = np.maximum(p["resp"], 1e-300)
    mu = p["sum_x"] / s0[:, None]
    C = p["sum_xx"] / s0[:, None, None] - mu[:, :, None] * mu[:, None, :]
    return np.linalg.eigvalsh(0.5 * (C + np.swapaxes(C, 1, 2)))[:, 0].min()


def test_geometry_prevents_indefinite_covariances_on_diabetes():
    """Standardised diabetes (s1, s2 correlate 0.90), 3-component full GMM at EM's fixed point,
    20 clients: one FedEM round Ŝ + Σ_i w_i q_i with quantised deviations Δ_i = s_i − Ŝ
    (whose mean is the mean field, 0 here) makes a covariance indefinite almost always when
    Δ_i is quantised in raw coordinates, and (almost) never in the model's geometry."""
    from sklearn.datasets import load_diabetes
    X = load_diabetes().data
    X = (X - X.mean(0)) / X.std(0)
    fed = Federation(X, np.linspace(0, X.shape[0], 21).astype(int))
    model = GaussianMixtureModel.from_federation(fed, n_components=3, covariance_type="full")
    theta = model.init_theta(fed, rng=0)
    for _ in range(300):
        s_hat = model.mean_stats(fed, theta)
        theta = model.t_map(s_hat)
    assert np.linalg.norm(model.mean_field(fed, s_hat)) < 1e-6           # at the fixed point
    assert _raw_min_eigenvalue(model, s_hat) > 0
    delta = model.client_stats(fed, theta)[0] - s_hat
    G, comp, rng = model.geometry(theta, s_hat), RandomDithering(s=4), np.random.default_rng(0)
    trials, raw, geo = 100, 0, 0
    for _ in range(trials):
        raw += _raw_min_eigenvalue(model, s_hat + fed.weights @ comp(delta, rng, model.layout.offsets)) <= 0
        geo += _raw_min_eigenvalue(model, s_hat + fed.weights @ G.inverse(comp(G.forward(delta), rng, G.blocks))) <= 0
    assert raw / trials >= 0.5, raw
    assert geo / trials <= 0.05 and geo * 10 <= raw, (raw, geo)


# ---------------------------------------------------------------------- trust region
def _shrink_step(name, model, s_hat):
    """A direction whose full step shrinks every weight (mixtures) or variance by 10x (step = -0.9 x this)."""
    if name.startswith("gaussian"):
        p = model.layout.unpack(s_hat)
        return model.layout.pack({"sum_x": np.zeros_like(p["sum_x"]),
                                  "sum_xx": p["sum_xx"] - np.outer(p["sum_x"], p["sum_x"])})
    return s_hat


@pytest.mark.parametrize("name", CASES)
def test_small_steps_are_accepted_whole(name):
    model, fed, theta, s_hat = setup(name, em_steps=60)
    G = model.geometry(theta, s_hat)
    assert G.step_fraction(s_hat, model.mean_field(fed, s_hat)) == 1.0   # an EM step near convergence
    small = 1e-4 * np.abs(s_hat).max() * np.random.default_rng(0).standard_normal(model.q)
    assert G.step_fraction(s_hat, small) == 1.0
    assert G.step_fraction(s_hat, np.zeros(model.q)) == 1.0


@pytest.mark.parametrize("name", ["gmm-full", "gmm-tied", "gaussian-missing"])
def test_safeguarded_em_reaches_em_fixed_point(name):
    """s <- s + t h(s) with t = step_fraction (cut early on, 1 near the end) converges where EM does:
    the trust region keeps the fixed point."""
    model, fed, theta, s_hat = setup(name, em_steps=1)
    s_em, s, cuts = s_hat.copy(), s_hat.copy(), 0
    for _ in range(150):
        s_em = s_em + model.mean_field(fed, s_em)
        h = model.mean_field(fed, s)
        t = model.geometry(model.t_map(s), s).step_fraction(s, h)
        cuts += t < 1
        s = s + t * h
    assert cuts > 0 and t == 1.0 and np.linalg.norm(model.mean_field(fed, s)) < 1e-8
    assert np.allclose(s, s_em, atol=1e-7)


@pytest.mark.parametrize("name", CASES)
def test_a_collapsing_step_is_cut_to_the_largest_safe_fraction(name):
    model, _, theta, s_hat = setup(name, reg=0.0)
    G = model.geometry(theta, s_hat)
    step = -0.9 * _shrink_step(name, model, s_hat)  # t = 1 leaves 0.1x, t = 1/2 leaves 0.55x
    t = G.step_fraction(s_hat, step)
    assert t == 0.5
    assert G._inside((s_hat + t * step)[None])[0] and not G._inside((s_hat + 2 * t * step)[None])[0]


@pytest.mark.parametrize("name", CASES)
def test_no_fraction_fits_returns_zero(name):
    model, _, theta, s_hat = setup(name, reg=0.0)
    G = model.geometry(theta, s_hat)
    assert G.step_fraction(s_hat, -(2.0 ** (MAX_HALVINGS + 1)) * _shrink_step(name, model, s_hat)) == 0.0
    assert G.step_fraction(s_hat, np.full(model.q, np.nan)) == 0.0


def test_trust_region_rejects_an_indefinite_covariance_and_accepts_a_valid_one():
    model, _, theta, s_hat = setup("gmm-full")
    G = model.geometry(theta, s_hat)
    p = model.layout.unpack(s_hat)
    w, V = np.linalg.eigh(theta.covariances[0])
    step_parts = {k: np.zeros_like(v) for k, v in p.items()}
    step_parts["sum_xx"][0] = -2.0 * p["resp"][0] * w[0] * np.outer(V[:, 0], V[:, 0])  # t = 1: eigenvalue -w0
    step = model.layout.pack(step_parts)
    assert _raw_min_eigenvalue(model, s_hat + step) < 0
    t = G.step_fraction(s_hat, step)
    assert 0 < t < 1 and t == 0.25    # 1 - 2t >= TRUST_RATIO
    accepted = s_hat + t * step
    assert _raw_min_eigenvalue(model, accepted) >= TRUST_RATIO * w[0] * (1 - 1e-6)
    assert model.layout.unpack(accepted)["resp"].min() >= TRUST_RATIO * p["resp"].min()


def test_identity_geometry_contract():
    model, _, theta, s_hat = setup("gmm-full")
    G = Model.geometry(model, theta, s_hat)
    assert isinstance(G, IdentityGeometry) and np.array_equal(G.blocks, model.layout.offsets)
    x = np.random.default_rng(0).normal(size=(3, model.q))
    y = G.forward(x)
    assert np.array_equal(y, x) and y is not x and np.array_equal(G.inverse(x), x)
    assert G.step_fraction(s_hat, -1e6 * s_hat) == 1.0


# ---------------------------------------------------------------------- fallbacks
def _gmm_with(theta, **changes):
    fields = dict(weights=theta.weights, means=theta.means, covariances=theta.covariances,
                  precisions_cholesky=theta.precisions_cholesky, covariance_type=theta.covariance_type)
    fields.update(changes)
    return GMMParams(**fields)


def _assert_sane(G, model, s_hat):
    x = np.random.default_rng(9).normal(size=(4, model.q))
    y = G.forward(x)
    assert np.all(np.isfinite(y)) and np.allclose(G.inverse(y), x, rtol=1e-9, atol=1e-9)
    assert 0.0 <= G.step_fraction(s_hat, 1e-3 * x[0]) <= 1.0


def _singular(theta):
    cov = theta.covariances.copy()
    v = np.arange(1.0, theta.n_features + 1)
    cov[0] = np.outer(v, v)
    return cov


def _cond14(theta):
    cov = theta.covariances.copy()
    Q = np.linalg.qr(np.random.default_rng(0).normal(size=cov.shape[1:]))[0]
    cov[0] = (Q * np.logspace(0, -14, cov.shape[1])) @ Q.T
    return cov


@pytest.mark.parametrize("kind", ["zero-weight", "singular", "cond-1e14", "nan-covariance"])
def test_gmm_component_fallback(kind, caplog):
    model, fed, theta, s_hat = setup("gmm-full")
    if kind == "zero-weight":
        p = {k: v.copy() for k, v in model.layout.unpack(s_hat).items()}
        for v in p.values():
            v[0] = 0.0
        s_hat = model.layout.pack(p)
        theta = model.t_map(s_hat)
    else:
        bad = {"singular": _singular, "cond-1e14": _cond14,
               "nan-covariance": lambda th: np.where(np.arange(3)[:, None, None] == 0, np.nan, th.covariances)}
        theta = _gmm_with(theta, covariances=bad[kind](theta))
    with caplog.at_level(logging.DEBUG, logger="fedemstats.models.gmm_geometry"):
        G = model.geometry(theta, s_hat)
    assert "identity map" in caplog.text
    assert G.fallback.tolist() == [True, False, False]
    assert G.unchecked.tolist() == [kind == "zero-weight", False, False]
    _assert_sane(G, model, s_hat)
    x = np.random.default_rng(1).normal(size=(2, model.q))
    y, lay = G.forward(x), model.layout
    for blk in ("sum_x", "sum_xx"):                    # component 0's blocks are untouched
        assert np.array_equal(lay.unpack(y)[blk][:, 0], lay.unpack(x)[blk][:, 0])
    h = model.mean_field(fed, s_hat)
    assert G.step_fraction(s_hat, h) > 0.0            # the other components still move


@pytest.mark.parametrize("name, breaker", [
    ("gmm-tied", lambda th: _gmm_with(th, covariances=np.zeros_like(th.covariances))),
    ("gaussian-missing", lambda th: GaussianParams(th.mean, np.ones_like(th.covariance))),
    ("gaussian-missing", lambda th: GaussianParams(th.mean * np.inf, th.covariance)),
])
def test_whole_map_falls_back_to_identity(name, breaker, caplog):
    model, _, theta, s_hat = setup(name)
    with caplog.at_level(logging.DEBUG, logger="fedemstats.models._geometry"):
        G = model.geometry(breaker(theta), s_hat)
    assert isinstance(G, IdentityGeometry) and "identity map" in caplog.text
    _assert_sane(G, model, s_hat)


@pytest.mark.parametrize("name", ["fa", "fa-missing"])
def test_factor_fallbacks(name):
    model, _, theta, s_hat = setup(name)
    p = {k: v.copy() for k, v in model.layout.unpack(s_hat).items()}
    p["sum_zz"][:] = 0.0                               # S_zz singular: no whitening at all
    assert isinstance(model.geometry(theta, model.layout.pack(p)), IdentityGeometry)
    heywood = type(theta)(theta.components, theta.noise_variance * np.r_[1e-13, np.ones(3)], theta.mean)
    G = model.geometry(heywood, s_hat)                 # a Heywood coordinate: not residualised
    assert G.fallback.tolist() == [True, False, False, False]
    _assert_sane(G, model, s_hat)
    assert isinstance(model.geometry(theta, np.full(model.q, np.nan)), IdentityGeometry)


@pytest.mark.parametrize("name", ["poisson", "poisson-missing"])
def test_poisson_fallbacks(name):
    model, fed, theta, s_hat = setup(name)
    rates = theta.rates.copy()
    rates[1, 2] = 0.0
    weights = theta.weights.copy()
    weights[0] = 0.0                                   # an empty component
    G = model.geometry(type(theta)(weights, rates), s_hat)
    assert G.unchecked.tolist() == [True, False, False]
    assert G.fallback[0].all() and G.fallback[1, 2] and G.fallback.sum() == model.n_features + 1
    _assert_sane(G, model, s_hat)
    assert G.step_fraction(s_hat, model.mean_field(fed, s_hat)) > 0.0


# ---------------------------------------------------------------------- determinism
@pytest.mark.parametrize("name", CASES)
def test_deterministic(name):
    model, _, theta, s_hat = setup(name)
    x = np.random.default_rng(0).normal(size=(3, model.q))
    G1, G2 = model.geometry(theta, s_hat), model.geometry(theta, s_hat.copy())
    assert np.array_equal(G1.blocks, G2.blocks)
    assert G1.forward(x).tobytes() == G2.forward(x).tobytes()
    assert G1.inverse(x).tobytes() == G2.inverse(x).tobytes()
    assert G1.step_fraction(s_hat, x[0]) == G2.step_fraction(s_hat, x[0])
