"""Ugly-data benchmark: the estimators at their defaults on raw tables a new user would try.

``bench_real_data.py`` runs standardised tables through the model layer. This benchmark goes
through the public estimators on the tables as they come, and on the ways real tables are ugly:

* raw scales (diabetes, wine: columns from 0.1 to 1,000), scales of 1e6 and 1e-6 in one table,
  a constant column, two exact affine duplicates (breast cancer), zero-inflated integer pixels
  (digits), a table of 20 rows (linnerud);
* three groupings: iid over 10 clients, 5 clients sorted by the first column (heterogeneous),
  and clients of 3 rows (one client's leftover row joins its neighbour: a client of one row
  is refused, since its statistic is its row);
* Gaussian mixtures (full, diagonal: 3 components; tied, spherical: 2), factor analysis
  (2 factors), the Gaussian imputer at 20% MCAR.

For every problem, exact EM (``compressor="identity"``, ``max_iter=EXACT_MAX_ITER``: the fixed
point, not scikit-learn's 100-round budget) and FedEM at ``compressor="dither:s=4"`` with
participation 1 and 0.5, everything else at its default, start from the same θ_0
(``random_state=0``). A FedEM fit passes when it says ``converged_``, empties no mixture
component that exact EM keeps (weight below ``WEIGHT_COLLAPSE``, as ``bench_real_data``) and its
mean log-likelihood per row is at least exact EM's − LL_TOL (imputer: RMSE on the masked cells
within 1 + RMSE_RTOL of exact EM's). Any other converged fit is classified by one exact EM step
from FedEM's end: *stationary* (the step gains less than the estimator's ``tol``: another
stationary point, where exact EM's own rule would stop too) or *early* (it gains more:
``converged_`` stopped too soon). Bits: the ledger's total (uplink + downlink) over exact EM's.

Run: ``python benchmarks/bench_ugly.py [--quick] [--out PATH]``; a full run writes
benchmarks/results/ugly.md.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn import datasets

sys.path.insert(0, str(Path(__file__).parent))
from _real_runs import WEIGHT_COLLAPSE  # noqa: E402
from bench_real_data import machine_note  # noqa: E402
from fedemstats.diagnostics import em_step_gain  # noqa: E402
from fedemstats.estimators import FederatedFactorAnalysis, FederatedGaussianMixture, FederatedImputer  # noqa: E402
from fedemstats.federation import Federation  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "ugly.md"
#: nats per row (as bench_real_data) and the imputer's relative RMSE slack
LL_TOL, RMSE_RTOL = 1e-3, 0.01
#: exact EM's round budget: its fixed point, whatever scikit-learn's default of 100 would stop at
EXACT_MAX_ITER = 3000
#: rows per client of the "tiny" grouping, and the share of cells the imputer's rows lose
TINY_ROWS, MCAR = 3, 0.2
SEED = 0
COMPRESSOR = "dither:s=4"
PARTICIPATIONS = (1.0, 0.5)

logger = logging.getLogger("benchmarks.ugly")


def tables():
    """name -> raw table (n, d), in report order."""
    wine = datasets.load_wine().data
    cancer = datasets.load_breast_cancer().data[:, :10]
    linnerud = datasets.load_linnerud()
    return {
        "diabetes": datasets.load_diabetes(scaled=False).data,
        "wine": wine,
        "wine_1e6_1e-6": wine * np.array([1e6] * 6 + [1e-6] * 7),
        "wine_const": np.hstack([wine, np.full((wine.shape[0], 1), 7.0)]),
        "cancer_dup": np.hstack([cancer, 3.0 * cancer[:, :2] + 1.0]),
        "digits_zeros": datasets.load_digits().data[:, 20:30],
        "linnerud_20": np.hstack([linnerud.data, linnerud.target]),
    }


def groupings(X):
    """name -> client label of each row."""
    n, rng = X.shape[0], np.random.default_rng(SEED)
    tiny = np.arange(n) // TINY_ROWS
    if n % TINY_ROWS == 1:  # a client of one row is refused: its row joins the last full client
        tiny[-1] -= 1
    return {"iid10": rng.permutation(np.arange(n) % 10),
            "sorted5": (np.argsort(np.argsort(X[:, 0], kind="stable")) * 5) // n,
            "tiny": tiny}


MODELS = {
    "gmm-full": lambda **k: FederatedGaussianMixture(3, covariance_type="full", random_state=SEED, **k),
    "gmm-diag": lambda **k: FederatedGaussianMixture(3, covariance_type="diag", random_state=SEED, **k),
    "gmm-tied": lambda **k: FederatedGaussianMixture(2, covariance_type="tied", random_state=SEED, **k),
    "gmm-sph": lambda **k: FederatedGaussianMixture(2, covariance_type="spherical", random_state=SEED, **k),
    "fa": lambda **k: FederatedFactorAnalysis(2, random_state=SEED, **k),
    "imputer": lambda **k: FederatedImputer(random_state=SEED, **k),
}


def fit_gain(name, X, groups, est):
    """Mean log-likelihood per row one exact EM step adds to ``est``'s parameters (NaN: imputer)."""
    if name.startswith("gmm"):
        warm = dict(weights_init=est.weights_, means_init=est.means_, precisions_init=est.precisions_)
        step = MODELS[name](max_iter=1, **warm).fit(X, groups=groups)
        return float(step.score(X) - est.score(X))
    if name == "fa":
        return em_step_gain(est.model_, Federation.from_groups(X, groups)[0], est.theta_)
    return np.nan


def quality(name, est, X, Xm):
    """The judged value: mean log-likelihood per row, or the imputer's RMSE on the masked cells
    in units of each column's standard deviation."""
    if name != "imputer":
        return float(est.score(X))
    missing = np.isnan(Xm)
    z = (est.transform(Xm) - X) / np.where(X.std(0) > 0, X.std(0), 1.0)
    return float(np.sqrt(np.mean(z[missing] ** 2)))


def measure(tname, X, gname, groups, name):
    Xm = X
    if name == "imputer":
        Xm = X.copy()
        Xm[np.random.default_rng(SEED + 1).random(X.shape) < MCAR] = np.nan
    exact = MODELS[name](max_iter=EXACT_MAX_ITER).fit(Xm, groups=groups)
    ref = quality(name, exact, X, Xm)
    row = {"table": tname, "grouping": gname, "model": name, "exact": ref, "exact_rounds": exact.n_iter_,
           "exact_converged": exact.converged_}
    for p in PARTICIPATIONS:
        start = time.perf_counter()
        est = MODELS[name](compressor=COMPRESSOR, participation=p).fit(Xm, groups=groups)
        value = quality(name, est, X, Xm)
        gap = value / ref - 1.0 if name == "imputer" else value - ref
        within = gap <= RMSE_RTOL if name == "imputer" else gap >= -LL_TOL
        collapsed = (name.startswith("gmm") and float(np.min(est.weights_)) < WEIGHT_COLLAPSE
                     <= float(np.min(exact.weights_)))
        verdict = "pass" if within and est.converged_ and not collapsed else None
        gain = np.nan
        if verdict is None:
            gain = fit_gain(name, Xm, groups, est)
            verdict = ("unconverged" if not est.converged_ else "collapse" if collapsed
                       else "stationary" if gain < est.tol else "early")
        row[p] = {"gap": gap, "verdict": verdict, "rounds": est.n_iter_, "gain": gain,
                  "bits": est.ledger_.total / exact.ledger_.total, "seconds": time.perf_counter() - start}
    return row


def run_all(names=None):
    rows = []
    for tname, X in tables().items():
        if names and tname not in names:
            continue
        for gname, groups in groupings(X).items():
            for name in MODELS:
                row = measure(tname, X, gname, groups, name)
                logger.info("%-14s %-7s %-8s %s", tname, gname, name,
                            "  ".join(f"p={p:g}: {row[p]['verdict']} {row[p]['gap']:+.1e}" for p in PARTICIPATIONS))
                rows.append(row)
    return rows


def report(rows, total_s):
    lines = ["# bench_ugly", "",
             "The estimators at their defaults on raw, ugly tables: FedEM (`dither:s=4`, participation 1 and 0.5) "
             f"against exact EM (`compressor=\"identity\"`, `max_iter={EXACT_MAX_ITER}`) from the same start. "
             "Generated by `python benchmarks/bench_ugly.py`; tables, groupings and rules in its docstring.", "",
             f"- Pass: `converged_`, no emptied component, mean log-likelihood ≥ exact EM's − {LL_TOL:g} nats/row "
             f"(imputer: RMSE ≤ {1 + RMSE_RTOL:g} × exact EM's). A miss is *stationary* when one exact EM step from "
             "FedEM's end gains less than `tol` (another stationary point), *early* when it gains more.",
             "- gap: FedEM − exact EM in nats/row (imputer: RMSE ratio − 1); bits: FedEM's total over exact EM's.",
             f"- Machine: {machine_note()} Total wall time {total_s / 60:.1f} min.", "", "## Summary", "",
             "| participation | pass | stationary | early | collapse | unconverged | median bits ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for p in PARTICIPATIONS:
        verdicts = [r[p]["verdict"] for r in rows]
        counts = " | ".join(str(verdicts.count(v)) for v in ("stationary", "early", "collapse", "unconverged"))
        lines.append(f"| {p:g} | {verdicts.count('pass')} / {len(rows)} | {counts} | "
                     f"{np.median([r[p]['bits'] for r in rows]):.2f} |")
    head = " | ".join(f"p={p:g}: verdict, gap, rounds, bits" for p in PARTICIPATIONS)
    lines += ["", "## Rows", "", f"| table | grouping | model | exact EM: value, rounds | {head} |",
              "|---|---|---|---:|" + "---:|" * len(PARTICIPATIONS)]
    for r in rows:
        cells = []
        for p in PARTICIPATIONS:
            c = r[p]
            verdict = c["verdict"] if c["verdict"] == "pass" else f"**{c['verdict']}**"
            gain = "" if np.isnan(c["gain"]) else f" (EM step {c['gain']:.1e})"
            cells.append(f"{verdict}{gain}, {c['gap']:+.1e}, {c['rounds']}, {c['bits']:.2f}")
        star = "" if r["exact_converged"] else " (not converged)"
        lines.append(f"| {r['table']} | {r['grouping']} | {r['model']} | {r['exact']:.4f}, "
                     f"{r['exact_rounds']}{star} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two tables; writes no results file")
    parser.add_argument("--out", type=Path, default=None, help="results file (default for a full run: "
                        f"benchmarks/results/{RESULTS.name})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny grouping's k-means fallback warns on every fit
        rows = run_all(("wine", "linnerud_20") if args.quick else None)
    text = report(rows, time.perf_counter() - start)
    print(text)
    out = args.out or (None if args.quick else RESULTS)
    if out is not None:
        out.write_text(text)
        logger.info("wrote %s", out)


if __name__ == "__main__":
    main()
