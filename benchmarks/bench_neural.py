"""Neural-bridge benchmark on MNIST-5k (SPEC §8; papers 001, 002, 004). Runs outside CI.

    NUMBA_CACHE_DIR=.venv/numba_cache .venv/bin/python benchmarks/bench_neural.py [--only rounds fedpm ...]

``--only`` regenerates the named tables and keeps the others from the results file.
Runs use JOBS worker processes (one BLAS thread each); on 2 cores the tables take about
2.5 (rounds), 20 (fedpm) and 30 (fedpm30) minutes.

Prints five tables and writes them to ``benchmarks/results/neural.md``:

1. FedAvg (E=5, B=10) vs FedSGD (E=1, B=inf): rounds to a test-accuracy target,
   iid and pathological non-iid (2 label shards per client), 100 clients, C=0.1;
   learning rate per method from equal-size grids, 2 seeds; u = E n_k / B sensitivity.
2. FedSparse (low/mid/high lambda0, paper 001 Table 1) vs FedAvg and FedDrop:
   accuracy, sparsity, total bits.
3. FedPM vs FedPM + entropy regulariser (paper 002): bits per parameter and accuracy,
   3 seeds; non-iid lambda chosen from a grid by a stated rule (``fedpm``: the benchmark's
   federation; ``fedpm30``: paper 002's 30-device non-iid setting, also with adam_eps 1e-5).
4. Speed: one local epoch of the 2NN (600 rows, B=10) in NumPy vs PyTorch, one thread each.

Everything is single-threaded (BLAS and torch), for fairness and because the
2-core machine is shared: multi-threaded OpenBLAS on 10 x 784 matrices is
dozens of times slower under contention.
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing
import pathlib
import time

import numpy as np
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

from fedemstats.datasets.mnist import load_mnist_5k
from fedemstats.neural import MLP, SGD, iid_clients, pathological_clients, run_hard_em
from fedemstats.neural.baselines import run_feddrop
from fedemstats.neural.fedpm import run_fedpm
from fedemstats.neural.fedsparse import run_fedsparse
from fedemstats.neural.optim import DEFAULT_EPS

LAYERS = (784, 200, 200, 10)
N_CLIENTS, C = 100, 0.1
TEST_ROWS = 1000
SEED = 0
# Rounds-to-target (table 1), two targets from the same runs. 90% is the
# brief's example; 93% is reached iid by FedAvg in ~35 rounds and by FedSGD
# (max 95.5% in 1000 rounds) in the pilot, so both are "reachable by both",
# and a higher target separates the methods more (paper 004 used 97% on full MNIST).
TARGETS = (0.90, 0.93)
# Lower targets, read off the same runs, for the speed-up-by-target table only
# (does any reachable target give 10x?); lr selection stays on 90%.
EXTRA_TARGETS = (0.80, 0.85, 0.88, 0.92)
ALL_TARGETS = TARGETS + EXTRA_TARGETS
CAPS = {"FedAvg": 300, "FedSGD": 1000}
# Learning-rate grids (table 1): same size (5) and the same factor-2 spacing for both
# methods, each centred on its earlier pilot optimum (FedAvg 0.2, FedSGD 0.5..1).
# Selection rule: per method, the rate with the fewest rounds to 90% on the iid
# split, averaged over ROUND_SEEDS (a run that misses the target counts as the cap).
# The non-iid rows re-use the two iid-selected rates (no separate non-iid tuning).
LR_GRID = {"FedSGD": (0.25, 0.5, 1.0, 2.0, 4.0), "FedAvg": (0.05, 0.1, 0.2, 0.4, 0.8)}
METHODS = {"FedSGD": dict(local_epochs=1, batch_size=None), "FedAvg": dict(local_epochs=5, batch_size=10),
           # u sensitivity only (not the benchmark's definition): B=10 with E=1 (u=4) and E=20 (u=80)
           "FedAvg E=1": dict(local_epochs=1, batch_size=10), "FedAvg E=20": dict(local_epochs=20, batch_size=10)}
U_LRS = (0.2, 0.4)  # the two best FedAvg rates of the grid; best of the two per E
ROUND_SEEDS = (0, 1)
SPARSE_ROUNDS = 100
LAMBDA0 = {"low": 1e-4, "mid": 1e-3, "high": 1e-2}
# FedPM (table 3): every lambda of a protocol runs the same rounds over PM_SEEDS
# (training seed: signed constants, theta_0, client sampling, mask sampling; the
# data split is fixed). Protocols:
# - "iid" and "non-iid": the benchmark's federation (100 clients, C = 0.1, n_k = 40,
#   B = 10; non-iid = McMahan's 2-shard split), 80 rounds;
# - "non-iid, 30 devices": paper 002's non-iid setting (section IV: 30 devices, each a
#   random subset of the classes; here the 2-shard split gives each 1-2 classes), all
#   devices every round, E = 3; B = 32 because paper 002's B = 128 would be one step
#   per epoch on ~133 rows; 60 rounds.
# iid keeps lambda = 3 from the iid pilot. Each non-iid lambda is chosen from its grid
# by the rule: the largest lambda whose seed-mean accuracy is within 2 points of
# lambda = 0 (the most compression that meets the accuracy constraint); if none is,
# the smallest grid value.
PM_SEEDS, PM_LR, PM_EPOCHS = (0, 1, 2), 0.1, 3
PM_PROTOCOLS = {
    "iid": dict(split="iid", client_fraction=C, batch_size=10, rounds=80, grid=(3.0,)),
    "non-iid": dict(split="non-iid", client_fraction=C, batch_size=10, rounds=80, grid=(0.5, 1.0, 1.5, 2.0)),
    "non-iid, 30 devices": dict(split="non-iid-30", client_fraction=1.0, batch_size=32, rounds=60, grid=(0.5, 1.0)),
    # Adam's epsilon at the scale of the score gradients (run_fedpm's adam_eps): lambda then
    # sets the regulariser's push on scores without data gradient (single-seed pilot, 60 rounds:
    # lambda = 1 -> -0.13 bpp, -2.0 pt; lambda = 2 -> -0.24 bpp, -4.2 pt; lambda = 0 +3.1 pt vs 1e-8).
    "non-iid, 30 devices, adam_eps 1e-5": dict(split="non-iid-30", client_fraction=1.0, batch_size=32, rounds=60,
                                               grid=(1.0, 2.0), adam_eps=1e-5),
}
PM_NOTES = {"fedpm": "The benchmark's federation; iid lambda = 3 from the iid pilot; non-iid = 2-shard split.",
            "fedpm30": "Paper 002's non-iid setting (section IV): 30 devices, all taking part every round, each "
                       "holding 2 label shards (1-2 classes); B = 32 because paper 002's B = 128 would be one "
                       "step per epoch on ~133 rows."}
# benchmark sections: which protocols each FedPM table runs
PM_TABLES = {"fedpm": ("iid", "non-iid"), "fedpm30": ("non-iid, 30 devices", "non-iid, 30 devices, adam_eps 1e-5")}
N_DEVICES_PM = 30
JOBS = 2
RESULTS = pathlib.Path(__file__).parent / "results" / "neural.md"


@functools.lru_cache(maxsize=1)
def _data():
    X, y = load_mnist_5k()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=TEST_ROWS, random_state=SEED, stratify=y)
    splits = {"iid": iid_clients(Xtr, ytr, N_CLIENTS, random_state=SEED),
              "non-iid": pathological_clients(Xtr, ytr, N_CLIENTS, random_state=SEED),
              "non-iid-30": pathological_clients(Xtr, ytr, N_DEVICES_PM, random_state=SEED)}
    return splits, (Xte, yte)


class _Reached(Exception):
    pass


def _rounds_job(split, method, lr, seed, cap):
    """First round at which the server model reaches each of TARGETS (None: not within ``cap``).

    Stops early once every target is reached, or when training has clearly
    diverged (accuracy <= 20% after 30 rounds: the run then counts as the cap)."""
    splits, (Xte, yte) = _data()
    model = MLP(LAYERS)
    first = {}

    def check(t, state):
        acc = np.mean(model.forward(state, Xte).argmax(axis=1) == yte)
        for target in ALL_TARGETS:
            if acc >= target and target not in first:
                first[target] = t
        if len(first) == len(ALL_TARGETS) or (t >= 30 and not acc > 0.2):
            raise _Reached(t)

    tic = time.perf_counter()
    with threadpool_limits(limits=1), np.errstate(all="ignore"):
        try:
            run_hard_em(model, splits[split], rounds=cap, client_fraction=C, track_train_loss=False,
                        random_state=seed, callback=check, lr=lr, **METHODS[method])
        except _Reached:
            pass
    return [first.get(target) for target in ALL_TARGETS], time.perf_counter() - tic


def _run_jobs(fn, jobs):
    """``{job: fn(*job)}``, spread over JOBS processes (one BLAS thread each)."""
    with multiprocessing.get_context("fork").Pool(JOBS) as pool:
        return dict(zip(jobs, pool.starmap(fn, jobs)))


def _fmt_rounds(values, cap):
    return " / ".join(str(v) if v else f">{cap}" for v in values)


def table_rounds():
    grid_jobs = [("iid", m, lr, seed, CAPS[m]) for m in LR_GRID for lr in LR_GRID[m] for seed in ROUND_SEEDS]
    grid = _run_jobs(_rounds_job, grid_jobs)

    def mean_rounds(job_prefix, i):
        vals = [grid[job_prefix + (seed, CAPS[job_prefix[1]]) ][0][i] for seed in ROUND_SEEDS]
        return float(np.mean([v if v else CAPS[job_prefix[1]] for v in vals]))

    best = {m: min(LR_GRID[m], key=lambda lr: (mean_rounds(("iid", m, lr), 0), mean_rounds(("iid", m, lr), 1)))
            for m in LR_GRID}
    grid_rows = ["| method | lr | rounds to 90% (seeds " + ", ".join(map(str, ROUND_SEEDS)) + ") | mean | "
                 "rounds to 93% | mean |", "|---|---|---|---|---|---|"]
    for (split, m, lr, seed, cap), _ in grid.items():
        if seed != ROUND_SEEDS[0]:
            continue
        r = [grid[(split, m, lr, s, cap)][0] for s in ROUND_SEEDS]
        mark = " (selected)" if lr == best[m] else ""
        grid_rows.append(f"| {m} | {lr:g}{mark} | {_fmt_rounds([x[0] for x in r], cap)} | "
                         f"{mean_rounds((split, m, lr), 0):.1f} | {_fmt_rounds([x[1] for x in r], cap)} | "
                         f"{mean_rounds((split, m, lr), 1):.1f} |")
    # non-iid: the iid-selected rates and, as a stability check, half of them (no separate non-iid tuning)
    nonlr = {m: (best[m], best[m] / 2) for m in LR_GRID}
    extra_jobs = [("non-iid", m, lr, seed, CAPS[m]) for m in LR_GRID for lr in nonlr[m] for seed in ROUND_SEEDS]
    extra_jobs += [("iid", m, lr, seed, CAPS["FedAvg"]) for m in ("FedAvg E=1", "FedAvg E=20")
                   for lr in U_LRS for seed in ROUND_SEEDS]
    noniid = _run_jobs(_rounds_job, extra_jobs)
    results = {**grid, **noniid}
    rows = ["| split | target | FedSGD (E=1, B=inf) | FedAvg (E=5, B=10) | FedAvg speed-up (ratio of means) |",
            "|---|---|---|---|---|"]
    settings = [("iid", "", {m: best[m] for m in LR_GRID})]
    settings += [("non-iid", f" (lr {nonlr['FedSGD'][j]:g} / {nonlr['FedAvg'][j]:g})",
                  {m: nonlr[m][j] for m in LR_GRID}) for j in (0, 1)]
    for split, label, lrs in settings:
        per = {m: [results[(split, m, lrs[m], s, CAPS[m])] for s in ROUND_SEEDS] for m in LR_GRID}
        for i, target in enumerate(TARGETS):
            cells, means = [], {}
            for m in ("FedSGD", "FedAvg"):
                vals = [r[0][i] for r in per[m]]
                means[m] = float(np.mean([v if v else CAPS[m] for v in vals]))
                cells.append(f"{means[m]:.1f} ({_fmt_rounds(vals, CAPS[m])})" if all(vals)
                             else f">= {means[m]:.0f} ({_fmt_rounds(vals, CAPS[m])})")
            ratio = f"{means['FedSGD'] / means['FedAvg']:.1f}x" if all(
                r[0][i] for m in per for r in per[m]) else "n/a"
            rows.append(f"| {split}{label} | {target:.0%} | {cells[0]} | {cells[1]} | {ratio} |")
        rows.append(f"| {split}{label} | wall time per run | {np.mean([r[1] for r in per['FedSGD']]):.0f} s | "
                    f"{np.mean([r[1] for r in per['FedAvg']]):.0f} s | |")
    sgd90 = float(np.mean([results[("iid", "FedSGD", best["FedSGD"], s, CAPS["FedSGD"])][0][0] or CAPS["FedSGD"]
                           for s in ROUND_SEEDS]))
    best90 = float(np.mean([results[("iid", "FedAvg", best["FedAvg"], s, CAPS["FedAvg"])][0][0] or CAPS["FedAvg"]
                            for s in ROUND_SEEDS]))
    by_target = ["| target | FedSGD (lr " + f"{best['FedSGD']:g}) | FedAvg (lr {best['FedAvg']:g}) | speed-up |",
                 "|---|---|---|---|"]
    for target in sorted(ALL_TARGETS):
        i = ALL_TARGETS.index(target)
        vals = {m: [results[("iid", m, best[m], s, CAPS[m])][0][i] for s in ROUND_SEEDS] for m in LR_GRID}
        means = {m: float(np.mean([v or CAPS[m] for v in vals[m]])) for m in LR_GRID}
        by_target.append(f"| {target:.0%} | {means['FedSGD']:.1f} ({_fmt_rounds(vals['FedSGD'], CAPS['FedSGD'])}) | "
                         f"{means['FedAvg']:.1f} ({_fmt_rounds(vals['FedAvg'], CAPS['FedAvg'])}) | "
                         f"{means['FedSGD'] / means['FedAvg']:.1f}x |")
    u_rows = ["| local work (B=10) | u = E n_k / B | lr | rounds to 90% (per seed) | mean | speed-up vs FedSGD |",
              "|---|---|---|---|---|---|"]
    for m, e in (("FedAvg E=1", 1), ("FedAvg", 5), ("FedAvg E=20", 20)):
        lrs = U_LRS if m != "FedAvg" else (best["FedAvg"],)
        mean90 = {lr: float(np.mean([results[("iid", m, lr, s, CAPS["FedAvg"])][0][0] or CAPS["FedAvg"]
                                     for s in ROUND_SEEDS])) for lr in lrs}
        lr = min(lrs, key=mean90.get)
        vals = [results[("iid", m, lr, s, CAPS["FedAvg"])][0][0] for s in ROUND_SEEDS]
        u_rows.append(f"| E={e} | {e * 40 // 10} | {lr:g} | {_fmt_rounds(vals, CAPS['FedAvg'])} | {mean90[lr]:.1f} | "
                      f"{sgd90 / mean90[lr]:.1f}x |")
    return ("### Rounds to a test accuracy (MNIST-5k, 2NN 200-200, K=100, C=0.1, n_k=40)\n\n"
            f"Learning rates chosen per method on the iid split from grids of the same size "
            f"(FedSGD {{{', '.join(f'{v:g}' for v in LR_GRID['FedSGD'])}}}, "
            f"FedAvg {{{', '.join(f'{v:g}' for v in LR_GRID['FedAvg'])}}}): the rate with the fewest "
            f"rounds to 90% averaged over seeds {', '.join(map(str, ROUND_SEEDS))} (ties: fewest to 93%); "
            f"a run that misses a target counts as the cap (FedSGD {CAPS['FedSGD']}, FedAvg {CAPS['FedAvg']} "
            f"rounds) and a diverged run (<= 20% after 30 rounds) is stopped. Selected: FedSGD lr {best['FedSGD']:g}, "
            f"FedAvg lr {best['FedAvg']:g}; non-iid re-uses them and, as a stability check, half of them. "
            f"Cells: mean rounds (per seed).\n\n"
            + "\n".join(rows) + f"\n\nTarget (iid, >= 10x fewer rounds to 90%): {sgd90 / best90:.1f}x -> "
            + ("met" if sgd90 / best90 >= 10 else "NOT met") + "\n\nFull iid grid (seed = model init and client sampling; the split is fixed):\n\n"
            + "\n".join(grid_rows)
            + "\n\nSpeed-up by target, iid, the selected rates (same runs; is there a reachable target with 10x?):\n\n"
            + "\n".join(by_target)
            + "\n\nDependence on u = E n_k / B, iid, 90% (sensitivity only: E=1 and E=20 are not the benchmark's "
              f"setting; lr best of {{{', '.join(f'{v:g}' for v in U_LRS)}}} per E; FedSGD = the selected "
              f"{sgd90:.1f} rounds):\n\n" + "\n".join(u_rows)
            + "\n\nPaper 004, Table 2, 2NN, 97% target, C=0.1 (full MNIST, 600 rows/client), iid speed-up of FedAvg "
              "over FedSGD by u = E n_k / B (local updates per round): u=10 (E=10, B=inf) 9.4x; u=12 (E=1, B=50) 10.2x; "
              "u=20 (E=20, B=inf) 16.0x; u=60 (E=1, B=10) 16.0x; u=120 32.6x; u=240 37.6x; u=600 (E=10, B=10) 43.2x; "
              "u=1200 45.9x (non-iid: 1.5x-3.7x). Here u = 5 x 40 / 10 = 20.")


def _tail(history, key, n=10):
    return float(np.mean(history[key][-n:]))


def table_sparse(splits, test):
    clients, model = splits["iid"], MLP(LAYERS)
    kw = dict(rounds=SPARSE_ROUNDS, client_fraction=C, local_epochs=5, batch_size=10, lr=0.05,
              eval_data=test, random_state=SEED)
    tic = time.perf_counter()
    avg = run_hard_em(model, clients, track_train_loss=False, **kw)
    ref_acc, ref_bits = _tail(avg.history, "test_accuracy"), avg.ledger.total
    rows = ["| method | accuracy (last 10) | sparsity | total Mbit | bits vs FedAvg | seconds |",
            "|---|---|---|---|---|---|",
            f"| FedAvg | {ref_acc:.4f} | 0 | {ref_bits / 1e6:.0f} | 1.00 | {time.perf_counter() - tic:.0f} |"]
    tic = time.perf_counter()
    drop = run_feddrop(model, clients, rate=0.25, **kw)
    rows.append(f"| FedDrop (rate 0.25) | {_tail(drop.history, 'test_accuracy'):.4f} | - | "
                f"{drop.ledger.total / 1e6:.0f} | {drop.ledger.total / ref_bits:.2f} | "
                f"{time.perf_counter() - tic:.0f} |")
    for name, lam in LAMBDA0.items():
        tic = time.perf_counter()
        res = run_fedsparse(model, clients, lambda0=lam, temperature=0.01, **kw)
        rows.append(f"| FedSparse {name} (lambda0={lam:g}) | {_tail(res.history, 'test_accuracy'):.4f} | "
                    f"{res.sparsity:.3f} | {res.ledger.total / 1e6:.0f} | {res.ledger.total / ref_bits:.2f} | "
                    f"{time.perf_counter() - tic:.0f} |")
    return (f"### FedSparse vs FedAvg, iid, {SPARSE_ROUNDS} rounds (E=5, B=10, lr 0.05, float32 wire)\n\n"
            + "\n".join(rows))


def _fedpm_job(protocol, reg, seed, reg_mode="adam"):
    splits, test = _data()
    cfg = PM_PROTOCOLS[protocol]
    tic = time.perf_counter()
    with threadpool_limits(limits=1):
        res = run_fedpm(MLP(LAYERS), splits[cfg["split"]], rounds=cfg["rounds"], client_fraction=cfg["client_fraction"],
                        local_epochs=PM_EPOCHS, batch_size=cfg["batch_size"], lr=PM_LR, reg=reg, reg_mode=reg_mode,
                        adam_eps=cfg.get("adam_eps", DEFAULT_EPS), eval_data=test, random_state=seed)
    h = res.history
    return {"acc": _tail(h, "test_accuracy"), "bpp_coded": _tail(h, "bpp_coded"),
            "bpp_entropy": _tail(h, "bpp_entropy"), "density": h["density"][-1],
            "acc_curve": list(h["test_accuracy"]), "seconds": time.perf_counter() - tic}


def _pm_stats(runs):
    acc = np.array([r["acc"] for r in runs])
    return {"acc": acc.mean(), "acc_sd": acc.std(ddof=1) if acc.size > 1 else 0.0, "acc_min": acc.min(),
            "acc_max": acc.max(), **{k: float(np.mean([r[k] for r in runs]))
                                     for k in ("bpp_coded", "bpp_entropy", "density", "seconds")}}


def select_lambda(stats, grid, tol=0.02):
    """The largest lambda of ``grid`` whose mean accuracy is within ``tol`` of lambda = 0; else min(grid)."""
    ok = [lam for lam in grid if stats[lam]["acc"] >= stats[0.0]["acc"] - tol]
    return max(ok) if ok else min(grid)


def _pm_verdict(protocol, stats, lam):
    d_acc, d_bpp = stats[lam]["acc"] - stats[0.0]["acc"], stats[lam]["bpp_coded"] - stats[0.0]["bpp_coded"]
    se = np.hypot(stats[lam]["acc_sd"], stats[0.0]["acc_sd"]) / np.sqrt(len(PM_SEEDS))
    met = d_bpp <= -0.2 and d_acc >= -0.02
    return (f"- {protocol}: lambda = {lam:g} gives {d_bpp:+.3f} bpp and {100 * d_acc:+.1f} +- {100 * se:.1f} pt "
            f"(standard error over seeds) -> {'met' if met else 'NOT met'}")


def table_fedpm(table="fedpm", reg_mode="adam"):
    protocols = {name: PM_PROTOCOLS[name] for name in PM_TABLES[table]}
    jobs = [(name, reg, seed, reg_mode) for name, cfg in protocols.items() for reg in (0.0,) + cfg["grid"]
            for seed in PM_SEEDS]
    # the longest jobs first keeps both workers busy
    out = _run_jobs(_fedpm_job, sorted(jobs, key=lambda j: -PM_PROTOCOLS[j[0]]["rounds"]
                                        / PM_PROTOCOLS[j[0]]["client_fraction"]))
    stats = {name: {reg: _pm_stats([out[(name, reg, s, reg_mode)] for s in PM_SEEDS]) for reg in (0.0,) + cfg["grid"]}
             for name, cfg in protocols.items()}
    chosen = {name: select_lambda(stats[name], cfg["grid"]) for name, cfg in protocols.items()}
    rows = ["| protocol | lambda | accuracy (mean +- sd over seeds; min-max) | d acc vs lambda=0 (pt) | "
            "bpp coded | d bpp vs lambda=0 | bpp entropy | density | seconds / run |",
            "|---|---|---|---|---|---|---|---|---|"]
    curve_rows = ["| protocol | lambda | accuracy per block of 10 rounds, first to last |", "|---|---|---|"]
    for name, cfg in protocols.items():
        base = stats[name][0.0]
        for reg in (0.0,) + cfg["grid"]:
            st = stats[name][reg]
            mark = " (selected)" if reg == chosen[name] else ""
            rows.append(f"| {name} | {reg:g}{mark} | {st['acc']:.4f} +- {st['acc_sd']:.4f} "
                        f"({st['acc_min']:.4f}-{st['acc_max']:.4f}) | {100 * (st['acc'] - base['acc']):+.1f} | "
                        f"{st['bpp_coded']:.3f} | {st['bpp_coded'] - base['bpp_coded']:+.3f} | "
                        f"{st['bpp_entropy']:.3f} | {st['density']:.3f} | {st['seconds']:.0f} |")
            curve = np.mean([out[(name, reg, s, reg_mode)]["acc_curve"] for s in PM_SEEDS], axis=0)
            curve_rows.append(f"| {name} | {reg:g} | " + " ".join(
                f"{curve[a:a + 10].mean():.3f}" for a in range(0, cfg["rounds"], 10)) + " |")
    settings = "; ".join(f"{name}: {cfg['rounds']} rounds, C = {cfg['client_fraction']:g}, B = {cfg['batch_size']}"
                         for name, cfg in protocols.items())
    title = "FedPM vs FedPM + regulariser" if table == "fedpm" else "FedPM, paper 002's non-iid setting"
    return (f"### {title} (E={PM_EPOCHS}, Adam lr {PM_LR:g} on scores, reg_mode={reg_mode})\n\n"
            f"{settings}. {PM_NOTES[table]} Accuracy of one sub-network sampled from theta each round, averaged "
            f"over the last 10 rounds, then mean +- sd (and range) over training seeds {', '.join(map(str, PM_SEEDS))}; "
            f"bpp and density are seed means. A protocol with several lambdas reports the largest whose seed-mean "
            f"accuracy is within 2 points of lambda = 0 (the same seeds serve for selection and report, so the "
            f"selected row is mildly optimistic), else the smallest.\n\n"
            + "\n".join(rows) + "\n\nTarget (bpp lower by >= 0.2 with accuracy within 2 points):\n\n"
            + "\n".join(_pm_verdict(name, stats[name], chosen[name]) for name in protocols)
            + "\n\nSeed-mean test accuracy per block of 10 rounds (convergence check):\n\n" + "\n".join(curve_rows))


def _numpy_epoch(model, w, X, y, rng):
    opt = SGD(lr=0.05)
    order = rng.permutation(len(y))
    for start in range(0, len(y), 10):
        idx = order[start:start + 10]
        _, grad = model.loss_and_grad(w, X[idx], y[idx])
        w = opt.step(w, grad)
    return w


def _torch_epoch_fn(X, y):
    import torch

    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(784, 200), torch.nn.ReLU(), torch.nn.Linear(200, 200),
                              torch.nn.ReLU(), torch.nn.Linear(200, 10)).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    loss_fn = torch.nn.CrossEntropyLoss()

    def epoch():
        order = torch.randperm(len(yt))
        for start in range(0, len(yt), 10):
            idx = order[start:start + 10]
            opt.zero_grad()
            loss_fn(net(Xt[idx]), yt[idx]).backward()
            opt.step()
    return epoch


def _best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return min(times), float(np.median(times))


def table_speed(splits, repeats=15):
    X = np.concatenate([c[0] for c in splits["iid"]])[:600]
    y = np.concatenate([c[1] for c in splits["iid"]])[:600].astype(np.int64)
    model, rng = MLP(LAYERS), np.random.default_rng(SEED)
    w = model.init_params(rng)
    ours = _best_of(lambda: _numpy_epoch(model, w, X, y, rng), repeats)
    rows = ["| implementation (float64, 1 thread) | best s | median s | ratio to torch (best) |", "|---|---|---|---|"]
    try:
        theirs = _best_of(_torch_epoch_fn(X, y), repeats)
    except ImportError:
        print("torch is not installed: skipping the PyTorch row (pip install torch==2.13.0)")
        theirs = None
    ratio = f"{ours[0] / theirs[0]:.2f}" if theirs else "n/a"
    rows.append(f"| fedemstats MLP + SGD | {ours[0]:.4f} | {ours[1]:.4f} | {ratio} |")
    if theirs:
        rows.append(f"| PyTorch nn.Sequential + optim.SGD | {theirs[0]:.4f} | {theirs[1]:.4f} | 1.00 |")
    return "### One local epoch, 2NN, 600 rows, B=10 (60 steps)\n\n" + "\n".join(rows)


SECTIONS = {"speed": "### One local epoch", "rounds": "### Rounds to", "sparse": "### FedSparse vs",
            "fedpm": "### FedPM vs", "fedpm30": "### FedPM, paper 002"}


def _merge(old, new):
    """Replace in the markdown ``old`` the sections regenerated in ``new`` ({name: text}); keep the others."""
    chunks = {}
    for chunk in ("\n" + old).split("\n### ")[1:]:
        text = "### " + chunk.strip()
        name = next((n for n, head in SECTIONS.items() if text.startswith(head)), None)
        if name:
            chunks[name] = text
    chunks.update(new)
    return "\n\n".join(["# Neural bridge benchmark (MNIST-5k: 4,000 train / 1,000 test rows)"]
                         + [chunks[n] for n in SECTIONS if n in chunks]) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(SECTIONS), nargs="*",
                        help="regenerate only these tables; the others are kept from the results file")
    parser.add_argument("--pm-reg-mode", choices=["adam", "decoupled"], default="adam", help="FedPM regulariser mode (the table replaces the FedPM section)")
    args = parser.parse_args()
    splits, test = _data()
    tables = {"speed": lambda: table_speed(splits), "rounds": table_rounds,
              "sparse": lambda: table_sparse(splits, test), "fedpm": lambda: table_fedpm("fedpm", args.pm_reg_mode),
              "fedpm30": lambda: table_fedpm("fedpm30", args.pm_reg_mode)}
    new = {}
    with threadpool_limits(limits=1):
        for name, make in tables.items():
            if args.only and name not in args.only:
                continue
            tic = time.perf_counter()
            new[name] = make()
            print(new[name] + f"\n\n({name}: {time.perf_counter() - tic:.0f} s)\n", flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = RESULTS.read_text() if RESULTS.exists() else ""
    RESULTS.write_text(_merge(old, new))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
