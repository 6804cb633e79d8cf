"""The ``fedemstats`` command line: ``fit``, ``impute`` and ``demo``.

Contract (tested in ``tests/test_cli*.py``):

* every option, path and CSV is checked *before* any fit; a problem is printed as
  one ``error: ...`` line naming the option, path or column, never a traceback;
* exit status: 0 success, 1 a failure the command line did not cause (e.g. a full
  disk while writing), 2 a usage error (bad option, path or data, or a fit the
  estimator refuses), 130 interrupted (Ctrl-C);
* every output is written atomically (:mod:`fedemstats._io`): a failed or killed
  run leaves an existing output byte-identical and no partial file.

``--rounds`` counts FedEM rounds after the initial one (round 0: initial E- and
M-step). ``fit``/``impute`` accept 0 (initialisation only); the demo needs at
least 1, since it compares how methods converge.
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import re
import sys
import time
import traceback
import warnings

from ._cli_checks import (EXIT_FAILURE, EXIT_USAGE, MAX_ROUNDS, MAX_SEED, CLIError, check_against_data,
                          check_input_file, check_output_file, check_output_folder, integer, participation,
                          read_cells_as_text, read_client_csv, step_size)
from ._io import write_files_atomic

__all__ = ["main", "build_parser", "COMMANDS"]

#: exit status after Ctrl-C, as shells report a process ended by SIGINT
EXIT_INTERRUPTED = 130
FIT_ROUNDS = integer(0, MAX_ROUNDS, "FedEM rounds after the initial one; 0 = initialisation only")
DEMO_ROUNDS_TYPE = integer(1, MAX_ROUNDS, "the demo compares convergence, so at least one round")
SEED = integer(0, MAX_SEED)
COMPONENTS = integer(1, MAX_ROUNDS, "number of mixture components")


def _add_common_fit_options(parser, *, n_components: int, rounds_help: str) -> None:
    """Options shared by ``fit`` and ``impute`` (same names, types and ranges)."""
    parser.add_argument("--client-column", required=True, help="column naming the client of each row")
    parser.add_argument("--n-components", type=COMPONENTS, default=n_components,
                        help=f"mixture components (default {n_components})")
    parser.add_argument("--compressor", default="identity", help="e.g. identity, dither:s=4, blockp:p=2, randk:k=10")
    parser.add_argument("--participation", type=participation, default=1.0,
                        help="1.0 everyone; p in (0,1) Bernoulli(p); a whole number k: k clients per round")
    parser.add_argument("--step-size", type=step_size, default="auto", help="a positive number or 'auto'")
    parser.add_argument("--rounds", type=FIT_ROUNDS, default=100, help=rounds_help)
    parser.add_argument("--seed", type=SEED, default=0, help=f"random seed, 0 to {MAX_SEED}")


def build_parser():
    """The argument parser of ``fedemstats`` (its types validate every option value)."""
    parser = argparse.ArgumentParser(prog="fedemstats", description="Federated EM for latent-variable models.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="progress bar (-v), logs (-vv)")
    sub = parser.add_subparsers(dest="command", required=True)

    fit = sub.add_parser("fit", help="fit a model on a CSV whose rows belong to clients")
    fit.add_argument("model", choices=["gmm"], help="model to fit")
    fit.add_argument("data", help="CSV file with a header row")
    _add_common_fit_options(fit, n_components=1,
                            rounds_help="FedEM rounds after the initial one (default 100; 0 = initialisation only)")
    fit.add_argument("--covariance-type", default="full", choices=["full", "tied", "diag", "spherical"])
    fit.add_argument("--out", required=True, help="output JSON with parameters and history")

    imp = sub.add_parser("impute", help="fill missing values of a CSV whose rows belong to clients")
    imp.add_argument("model", choices=["gaussian", "gmm", "poisson"])
    imp.add_argument("data", help="CSV file with a header row; empty cells are missing")
    _add_common_fit_options(imp, n_components=3, rounds_help="maximum FedEM rounds (default 100)")
    imp.add_argument("--out", required=True,
                     help="output CSV: the input's columns and cells as written, each empty cell filled with its "
                          "conditional expectation (not rounded, also for poisson counts)")

    from ._demo import DEMO_ROUNDS
    demo = sub.add_parser("demo", help="compare EM, FedEM and naive compressed EM on embedded data")
    demo.add_argument("--out", default="demo_output", help="folder for the table (CSV) and the PNG")
    demo.add_argument("--rounds", type=DEMO_ROUNDS_TYPE, default=DEMO_ROUNDS,
                      help=f"rounds per method, at least 1 (default {DEMO_ROUNDS})")
    return parser


# --------------------------------------------------------------------- shared steps
def _check_compressor(spec: str) -> None:
    from .compression import make_compressor

    try:
        make_compressor(spec)
    except ValueError as exc:
        raise CLIError(f"--compressor {spec!r}: {exc}") from None


def _load(args, *, allow_missing: bool, uses_components: bool = True):
    """Every check of ``fit``/``impute`` before the estimator exists; return (out, features, groups)."""
    data = check_input_file(args.data)
    out = check_output_file(args.out)
    _check_compressor(args.compressor)
    features, groups = read_client_csv(data, args.client_column, allow_missing=allow_missing)
    check_against_data(args, len(features), len(set(groups.tolist())), repr(args.data),
                       uses_components=uses_components)
    if isinstance(args.participation, int) and args.participation == 1:
        _note("--participation 1 is one client per round; 1.0 is every client")
    _data_notes(features, groups, args.client_column)
    return out, features, groups


def _data_notes(features, groups, client_column) -> None:
    """Notes on data a user may not have meant: constant columns, client labels that differ only in
    spaces or case (they are different clients)."""
    constant = [c for c in features.columns if features[c].nunique(dropna=True) == 1]
    if constant:
        _note(f"column(s) {constant[:5]} are constant; the model gives them the variance floor reg_covar")
    labels = sorted({str(g) for g in groups})
    spelled = {}
    for label in labels:
        spelled.setdefault(" ".join(label.split()).lower(), []).append(label)
    alike = next((v for v in spelled.values() if len(v) > 1), None)
    if alike:
        _note(f"client labels {alike[:3]} of column {client_column!r} differ only in spaces or case; "
              "they are different clients")


def _note(message: str) -> None:
    """One ``note:`` line on stderr: something the user may not expect, not a failure."""
    print("note: " + " ".join(str(message).split()), file=sys.stderr)


def _clients(n: int) -> str:
    return f"{n} client" + ("" if n == 1 else "s")


def _history_notes(history) -> float:
    """A note when no client took part after round 0 (the output is then the initial model); return
    the last finite log-likelihood (a round without participants has none)."""
    active = history["n_active"].to_numpy()[1:]
    if active.size and not active.any():
        _note(f"no client took part in rounds 1-{active.size} (--participation too low for this many "
              "clients); the output is the initial model")
    finite = history["loglik"].dropna()
    return float(finite.iloc[-1]) if len(finite) else float("nan")


def _fit(estimator, features, groups, what: str):
    """``estimator.fit``; a ``ValueError`` (the estimator refusing the data) names the job and file, and
    a fit that runs out of rounds says so in one line (not a Python warning with its source line)."""
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        try:
            fitted = estimator.fit(features, groups=groups)
        except ValueError as exc:
            raise CLIError(f"cannot {what}: {_in_cli_terms(str(exc))}") from None
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            _note(f"the fit did not converge in {estimator.max_iter - 1} rounds; raise --rounds "
                  "(the output is the last round's model)")
        else:  # one line, not a Python warning with its source line
            _note(w.message)
    return fitted


#: the estimators name the columns of the frame they were given (``feature_names_in_``) as
#: "column(s) [...] of X", and count rows of X from 0
_OF_X = re.compile(r"(column\(s\) \[[^\]]*\]) of X\b")
_ROW_OF_X = re.compile(r"\brow (\d+):")


def _in_cli_terms(message: str) -> str:
    """An estimator's message in the command line's terms: no "X" (the columns are the CSV's,
    already named), data rows counted from 1, and the command for the estimator's argument."""
    message = _OF_X.sub(r"\1", message)
    message = _ROW_OF_X.sub(lambda m: f"data row {int(m.group(1)) + 1}:", message)
    return message.replace("model='gaussian'", "'fedemstats impute gaussian'")


def write_outputs(files) -> None:
    """Write ``{path: bytes}`` atomically; a failure is one error line, old outputs stay intact."""
    try:
        write_files_atomic(files)
    except OSError as exc:
        names = ", ".join(repr(str(p)) for p in files)
        raise CLIError(f"could not write {names}: {exc.strerror or exc}; existing files are unchanged",
                       EXIT_FAILURE) from None


# --------------------------------------------------------------------- commands
def _cmd_fit(args):
    out, frame, groups = _load(args, allow_missing=False)
    from .estimators import FederatedGaussianMixture  # after the checks: importing takes seconds

    est = FederatedGaussianMixture(
        n_components=args.n_components, covariance_type=args.covariance_type, compressor=args.compressor,
        participation=args.participation, step_size=args.step_size, max_iter=args.rounds + 1, tol=0.0,
        random_state=args.seed, verbose=args.verbose)
    start = time.perf_counter()
    _fit(est, frame, groups, f"fit gmm to {args.data!r}")
    payload = {
        "model": "gmm", "features": list(frame.columns), "n_clients": int(len(est.client_labels_)),
        "compressor": args.compressor, "participation": args.participation,
        "weights": est.weights_.tolist(), "means": est.means_.tolist(),
        "covariances": est.covariances_.tolist(), "covariance_type": args.covariance_type,
        "n_iter": est.n_iter_, "seconds": time.perf_counter() - start,
        "history": json.loads(est.history_.to_json(orient="records")),
    }
    try:  # strict JSON: a NaN parameter is an error, not an unreadable file
        text = json.dumps(payload, indent=1, allow_nan=False)
    except ValueError:
        raise CLIError(f"the fit of {args.data!r} produced non-finite parameters; nothing written "
                       "(try a smaller --step-size or another --seed)") from None
    write_outputs({out: text.encode("utf-8")})
    loglik = _history_notes(est.history_)
    print(f"fitted {args.n_components}-component GMM on {len(frame)} rows from "
          f"{_clients(payload['n_clients'])} in {payload['seconds']:.2f} s; "
          f"loglik {loglik:.4f}; {int(est.history_['cumulative_bits'].iloc[-1])} bits sent; wrote {args.out}")
    return 0


def _cmd_impute(args):
    out, frame, groups = _load(args, allow_missing=True, uses_components=args.model != "gaussian")
    from .estimators import FederatedImputer  # after the checks: importing takes seconds

    imp = FederatedImputer(args.model, n_components=args.n_components, compressor=args.compressor,
                           participation=args.participation, step_size=args.step_size, max_iter=args.rounds + 1,
                           random_state=args.seed, verbose=args.verbose).set_output(transform="pandas")
    filled = _fit(imp, frame, groups, f"impute {args.data!r} with the {args.model} model").transform(frame)
    _history_notes(imp.history_)
    # the file's own text, columns and order, with only the missing cells replaced
    cells = read_cells_as_text(args.data)
    missing = frame.isna()
    for col in frame.columns:
        rows = missing[col].to_numpy()
        if rows.any():
            cells.loc[rows, col] = [repr(float(v)) for v in filled[col].to_numpy()[rows]]
    buffer = io.StringIO()
    cells.to_csv(buffer, index=False)
    write_outputs({out: buffer.getvalue().encode("utf-8")})
    print(f"imputed {int(missing.to_numpy().sum())} cells of {len(frame)} rows from "
          f"{_clients(len(imp.client_labels_))}; {int(imp.history_['cumulative_bits'].iloc[-1])} bits "
          f"sent; wrote {args.out}")
    return 0


def _cmd_demo(args):
    import pandas as pd

    from ._demo import TARGET_GAP, run_demo

    out = check_output_folder(args.out)
    start = time.perf_counter()
    try:
        table, summary, png = run_demo(out, rounds=args.rounds, write=write_outputs)
    except OSError as exc:  # creating the folder (e.g. a race with another process)
        raise CLIError(f"--out {args.out!r}: {exc.strerror or exc}", EXIT_FAILURE) from None
    # the log-likelihoods differ in the fourth decimal and beyond: four significant digits showed one number
    formatters = {col: "{:.5f}".format for col in table.columns if col[0] == "loglik"}
    with pd.option_context("display.width", 220, "display.max_columns", 20, "display.float_format", "{:.4g}".format):
        print(table.to_string(formatters=formatters))
        print(f"\nTo within {TARGET_GAP:g} nats/row of exact EM's fixed point (NaN: not within in "
              f"{args.rounds} rounds):")
        print(summary.to_string(index=False))
    print(f"\nwrote {png} and the tables as CSV in {time.perf_counter() - start:.1f} s")
    return 0


#: subcommand name -> handler(args) returning the exit status
COMMANDS = {"fit": _cmd_fit, "demo": _cmd_demo, "impute": _cmd_impute}


def _error(message: str) -> None:
    """The one line a user sees for a failure (messages never span lines)."""
    print("error: " + " ".join(str(message).split()), file=sys.stderr)


def main(argv=None):
    """Run ``fedemstats`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Bad option values end in argparse's ``SystemExit(2)`` with a message naming the
    option; every other failure returns non-zero after one ``error:`` line.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose >= 2 else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return COMMANDS[args.command](args)
    except CLIError as exc:
        _error(str(exc))
        return exc.code
    except KeyboardInterrupt:
        _error("interrupted; outputs are either complete or untouched")
        return EXIT_INTERRUPTED
    except ValueError as exc:  # an estimator refusing its parameters mid-way
        _error(str(exc))
        return EXIT_USAGE
    except Exception as exc:  # a bug: still one line, the traceback on request
        if args.verbose >= 2:
            traceback.print_exc()
        _error(f"internal error ({type(exc).__name__}: {exc}); please report it "
               "(rerun with -vv for the traceback)")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
