"""FederatedGaussianMixture: scikit-learn parity, estimator checks, claims and bad input."""
import warnings

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture
from sklearn.utils.estimator_checks import parametrize_with_checks

from fedemstats.algorithms.fine_start import EVERYONE_ROUNDS, FINE_START_ROUNDS
from fedemstats.estimators.mixture import FederatedGaussianMixture
from fedemstats.federation import partition_dirichlet

COV_TYPES = ("full", "tied", "diag", "spherical")


def blobs(n=900, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0, 0.0], [5.0, 5.0, 0.0], [0.0, 6.0, 6.0]])
    z = rng.integers(0, 3, n)
    A = np.array([[1.0, 0.4, 0.0], [0.0, 0.8, 0.3], [0.0, 0.0, 0.6]])
    return centers[z] + rng.normal(size=(n, 3)) @ A, z


def sklearn_init(X, ctype, seed=1):
    rng = np.random.default_rng(seed)
    K = 3
    means = X[rng.choice(X.shape[0], K, replace=False)] + 0.5
    weights = np.array([0.2, 0.3, 0.5])
    prec = np.linalg.inv(np.cov(X.T))
    precisions = {"full": np.repeat(prec[None], K, axis=0), "tied": prec,
                  "diag": np.repeat(np.diag(prec)[None], K, axis=0), "spherical": np.full(K, np.diag(prec).mean())}
    return dict(weights_init=weights, means_init=means, precisions_init=precisions[ctype])


@pytest.mark.parametrize("ctype", COV_TYPES)
@pytest.mark.parametrize("n_iter", [1, 7])
def test_parity_with_sklearn_em_over_unequal_clients(ctype, n_iter):
    X, _ = blobs()
    rng = np.random.default_rng(2)
    groups = np.minimum(rng.geometric(0.15, X.shape[0]), 12)  # 12 clients of very unequal sizes
    assert np.unique(groups).size >= 10
    init = sklearn_init(X, ctype)
    ref = GaussianMixture(3, covariance_type=ctype, max_iter=n_iter, tol=0, **init).fit(X)
    ours = FederatedGaussianMixture(3, covariance_type=ctype, max_iter=n_iter, tol=0, compressor="identity",
                                    participation=1.0, alpha=1.0, step_size=1.0, **init).fit(X, groups=groups)
    assert ours.n_iter_ == ref.n_iter_ == n_iter
    for attr in ("weights_", "means_", "covariances_", "precisions_cholesky_"):
        np.testing.assert_allclose(getattr(ours, attr), getattr(ref, attr), rtol=1e-6, atol=1e-12, err_msg=attr)
    np.testing.assert_allclose(ours.score_samples(X), ref.score_samples(X), rtol=1e-8)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))


def test_exact_em_lower_bound_matches_sklearn_at_convergence():
    X, _ = blobs()
    init = sklearn_init(X, "full")
    ref = GaussianMixture(3, max_iter=200, tol=1e-8, **init).fit(X)
    ours = FederatedGaussianMixture(3, algorithm="em", max_iter=200, tol=1e-8, **init).fit(X)
    assert ours.converged_
    assert ours.score(X) == pytest.approx(ref.score(X), rel=1e-7)


@parametrize_with_checks([FederatedGaussianMixture(covariance_type=c, random_state=0) for c in COV_TYPES])
def test_sklearn_estimator_checks(estimator, check):
    # No check is skipped by us. scikit-learn itself skips check_array_api_input unless
    # SCIPY_ARRAY_API=1 is set (our kernels are NumPy/numba only, like GaussianMixture).
    # The checks' tiny data sets give clients under 5 rows, so the k-means summaries
    # initialisation falls back to global moments with a UserWarning (tested below).
    check(estimator)


def test_kmeans_init_falls_back_to_moments_when_clients_are_too_small():
    X, _ = blobs(40)
    with pytest.warns(UserWarning, match="falling back"):
        FederatedGaussianMixture(2, n_clients=10, max_iter=3, random_state=0).fit(X)


def heterogeneous_problem(seed=0):
    """SPEC §3 prototype: GMM d=2, K=3, 20 clients with Dirichlet(0.1) shares per component."""
    rng = np.random.default_rng(seed)
    centers = np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    z = rng.integers(0, 3, 3000)
    X = centers[z] + rng.normal(size=(3000, 2))
    return X, partition_dirichlet(z, 20, 0.1, rng), centers


def test_heterogeneity_claim_fedem_beats_naive_compressed_em():
    """Paper 003: with heterogeneous clients, naive compressed EM stalls at a noise floor
    while FedEM's control variates drive ||h||² to zero (same compressor, same γ)."""
    X, groups, centers = heterogeneous_problem()
    common = dict(n_components=3, compressor="dither:s=2", step_size=0.1, max_iter=301, tol=0.0,
                  track_h=True, means_init=centers + 0.3, random_state=0)
    fedem = FederatedGaussianMixture(**common).fit(X, groups=groups).history_["h_norm2"].to_numpy()
    naive = FederatedGaussianMixture(alpha=0.0, v_init="zero", **common).fit(X, groups=groups).history_[
        "h_norm2"].to_numpy()
    assert fedem[-1] <= 1e-3 * naive[-1]
    windows = [(50, 100), (100, 150), (150, 200), (200, 250), (250, 301)]
    fedem_med = [np.median(fedem[a:b]) for a, b in windows]
    naive_med = [np.median(naive[a:b]) for a, b in windows]
    # FedEM keeps decreasing (linear convergence): each 50-round window >= 10x below the previous
    assert all(later < 0.1 * earlier for earlier, later in zip(fedem_med, fedem_med[1:]))
    # naive plateaus: over the same 250 rounds its window medians show no trend (they stay
    # within a factor 100 of each other, while FedEM falls by > 1e6), and it never comes
    # near FedEM's final value
    assert max(naive_med) < 100 * min(naive_med)
    assert fedem_med[0] > 1e6 * fedem_med[-1]
    assert naive[200:].min() > 1e6 * fedem[-1]


def test_same_random_state_same_history_and_parameters():
    X, groups, _ = heterogeneous_problem()
    kw = dict(n_components=3, compressor="dither:s=4", participation=0.5, max_iter=20, random_state=7)
    a = FederatedGaussianMixture(**kw).fit(X, groups=groups)
    b = FederatedGaussianMixture(**kw).fit(X, groups=groups)
    assert a.history_.equals(b.history_)
    np.testing.assert_array_equal(a.means_, b.means_)
    np.testing.assert_array_equal(a.covariances_, b.covariances_)
    c = FederatedGaussianMixture(**{**kw, "random_state": 8}).fit(X, groups=groups)
    assert not np.array_equal(a.means_, c.means_)


def test_dithering_sends_far_fewer_uplink_bits():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 6)) + np.repeat(np.eye(6)[:3] * 6, 200, axis=0)
    groups = np.repeat(np.arange(12), 50)
    kw = dict(n_components=3, covariance_type="full", max_iter=FINE_START_ROUNDS + 6, tol=0.0, random_state=0)
    ident = FederatedGaussianMixture(**kw).fit(X, groups=groups)
    dith = FederatedGaussianMixture(compressor="dither:s=4", **kw).fit(X, groups=groups)
    q = 3 + 3 * 6 + 3 * 6 * 7 // 2  # full covariances travel as packed upper triangles
    assert q >= 80
    # the rounds after the fine start carry dither:s=4's messages (round 0 is the start, the fine
    # start's rounds dither at 64 levels); both include each client's 64-bit log-likelihood
    after = slice(FINE_START_ROUNDS + 1, None)
    up_ident, up_dith = ident.history_["uplink_bits"][after], dith.history_["uplink_bits"][after]
    assert len(up_dith) == 5  # rounds FINE_START_ROUNDS + 1 ... max_iter - 1
    assert (up_ident == 12 * (64 * q + 64)).all()
    # against the full-matrix layout the first release sent (q = 129): ten times fewer; against
    # the packed identity (a third cheaper itself) the per-block float32 norms of 7 small blocks
    # weigh more, and the ratio is 8.7
    q_full = 3 + 3 * 6 + 3 * 6 * 6
    assert 12 * (64 * q_full + 64) * len(up_ident) >= 10 * up_dith.sum()
    assert up_ident.sum() >= 8 * up_dith.sum()


def test_list_of_clients_equals_groups_and_history_columns():
    X, groups, _ = heterogeneous_problem()
    kw = dict(n_components=3, max_iter=5, random_state=0)
    a = FederatedGaussianMixture(**kw).fit(X, groups=groups)
    b = FederatedGaussianMixture(**kw).fit([X[groups == g] for g in np.unique(groups)])
    np.testing.assert_allclose(a.means_, b.means_, rtol=1e-12)
    assert {"round", "loglik", "h_norm2", "uplink_bits", "downlink_bits", "n_active"} <= set(a.history_.columns)


def test_partial_participation_and_sampling_api():
    X, groups, centers = heterogeneous_problem()
    # tol=0: all 60 rounds (from this start the fit converges within the fine start)
    gm = FederatedGaussianMixture(3, compressor="dither:s=4", participation=5, max_iter=60, tol=0.0,
                                  means_init=centers + 0.2, random_state=0).fit(X, groups=groups)
    assert len(gm.history_) == 60  # round 0 counts as one of max_iter
    # the fine start's rounds and the first coarse ones hear every client, then 5 are sampled a round
    n_active = gm.history_["n_active"].to_numpy()
    assert set(n_active[1:1 + EVERYONE_ROUNDS]) == {np.unique(groups).size}
    assert set(n_active[1 + EVERYONE_ROUNDS:]) == {5}
    order = np.argsort(gm.means_[:, 0])
    np.testing.assert_allclose(gm.means_[order], centers[np.argsort(centers[:, 0])], atol=0.3)
    Xs, labels = gm.sample(50)
    assert Xs.shape == (50, 2) and labels.shape == (50,)
    assert gm.bic(X) > gm.aic(X)  # n large: log(n) > 2
    np.testing.assert_allclose(gm.predict_proba(X[:5]).sum(1), 1.0)


BAD_INPUTS = [
    (lambda X, g: FederatedGaussianMixture(2).fit(np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X)),
     "NaN"),
    (lambda X, g: FederatedGaussianMixture(2).fit(np.where(np.arange(X.size).reshape(X.shape) == 3, np.inf, X)),
     "inf"),
    (lambda X, g: FederatedGaussianMixture(2).fit([X[:10], X[10:10], X[10:]]), "no rows"),
    (lambda X, g: FederatedGaussianMixture(2).fit(X, groups=g[:-1]), "one label per row"),
    (lambda X, g: FederatedGaussianMixture(50).fit(X[:20]), "n_components"),
    (lambda X, g: FederatedGaussianMixture(2, compressor="gzip").fit(X), "unknown compressor"),
    (lambda X, g: FederatedGaussianMixture(2, compressor="dither:s=0").fit(X), "s"),
    (lambda X, g: FederatedGaussianMixture(2, participation=1.5).fit(X), "participation"),
    (lambda X, g: FederatedGaussianMixture(2, participation=0.0).fit(X), "participation"),
    (lambda X, g: FederatedGaussianMixture(2, step_size=0.0).fit(X), "step_size"),
    (lambda X, g: FederatedGaussianMixture(2, step_size=-1.0).fit(X), "step_size"),
    (lambda X, g: FederatedGaussianMixture(2, covariance_type="banded").fit(X), "covariance_type"),
    (lambda X, g: FederatedGaussianMixture(2, algorithm="em", compressor="dither:s=4").fit(X), "exact EM"),
    (lambda X, g: FederatedGaussianMixture(2).fit(X).predict(X[:, :1]), "features"),
    # each names what to change, before any round (a sweep found them raised deep in the run)
    (lambda X, g: FederatedGaussianMixture(2, participation=500).fit(X),
     r"participation asks for k=500 clients .* a count <= \d+ or a fraction"),
    (lambda X, g: FederatedGaussianMixture(2, compressor="randk:k=1000").fit(X),
     r"statistic has only q=\d+ .* choose k <="),
    (lambda X, g: FederatedGaussianMixture(2).fit([X[:100], X[100:], None]), r"client\(s\) \[2\] of the list"),
    (lambda X, g: FederatedGaussianMixture(2, compressor="dither:x=3").fit(X),
     r"no argument\(s\) \['x'\]; its arguments are \['s', "),
    # numpy's concatenate error ("all the input array dimensions ... must match exactly") named no client
    (lambda X, g: FederatedGaussianMixture(2).fit([X[:100], X[100:, :1]]),
     r"client\(s\) \[1\] of the list have 1 columns but client 0 has 2"),
]


@pytest.mark.parametrize("make, match", BAD_INPUTS)
def test_bad_input_gives_clear_value_error(make, match):
    X, groups, _ = heterogeneous_problem()
    with pytest.raises(ValueError, match=match):
        make(X[:200], groups[:200])


def test_estimator_runs_vr_fedem_and_online_em_through_the_registry():
    """algorithm="vr-fedem" / "online" need no extra import, and their parameters clone."""
    from sklearn.base import clone

    X, groups, centers = heterogeneous_problem()
    vr = FederatedGaussianMixture(3, algorithm="vr-fedem", compressor="dither:s=8", step_size=0.3, k_in=5,
                                  batch_size=20, max_iter=21, means_init=centers + 0.3, track_h=True,
                                  n_clients=10, random_state=0).fit(X)  # iid clients of 300 rows
    assert "outer" in vr.history_.columns and vr.history_["outer"].max() == 4
    assert vr.history_["h_norm2"].iloc[-1] < vr.history_["h_norm2"].iloc[0]
    assert clone(vr).get_params()["k_in"] == 5
    online = FederatedGaussianMixture(3, algorithm="online", batch_size=30, online_power=0.7, max_iter=40,
                                      means_init=centers + 0.3, random_state=0).fit(X, groups=groups)
    np.testing.assert_allclose(np.sort(online.means_[:, 0]), np.sort(centers[:, 0]), atol=0.3)
    with pytest.raises(ValueError, match="participation"):
        FederatedGaussianMixture(3, algorithm="vr-fedem", participation=0.5, batch_size=20).fit(X)
    with pytest.raises(ValueError, match="exceeds the 2 rows"):  # Dirichlet(0.1) leaves 2-row clients
        FederatedGaussianMixture(3, algorithm="vr-fedem", batch_size=20).fit(X, groups=groups)


def test_one_row_client_is_refused_because_its_mean_is_its_raw_row():
    X, _ = blobs(40)
    groups = np.r_[np.zeros(39, dtype=int), 1]
    with pytest.raises(ValueError, match=r"\[1\] hold fewer than 2 rows"):
        FederatedGaussianMixture(2).fit(X, groups=groups)


def test_verbose_logs_progress(caplog):
    X, _ = blobs(300)
    with caplog.at_level("INFO", logger="fedemstats"):
        FederatedGaussianMixture(3, verbose=2, verbose_interval=4, max_iter=9, tol=0.0, random_state=0).fit(X)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["round 4", "round 8"]


def test_a_fit_stopped_by_max_iter_warns_as_scikit_learn_does():
    """A fit that tests convergence and runs out of rounds raises ConvergenceWarning (it raised
    nothing), VR-FedEM's mini-batch runs too (they test it on their outer loops' full passes); a run
    that never tests it (tol = 0: a fixed number of rounds, as the command line and the demo ask;
    mini-batch FedEM) does not warn at its budget."""
    import warnings
    from sklearn.exceptions import ConvergenceWarning
    X, groups, centers = heterogeneous_problem()
    with pytest.warns(ConvergenceWarning, match=r"did not converge in 2 M-steps \(max_iter=2,"):
        est = FederatedGaussianMixture(3, max_iter=2, random_state=0).fit(X, groups=groups)
    assert not est.converged_
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FederatedGaussianMixture(3, random_state=0).fit(X, groups=groups)
        FederatedGaussianMixture(3, max_iter=3, tol=0.0, random_state=0).fit(X, groups=groups)  # fixed rounds
        FederatedGaussianMixture(3, compressor="dither:s=8", batch_size=20, n_clients=10, max_iter=6,
                                 random_state=0).fit(X)
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    with pytest.warns(ConvergenceWarning, match=r"did not converge in 6 M-steps"):
        vr = FederatedGaussianMixture(3, algorithm="vr-fedem", compressor="dither:s=8", step_size=0.3, k_in=5,
                                      batch_size=20, n_clients=10, max_iter=6, random_state=0).fit(X)
    assert not vr.converged_


def test_downlink_compressor_reaches_the_algorithm_and_its_ledger():
    """docs/fedem.md and the private fit's error message name `downlink_compressor`; the estimators
    did not accept it. None broadcasts Ŝ as float64 (64 q bits per active client a round)."""
    X, groups, _ = heterogeneous_problem()
    kw = dict(compressor="dither:s=4", max_iter=6, tol=0.0, random_state=0)
    auto = FederatedGaussianMixture(3, **kw).fit(X, groups=groups)
    plain = FederatedGaussianMixture(3, downlink_compressor=None, **kw).fit(X, groups=groups)
    q = plain.history_["n_active"].iloc[1] * 64 * (3 + 3 * X.shape[1] + 3 * X.shape[1] * (X.shape[1] + 1) // 2)
    assert plain.history_["downlink_bits"].iloc[2] >= q > auto.history_["downlink_bits"].iloc[2]
    with pytest.raises(ValueError, match="exact EM: a lossy downlink_compressor"):
        FederatedGaussianMixture(3, algorithm="em", downlink_compressor="dither:s=4").fit(X, groups=groups)


def test_reg_covar_that_dominates_a_column_warns():
    """Data in small units (column variances 1e-10): reg_covar = 1e-6, added to every covariance
    diagonal as scikit-learn does, is what the fitted variances are made of, and the user is told.
    Standardised data and a constant column (which reg_covar keeps invertible) do not warn."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)) + np.repeat([[0, 0, 0], [4, 4, 4]], 100, axis=0)
    tiny = 1e-5 * X
    with pytest.warns(UserWarning, match=r"reg_covar=1e-06 is more than 1% of the variance of column\(s\) 0, 1, 2"):
        fed = FederatedGaussianMixture(2, n_clients=4, random_state=0).fit(tiny)
    ours = np.sort(fed.covariances_[:, 0, 0])
    assert ours.min() > 1e-6 and ours.max() < 1.2e-6     # the floor, not the data's 1e-10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FederatedGaussianMixture(2, n_clients=4, random_state=0).fit(X)
        FederatedGaussianMixture(2, n_clients=4, random_state=0).fit(np.column_stack([X, np.full(200, 0.1)]))
