"""Issue 15 item 2: the E-step from (client, pattern) group moments equals the row-by-row
E-step (the implementation before the issue) for factor analysis and the Gaussian with
missing values: with and without missing values, few and many patterns, many clients,
client subsets and mini-batches."""
import numpy as np
import pytest

from fedemstats.federation import Federation
from fedemstats.models import _group_moments
from fedemstats.models.factor import FactorAnalysisModel, FactorParams
from fedemstats.models.gaussian_missing import GaussianMissingModel, GaussianParams

#: Required agreement between the two paths (issue: "~1e-10 relative").
RTOL = 1e-10
D, K_FACTORS = 8, 3


def make_data(missing, n=3000, n_clients=40, seed=0, offset=20.0):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(K_FACTORS, D))
    X = rng.normal(size=(n, K_FACTORS)) @ W + rng.normal(size=(n, D)) * 0.7 + offset
    X[:, 2] *= 50.0  # columns of different units: the public scale matters
    if missing == "blocks":  # few patterns: whole columns missing in some rows
        for j, frac in [(1, 0.3), (5, 0.2), (6, 0.1)]:
            X[rng.random(n) < frac, j] = np.nan
    elif missing == "random":  # many patterns
        X[rng.random((n, D)) < 0.25] = np.nan
        X = X[~np.isnan(X).all(1)]
    cuts = np.sort(rng.choice(np.arange(1, X.shape[0]), n_clients - 1, replace=False))
    return Federation(X, np.r_[0, cuts, X.shape[0]], allow_nan=True)


def models_and_params(fed, seed=1):
    rng = np.random.default_rng(seed)
    shift, scale = np.nanmean(fed.X, 0), np.nanstd(fed.X, 0)
    fa = FactorAnalysisModel(D, K_FACTORS, shift=shift, scale=scale)
    fa_theta = FactorParams(rng.normal(size=(K_FACTORS, D)) * scale, rng.uniform(0.3, 1.5, D) * scale ** 2,
                            shift + rng.normal(size=D) * scale)
    A = rng.normal(size=(D, D))
    g_theta = GaussianParams(shift + rng.normal(size=D) * scale, (A @ A.T + np.eye(D)) * np.outer(scale, scale))
    gauss = GaussianMissingModel(D, shift=shift, scale=scale)
    return [(fa, fa_theta), (gauss, g_theta)]


def both_paths(monkeypatch, model, fed, theta, **kw):
    """(moments, rows) results of client_stats; each path forced by the group-size threshold."""
    monkeypatch.setattr(_group_moments, "MIN_ROWS_PER_FEATURE", 0.0)
    monkeypatch.setattr(_group_moments, "_CACHE", type(_group_moments._CACHE)())
    rng = np.random.default_rng(5)
    moments = model.client_stats(fed, theta, rng=rng, **kw)
    monkeypatch.setattr(_group_moments, "MIN_ROWS_PER_FEATURE", np.inf)
    monkeypatch.setattr(_group_moments, "_CACHE", type(_group_moments._CACHE)())
    rows = model.client_stats(fed, theta, rng=np.random.default_rng(5), **kw)
    return moments, rows


def assert_same(a, b):
    (sa, la), (sb, lb) = a, b
    assert sa.shape == sb.shape and la.shape == lb.shape
    np.testing.assert_allclose(sa, sb, rtol=RTOL, atol=RTOL * np.abs(sb).max())
    np.testing.assert_allclose(la, lb, rtol=RTOL)


@pytest.mark.parametrize("missing", ["none", "blocks", "random"])
@pytest.mark.parametrize("which", [0, 1], ids=["factor", "gaussian"])
def test_group_moments_equal_rows_on_all_clients(monkeypatch, missing, which):
    fed = make_data(missing)
    model, theta = models_and_params(fed)[which]
    assert_same(*both_paths(monkeypatch, model, fed, theta))


@pytest.mark.parametrize("which", [0, 1], ids=["factor", "gaussian"])
def test_group_moments_equal_rows_on_client_subsets_and_mini_batches(monkeypatch, which):
    fed = make_data("blocks", seed=2)
    model, theta = models_and_params(fed, seed=3)[which]
    clients = np.array([7, 0, 39, 12, 13])
    assert_same(*both_paths(monkeypatch, model, fed, theta, clients=clients))
    assert_same(*both_paths(monkeypatch, model, fed, theta, clients=clients, batch=25))
    assert_same(*both_paths(monkeypatch, model, fed, theta, batch=40))


def test_the_default_threshold_takes_the_moments_for_few_patterns_and_the_rows_for_many():
    few, many = make_data("blocks"), make_data("random", n=600)
    assert _group_moments.group_moments(few.X, few.offsets, np.zeros(D), np.ones(D)) is not None
    assert _group_moments.group_moments(many.X, many.offsets, np.zeros(D), np.ones(D)) is None


def test_cached_moments_follow_the_federation_and_the_standardisation(monkeypatch):
    fed = make_data("blocks")
    calls = []
    real = _group_moments.group_moments
    monkeypatch.setattr(_group_moments, "group_moments", lambda *a: calls.append(1) or real(*a))
    (fa, theta), _ = models_and_params(fed)
    first = fa.client_stats(fed, theta)
    again = fa.client_stats(fed, theta, clients=[3, 4])
    assert len(calls) == 1  # computed once per federation and standardisation
    np.testing.assert_array_equal(again[0], first[0][[3, 4]])
    other = FactorAnalysisModel(D, K_FACTORS, shift=fa.shift + 1.0, scale=fa.scale)
    other.client_stats(fed, theta)
    assert len(calls) == 2
    with pytest.raises(ValueError, match="client ids"):
        fa.client_stats(fed, theta, clients=[fed.n_clients])


@pytest.mark.parametrize("which", [0, 1], ids=["factor", "gaussian"])
def test_moment_statistics_do_not_depend_on_the_blas_thread_count(monkeypatch, which):
    """The moments are BLAS matrix products (each entry summed in one order by one
    thread), never a BLAS reduction split across threads: bitwise the same results."""
    from threadpoolctl import threadpool_limits

    fed = make_data("blocks", n=20_000, n_clients=4)
    model, theta = models_and_params(fed)[which]
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(_group_moments, "_CACHE", type(_group_moments._CACHE)())
        with threadpool_limits(limits=threads, user_api="blas"):
            results.append(model.client_stats(fed, theta))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
