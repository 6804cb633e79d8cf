"""Peak-memory cases of ``bench_scale.py``, each run in its own process.

The peak resident set (``VmHWM``) is reset through ``/proc/self/clear_refs`` once the
data and the contender's state exist and its code is compiled, so the figure is the
memory one iteration / fit adds on top of the data it works on (Linux only).
"""
from __future__ import annotations

import numpy as np

from _scale_fa import _sklearn_fit, fa_data
from _scale_gmm import ours_round, sklearn_iteration, start_params, synthetic

KB_PER_MB = 1024


def _status_kb(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _contender(case, scale, rng):
    n = 1_000_000 // scale
    if case.startswith("fa-"):
        from fedemstats.estimators import FederatedFactorAnalysis
        X = fa_data(n, 20, 5, rng)
        if case == "fa-lapack":
            return X, lambda: _sklearn_fit(X, 5, "lapack", max_iter=10, tol=0.0)
        return X, lambda: FederatedFactorAnalysis(5, max_iter=10, tol=0.0).fit(X)
    X = synthetic(n, 10, 5, rng)
    theta = start_params(X, 5, "full", rng)
    clients = 100 if case.startswith("gmm") else 100_000 // scale
    offsets = np.linspace(0, n, clients + 1).astype(np.int64)
    if case == "gmm-iter-sklearn":
        return X, sklearn_iteration(X, theta)
    if case == "clients-1e5-dither":
        return X, ours_round(X, offsets, theta, "dither:s=4", 0.5)
    return X, ours_round(X, offsets, theta)


def memory_case(case, scale):
    """Peak resident MB that 2 iterations (GMM) or a 10-iteration fit (FA) add above the data."""
    X, fn = _contender(case, scale, np.random.default_rng(0))
    fn()  # compile / allocate the state once
    base = _status_kb("VmRSS")
    _reset_peak()
    fn()
    if not case.startswith("fa-"):
        fn()
    return {"peak_above_MB": (_status_kb("VmHWM") - base) / KB_PER_MB, "data_MB": X.nbytes / 2 ** 20}
