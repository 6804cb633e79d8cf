"""Timing of one GMM client_stats pass vs one scikit-learn EM iteration (SPEC §11).

1,000,000 x 10, K=5, full covariances, 100 clients. Run:
``NUMBA_CACHE_DIR=.venv/numba_cache .venv/bin/python benchmarks/_gmm_pass_timing.py``.
"""
import time

import numpy as np
from sklearn.mixture import GaussianMixture

from fedemstats.federation import Federation
from fedemstats.models.gmm import GaussianMixtureModel, make_params

N_ROWS, N_FEATURES, N_COMPONENTS, N_CLIENTS, REPEATS = 1_000_000, 10, 5, 100, 3
#: enough rows for the parallel kernel (gmm.py chooses it by the work of the pass)
WARMUP_ROWS = 50_000


def _best(fn):
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=5, size=(N_COMPONENTS, N_FEATURES))
    X = centers[rng.integers(N_COMPONENTS, size=N_ROWS)] + rng.normal(size=(N_ROWS, N_FEATURES))
    gm = GaussianMixture(N_COMPONENTS, max_iter=1, random_state=0).fit(X[:20000])
    theta = make_params(gm.weights_, gm.means_, precisions_cholesky=gm.precisions_cholesky_)
    offsets = np.linspace(0, N_ROWS, N_CLIENTS + 1).astype(np.int64)
    model = GaussianMixtureModel(N_COMPONENTS, N_FEATURES, shift=X[:1000].mean(0))
    t0 = time.perf_counter()
    model.client_stats(Federation(X[:1000], [0, 1000]), theta)  # the serial kernel
    model.client_stats(Federation(X[:WARMUP_ROWS], [0, WARMUP_ROWS]), theta)  # the parallel one
    results = {"first calls (compile or cache load) s": time.perf_counter() - t0}
    for label, fed in [("100 clients", Federation(X, offsets)),
                       ("1 client", Federation(X, [0, N_ROWS]))]:
        results[f"client_stats {label} s"] = _best(lambda: model.client_stats(fed, theta))
    stats = fed.weights @ model.client_stats(fed, theta)[0]
    results["t_map alone s"] = _best(lambda: model.t_map(stats))
    def sk_iter():
        _, log_resp = gm._e_step(X)
        gm._m_step(X, log_resp)
    results["sklearn e_step+m_step s"] = _best(sk_iter)
    results["sklearn e_step s"] = _best(lambda: gm._e_step(X))
    return results


if __name__ == "__main__":
    for key, value in main().items():
        print(f"{key:40s} {value:.3f}")
