"""Timing tools of ``bench_scale.py``: interleaved repetitions, spread, the machine's
dense-matmul rate and the GMM round's flop count (the compute floor)."""
from __future__ import annotations

import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

#: Square size of the dense product that measures the machine's GFLOP/s.
FLOOR_MATMUL_N = 2000


#: Pause before each timed sample: the previous contender's idle BLAS / OpenMP threads
#: spin for up to ~0.1 s after their last call and would slow the next one down.
SETTLE_S = 0.3
#: Consecutive iterations (rounds) per timed sample: a fit runs them back to back, so the
#: interplay of one round's server products with the next round's kernel is included.
ITERATIONS_PER_SAMPLE = 3


def interleaved(fns: dict, reps: int, per_sample: int = 1) -> dict:
    """Run each callable ``per_sample`` times in a row per repetition, contenders in turn,
    so that the machine's load hits every contender alike.

    Returns
    -------
    dict of name -> list of (wall s, cpu s of this process) per call (sample / per_sample)
    """
    out = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            time.sleep(SETTLE_S)
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(per_sample):
                fn()
            out[name].append(((time.perf_counter() - t0) / per_sample, (time.process_time() - c0) / per_sample))
    return out


def summary(samples) -> dict:
    """Median, min and max wall time and median cpu / wall of ``[(wall, cpu), ...]``."""
    wall = np.array([w for w, _ in samples])
    cpu = np.array([c for _, c in samples])
    return {"med": float(np.median(wall)), "min": float(wall.min()), "max": float(wall.max()),
            "cpu_wall": float(np.median(cpu / wall))}


def spread(s) -> str:
    """``median [min-max]`` in seconds."""
    return f"{s['med']:.3g} [{s['min']:.3g}-{s['max']:.3g}]"


def matmul_gflops(threads=None, n=FLOOR_MATMUL_N, reps=5) -> float:
    """Best dense float64 matmul rate in GFLOP/s (2 n³ flops) with ``threads`` BLAS threads."""
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    with threadpool_limits(threads or os.cpu_count(), user_api="blas"):
        a @ b
        best = min(_timed(lambda: a @ b) for _ in range(reps))
    return 2.0 * n ** 3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def gmm_round_flops(n, d, K, ctype) -> float:
    """Floating-point operations of one GMM E-step + statistics pass as our kernel does it.

    Per row and component: ``d`` subtractions, the triangular product ``(x − μ) U``
    (``d (d + 1) / 2`` multiply-adds) or the diagonal scaling (``d``), the squared norm
    (``2 d``), one exp and normalisation (counted as 4), ``r x`` (``2 d``) and the
    weighted upper triangle of ``x xᵀ`` (``d (d + 1)`` flops; tied: once per row,
    unweighted; diag: ``2 d``; spherical: ``2 d``). The M-step (O(K d³)) is negligible.
    """
    if ctype in ("full", "tied"):
        logp = d + d * (d + 1) + 2 * d
    else:
        logp = 3 * d
    second = {"full": d * (d + 1), "tied": 0, "diag": 2 * d, "spherical": 2 * d}[ctype]
    per_row = K * (logp + 4 + 2 * d + second) + (d * (d + 1) if ctype == "tied" else 0)
    return float(n) * per_row


def load() -> str:
    """The 1-minute load average, for the report."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:  # pragma: no cover - not on every platform
        return "n/a"
