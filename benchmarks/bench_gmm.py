"""GMM FedEM benchmark: ours against scikit-learn in the same run (issue: core engine).

(a) 1,000,000 x 10, K=5, full covariances, 100 clients, identity, full participation:
    seconds per FedEM round against seconds per scikit-learn EM iteration from the
    same parameters (numba compile time excluded, reported separately);
(b) 10,000 clients of ~100 rows, d=5, K=3, dithering s=4, Bernoulli(0.1), 1,000
    rounds: wall time and peak memory;
(c) compressor throughput on a (1,000 x 10,000) float64 matrix.

Run: ``python benchmarks/bench_gmm.py [--quick]``; writes benchmarks/results/gmm.md.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from sklearn.mixture import GaussianMixture

from fedemstats.algorithms import FedEM
from fedemstats.federation import Federation
from fedemstats.models._summaries import global_mean
from fedemstats.models.gmm import GaussianMixtureModel, make_params

sys.path.insert(0, str(Path(__file__).parent))
from _scale_timing import interleaved, summary  # noqa: E402
from bench_compression import throughput_table  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "gmm.md"
TRACED_ROUNDS = 50
#: warm-up rows: enough work that the *parallel* kernel compiles before the timings
WARMUP_ROWS = 50_000


def synthetic(n, d, K, n_clients, rng, client_sizes=None):
    means = rng.normal(scale=4.0, size=(K, d))
    z = rng.integers(0, K, n)
    X = means[z] + rng.normal(size=(n, d))
    sizes = client_sizes if client_sizes is not None else np.full(n_clients, n // n_clients)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return X[: offsets[-1]], offsets, means


def start_params(X, K, rng):
    """Same initial parameters for both libraries: K random rows as means, pooled covariance."""
    means = X[rng.choice(X.shape[0], K, replace=False)]
    cov = np.cov(X[:20000].T) + 1e-6 * np.eye(X.shape[1])
    return np.full(K, 1.0 / K), means, np.repeat(np.linalg.inv(cov)[None], K, axis=0)


def bench_a(n=1_000_000, d=10, K=5, n_clients=100, reps=5, rng=None):
    """Rounds against iterations, interleaved (one of each per repetition); cpu / wall of ours."""
    X, offsets, _ = synthetic(n, d, K, n_clients, rng)
    w0, m0, p0 = start_params(X, K, rng)
    # scikit-learn: time _e_step + _m_step, i.e. exactly one EM iteration
    gm = GaussianMixture(K, covariance_type="full")
    gm.weights_, gm.means_ = w0, m0
    gm.precisions_cholesky_ = np.linalg.cholesky(p0)
    fed = Federation(X, offsets)
    model = GaussianMixtureModel(K, d, "full", 1e-6, shift=global_mean(fed))
    theta0 = make_params(w0, m0, precisions=p0, covariance_type="full")
    t0 = time.perf_counter()
    # compile (or load) both kernels: the serial one on few rows, the parallel one on
    # WARMUP_ROWS (enough work for PARALLEL_MIN_FLOPS; 1,000 rows would only warm the serial one)
    model.client_stats(Federation(X[:1000], [0, 500, 1000]), theta0)
    model.client_stats(Federation(X[:WARMUP_ROWS], [0, WARMUP_ROWS // 2, WARMUP_ROWS]), theta0)
    compile_s = time.perf_counter() - t0
    run = FedEM(model, step_size=1.0, alpha=1.0).start(fed, theta0, random_state=0)

    def sklearn_iteration():
        _, log_resp = gm._e_step(X)
        gm._m_step(X, log_resp)
    # interleaved with a settling pause, as bench_scale.py: scikit-learn's idle BLAS threads
    # spin for ~0.1 s after its iteration and took a core from a round timed right after it
    # (0.055 s with cpu/wall 1.79 against 0.037 s settled, on the same code)
    times = interleaved({"sklearn": sklearn_iteration, "ours": run.step}, reps)
    sk, ours = summary(times["sklearn"]), summary(times["ours"])
    return {"rows": n, "sklearn_s_per_iter": sk["med"], "fedem_s_per_round": ours["med"],
            "spread": f"[{ours['min']:.3f}-{ours['max']:.3f}] vs [{sk['min']:.3f}-{sk['max']:.3f}]",
            "compile_s": compile_s, "ratio": ours["med"] / sk["med"], "cpu_wall": ours["cpu_wall"],
            "load": os.getloadavg()[0]}


def bench_b(n_clients=10_000, rows=100, d=5, K=3, rounds=1000, rng=None):
    sizes = rng.integers(rows // 2, 3 * rows // 2 + 1, n_clients)
    X, offsets, means = synthetic(int(sizes.sum()), d, K, n_clients, rng, client_sizes=sizes)
    fed = Federation(X, offsets)
    model = GaussianMixtureModel(K, d, "full", 1e-6, shift=global_mean(fed))
    theta0 = make_params(np.full(K, 1 / K), means + rng.normal(size=means.shape),
                         covariances=np.repeat(np.eye(d)[None] * 4, K, axis=0), covariance_type="full")
    algo = FedEM(model, compressor="dither:s=4", participation=0.1, step_size="auto")
    algo.run(Federation(X[:200], [0, 100, 200]), theta0, 2, 0)  # warm the numba caches
    t0 = time.perf_counter()
    res = algo.run(fed, theta0, rounds, 0)
    wall = time.perf_counter() - t0
    # tracemalloc slows allocation-heavy Python 2-4x, so memory is traced in a second,
    # shorter run: the state (memories V_i, data) is allocated up front, so the peak
    # of TRACED_ROUNDS rounds is the peak of the whole run
    tracemalloc.start()
    algo.run(fed, theta0, min(rounds, TRACED_ROUNDS), 0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"wall_s": wall, "peak_traced_MB": peak / 2**20, "max_rss_MB": _max_rss_mb(),
            "final_loglik": float(res.history["loglik"].iloc[-1]), "Mbit": res.ledger.total / 1e6,
            "rows": int(X.shape[0]), "clients": n_clients, "rounds": rounds}


def _max_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(a, b, c):
    lines = ["# bench_gmm", "", "## (a) n x 10, K=5, full, 100 clients, identity, full participation", "",
             "Medians of interleaved repetitions; ours' cpu time / wall time shows whether the round used "
             f"both cores. Load average at the end: {a['load']:.2f}.", "",
             "| rows | scikit-learn s/iter | FedEM s/round | spread (ours vs sklearn) | ratio (ours / sklearn) "
             "| ours cpu/wall | numba compile s (excluded) |",
             "|---:|---:|---:|---|---:|---:|---:|",
             f"| {a['rows']} | {a['sklearn_s_per_iter']:.3f} | {a['fedem_s_per_round']:.3f} | {a['spread']} | "
             f"{a['ratio']:.3f} | {a['cpu_wall']:.2f} | {a['compile_s']:.2f} |",
             "", f"## (b) {b['clients']} clients, d=5, K=3, dither s=4, Bernoulli(0.1), {b['rounds']} rounds", "",
             "| rows | wall s | peak traced MB (Python + NumPy) | max RSS MB (whole process, incl. (a)) | total Mbit | final loglik |",
             "|---:|---:|---:|---:|---:|---:|",
             f"| {b['rows']} | {b['wall_s']:.1f} | {b['peak_traced_MB']:.0f} | {b['max_rss_MB']:.0f} | "
             f"{b['Mbit']:.1f} | {b['final_loglik']:.4f} |",
             "", "## (c) compressor throughput on a float64 matrix (1,000 x 10,000; 100 x 10,000 in --quick)", "",
             "| compressor | compress MB/s | decompress MB/s | bits / coordinate | omega |",
             "|---|---:|---:|---:|---:|"]
    for row in c:
        lines.append(f"| {row['compressor']} | {row['compress_MBps']:.0f} | {row['decompress_MBps']:.0f} | "
                     f"{row['bits_per_coord']:.3f} | {row['omega']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller problems (smoke run)")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    rng = np.random.default_rng(0)
    a = bench_a(n=1_000_000 // scale, rng=rng)
    b = bench_b(n_clients=10_000 // scale, rounds=1000 // scale, rng=rng)
    c = throughput_table(n_rows=1000 // scale, q=10_000, rng=np.random.default_rng(1))
    text = report(a, b, c)
    print(text)
    if not args.quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
