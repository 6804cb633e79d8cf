"""Table 1 of the neural-bridge benchmark: FedAvg vs FedSGD, rounds to a test accuracy (paper 004)."""
from __future__ import annotations

import time

import numpy as np
from _neural_setup import LAYERS, C, data, run_jobs
from threadpoolctl import threadpool_limits

from fedemstats.neural import MLP, run_hard_em

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


class _Reached(Exception):
    pass


def _cap(method):
    """Round cap of a method (the u-sensitivity FedAvg variants share FedAvg's)."""
    return CAPS.get(method, CAPS["FedAvg"])


def _rounds_job(split, method, lr, seed):
    """First round at which the server model reaches each of ALL_TARGETS (None: not within the cap).

    Stops early once every target is reached, or when training has clearly
    diverged (accuracy <= 20% after 30 rounds: the run then counts as the cap)."""
    splits, (Xte, yte) = data()
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
            run_hard_em(model, splits[split], rounds=_cap(method), client_fraction=C, track_train_loss=False,
                        random_state=seed, callback=check, lr=lr, **METHODS[method])
        except _Reached:
            pass
    return [first.get(target) for target in ALL_TARGETS], time.perf_counter() - tic


def _fmt_rounds(values, cap):
    return " / ".join(str(v) if v else f">{cap}" for v in values)


class _Runs:
    """Look-ups into ``{(split, method, lr, seed): (first rounds per target, seconds)}``."""

    def __init__(self, results):
        self.results = results

    def firsts(self, split, method, lr, target):
        """Per seed, the first round reaching ``target`` (None: missed)."""
        i = ALL_TARGETS.index(target)
        return [self.results[(split, method, lr, s)][0][i] for s in ROUND_SEEDS]

    def mean(self, split, method, lr, target):
        """Mean over seeds of the rounds to ``target``, a miss counting as the cap."""
        return float(np.mean([v or _cap(method) for v in self.firsts(split, method, lr, target)]))

    def seconds(self, split, method, lr):
        return float(np.mean([self.results[(split, method, lr, s)][1] for s in ROUND_SEEDS]))

    def cell(self, split, method, lr, target):
        vals, mean = self.firsts(split, method, lr, target), self.mean(split, method, lr, target)
        text = _fmt_rounds(vals, _cap(method))
        return f"{mean:.1f} ({text})" if all(vals) else f">= {mean:.0f} ({text})"


def table_rounds():
    first_target, second_target = TARGETS
    grid = _Runs(run_jobs(_rounds_job, [("iid", m, lr, seed) for m in LR_GRID for lr in LR_GRID[m]
                                         for seed in ROUND_SEEDS]))
    best = {m: min(LR_GRID[m], key=lambda lr: (grid.mean("iid", m, lr, first_target),
                                               grid.mean("iid", m, lr, second_target)))
            for m in LR_GRID}
    grid_rows = ["| method | lr | rounds to 90% (seeds " + ", ".join(map(str, ROUND_SEEDS)) + ") | mean | "
                 "rounds to 93% | mean |", "|---|---|---|---|---|---|"]
    for m in LR_GRID:
        for lr in LR_GRID[m]:
            mark = " (selected)" if lr == best[m] else ""
            grid_rows.append(" | ".join([f"| {m}", f"{lr:g}{mark}"] + [
                f"{_fmt_rounds(grid.firsts('iid', m, lr, t), _cap(m))} | {grid.mean('iid', m, lr, t):.1f}"
                for t in TARGETS]) + " |")
    # non-iid: the iid-selected rates and, as a stability check, half of them (no separate non-iid tuning)
    nonlr = {m: (best[m], best[m] / 2) for m in LR_GRID}
    extra_jobs = [("non-iid", m, lr, seed) for m in LR_GRID for lr in nonlr[m] for seed in ROUND_SEEDS]
    extra_jobs += [("iid", m, lr, seed) for m in ("FedAvg E=1", "FedAvg E=20") for lr in U_LRS for seed in ROUND_SEEDS]
    runs = _Runs({**grid.results, **run_jobs(_rounds_job, extra_jobs)})
    rows = ["| split | target | FedSGD (E=1, B=inf) | FedAvg (E=5, B=10) | FedAvg speed-up (ratio of means) |",
            "|---|---|---|---|---|"]
    settings = [("iid", "", best)]
    settings += [("non-iid", f" (lr {nonlr['FedSGD'][j]:g} / {nonlr['FedAvg'][j]:g})",
                  {m: nonlr[m][j] for m in LR_GRID}) for j in (0, 1)]
    for split, label, lrs in settings:
        for target in TARGETS:
            reached = all(all(runs.firsts(split, m, lrs[m], target)) for m in LR_GRID)
            ratio = (f"{runs.mean(split, 'FedSGD', lrs['FedSGD'], target) / runs.mean(split, 'FedAvg', lrs['FedAvg'], target):.1f}x"
                     if reached else "n/a")
            rows.append(f"| {split}{label} | {target:.0%} | {runs.cell(split, 'FedSGD', lrs['FedSGD'], target)} | "
                        f"{runs.cell(split, 'FedAvg', lrs['FedAvg'], target)} | {ratio} |")
        rows.append(f"| {split}{label} | wall time per run | {runs.seconds(split, 'FedSGD', lrs['FedSGD']):.0f} s | "
                    f"{runs.seconds(split, 'FedAvg', lrs['FedAvg']):.0f} s | |")
    sgd90 = runs.mean("iid", "FedSGD", best["FedSGD"], first_target)
    best90 = runs.mean("iid", "FedAvg", best["FedAvg"], first_target)
    by_target = ["| target | FedSGD (lr " + f"{best['FedSGD']:g}) | FedAvg (lr {best['FedAvg']:g}) | speed-up |",
                 "|---|---|---|---|"]
    for target in sorted(ALL_TARGETS):
        means = {m: runs.mean("iid", m, best[m], target) for m in LR_GRID}
        by_target.append(f"| {target:.0%} | {means['FedSGD']:.1f} "
                         f"({_fmt_rounds(runs.firsts('iid', 'FedSGD', best['FedSGD'], target), CAPS['FedSGD'])}) | "
                         f"{means['FedAvg']:.1f} "
                         f"({_fmt_rounds(runs.firsts('iid', 'FedAvg', best['FedAvg'], target), CAPS['FedAvg'])}) | "
                         f"{means['FedSGD'] / means['FedAvg']:.1f}x |")
    u_rows = ["| local work (B=10) | u = E n_k / B | lr | rounds to 90% (per seed) | mean | speed-up vs FedSGD |",
              "|---|---|---|---|---|---|"]
    for m, e in (("FedAvg E=1", 1), ("FedAvg", 5), ("FedAvg E=20", 20)):
        lrs = U_LRS if m != "FedAvg" else (best["FedAvg"],)
        lr = min(lrs, key=lambda v: runs.mean("iid", m, v, first_target))
        mean90 = runs.mean("iid", m, lr, first_target)
        u_rows.append(f"| E={e} | {e * 40 // 10} | {lr:g} | {_fmt_rounds(runs.firsts('iid', m, lr, first_target), _cap(m))} | "
                      f"{mean90:.1f} | {sgd90 / mean90:.1f}x |")
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

