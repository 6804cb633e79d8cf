"""Table 3 of the neural-bridge benchmark (sections "fedpm" and "fedpm30"): FedPM vs FedPM + entropy regulariser (paper 002)."""
from __future__ import annotations

import time

import numpy as np
from _neural_setup import LAYERS, C, data, run_jobs, tail
from threadpoolctl import threadpool_limits

from fedemstats.neural import MLP
from fedemstats.neural.fedpm import run_fedpm
from fedemstats.neural.optim import DEFAULT_EPS

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


def _fedpm_job(protocol, reg, seed, reg_mode="adam"):
    splits, test = data()
    cfg = PM_PROTOCOLS[protocol]
    tic = time.perf_counter()
    with threadpool_limits(limits=1):
        res = run_fedpm(MLP(LAYERS), splits[cfg["split"]], rounds=cfg["rounds"], client_fraction=cfg["client_fraction"],
                        local_epochs=PM_EPOCHS, batch_size=cfg["batch_size"], lr=PM_LR, reg=reg, reg_mode=reg_mode,
                        adam_eps=cfg.get("adam_eps", DEFAULT_EPS), eval_data=test, random_state=seed)
    h = res.history
    return {"acc": tail(h, "test_accuracy"), "bpp_coded": tail(h, "bpp_coded"),
            "bpp_entropy": tail(h, "bpp_entropy"), "density": h["density"][-1],
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
    out = run_jobs(_fedpm_job, sorted(jobs, key=lambda j: -PM_PROTOCOLS[j[0]]["rounds"]
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

