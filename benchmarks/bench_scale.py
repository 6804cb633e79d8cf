"""Speed at every scale (issue 15): ours against scikit-learn in one run, as ratios.

Parts (``--parts``, comma-separated; all by default):

* ``floor``: the machine's dense-matmul GFLOP/s (1 and all BLAS threads), the compute
  floor against which the GMM round is placed;
* ``gmm``: one FedEM round (exact EM, 100 clients, K=5) against one scikit-learn EM
  iteration from the same parameters, n in {1e4, 1e5, 1e6} x d in {10, 50} x {full, diag};
* ``clients``: n=1e6, d=10, K=5, full over {10, 1e3, 1e5} clients, identity and
  ``dither:s=4`` with participation 0.5;
* ``setup``: the fixed set-up of ``FederatedGaussianMixture.fit`` at 1e6 x 10, in rounds;
* ``fa``: factor analysis (d=20, k=5) per iteration and to convergence against
  ``FactorAnalysis(svd_method="lapack" | "randomized")`` at 1e5 and 1e6 rows;
* ``imputer``: FederatedImputer against IterativeImputer;
* ``memory``: peak resident memory above the data, each case in its own process.

Timed contenders run interleaved (one of each per repetition) so that the load of a
shared machine hits all alike; medians are reported with [min-max]. Run:
``python benchmarks/bench_scale.py [--quick] [--parts gmm,fa] [--reps 3]``; a full run of
all parts (about 20 minutes on 2 cores) writes ``benchmarks/results/scale.md``.
Leave ``OPENBLAS_NUM_THREADS`` unset: the thread interplay is part of what is measured.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _scale_fa import fa_convergence, fa_data, fa_per_iteration, imputer_case  # noqa: E402
from _scale_gmm import clients_table, gmm_table, setup_case, warm_up  # noqa: E402
from _scale_report import (clients_lines, fa_lines, floor_lines, gmm_lines, header_lines, imputer_lines,  # noqa: E402
                           memory_lines, setup_lines)
from _scale_timing import load, matmul_gflops  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "scale.md"
PARTS = ("floor", "gmm", "clients", "setup", "fa", "imputer", "memory")
MEMORY_CASES = ("gmm-iter-sklearn", "gmm-iter-ours", "clients-1e5-ours", "clients-1e5-dither",
                "fa-lapack", "fa-ours")


def run_parts(parts, scale, reps):
    rng = np.random.default_rng(0)
    warm_up(rng)
    res = {"load_start": load()}
    if "floor" in parts:
        res["floor"] = {"1 thread": matmul_gflops(1), "all threads": matmul_gflops()}
    if "gmm" in parts:
        res["gmm"] = gmm_table([10_000 // scale, 100_000 // scale, 1_000_000 // scale], [10, 50], ["full", "diag"],
                               reps, rng)
    if "clients" in parts:
        res["clients"] = clients_table(1_000_000 // scale, [10, 1000 // scale, 100_000 // scale], reps, rng)
    if "setup" in parts:
        res["setup"] = setup_case(1_000_000 // scale, 10, 100, rng)
    if "fa" in parts:
        res["fa"] = {}
        for n in (100_000 // scale, 1_000_000 // scale):
            X = fa_data(n, 20, 5, rng)
            res["fa"][n] = {"per_iter": fa_per_iteration(X, 5, reps), "converge": fa_convergence(X, 5, n)}
    if "imputer" in parts:
        res["imputer"] = imputer_case(100_000 // scale, 10, 0.2, rng)
    if "memory" in parts:
        res["memory"] = {case: _memory_subprocess(case, scale) for case in MEMORY_CASES}
    res["load_end"] = load()
    return res


def _memory_subprocess(case, scale):
    done = subprocess.run([sys.executable, __file__, "--memory-case", case, "--scale", str(scale)],
                          capture_output=True, text=True, env=os.environ.copy(), timeout=1800)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(res, scale, reps):
    lines = header_lines(res, scale, reps)
    for key, fn in [("floor", floor_lines), ("gmm", gmm_lines), ("clients", clients_lines), ("setup", setup_lines),
                    ("fa", fa_lines), ("imputer", imputer_lines), ("memory", memory_lines)]:
        if key in res:
            lines += fn(res[key], res) + [""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x fewer rows (smoke run, not written)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions per timing")
    parser.add_argument("--out", default=None, help="write the markdown report here")
    parser.add_argument("--memory-case", choices=MEMORY_CASES, help=argparse.SUPPRESS)
    parser.add_argument("--scale", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_case:
        from _scale_memory import memory_case
        print(json.dumps(memory_case(args.memory_case, args.scale)))
        return
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    scale = 10 if args.quick else 1
    text = report(run_parts(parts, scale, args.reps), scale, args.reps)
    print(text)
    out = args.out or (RESULTS if not args.quick and set(parts) == set(PARTS) else None)
    if out:
        Path(out).parent.mkdir(exist_ok=True)
        Path(out).write_text(text)


if __name__ == "__main__":
    main()
