"""What the command line accepts: option types, path checks and CSV checks, run before any fit.

Each check fails with a message that names the option, path or column at fault
and says what to do, so that ``fedemstats`` can print it as one ``error:`` line:

* option values are parsed by the argparse types below; argparse prefixes their
  message with ``argument --option:`` and exits with status 2;
* paths and CSV contents are checked by the ``check_*`` / :func:`read_client_csv`
  functions, which raise :class:`CLIError` before any estimator is built.
"""
from __future__ import annotations

import argparse
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "CLIError", "EXIT_USAGE", "EXIT_FAILURE", "MAX_ROUNDS", "MAX_SEED",
    "integer", "step_size", "participation",
    "check_input_file", "check_output_file", "check_output_folder", "read_client_csv", "read_cells_as_text",
]

#: exit status of a usage error (bad option, path or data), as argparse uses
EXIT_USAGE = 2
#: exit status of a failure the user did not cause by the command line (e.g. disk full)
EXIT_FAILURE = 1
#: more rounds than anyone runs from a shell; guards against typos such as 1000000000
MAX_ROUNDS = 1_000_000
#: numpy seeds are non-negative; 2**32 - 1 keeps them valid for scikit-learn's RandomState too
MAX_SEED = 2**32 - 1
#: how many offending rows/columns a message lists before "..."
SHOWN = 5


class CLIError(Exception):
    """A problem the user can fix; printed as one ``error: <message>`` line, exit ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------- option types
def integer(low: int, high: int, meaning: str = ""):
    """An argparse type accepting integers in ``[low, high]``; ``meaning`` explains the bounds."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            hint = f" ({meaning})" if meaning else ""
            raise argparse.ArgumentTypeError(f"expected an integer from {low} to {high}{hint}, got {text!r}")
        return value
    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


def _finite_float(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def step_size(text):
    """argparse type of ``--step-size``: ``'auto'`` or a finite number > 0 (the constant γ)."""
    if text.strip().lower() == "auto":
        return "auto"
    value = _finite_float(text)
    if value is None or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'auto', got {text!r}")
    return value


def participation(text):
    """argparse type of ``--participation``: an integer k >= 1 (k clients per round) or a
    fraction p in (0, 1] (each client takes part with probability p; 1.0 is everyone)."""
    try:
        k = int(text)
    except ValueError:
        k = None
    if k is not None:
        if k >= 1:
            return k
    else:
        p = _finite_float(text)
        if p is not None and 0 < p <= 1:
            return p
    raise argparse.ArgumentTypeError(
        f"expected a fraction in (0, 1] (e.g. 0.5, or 1.0 for everyone) or a whole number of "
        f"clients per round >= 1, got {text!r}")


# --------------------------------------------------------------------- paths
def check_input_file(path: str, what: str = "input file") -> Path:
    """The input exists, is a regular file and can be opened for reading."""
    p = Path(path)
    if not path:
        raise CLIError(f"the {what} name is empty; give the path of a CSV file")
    if not p.exists():
        raise CLIError(f"{what} {path!r} does not exist; check the path")
    if p.is_dir():
        raise CLIError(f"{what} {path!r} is a directory; give the path of a CSV file")
    if not os.access(p, os.R_OK):
        raise CLIError(f"{what} {path!r} is not readable; check its permissions")
    return p


def _writable_directory(directory: Path, path: str, flag: str) -> None:
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CLIError(f"{flag} {path!r}: cannot write in directory '{directory}'; check its permissions")


def check_output_file(path: str, flag: str = "--out") -> Path:
    """The output can be created or replaced: its directory exists and it is not a directory."""
    if not path:
        raise CLIError(f"{flag} is empty; give a file name")
    p = Path(path)
    if p.is_dir():
        raise CLIError(f"{flag} {path!r} is a directory; give a file name, e.g. '{p / 'result'}'")
    parent = p.resolve().parent
    if not parent.exists():
        raise CLIError(f"{flag} {path!r}: directory '{p.parent}' does not exist; create it first")
    if not parent.is_dir():
        raise CLIError(f"{flag} {path!r}: '{p.parent}' is not a directory")
    _writable_directory(parent, path, flag)
    return p


def check_output_folder(path: str, flag: str = "--out") -> Path:
    """The output folder exists, or can be created (its nearest existing ancestor is a
    writable directory). Nothing is created here: the folder appears with the outputs."""
    if not path:
        raise CLIError(f"{flag} is empty; give a folder name")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CLIError(f"{flag} {path!r} is an existing file, but the demo writes a folder there; "
                       "give a new or existing folder name")
    ancestor = p.resolve()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CLIError(f"{flag} {path!r}: '{ancestor}' is a file, so the folder cannot be created there")
    _writable_directory(ancestor, path, flag)
    return p


# --------------------------------------------------------------------- CSV contents
def _rows(index) -> str:
    """Data rows by their number in the file (1 = first row under the header)."""
    shown = ", ".join(str(i + 1) for i in index[:SHOWN])
    return shown + (", ..." if len(index) > SHOWN else "")


def _read_csv(path: Path, **options) -> pd.DataFrame:
    try:
        # index_col=False: a row with one field more than the header was read as an index, which
        # silently shifted every column (the client column then held the first data column)
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(path, index_col=False, **options)
    except pd.errors.ParserWarning:
        raise CLIError(f"data rows of {str(path)!r} have more fields than its header names; add the missing "
                       "header names or remove the extra fields") from None
    except pd.errors.EmptyDataError:
        raise CLIError(f"{str(path)!r} is empty; expected a header row and data rows") from None
    except pd.errors.ParserError as exc:
        raise CLIError(f"{str(path)!r} is not a valid CSV file: {exc}") from None
    except UnicodeDecodeError as exc:
        raise CLIError(f"{str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise CLIError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None


def read_cells_as_text(path: Path) -> pd.DataFrame:
    """Every cell as the text the file holds (empty cells as ``''``), to write untouched cells back
    exactly as read: parsing turned ``5`` into ``5.0`` and the client ``002`` into ``2``."""
    return _read_csv(path, dtype=str, keep_default_na=False)


def _header_names(path: Path) -> list:
    """The first line's fields as written (pandas renames a second ``a`` to ``a.1`` and an empty name
    to ``Unnamed: 4`` when it reads them as the header)."""
    return _read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0].tolist()


def _check_header(names, where: str) -> None:
    """Header names are present and distinct (renamed by pandas, they surfaced in messages about
    the data)."""
    unnamed = [i + 1 for i, n in enumerate(names) if not str(n).strip()]
    if unnamed:
        raise CLIError(f"the header of {where} has no name for column(s) {unnamed[:SHOWN]} (counting from 1; "
                       "a trailing comma?); name them or remove them")
    counts = pd.Series(names).value_counts()
    repeated = sorted(counts.index[counts > 1])
    if repeated:
        raise CLIError(f"column name(s) {repeated[:SHOWN]} appear more than once in the header of {where}; "
                       "rename them")


def _check_excel_separator_line(names, path: Path) -> None:
    """Excel may write a ``sep=,`` line above the header; read as the header, it made every data row
    look one field too long."""
    first = ",".join(names).strip().lower()
    if first.startswith("sep="):
        raise CLIError(f"the first line of {str(path)!r} is Excel's {first!r} line, not a header; remove it "
                       "(fedemstats reads comma-separated files with the header on the first line)")


def _delimiter_hint(columns) -> str:
    """A hint when the file is not comma-separated: one header cell holding ';' or a tab."""
    if len(columns) != 1:
        return ""
    for sep, name in ((";", "';'"), ("\t", "tab")):
        if sep in str(columns[0]):
            return f"; the file seems to be {name}-separated: fedemstats reads comma-separated files"
    return ""


def _check_numeric(features: pd.DataFrame, where: str) -> None:
    flags = [c for c in features.columns if pd.api.types.is_bool_dtype(features[c])]
    if flags:
        raise CLIError(f"column(s) {flags[:SHOWN]} of {where} hold True/False, not numbers; convert them to "
                       "0/1 or remove them")
    bad = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if not bad:
        return
    col = features[bad[0]]
    text = col.notna() & pd.to_numeric(col, errors="coerce").isna()
    row = np.flatnonzero(text.to_numpy())[:1]
    example = f" (data row {row[0] + 1}: {col.iloc[row[0]]!r})" if row.size else ""
    raise CLIError(f"column(s) {bad[:SHOWN]} of {where} are not numeric{example}; "
                   "fix the cells or remove the column(s)")


def _check_finite(features: pd.DataFrame, where: str, allow_missing: bool) -> None:
    values = features.to_numpy(dtype=np.float64)
    infinite = [c for c, bad in zip(features.columns, np.isinf(values).any(axis=0)) if bad]
    if infinite:
        raise CLIError(f"column(s) {infinite[:SHOWN]} of {where} hold infinite values; "
                       "replace them with finite numbers")
    missing = np.isnan(values)
    cols = [c for c, bad in zip(features.columns, missing.all(axis=0)) if bad]
    if cols:
        raise CLIError(f"column(s) {cols[:SHOWN]} of {where} are entirely empty; remove them")
    if not allow_missing:
        cols = [c for c, bad in zip(features.columns, missing.any(axis=0)) if bad]
        if cols:
            raise CLIError(f"column(s) {cols[:SHOWN]} of {where} have empty cells; this model needs "
                           "every cell (fill them with 'fedemstats impute')")
        return
    rows = np.flatnonzero(missing.all(axis=1))
    if rows.size:
        alone = ("; a file with one data column cannot be imputed: a cell is filled from the other "
                 "columns of its row" if features.shape[1] == 1 else "")
        raise CLIError(f"{rows.size} data row(s) of {where} have no value besides the client "
                       f"(rows {_rows(rows)}); remove them{alone}")


def read_client_csv(path: Path, client_column: str, *, allow_missing: bool):
    """Read a CSV whose rows belong to clients; return ``(features, groups)``.

    ``features`` holds every column except ``client_column``, all numeric and finite
    (empty cells allowed only when ``allow_missing``); ``groups`` is the client of each row.
    """
    names = _header_names(path)
    _check_excel_separator_line(names, path)
    # the client column as text: '002' and '2', or '1' and '1.0', are different sites
    frame = _read_csv(path, dtype={client_column: str})
    where = repr(str(path))
    if client_column not in frame.columns:
        raise CLIError(f"column {client_column!r} (--client-column) is not in {where}; "
                       f"its columns are {list(frame.columns)[:20]}{_delimiter_hint(frame.columns)}")
    _check_header(names, where)
    if frame.empty:
        raise CLIError(f"{where} has a header but no data rows")
    groups = frame.pop(client_column)
    unlabelled = np.flatnonzero(groups.isna().to_numpy())
    if unlabelled.size:
        raise CLIError(f"column {client_column!r} (--client-column) of {where} is empty in "
                       f"{unlabelled.size} row(s) (rows {_rows(unlabelled)}); every row needs a client")
    if frame.shape[1] == 0:
        raise CLIError(f"{where} has no data column besides the client column {client_column!r}")
    _check_numeric(frame, where)
    _check_finite(frame, where, allow_missing)
    return frame, groups.to_numpy()


def check_against_data(args, n_rows: int, n_clients: int, where: str, *, uses_components=True) -> None:
    """Options whose valid range depends on the data: ``--n-components``, ``--participation``."""
    if uses_components and args.n_components > n_rows:
        raise CLIError(f"--n-components {args.n_components} is more than the {n_rows} data rows of {where}")
    if isinstance(args.participation, int) and args.participation > n_clients:
        raise CLIError(f"--participation {args.participation} asks for {args.participation} clients per "
                       f"round, but {where} has {n_clients} client(s); use at most {n_clients} "
                       "or a fraction such as 0.5")
