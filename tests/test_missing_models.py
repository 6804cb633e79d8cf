"""Missing-value models (SPEC §5): statistics against per-row references written here,
federated EM against a pooled EM written here, T-map totality, imputation."""
import numpy as np
import pytest
from scipy.special import gammaln
from scipy.stats import multivariate_normal

from fedemstats.algorithms import FedEM
from fedemstats.federation import Federation
from fedemstats.models import _patterns
from fedemstats.models.gaussian_missing import GaussianMissingModel, GaussianParams, init_gaussian
from fedemstats.models.gmm import GaussianMixtureModel, make_params
from fedemstats.models.gmm_missing import GaussianMixtureMissingModel
from fedemstats.models.poisson_mixture import PoissonMixtureModel, PoissonMixtureParams, check_counts

D = 5


def gaussian_data(seed=0, n=300, d=D, frac=0.3, offset=0.0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    cov = A @ A.T + np.eye(d)
    mean = rng.normal(size=d) + offset
    X = rng.multivariate_normal(mean, cov, size=n)
    X[rng.random((n, d)) < frac] = np.nan
    return X[~np.isnan(X).all(axis=1)], mean, cov


def federation(X, n_clients=4, seed=1):
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(5, X.shape[0] - 5), n_clients - 1, replace=False))
    return Federation(X, np.r_[0, cuts, X.shape[0]], allow_nan=True)


def row_conditional(x, mean, cov, logpdf=True):
    """E[x | x_o], Cov[x | x_o] (zero-padded) and log N(x_o) for one row, by direct solves."""
    o = ~np.isnan(x)
    m = ~o
    xhat, C = x.copy(), np.zeros_like(cov)
    if not o.any():
        return mean.copy(), cov.copy(), 0.0
    Soo = cov[np.ix_(o, o)]
    xhat[m] = mean[m] + cov[np.ix_(m, o)] @ np.linalg.solve(Soo, x[o] - mean[o])
    C[np.ix_(m, m)] = cov[np.ix_(m, m)] - cov[np.ix_(m, o)] @ np.linalg.solve(Soo, cov[np.ix_(o, m)])
    return xhat, C, multivariate_normal(mean[o], Soo).logpdf(x[o]) if logpdf else np.nan


def pooled_gaussian_em(X, mean, cov, n_iter, reg):
    """Plain EM for a Gaussian with values missing at random, row by row."""
    for _ in range(n_iter):
        s1, s2 = np.zeros_like(mean), np.zeros_like(cov)
        for x in X:
            xhat, C, _ = row_conditional(x, mean, cov, logpdf=False)
            s1 += xhat
            s2 += np.outer(xhat, xhat) + C
        mean = s1 / len(X)
        cov = s2 / len(X) - np.outer(mean, mean) + reg * np.eye(len(mean))
    return mean, cov


def test_gaussian_stats_match_per_row_reference():
    X, mean, cov = gaussian_data()
    X[7] = np.nan  # an all-missing row: contributes the prior moments, log-density 0
    fed = federation(X)
    shift = np.nanmean(X, axis=0)
    model = GaussianMissingModel(D, reg_covar=0.0, shift=shift)
    stats, loglik = model.client_stats(fed, GaussianParams(mean, cov))
    for i in range(fed.n_clients):
        rows = [row_conditional(x, mean, cov) for x in fed.client(i)]
        s1 = np.mean([r[0] - shift for r in rows], axis=0)
        s2 = np.mean([np.outer(r[0] - shift, r[0] - shift) + r[1] for r in rows], axis=0)
        ref = model.layout.pack({"sum_x": s1, "sum_xx": s2})
        np.testing.assert_allclose(stats[i], ref, rtol=1e-12, atol=1e-12)
        assert loglik[i] == pytest.approx(np.mean([r[2] for r in rows]), rel=1e-12)


def test_federated_em_equals_pooled_em_gaussian_missing():
    """Identity compression, full participation, gamma = 1: FedEM is EM (SPEC §3)."""
    X, _, _ = gaussian_data(seed=3, n=240, offset=50.0)
    fed = federation(X, n_clients=5)
    reg, n_rounds = 1e-6, 25
    model = GaussianMissingModel(D, reg_covar=reg, shift=np.nanmean(X, axis=0))
    theta0 = init_gaussian(fed, reg)
    result = FedEM(model, step_size=1.0, alpha=1.0).run(fed, theta0, n_rounds, random_state=0)
    # round 0 is one E+M step, so n_rounds rounds are n_rounds + 1 EM iterations
    mean, cov = pooled_gaussian_em(X, theta0.mean, theta0.covariance, n_rounds + 1, reg)
    np.testing.assert_allclose(result.theta.mean, mean, rtol=1e-8)
    assert np.max(np.abs(result.theta.covariance - cov)) <= 1e-8 * np.max(np.abs(cov))
    ll = result.history["loglik"].to_numpy()
    assert np.all(np.diff(ll[1:]) >= -1e-10)  # EM never decreases the likelihood


def test_standardising_scale_does_not_change_the_em_step():
    """Statistics on (x - c) / sigma, mapped back by the T-map: the same EM iterate (reg_covar = 0:
    with a scale, reg_covar is in its units, see the next test)."""
    X, mean, cov = gaussian_data(seed=10, n=150)
    X[:, 2] *= 1e3
    fed = federation(X)
    theta = init_gaussian(fed)
    plain = GaussianMissingModel(D, reg_covar=0.0, shift=np.nanmean(X, 0))
    scaled = GaussianMissingModel(D, reg_covar=0.0, shift=np.nanmean(X, 0), scale=np.nanstd(X, 0))
    (sa, la), (sb, lb) = plain.client_stats(fed, theta), scaled.client_stats(fed, theta)
    ta, tb = plain.t_map(fed.weights @ sa), scaled.t_map(fed.weights @ sb)
    np.testing.assert_allclose(tb.mean, ta.mean, rtol=1e-12)
    np.testing.assert_allclose(tb.covariance, ta.covariance, rtol=1e-10, atol=1e-12 * np.abs(ta.covariance).max())
    np.testing.assert_allclose(lb, la, rtol=1e-12)


def test_reg_covar_is_in_units_of_the_public_scale():
    """Σ_jj gains reg_covar σ_j², not reg_covar: 1e-6 in original units swamped a column of
    variance 1e-6 (a sweep: RMSE 3.4 on it, against 1.08 for mean imputation)."""
    X, _, _ = gaussian_data(seed=10, n=150)
    fed = federation(X)
    sd = np.nanstd(X, 0) * np.geomspace(0.5, 2.0, D)  # valid statistics: no repair binds
    model = GaussianMissingModel(D, reg_covar=1e-2, shift=np.nanmean(X, 0), scale=sd)
    bare = GaussianMissingModel(D, reg_covar=0.0, shift=np.nanmean(X, 0), scale=sd)
    s = fed.weights @ model.client_stats(fed, init_gaussian(fed))[0]
    added = np.diag(model.t_map(s).covariance - bare.t_map(s).covariance)
    np.testing.assert_allclose(added, 1e-2 * sd ** 2, rtol=1e-8)
    np.testing.assert_allclose(model.expected_stats(model.t_map(s)), s, rtol=1e-9, atol=1e-12)


def test_gmm_missing_stats_match_per_row_reference():
    X, _, _ = gaussian_data(seed=4, n=200)
    fed = federation(X)
    rng = np.random.default_rng(0)
    means = rng.normal(size=(2, D))
    covs = np.array([np.eye(D) * 2.0, np.cov(np.nan_to_num(X).T) + np.eye(D)])
    theta = make_params(np.array([0.3, 0.7]), means, covs)
    shift = np.nanmean(X, axis=0)
    model = GaussianMixtureMissingModel(2, D, shift=shift)
    stats, loglik = model.client_stats(fed, theta)
    for i in range(fed.n_clients):
        acc, lls = [], []
        for x in fed.client(i):
            parts = [row_conditional(x, means[k], covs[k]) for k in range(2)]
            logw = np.log(theta.weights) + np.array([p[2] for p in parts])
            r = np.exp(logw - np.logaddexp.reduce(logw))
            z = [p[0] - shift for p in parts]
            acc.append(model.layout.pack({"resp": r, "sum_x": r[:, None] * np.array(z), "sum_xx": np.array(
                [r[k] * (np.outer(z[k], z[k]) + parts[k][1]) for k in range(2)])}))
            lls.append(np.logaddexp.reduce(logw))
        np.testing.assert_allclose(stats[i], np.mean(acc, axis=0), rtol=1e-10, atol=1e-12)
        assert loglik[i] == pytest.approx(np.mean(lls), rel=1e-12)


@pytest.mark.parametrize("ctype", ["full", "diag"])
def test_gmm_missing_without_nan_equals_gmm_model(ctype):
    """Two independent kernels (numba GMM, pattern-based missing) agree on complete data."""
    X, _, _ = gaussian_data(seed=5, n=150, frac=0.0)
    fed = federation(X)
    rng = np.random.default_rng(2)
    covs = np.array([np.eye(D), 2 * np.eye(D) + 0.3]) if ctype == "full" else rng.uniform(0.5, 2, (2, D))
    theta = make_params(np.array([0.4, 0.6]), rng.normal(size=(2, D)), covs, covariance_type=ctype)
    shift = X.mean(0)
    a, la = GaussianMixtureModel(2, D, ctype, shift=shift).client_stats(fed, theta)
    b, lb = GaussianMixtureMissingModel(2, D, ctype, shift=shift).client_stats(fed, theta)
    np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(lb, la, rtol=1e-10)


def test_chunking_does_not_change_the_statistics(monkeypatch):
    X, mean, cov = gaussian_data(seed=6, n=120)
    fed = federation(X)
    model = GaussianMissingModel(D, shift=np.nanmean(X, 0))
    theta = GaussianParams(mean, cov)
    full, ll = model.client_stats(fed, theta)
    monkeypatch.setattr(_patterns, "CHUNK_FLOATS", 7 * D * D)  # 7-row chunks cut clients
    small, ll_small = model.client_stats(fed, theta)
    np.testing.assert_allclose(small, full, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(ll_small, ll, rtol=1e-12)


def test_minibatch_stats_are_means_over_the_drawn_rows():
    X, mean, cov = gaussian_data(seed=7, n=200)
    fed = federation(X)
    model = GaussianMissingModel(D, shift=np.nanmean(X, 0))
    theta = GaussianParams(mean, cov)
    stats, _ = model.client_stats(fed, theta, clients=[2, 0], batch=10, rng=np.random.default_rng(0))
    rows, seg = fed.select([2, 0], 10, np.random.default_rng(0))
    ref, _ = model.client_stats(Federation(rows, seg, allow_nan=True), theta)
    np.testing.assert_allclose(stats, ref, rtol=1e-12)


@pytest.mark.parametrize("make_model", [
    lambda: GaussianMissingModel(3),
    lambda: GaussianMixtureMissingModel(2, 3),
    lambda: GaussianMixtureMissingModel(2, 3, "diag"),
    lambda: PoissonMixtureModel(2, 3),
])
def test_t_map_is_total(make_model):
    model = make_model()
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(6, 3))).round()
    for scale in (1e-3, 1.0, 1e3):
        theta = model.t_map(rng.normal(scale=scale, size=model.q))
        assert np.all(np.isfinite(model.log_likelihood(X, theta)))
    with pytest.raises(ValueError):
        model.t_map(np.full(model.q, np.nan))


def test_gaussian_imputation_is_the_conditional_mean_and_draws_match_it():
    X, mean, cov = gaussian_data(seed=8, n=40)
    theta = GaussianParams(mean, cov)
    model = GaussianMissingModel(D)
    filled = model.impute(X, theta)
    for x, f in zip(X, filled):
        np.testing.assert_allclose(f, row_conditional(x, mean, cov)[0], rtol=1e-10, atol=1e-12)
    # draws: mean and covariance of one row's missing block by Monte Carlo
    x = X[np.flatnonzero(np.isnan(X).sum(1) == 2)[0]]
    xhat, C, _ = row_conditional(x, mean, cov)
    draws = model.impute(np.repeat(x[None], 20000, axis=0), theta, rng=np.random.default_rng(1), sample=True)
    m = np.isnan(x)
    assert np.all(draws[:, ~m] == x[~m])
    np.testing.assert_allclose(draws[:, m].mean(0), xhat[m], atol=4 * np.sqrt(C[m, m].max() / 20000))
    np.testing.assert_allclose(np.cov(draws[:, m].T), C[np.ix_(m, m)], rtol=0.06, atol=0.03)


def test_poisson_stats_and_imputation_match_reference():
    rng = np.random.default_rng(9)
    rates = np.array([[1.0, 5.0, 0.5], [8.0, 0.5, 3.0]])
    z = rng.integers(2, size=150)
    Y = rng.poisson(rates[z]).astype(float)
    Y[rng.random(Y.shape) < 0.25] = np.nan
    Y = Y[~np.isnan(Y).all(1)]
    fed = federation(Y)
    theta = PoissonMixtureParams(np.array([0.4, 0.6]), np.array([[2.0, 3.0, 1.0], [5.0, 1.0, 2.0]]))
    stats, loglik = PoissonMixtureModel(2, 3).client_stats(fed, theta)
    for i in range(fed.n_clients):
        acc = []
        for y in fed.client(i):
            o = ~np.isnan(y)
            logp = np.log(theta.weights) + np.array(
                [np.sum(y[o] * np.log(lam[o]) - lam[o] - gammaln(y[o] + 1)) for lam in theta.rates])
            r = np.exp(logp - np.logaddexp.reduce(logp))
            filled = np.where(o, y, theta.rates)
            acc.append(np.r_[r, (r[:, None] * filled).ravel(), np.logaddexp.reduce(logp)])
        ref = np.mean(acc, axis=0)
        np.testing.assert_allclose(stats[i], ref[:-1], rtol=1e-12)
        assert loglik[i] == pytest.approx(ref[-1], rel=1e-12)
    y = Y[np.isnan(Y).any(1)][0]
    o = ~np.isnan(y)
    logp = np.log(theta.weights) + (y[o] * np.log(theta.rates[:, o]) - theta.rates[:, o]).sum(1)
    r = np.exp(logp - np.logaddexp.reduce(logp))
    np.testing.assert_allclose(PoissonMixtureModel(2, 3).impute(y[None], theta)[0], np.where(o, y, r @ theta.rates))


def test_check_counts_rejects_negative_and_fractional_values():
    check_counts(np.array([[0.0, 3.0, np.nan]]))
    with pytest.raises(ValueError, match="Negative"):
        check_counts(np.array([[-1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"Non-integer .* column\(s\) \[1\] of X \(e.g. row 1: 2.5\)"):
        check_counts(np.array([[1.0, 2.0], [1.0, 2.5]]))  # names the column and the row
