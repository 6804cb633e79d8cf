"""Markdown tables of ``bench_scale.py``."""
from __future__ import annotations

import os
import platform

from threadpoolctl import threadpool_info

from _scale_timing import spread


def header_lines(res, scale, reps):
    blas = ", ".join(f"{i['internal_api']} {i['num_threads']} thr" for i in threadpool_info())
    import numba
    return ["# bench_scale" + (" (--quick: 10x fewer rows)" if scale > 1 else ""), "",
            f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}); numba "
            f"{numba.get_num_threads()} threads; BLAS: {blas}; OPENBLAS_NUM_THREADS="
            f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}. Load average (1 min) {res['load_start']} at the "
            f"start, {res['load_end']} at the end. Times: median [min-max] of {reps} interleaved repetitions.", ""]


def floor_lines(floor, res):
    return ["## Compute floor: dense float64 matmul (2000 x 2000)", "",
            "| BLAS threads | GFLOP/s |", "|---|---:|",
            f"| 1 | {floor['1 thread']:.1f} |", f"| all | {floor['all threads']:.1f} |"]


def gmm_lines(rows, res):
    gflops = res.get("floor", {}).get("all threads")
    out = ["## GMM: one FedEM round (exact EM, 100 clients, K=5) vs one scikit-learn EM iteration", "",
           "| n | d | cov | sklearn s/iter | ours s/round | ratio | ours cpu/wall | GFLOP/round | x floor |",
           "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        floor = f"{r['ours']['med'] / (r['flops'] / 1e9 / gflops):.1f}" if gflops else "n/a"
        out.append(f"| {r['n']:.0e} | {r['d']} | {r['cov']} | {spread(r['sklearn'])} | {spread(r['ours'])} | "
                   f"{r['ratio']:.2f} | {r['ours']['cpu_wall']:.2f} | {r['flops'] / 1e9:.2f} | {floor} |")
    out += ["", "x floor = our round / (its flops / the all-threads matmul rate): how far the round is from "
                "running its arithmetic at dense-matmul speed."]
    return out


def clients_lines(rows, res):
    out = ["## Clients at n=1e6, d=10, K=5, full (many small clients: today's code)", "",
           "| clients | sklearn s/iter | identity s/round | ratio | dither:s=4, part. 0.5 s/round | ratio |",
           "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['clients']} | {spread(r['sklearn'])} | {spread(r['identity'])} | {r['ratio_identity']:.2f} "
                   f"| {spread(r['dither'])} | {r['ratio_dither']:.2f} |")
    return out


def setup_lines(s, res):
    out = [f"## Set-up of FederatedGaussianMixture.fit at {s['n']:.0e} x {s['d']}, {s['clients']} clients", "",
           f"fit(max_iter=1) {spread(s['fit_max_iter_1'])} s, one round {spread(s['round'])} s: set-up "
           f"{s['setup']:.3f} s = **{s['setup_in_rounds']:.1f} rounds** (target <= 2).", "",
           "| stage | s |", "|---|---:|"]
    out += [f"| {k} | {v:.3f} |" for k, v in s["breakdown"].items()]
    return out


def fa_lines(fa, res):
    out = ["## Factor analysis, d=20, k=5 (10 clients)", "", "Per iteration (s):", "",
           "| n | lapack | randomized | ours | ours / lapack | ours / randomized |", "|---:|---:|---:|---:|---:|---:|"]
    for n, r in fa.items():
        p = r["per_iter"]
        out.append(f"| {n:.0e} | {spread(p['lapack'])} | {spread(p['randomized'])} | {spread(p['ours'])} | "
                   f"{p['ours']['med'] / p['lapack']['med']:.3f} | {p['ours']['med'] / p['randomized']['med']:.3f} |")
    out += ["", "To convergence (one run each; wall includes every set-up step; loglik = mean per row "
                "of the final parameters on all rows):", "",
            "| n | run | wall s | iterations | final loglik / row | gap to lapack |", "|---:|---|---:|---:|---:|---:|"]
    for n, r in fa.items():
        ref = r["converge"]["sklearn lapack"]["loglik"]
        for label, c in r["converge"].items():
            gap = c["loglik"] - ref
            out.append(f"| {n:.0e} | {label} | {c['wall']:.2f} | {c['iters']} | {c['loglik']:.8f} | {gap:+.2e} |")
    return out


def imputer_lines(imp, res):
    out = ["## Imputer: 1e5 x 10, 20% missing completely at random", "",
           "| imputer | wall s | RMSE on hidden cells |", "|---|---:|---:|"]
    out += [f"| {k} | {v['wall']:.2f} | {v['rmse']:.4f} |" for k, v in imp.items()]
    ratio = imp["FederatedImputer"]["wall"] / imp["IterativeImputer"]["wall"]
    return out + ["", f"ours / IterativeImputer = {ratio:.2f}"]


def memory_lines(mem, res):
    out = ["## Peak memory above the data (own process each; VmHWM reset once the state exists)", "",
           "| case | data MB | peak above data MB |", "|---|---:|---:|"]
    for case, m in mem.items():
        if "error" in m:
            out.append(f"| {case} | - | error: {m['error']} |")
        else:
            out.append(f"| {case} | {m['data_MB']:.0f} | {m['peak_above_MB']:.0f} |")
    return out + ["", "gmm-iter: two iterations / rounds at 1e6 x 10, 100 clients; clients-1e5: two rounds over "
                      "100,000 clients (compare with gmm-iter-sklearn); fa: a 10-iteration fit at 1e6 x 20."]
