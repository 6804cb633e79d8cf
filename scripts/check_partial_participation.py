"""Partial participation costs rounds in proportion to 1/p (paper 003, §2 and Appendix A).

Claim: with Bernoulli(p) participation, p in {1, 0.5, 0.1}, the rounds FedEM needs
to reach ||h||² <= ε grow about as 1/p: the fitted exponent a in
rounds ∝ p^{-a} lies in [0.7, 1.3]. Each client refreshes its memory V_i only when
it participates (once every 1/p rounds on average), so the usable step shrinks
like p. For each p we take the step of a power-of-two grid that reaches ε in the
fewest rounds (the theory gives γ_max only up to unknown constants), and the
median over seeds.
"""
from __future__ import annotations

import _common  # noqa: F401  (sets thread variables before numpy)
from _common import PAPER, PAPER_FEDEM, gmm_problem, run_main, save_figure, write_table

import numpy as np
import pandas as pd

from fedemstats.algorithms import FedEM
from fedemstats.diagnostics import rounds_to_reach

COMPRESSOR = "dither:s=4,per_block=true"
PROBABILITIES = (1.0, 0.5, 0.1)
EPS = 1e-8
DIRICHLET = 0.3
EXPONENT_BAND = (0.7, 1.3)
#: a run may take up to ROUND_BUDGET / (γ p) rounds (progress per round ∝ γ p)
ROUND_BUDGET = 40.0
SIZES = {True: dict(n_clients=50, rows_per_client=20, seeds=2, steps=(1.0, 0.5, 0.25, 0.125)),
         False: dict(n_clients=50, rows_per_client=40, seeds=5, steps=(1.0, 0.5, 0.25, 0.125, 0.0625))}


def _best_rounds(model, fed, theta0, p, steps, seeds):
    """(best step, median rounds to ε over seeds) over the step grid."""
    best = (np.nan, np.inf)
    for gamma in steps:
        algo = FedEM(model, compressor=COMPRESSOR, participation=p, step_size=gamma, track_h=True,
                     **PAPER_FEDEM)
        budget = int(np.ceil(ROUND_BUDGET / (gamma * p)))
        runs = [rounds_to_reach(algo, fed, theta0, EPS, budget, seed) for seed in seeds]
        # a seed that never reaches ε counts as infinitely slow
        med = float(np.median([np.inf if np.isnan(r) else r for r in runs]))
        if med < best[1]:
            best = (gamma, med)
    return best


def run(quick=False, seed=0, out=None):
    """Returns ``(table, ok, message)``; writes ``partial_participation.png`` and the table."""
    size = SIZES[quick]
    model, fed, theta0 = gmm_problem(size["n_clients"], size["rows_per_client"], DIRICHLET, seed)
    seeds = [seed + 1000 * j for j in range(size["seeds"])]
    rows = []
    for p in PROBABILITIES:
        gamma, rounds = _best_rounds(model, fed, theta0, p, size["steps"], seeds)
        rows.append({"p": p, "best_step": gamma, "median_rounds_to_eps": rounds,
                     "rounds_times_p": rounds * p})
    table = pd.DataFrame(rows)
    finite = np.isfinite(table["median_rounds_to_eps"])
    if finite.all():
        slope = np.polyfit(np.log(1.0 / table["p"]), np.log(table["median_rounds_to_eps"]), 1)[0]
    else:
        slope = np.nan
    low, high = EXPONENT_BAND
    ok = bool(low <= slope <= high)
    message = (f"fitted exponent a = {slope:.3f} in rounds ∝ p^(-a) (required in [{low}, {high}]); "
               f"ε = {EPS:g}, {len(seeds)} seed(s), {COMPRESSOR}.")
    if out is not None:
        write_table(table, out, "partial_participation")
        _figure(table, slope, out)
    return table, ok, message


def _figure(table, slope, out):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.8))
    inv_p = 1.0 / table["p"]
    ax.loglog(inv_p, table["median_rounds_to_eps"], "o-", label=f"FedEM (fit: a = {slope:.2f})")
    ax.loglog(inv_p, table["median_rounds_to_eps"].iloc[0] * inv_p, "k:", label="∝ 1/p")
    ax.set_xlabel("1 / p")
    ax.set_ylabel(f"rounds to ||h||² ≤ {EPS:g}")
    ax.legend()
    save_figure(fig, out, "partial_participation")


def main(argv=None):
    return run_main(run, __doc__, "check_partial_participation", argv)


if __name__ == "__main__":
    raise SystemExit(main())
