"""Wall time of compressed fits alone and side by side: numba's pool on small kernel calls.

``fedemstats._threads.run`` runs a parallel kernel on the calling thread when its work is below
``SERIAL_BELOW`` elements. The reference is the same code with every kernel call on numba's
pool (``SERIAL_BELOW = 0``, the package before). Each fit runs in a fresh process, after a
warm-up fit (compilation untimed), once alone and once with a copy of itself in a second
process at the same time (two jobs on one machine; the table's "pair" is the slower of the two),
five times (REPEATS) with the policies interleaved; the table gives the medians, and ours / reference
as a ratio. Same seed, same fit: the kernels' results do not depend on the thread count, and
the runner checks that the fitted log-likelihoods agree.

Run: ``python benchmarks/bench_threads.py [--quick] [--out PATH]``; a full run writes
benchmarks/results/threads.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results" / "threads.md"
POLICIES = {"ours": None, "reference": 0}
#: measurements of each (problem, policy, alone / pair); the table gives their medians
REPEATS = 5


def _problem(name):
    """(estimator, X, groups) of a named problem."""
    from sklearn import datasets

    from fedemstats.estimators import FederatedGaussianMixture, FederatedImputer
    rng = np.random.default_rng(0)
    if name == "imputer-gmm wine, 10 clients":
        X = datasets.load_wine().data
        X = np.where(np.random.default_rng(1).random(X.shape) < 0.2, np.nan, X)
        return (FederatedImputer("gmm", n_components=3, compressor="dither:s=4", max_iter=60, tol=0, random_state=0),
                X, rng.permutation(np.arange(X.shape[0]) % 10))
    if name == "gmm-full diabetes, 20 clients":
        X = datasets.load_diabetes().data
        return (FederatedGaussianMixture(3, compressor="dither:s=4", max_iter=60, tol=0, random_state=0),
                X, rng.permutation(np.arange(X.shape[0]) % 20))
    if name == "gmm-full 200,000 rows, 50 clients":
        X = rng.normal(size=(200_000, 8)) + 3 * rng.normal(size=(4, 8))[rng.integers(4, size=200_000)]
        return (FederatedGaussianMixture(4, compressor="dither:s=4", max_iter=20, tol=0, random_state=0),
                X, rng.integers(50, size=X.shape[0]))
    raise ValueError(name)


PROBLEMS = ("imputer-gmm wine, 10 clients", "gmm-full diabetes, 20 clients", "gmm-full 200,000 rows, 50 clients")


def worker(name, serial_below):
    """Fit ``name`` once untimed and once timed; print {"wall": s, "ll": mean log-likelihood}."""
    from fedemstats import _threads
    if serial_below is not None:
        _threads.SERIAL_BELOW = serial_below
    warnings.simplefilter("ignore")
    est, X, groups = _problem(name)
    est.set_params(max_iter=3).fit(X, groups=groups)
    est, X, groups = _problem(name)
    t0 = time.perf_counter()
    est.fit(X, groups=groups)
    print(json.dumps({"wall": time.perf_counter() - t0, "ll": float(est.lower_bound_)}))


def _spawn(name, policy):
    arg = "none" if POLICIES[policy] is None else str(POLICIES[policy])
    return subprocess.Popen([sys.executable, __file__, "--worker", name, arg], stdout=subprocess.PIPE, text=True)


def _collect(procs):
    out = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode:
            raise RuntimeError(f"worker failed with code {p.returncode}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def measure(name):
    row, lls = {"problem": name}, []
    walls = {policy: ([], []) for policy in POLICIES}
    for _ in range(REPEATS):  # policies interleaved, so that a slow spell of the machine hits both
        for policy in POLICIES:
            alone = _collect([_spawn(name, policy)])
            pair = _collect([_spawn(name, policy), _spawn(name, policy)])
            walls[policy][0].append(alone[0]["wall"])
            walls[policy][1].append(max(r["wall"] for r in pair))
            lls += [r["ll"] for r in alone + pair]
    for policy, (alone, pair) in walls.items():
        row[policy] = (float(np.median(alone)), float(np.median(pair)))
    if not np.allclose(lls, lls[0], rtol=0, atol=1e-9):
        raise AssertionError(f"{name}: fits differ between policies: {lls}")
    return row


def report(rows):
    from bench_real_data import machine_note
    lines = ["# bench_threads", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"- Machine: {machine_note()}", "",
             "| problem | alone: ours s | reference s | ratio | pair: ours s | reference s | ratio |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        (oa, op), (ra, rp) = r["ours"], r["reference"]
        lines.append(f"| {r['problem']} | {oa:.2f} | {ra:.2f} | {oa / ra:.2f} | {op:.2f} | {rp:.2f} | {op / rp:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("PROBLEM", "SERIAL_BELOW"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="the first problem only; writes no results file")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.worker:
        name, value = args.worker
        return worker(name, None if value == "none" else int(value))
    sys.path.insert(0, str(Path(__file__).parent))
    rows = [measure(name) for name in (PROBLEMS[:1] if args.quick else PROBLEMS)]
    text = report(rows)
    print(text)
    out = args.out or (None if args.quick else RESULTS)
    if out is not None:
        out.write_text(text)


if __name__ == "__main__":
    main()
