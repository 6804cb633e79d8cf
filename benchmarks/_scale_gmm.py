"""Gaussian-mixture cases of ``bench_scale.py``: one FedEM round against one scikit-learn
EM iteration (``_e_step`` + ``_m_step``) from the same parameters, interleaved."""
from __future__ import annotations

import time

import numpy as np
from sklearn.mixture import GaussianMixture

from fedemstats.algorithms import FedEM
from fedemstats.estimators import FederatedGaussianMixture
from fedemstats.estimators._algorithms import ALGORITHMS
from fedemstats.federation import Federation
from fedemstats.models._summaries import global_mean
from fedemstats.models.gmm import GaussianMixtureModel, make_params

from _scale_timing import ITERATIONS_PER_SAMPLE, gmm_round_flops, interleaved, summary

#: Rows of the warm-up federation (d=10, K=5): enough work for the *parallel* kernel
#: (PARALLEL_MIN_FLOPS, even with diagonal covariances) to compile or load before any
#: timing, and the serial one on a small federation.
WARMUP_ROWS = 50_000
K_DEFAULT = 5


def synthetic(n, d, K, rng, scale=4.0):
    """Rows of a K-component mixture with unit within-component covariance, shape (n, d)."""
    X = rng.standard_normal((n, d))
    X += rng.normal(scale=scale, size=(K, d))[rng.integers(K, size=n)]
    return X


def start_params(X, K, ctype, rng):
    """Shared θ_0: K random rows as means, the pooled covariance of a subsample."""
    d = X.shape[1]
    means = X[rng.choice(X.shape[0], K, replace=False)]
    cov = np.cov(X[:20000].T) + 1e-6 * np.eye(d)
    covs = {"full": np.repeat(cov[None], K, 0), "tied": cov, "diag": np.repeat(np.diag(cov)[None], K, 0),
            "spherical": np.full(K, np.diag(cov).mean())}[ctype]
    return make_params(np.full(K, 1.0 / K), means, covs, covariance_type=ctype)


def sklearn_iteration(X, theta):
    """One scikit-learn EM iteration from θ (later calls continue from its M-step)."""
    gm = GaussianMixture(theta.n_components, covariance_type=theta.covariance_type)
    gm.weights_, gm.means_, gm.precisions_cholesky_ = theta.weights, theta.means, theta.precisions_cholesky

    def step():
        _, log_resp = gm._e_step(X)
        gm._m_step(X, log_resp)
    return step


def ours_round(X, offsets, theta, compressor="identity", participation=1.0):
    """One FedEM round (exact EM when identity with full participation) after round 0."""
    fed = Federation(X, offsets)
    model = GaussianMixtureModel(theta.n_components, X.shape[1], theta.covariance_type, shift=global_mean(fed))
    exact = compressor == "identity" and participation == 1.0
    algo = FedEM(model, compressor=compressor, participation=participation,
                 step_size=1.0 if exact else "auto", alpha=1.0 if exact else None,
                 v_init="zero" if exact else "mean-field")
    run = algo.start(fed, theta, random_state=0)
    return run.step


def warm_up(rng):
    """Compile (or load) the serial and the parallel kernels, outside every timing."""
    X = synthetic(WARMUP_ROWS, 10, K_DEFAULT, rng)
    for ctype in ("full", "diag"):
        theta = start_params(X, K_DEFAULT, ctype, rng)
        for rows in (1000, WARMUP_ROWS):
            ours_round(X[:rows], [0, rows // 2, rows], theta)()
        sklearn_iteration(X, theta)()


def gmm_case(n, d, ctype, reps, rng, n_clients=100, K=K_DEFAULT):
    X = synthetic(n, d, K, rng)
    theta = start_params(X, K, ctype, rng)
    offsets = np.linspace(0, n, n_clients + 1).astype(np.int64)
    times = interleaved({"sklearn": sklearn_iteration(X, theta), "ours": ours_round(X, offsets, theta)}, reps,
                        ITERATIONS_PER_SAMPLE)
    sk, ours = summary(times["sklearn"]), summary(times["ours"])
    return {"n": n, "d": d, "cov": ctype, "sklearn": sk, "ours": ours, "ratio": ours["med"] / sk["med"],
            "flops": gmm_round_flops(n, d, K, ctype)}


def gmm_table(sizes, dims, ctypes, reps, rng):
    return [gmm_case(n, d, c, reps, rng) for n in sizes for d in dims for c in ctypes]


def clients_table(n, client_counts, reps, rng, d=10, K=K_DEFAULT):
    """Rounds at ``n`` rows over several client counts: identity, and dither:s=4 at participation 0.5."""
    X = synthetic(n, d, K, rng)
    theta = start_params(X, K, "full", rng)
    rows = []
    for m in client_counts:
        offsets = np.linspace(0, n, m + 1).astype(np.int64)
        fns = {"sklearn": sklearn_iteration(X, theta), "identity": ours_round(X, offsets, theta),
               "dither": ours_round(X, offsets, theta, "dither:s=4", 0.5)}
        times = {k: summary(v) for k, v in interleaved(fns, reps, ITERATIONS_PER_SAMPLE).items()}
        rows.append({"clients": m, **times, "ratio_identity": times["identity"]["med"] / times["sklearn"]["med"],
                     "ratio_dither": times["dither"]["med"] / times["sklearn"]["med"]})
    return rows


def setup_case(n, d, n_clients, rng, K=K_DEFAULT, reps=3):
    """Fixed set-up of ``FederatedGaussianMixture.fit`` (k-means init, full covariances).

    ``fit(max_iter=1)`` runs the set-up and round 0 (one E-step and M-step, i.e. one EM
    iteration); the set-up is its time minus one round, measured in the same repetition.
    """
    X = synthetic(n, d, K, rng)
    groups = np.arange(n) % n_clients
    theta = start_params(X, K, "full", rng)
    offsets = np.linspace(0, n, n_clients + 1).astype(np.int64)
    step = ours_round(X, offsets, theta)
    kw = dict(n_components=K, max_iter=1, tol=0.0, random_state=0)
    FederatedGaussianMixture(**kw).fit(X[:WARMUP_ROWS], groups=groups[:WARMUP_ROWS])
    times = interleaved({"fit1": lambda: FederatedGaussianMixture(**kw).fit(X, groups=groups), "round": step},
                        reps)
    fit1, rnd = summary(times["fit1"]), summary(times["round"])
    return {"n": n, "d": d, "clients": n_clients, "fit_max_iter_1": fit1, "round": rnd,
            "setup": fit1["med"] - rnd["med"], "setup_in_rounds": (fit1["med"] - rnd["med"]) / rnd["med"],
            "breakdown": setup_breakdown(X, groups, K)}


def setup_breakdown(X, groups, K):
    """Seconds of each set-up stage of the estimator's fit, in order."""
    est = FederatedGaussianMixture(K, max_iter=1, random_state=0)
    est._check_federated_params()
    out, t0 = {}, time.perf_counter()
    fed, _, _ = est._federation(X, groups, min_rows=2)
    out["Federation.from_groups + validation"], t0 = time.perf_counter() - t0, time.perf_counter()
    model = GaussianMixtureModel.from_federation(fed, n_components=K)
    out["public centring (global mean)"], t0 = time.perf_counter() - t0, time.perf_counter()
    theta = model.init_theta(fed, rng=np.random.default_rng(0))
    out["k-means summaries + hard-label pass (sampled)"], t0 = time.perf_counter() - t0, time.perf_counter()
    stats = model.client_stats(fed, theta)[0]
    out["round 0: E-step (an EM iteration)"], t0 = time.perf_counter() - t0, time.perf_counter()
    point = ALGORITHMS[est.algorithm](est, model).mean_field_point(stats, fed.weights)
    if point is not None:  # exact EM skips it (its memories cancel)
        model.client_stats(fed, point)
        out["round 0: mean-field pass (v_init)"] = time.perf_counter() - t0
    return out
