"""The ``fedemstats`` command line: ``fit``, ``demo`` (and subcommands added by extensions)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import pandas as pd

__all__ = ["main", "build_parser"]


def _participation(text):
    """'0.5' -> Bernoulli(0.5), '5' -> FixedSize(5), '1.0' -> everyone."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def build_parser():
    parser = argparse.ArgumentParser(prog="fedemstats", description="Federated EM for latent-variable models.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="progress bar (-v), logs (-vv)")
    sub = parser.add_subparsers(dest="command", required=True)

    fit = sub.add_parser("fit", help="fit a model on a CSV whose rows belong to clients")
    fit.add_argument("model", choices=["gmm"], help="model to fit")
    fit.add_argument("data", help="CSV file with a header row")
    fit.add_argument("--client-column", required=True, help="column naming the client of each row")
    fit.add_argument("--n-components", type=int, default=1)
    fit.add_argument("--covariance-type", default="full", choices=["full", "tied", "diag", "spherical"])
    fit.add_argument("--compressor", default="identity", help="e.g. identity, dither:s=4, blockp:p=2, randk:k=10")
    fit.add_argument("--participation", type=_participation, default=1.0,
                     help="1.0 everyone; p in (0,1) Bernoulli(p); integer k: k clients per round")
    fit.add_argument("--step-size", default="auto", help="float or 'auto'")
    fit.add_argument("--rounds", type=int, default=100, help="FedEM rounds after the initial one")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--out", required=True, help="output JSON with parameters and history")

    demo = sub.add_parser("demo", help="compare EM, FedEM and naive compressed EM on embedded data")
    demo.add_argument("--out", default="demo_output", help="folder for the table and PNG")
    demo.add_argument("--rounds", type=int, default=None)
    _add_impute_parser(sub)
    return parser


def _cmd_fit(args):
    from .estimators.mixture import FederatedGaussianMixture

    frame = pd.read_csv(args.data)
    if args.client_column not in frame.columns:
        raise SystemExit(f"error: column {args.client_column!r} not in {args.data}; "
                         f"columns are {list(frame.columns)}")
    groups = frame.pop(args.client_column).to_numpy()
    step = args.step_size if args.step_size == "auto" else float(args.step_size)
    est = FederatedGaussianMixture(
        n_components=args.n_components, covariance_type=args.covariance_type, compressor=args.compressor,
        participation=args.participation, step_size=step, max_iter=args.rounds + 1, tol=0.0,
        random_state=args.seed, verbose=args.verbose)
    start = time.perf_counter()
    est.fit(frame, groups=groups)
    payload = {
        "model": "gmm", "features": list(frame.columns), "n_clients": int(len(est.client_labels_)),
        "compressor": args.compressor, "participation": args.participation,
        "weights": est.weights_.tolist(), "means": est.means_.tolist(),
        "covariances": est.covariances_.tolist(), "covariance_type": args.covariance_type,
        "n_iter": est.n_iter_, "seconds": time.perf_counter() - start,
        "history": json.loads(est.history_.to_json(orient="records")),
    }
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1)
    last = est.history_.iloc[-1]
    print(f"fitted {args.n_components}-component GMM on {len(frame)} rows from "
          f"{payload['n_clients']} clients in {payload['seconds']:.2f} s; "
          f"loglik {last['loglik']:.4f}; {int(last['cumulative_bits'])} bits sent; wrote {args.out}")
    return 0


def _cmd_demo(args):
    from ._demo import DEMO_ROUNDS, run_demo

    start = time.perf_counter()
    table, png = run_demo(args.out, rounds=args.rounds or DEMO_ROUNDS)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.4g}".format):
        print(table.to_string())
    print(f"\nwrote {png} and the table as CSV in {time.perf_counter() - start:.1f} s")
    return 0


def _add_impute_parser(sub):
    imp = sub.add_parser("impute", help="fill missing values of a CSV whose rows belong to clients")
    imp.add_argument("model", choices=["gaussian", "gmm", "poisson"])
    imp.add_argument("data", help="CSV file with a header row; empty cells are missing")
    imp.add_argument("--client-column", required=True, help="column naming the client of each row")
    imp.add_argument("--n-components", type=int, default=3, help="mixture components (gmm, poisson)")
    imp.add_argument("--compressor", default="identity", help="e.g. identity, dither:s=4")
    imp.add_argument("--participation", type=_participation, default=1.0)
    imp.add_argument("--step-size", default="auto", help="float or 'auto'")
    imp.add_argument("--rounds", type=int, default=100, help="maximum FedEM rounds")
    imp.add_argument("--seed", type=int, default=0)
    imp.add_argument("--out", required=True, help="output CSV (same columns, missing cells filled)")


def _cmd_impute(args):
    from .estimators.impute import FederatedImputer

    frame = pd.read_csv(args.data)
    if args.client_column not in frame.columns:
        raise SystemExit(f"error: column {args.client_column!r} not in {args.data}")
    groups = frame.pop(args.client_column).to_numpy()
    step = args.step_size if args.step_size == "auto" else float(args.step_size)
    imp = FederatedImputer(args.model, n_components=args.n_components, compressor=args.compressor,
                           participation=args.participation, step_size=step, max_iter=args.rounds + 1,
                           random_state=args.seed, verbose=args.verbose).set_output(transform="pandas")
    filled = imp.fit(frame, groups=groups).transform(frame)
    filled.insert(0, args.client_column, groups)
    filled.to_csv(args.out, index=False)
    print(f"imputed {int(frame.isna().to_numpy().sum())} cells of {len(frame)} rows from "
          f"{len(imp.client_labels_)} clients; {int(imp.history_['cumulative_bits'].iloc[-1])} bits "
          f"sent; wrote {args.out}")
    return 0


COMMANDS = {"fit": _cmd_fit, "demo": _cmd_demo, "impute": _cmd_impute}


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose >= 2 else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return COMMANDS[args.command](args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
