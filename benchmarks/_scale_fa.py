"""Factor-analysis and imputer cases of ``bench_scale.py``."""
from __future__ import annotations

import time
import warnings

import numpy as np
from sklearn.decomposition import FactorAnalysis
from sklearn.exceptions import ConvergenceWarning

from fedemstats.algorithms import FedEM
from fedemstats.estimators import FederatedFactorAnalysis, FederatedImputer
from fedemstats.federation import Federation, partition_iid
from fedemstats.models.factor import FactorAnalysisModel

from _scale_timing import interleaved, summary

#: Iterations per timed fit when measuring the cost of one iteration.
PER_ITER_FITS = 10
#: The accuracy target: within this many nats per row of scikit-learn's final log-likelihood.
TARGET_GAP = 1e-6
#: Rounds after which the "time to scikit-learn's log-likelihood" search gives up.
MAX_ROUNDS = 5000
N_CLIENTS = 10


def fa_data(n, d, k, rng):
    """Rows of a k-factor model with heteroscedastic noise and a non-zero mean, shape (n, d)."""
    W = rng.normal(size=(k, d))
    X = rng.standard_normal((n, k)) @ W
    X += rng.standard_normal((n, d)) * np.sqrt(rng.uniform(0.5, 2.0, d)) + rng.normal(scale=3.0, size=d)
    return X


def _sklearn_fit(X, k, method, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return FactorAnalysis(k, svd_method=method, random_state=0, **kw).fit(X)


def _our_run(X, k, n_clients=N_CLIENTS):
    """What the estimator does before its rounds: clients, public scaling, θ_0, round 0."""
    fed, _, _ = Federation.from_groups(X, partition_iid(X.shape[0], n_clients, 0))
    model = FactorAnalysisModel.from_federation(fed, n_factors=k)
    run = FedEM(model, step_size=1.0, alpha=1.0, v_init="zero").start(fed, model.init_theta(fed), 0)
    return run


def fa_per_iteration(X, k, reps):
    """Seconds per EM iteration: scikit-learn fits of PER_ITER_FITS iterations, our rounds."""
    run = _our_run(X, k)

    def ours():
        for _ in range(PER_ITER_FITS):
            run.step()
    fns = {"lapack": lambda: _sklearn_fit(X, k, "lapack", max_iter=PER_ITER_FITS, tol=0.0),
           "randomized": lambda: _sklearn_fit(X, k, "randomized", max_iter=PER_ITER_FITS, tol=0.0),
           "ours": ours}
    out = {}
    for name, samples in interleaved(fns, reps).items():
        out[name] = summary([(w / PER_ITER_FITS, c / PER_ITER_FITS) for w, c in samples])
    return out


def _timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def our_time_to(X, k, target):
    """Wall time (set-up included), rounds and the log-likelihood reached (the round's exact
    one, of its starting parameters) for our exact EM to reach ``target`` nats per row."""
    t0 = time.perf_counter()
    run = _our_run(X, k)
    for _ in range(MAX_ROUNDS):
        loglik = run.step()["loglik"]
        if loglik >= target:
            return time.perf_counter() - t0, int(run.state.round), float(loglik)
    return np.inf, MAX_ROUNDS, np.nan


def fa_convergence(X, k, n):
    """To convergence: scikit-learn (both SVD methods, default tol) and ours (several tol)."""
    rows = {}
    for method in ("lapack", "randomized"):
        fa, wall = _timed(lambda m=method: _sklearn_fit(X, k, m))
        rows[f"sklearn {method}"] = {"wall": wall, "iters": fa.n_iter_, "loglik": fa.score(X)}
    target = rows["sklearn lapack"]["loglik"] - TARGET_GAP
    for label, tol in [("ours, default tol (1e-5 per row)", 1e-5), ("ours, tol = 1e-2 / n (sklearn's total)", 1e-2 / n),
                       ("ours, tol = 1e-7 per row", 1e-7)]:
        est, wall = _timed(lambda t=tol: FederatedFactorAnalysis(k, tol=t, max_iter=1000, n_clients=N_CLIENTS).fit(X))
        rows[label] = {"wall": wall, "iters": est.n_iter_, "loglik": est.score(X)}
    wall, rounds, loglik = our_time_to(X, k, target)
    rows["ours, until sklearn lapack's loglik - 1e-6"] = {"wall": wall, "iters": rounds + 1, "loglik": loglik}
    return rows


def imputer_case(n, d, frac, rng):
    """FederatedImputer (Gaussian) against IterativeImputer: wall time and RMSE on the hidden cells."""
    from sklearn.experimental import enable_iterative_imputer  # noqa: F401
    from sklearn.impute import IterativeImputer

    A = rng.normal(size=(d, d))
    X = rng.multivariate_normal(rng.normal(size=d), A @ A.T / d + np.eye(d), size=n)
    hidden = rng.random(X.shape) < frac
    hidden[hidden.all(1), 0] = False
    Xm = np.where(hidden, np.nan, X)
    out = {}
    for name, make in [("IterativeImputer", lambda: IterativeImputer(max_iter=10, random_state=0)),
                       ("FederatedImputer", lambda: FederatedImputer(model="gaussian", n_clients=N_CLIENTS))]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            filled, wall = _timed(lambda m=make: m().fit_transform(Xm))
        out[name] = {"wall": wall, "rmse": float(np.sqrt(np.mean((filled[hidden] - X[hidden]) ** 2)))}
    return out
