"""Gaussian mixture model: statistics, T-map, likelihood and federated init (SPEC §2, §3, §5)."""
import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture
from sklearn.mixture._gaussian_mixture import _estimate_gaussian_parameters

from fedemstats.federation import Federation
from fedemstats.models.gmm import (GaussianMixtureModel, GMMParams, estimate_log_prob_resp,
                                   make_params)
from fedemstats.models._kmeans_summaries import init_kmeans_summaries
from fedemstats.models._summaries import global_moments
from fedemstats.models.gmm_init import init_params

TYPES = ["full", "tied", "diag", "spherical"]
K, D = 3, 4


def rel_err(a, b):
    """max |a - b| / max |b|: relative to the array's scale (covariance entries may be ~0)."""
    return np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b))


def make_data(seed=0, n=1500, offset=0.0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(K, D))
    labels = rng.integers(K, size=n)
    A = rng.normal(size=(K, D, D)) * 0.5 + np.eye(D)
    X = centers[labels] + np.einsum("nij,nj->ni", A[labels], rng.normal(size=(n, D))) + offset
    return X, labels, centers + offset


def make_federation(X, n_clients=12, seed=1):
    """Unequal client sizes, at least 20 rows each."""
    rng = np.random.default_rng(seed)
    sizes = 20 + rng.multinomial(X.shape[0] - 20 * n_clients, rng.dirichlet(np.ones(n_clients)))
    return Federation(X, np.concatenate([[0], np.cumsum(sizes)]), weights="samples")


def fitted_sklearn(X, ctype, seed=0):
    """A GaussianMixture after a few EM steps: a generic (non-converged) parameter point."""
    return GaussianMixture(K, covariance_type=ctype, max_iter=2, random_state=seed).fit(X)


def theta_of(gm):
    return make_params(gm.weights_, gm.means_, precisions_cholesky=gm.precisions_cholesky_,
                       covariance_type=gm.covariance_type)


pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.mark.parametrize("ctype", TYPES)
def test_t_map_of_client_stats_equals_sklearn_em_step(ctype):
    X, _, _ = make_data()
    fed = make_federation(X)
    gm = fitted_sklearn(X, ctype)
    model = GaussianMixtureModel(K, D, ctype, shift=X.mean(0))
    stats, _ = model.client_stats(fed, theta_of(gm))
    new = model.t_map(fed.weights @ stats)
    _, log_resp = gm._e_step(X)
    gm._m_step(X, log_resp)
    for ours, ref in [(new.weights, gm.weights_), (new.means, gm.means_),
                      (new.covariances, gm.covariances_),
                      (new.precisions_cholesky, gm.precisions_cholesky_)]:
        assert ours.shape == ref.shape
        assert rel_err(ours, ref) < 1e-8


@pytest.mark.parametrize("ctype", TYPES)
def test_merge_of_client_stats_equals_pooled_stats(ctype):
    X, _, _ = make_data(seed=3)
    fed = make_federation(X)
    theta = theta_of(fitted_sklearn(X, ctype))
    model = GaussianMixtureModel(K, D, ctype, shift=X.mean(0))
    stats, ll = model.client_stats(fed, theta)
    pooled, pooled_ll = model.client_stats(Federation(X, [0, X.shape[0]]), theta)
    assert rel_err(fed.weights @ stats, pooled[0]) < 1e-12
    assert abs(fed.weights @ ll - pooled_ll[0]) < 1e-12 * abs(pooled_ll[0])
    blocks = model.layout.unpack(pooled[0])
    assert np.isclose(blocks["resp"].sum(), 1.0, rtol=1e-12)


@pytest.mark.parametrize("ctype", ["full", "tied"])
def test_parallel_row_blocks_assign_rows_to_the_right_client(ctype):
    """Enough rows for several row blocks: clients that start, end or span blocks."""
    X, _, _ = make_data(seed=6, n=30000)
    sizes = np.array([3, 17000, 7, 2500, 1, 6000, 3489, 1000])
    fed = Federation(X, np.concatenate([[0], np.cumsum(sizes)]))
    theta = theta_of(fitted_sklearn(X[:3000], ctype))
    model = GaussianMixtureModel(K, D, ctype, shift=X.mean(0))
    stats, ll = model.client_stats(fed, theta)
    clients = np.array([5, 1, 4])
    sub, sub_ll = model.client_stats(fed, theta, clients)
    for i in range(fed.n_clients):
        alone, alone_ll = model.client_stats(Federation(fed.client(i), [0, sizes[i]]), theta)
        assert rel_err(stats[i], alone[0]) < 1e-12
        assert abs(ll[i] - alone_ll[0]) < 1e-12 * abs(alone_ll[0])
    assert rel_err(sub, stats[clients]) < 1e-12


@pytest.mark.parametrize("ctype", TYPES)
def test_client_loglik_and_log_prob_resp_match_sklearn(ctype):
    X, _, _ = make_data(seed=4)
    fed = make_federation(X)
    gm = fitted_sklearn(X, ctype)
    model = GaussianMixtureModel(K, D, ctype)
    _, ll = model.client_stats(fed, theta_of(gm))
    ref = np.add.reduceat(gm.score_samples(X), fed.offsets[:-1]) / fed.sizes
    np.testing.assert_allclose(ll, ref, rtol=1e-10)
    log_norm, log_resp = estimate_log_prob_resp(X, theta_of(gm))
    ref_norm, ref_resp = gm._estimate_log_prob_resp(X)
    np.testing.assert_allclose(log_norm, ref_norm, rtol=1e-10)
    np.testing.assert_allclose(np.exp(log_resp), np.exp(ref_resp), atol=1e-10)
    np.testing.assert_allclose(model.log_likelihood(X, theta_of(gm)), ref_norm, rtol=1e-10)


@pytest.mark.parametrize("ctype", TYPES)
def test_shift_is_invisible_but_fixes_large_offsets(ctype):
    X, _, _ = make_data(seed=5)
    fed = make_federation(X)
    gm = fitted_sklearn(X, ctype)
    theta = theta_of(gm)
    out = [GaussianMixtureModel(K, D, ctype, shift=c).t_map(fed.weights @ GaussianMixtureModel(
        K, D, ctype, shift=c).client_stats(fed, theta)[0]) for c in (None, X.mean(0) + 3.0)]
    assert rel_err(out[0].covariances, out[1].covariances) < 1e-10
    assert rel_err(out[0].means, out[1].means) < 1e-12
    # Same problem translated by 1e6: covariances are translation invariant.
    offset = 1e6
    moved = make_params(theta.weights, theta.means + offset, covariances=theta.covariances,
                        covariance_type=ctype)
    fed_far = make_federation(X + offset)
    errs = []
    for c in (None, (X + offset).mean(0)):
        model = GaussianMixtureModel(K, D, ctype, shift=c)
        far = model.t_map(fed_far.weights @ model.client_stats(fed_far, moved)[0])
        errs.append(rel_err(far.covariances, out[0].covariances))
        assert rel_err(far.means - offset, out[0].means) < 1e-8
    assert errs[1] < 1e-8, errs
    assert errs[0] > 100 * errs[1], errs


@pytest.mark.parametrize("ctype", TYPES)
def test_t_map_is_total(ctype):
    model = GaussianMixtureModel(K, D, ctype, reg_covar=1e-6)
    rng = np.random.default_rng(7)
    candidates = [rng.normal(size=model.q), -np.abs(rng.normal(size=model.q)),
                  rng.normal(scale=1e3, size=model.q), np.zeros(model.q),
                  rng.standard_cauchy(size=model.q)]
    exact = model.layout.unpack(np.ones(model.q).copy())
    exact["sum_xx"][...] = -5.0  # negative second moments: nowhere near PSD
    candidates.append(model.layout.pack(exact))
    for s in candidates:
        theta = model.t_map(s)
        assert np.all(np.isfinite(theta.weights)) and np.all(theta.weights > 0)
        assert np.isclose(theta.weights.sum(), 1.0)
        assert np.all(np.isfinite(theta.means))
        cov = theta.covariances
        if ctype in ("full", "tied"):
            mats = cov if ctype == "full" else cov[None]
            for m in mats:
                np.testing.assert_allclose(m, m.T)
                assert np.linalg.eigvalsh(m).min() > 0
            pc = theta.precisions_cholesky if ctype == "full" else theta.precisions_cholesky[None]
            for m, u in zip(mats, pc):
                np.testing.assert_allclose(u @ u.T @ m, np.eye(D), atol=1e-6)
        else:
            assert np.all(np.isfinite(cov)) and np.all(cov > 0)
        # The repaired parameters are usable by the statistics kernel.
        X = rng.normal(size=(50, D))
        assert np.all(np.isfinite(model.log_likelihood(X, theta)))


def test_t_map_rejects_nan():
    model = GaussianMixtureModel(K, D)
    s = np.zeros(model.q)
    s[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.t_map(s)
    with pytest.raises(ValueError, match="shape"):
        model.t_map(np.zeros(model.q + 1))


@pytest.mark.parametrize("ctype", ["full", "diag"])
def test_minibatch_draws_min_b_rows_reproducibly(ctype):
    X, _, _ = make_data(seed=8, n=900)
    fed = make_federation(X, n_clients=10)
    theta = theta_of(fitted_sklearn(X, ctype))
    model = GaussianMixtureModel(K, D, ctype, shift=X.mean(0))
    b = int(np.median(fed.sizes))
    by_size = np.argsort(fed.sizes)
    clients = np.array([by_size[-1], by_size[0], by_size[-2], by_size[1]])  # unsorted on purpose
    s1, l1 = model.client_stats(fed, theta, clients, batch=b, rng=np.random.default_rng(11))
    s2, l2 = model.client_stats(fed, theta, clients, batch=b, rng=np.random.default_rng(11))
    s3, _ = model.client_stats(fed, theta, clients, batch=b, rng=np.random.default_rng(12))
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_array_equal(l1, l2)
    X_sel, seg = fed.select(clients, b, np.random.default_rng(11))
    np.testing.assert_array_equal(np.diff(seg), np.minimum(fed.sizes[clients], b))
    ref, ref_ll = model.client_stats(Federation(X_sel, seg), theta)
    np.testing.assert_allclose(s1, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(l1, ref_ll, rtol=1e-12)
    full, _ = model.client_stats(fed, theta, clients)
    small = fed.sizes[clients] <= b  # whole client taken: the exact local mean
    big = ~small
    assert small.any() and big.any()
    np.testing.assert_allclose(s1[small], full[small], rtol=1e-12, atol=1e-14)
    assert not np.allclose(s1[big], s3[big])


def test_global_moments_are_exact_and_stable():
    X, _, _ = make_data(seed=9)
    for offset in (0.0, 1e8):
        Xo = X + offset
        exact = Xo - offset  # exact in floating point (Sterbenz), the data actually held
        mean, cov = global_moments(make_federation(Xo))
        assert rel_err(mean, offset + exact.mean(0)) < 1e-14
        assert rel_err(cov, np.cov(exact, rowvar=False, bias=True)) < 1e-9


def test_kmeans_init_server_sees_only_summaries(monkeypatch):
    X, labels, centers = make_data(seed=10, n=3000)
    fed = make_federation(X, n_clients=15)
    seen = {}
    real_fit = KMeans.fit

    def spy_fit(self, C, y=None, sample_weight=None):
        seen["C"], seen["w"] = np.asarray(C), np.asarray(sample_weight)
        return real_fit(self, C, y, sample_weight=sample_weight)

    monkeypatch.setattr(KMeans, "fit", spy_fit)
    means = init_kmeans_summaries(fed, K, np.random.default_rng(0), min_rows=5)
    assert np.all(seen["w"] >= 5) and seen["C"].shape[0] <= K * fed.n_clients
    as_rows = (seen["C"][:, None, :] == X[None]).all(-1).any()
    assert not as_rows  # no centroid equals a raw row
    # a reasonable start: every true centre has an initial mean nearby
    dist = np.linalg.norm(centers[:, None] - means[None], axis=-1)
    assert dist.min(axis=1).max() < 1.0


@pytest.mark.parametrize("ctype", TYPES)
def test_init_params_kmeans_and_random(ctype):
    X, labels, centers = make_data(seed=12, n=2400)
    fed = make_federation(X)
    model = GaussianMixtureModel(K, D, ctype, shift=global_moments(fed)[0])
    theta = init_params(fed, model, "kmeans", np.random.default_rng(1))
    assert isinstance(theta, GMMParams) and theta.covariance_type == ctype
    # the E/M pass is scikit-learn's kmeans-label initialisation from the same means
    means = init_kmeans_summaries(fed, K, np.random.default_rng(1))
    hard = np.eye(K)[np.argmin(np.linalg.norm(X[:, None] - means[None], axis=-1), axis=1)]
    w, mu, cov = _estimate_gaussian_parameters(X, hard, model.reg_covar, ctype)
    for ours, ref in [(theta.weights, w / w.sum()), (theta.means, mu), (theta.covariances, cov)]:
        assert rel_err(ours, ref) < 1e-8
    # and a reasonable start: one initial mean per true centre, weights near the truth
    order = np.argmin(np.linalg.norm(centers[:, None] - theta.means[None], axis=-1), axis=1)
    assert sorted(order) == list(range(K))
    np.testing.assert_allclose(theta.weights[order], np.bincount(labels) / labels.size, atol=0.1)
    rnd = init_params(fed, model, "random", np.random.default_rng(1))
    assert np.allclose(rnd.weights, 1.0 / K) and np.all(np.isfinite(rnd.means))
    rnd2 = model.init_theta(fed, rng=np.random.default_rng(1), method="random")
    np.testing.assert_array_equal(rnd.means, rnd2.means)


def test_kmeans_init_refuses_when_clients_are_too_small():
    X, _, _ = make_data(seed=13, n=120)
    fed = Federation(X, np.arange(0, 121, 4))  # 30 clients of 4 rows < min_rows
    model = GaussianMixtureModel(K, D)
    with pytest.raises(ValueError, match="init_params='random'"):
        init_params(fed, model, "kmeans", np.random.default_rng(0), min_rows=5)
    with pytest.raises(ValueError, match="min_rows"):
        init_kmeans_summaries(fed, K, 0, min_rows=1)
    assert np.all(np.isfinite(init_params(fed, model, "random", np.random.default_rng(0)).means))


@pytest.mark.parametrize("ctype", TYPES)
def test_make_params_matches_sklearn_conversions(ctype):
    X, _, _ = make_data(seed=14)
    gm = fitted_sklearn(X, ctype)
    by_cov = make_params(gm.weights_, gm.means_, gm.covariances_, covariance_type=ctype)
    by_prec = make_params(gm.weights_, gm.means_, precisions=gm.precisions_, covariance_type=ctype)
    for p in (by_cov, by_prec):
        assert rel_err(p.precisions_cholesky, gm.precisions_cholesky_) < 1e-10
        assert rel_err(p.covariances, gm.covariances_) < 1e-10
        assert rel_err(p.precisions, gm.precisions_) < 1e-10
    model = GaussianMixtureModel(K, D, ctype)
    assert model.n_parameters(by_cov) == gm._n_parameters()
    Xs, ys = model.sample(by_cov, 500, np.random.default_rng(0))
    assert Xs.shape == (500, D) and ys.shape == (500,) and set(ys) <= set(range(K))


def test_bad_input_errors():
    w, mu, cov = np.full(2, 0.5), np.zeros((2, 2)), np.repeat(np.eye(2)[None], 2, 0)
    with pytest.raises(ValueError, match="sum to 1"):
        make_params([0.5, 0.6], mu, cov)
    with pytest.raises(ValueError, match="shape"):
        make_params(w, mu, np.eye(2))
    with pytest.raises(ValueError, match="positive definite"):
        make_params(w, mu, cov * -1)
    with pytest.raises(ValueError, match="symmetric"):
        make_params(w, mu, cov + np.array([[0, 1.0], [0, 0]]))
    with pytest.raises(ValueError, match="exactly one"):
        make_params(w, mu, cov, precisions=cov)
    with pytest.raises(ValueError, match="covariance_type"):
        make_params(w, mu, cov, covariance_type="banana")
    with pytest.raises(ValueError, match="> 0"):
        make_params(w, mu, np.array([1.0, 0.0]), covariance_type="spherical")
    with pytest.raises(ValueError, match="covariance_type"):
        GaussianMixtureModel(2, 2, "banana")
    with pytest.raises(ValueError, match="shift"):
        GaussianMixtureModel(2, 2, shift=np.zeros(3))
    model = GaussianMixtureModel(2, 2)
    fed = Federation(np.random.default_rng(0).normal(size=(20, 2)), [0, 10, 20])
    theta = make_params(w, mu, cov)
    with pytest.raises(ValueError, match="GMMParams"):
        model.client_stats(fed, make_params(w, mu, np.ones((2, 2)), covariance_type="diag"))
    with pytest.raises(ValueError, match="batch"):
        model.client_stats(fed, theta, batch=0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="features"):
        estimate_log_prob_resp(np.zeros((3, 5)), theta)
    with pytest.raises(ValueError, match="method"):
        init_params(fed, model, "kmeans++")
