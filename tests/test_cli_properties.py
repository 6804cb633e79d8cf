"""Property-based tests of ``fedemstats.cli.main`` (issue 13, "Hypothesis", CLI part).

Generated: argument lists (each option omitted, valid, or invalid text: negative,
fractional, nan, inf, huge, words), data/output paths that exist, do not, or are
directories, and small CSVs (numeric, text cells, infinite or empty cells, empty
file, header only, no client column, blank client cells, one client, one-row
clients). Every generated defect carries the text the error line must name.

Invariant: ``main`` returns 0 with a valid output, or returns non-zero after
exactly one ``error:`` line naming a defect (option, path or column), or argparse
exits with status 2 naming the option; never a traceback, never another
exception, and an existing output is never modified by a failed run. Without a
generated defect, an estimator may still refuse the data (e.g. a fit that
diverges): that is one line naming the data file, counted as an ``event``.

Profiles (own names, so estimator test modules keep theirs; ``tests/_hypothesis_profiles.py``):
``cli-default`` (fast, ``make test``, derandomised) and ``cli-long`` (random), selected by
``HYPOTHESIS_PROFILE=long``.
"""
import contextlib
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
from hypothesis import event, given, note
from hypothesis import strategies as st

from _cli_helpers import TEMPORARY, error_lines
from _hypothesis_profiles import profile
from fedemstats.cli import main
from fedemstats.estimators import FederatedGaussianMixture

CLI_SETTINGS = profile("cli", default_examples=100, long_examples=2000)  # examples per test

CLIENT = "site_id"
FEATURES = ["col_a", "col_b", "col_c"]
USAGE = 2
#: valid runs use at most this many rounds (small data, fast examples)
VALID_ROUNDS_MAX = 3
OLD_RESULT = b"previous result"
WORDS = ["abc", "", " ", "auto!", "1,5", "0x10", "--", "e"]
NEGATIVE = st.integers(-10**30, -1).map(str)
HUGE = st.integers(10**10, 10**40).map(str)
FRACTIONAL = st.floats(allow_nan=True, allow_infinity=True).map(repr)  # always has '.', 'e', nan or inf
SPECIAL_FLOATS = st.sampled_from(["nan", "inf", "-inf", "1e400", "-0.0", "0", "0.0"])


# ------------------------------------------------------------------ generated pieces
def _option(flag, valid, invalid, clean):
    """(argv tokens, needle or None): the option omitted, valid or (unless ``clean``) invalid."""
    choices = [st.just(((), None)), valid.map(lambda v: ((flag, v), None))]
    if not clean:
        choices.append(invalid.map(lambda v: ((flag, v), flag)))
    return st.one_of(*choices)


def _options(clean):
    rounds_invalid = st.one_of(NEGATIVE, st.just(str(10**6 + 1)), HUGE, FRACTIONAL, st.sampled_from(WORDS))
    step_invalid = st.one_of(NEGATIVE, SPECIAL_FLOATS, st.floats(max_value=0).map(repr), st.sampled_from(WORDS))
    part_invalid = st.one_of(NEGATIVE, SPECIAL_FLOATS, st.floats(1.0001, 1e300).map(repr), st.sampled_from(WORDS))
    return [_option(*spec, clean) for spec in [
        ("--rounds", st.integers(0, VALID_ROUNDS_MAX).map(str), rounds_invalid),
        ("--step-size", st.sampled_from(["auto", "AUTO", "0.05", "0.5", "1", "1.0"]), step_invalid),
        ("--participation", st.sampled_from(["1.0", "0.5", "0.99", "1"]), part_invalid),
        ("--n-components", st.sampled_from(["1", "2"]),
         st.one_of(NEGATIVE, st.just("0"), FRACTIONAL, st.sampled_from(WORDS))),
        ("--seed", st.sampled_from(["0", "7", str(2**32 - 1)]),
                st.one_of(NEGATIVE, st.just(str(2**32)), HUGE, FRACTIONAL, st.sampled_from(WORDS))),
        ("--compressor", st.sampled_from(["identity", "dither:s=4", "blockp:p=2", "randk:k=1"]),
         st.sampled_from(["zip", "dither:s", "dither:q=3", "randk:k=x", ":"])),
    ]]


CSV_DEFECTS = ["text", "inf", "blank", "empty", "header", "no-client", "blank-client", "only-client"]


@st.composite
def csv_cases(draw, counts, clean):
    """(CSV bytes, defect needles, n_rows, n_clients, n_features) of a small client CSV
    (``clean``: no defect, every client with at least two rows)."""
    n_clients = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(2 if clean else 1, 6), min_size=n_clients, max_size=n_clients))
    n_features = draw(st.integers(1, 3))
    n_rows = sum(sizes)
    values = (st.integers(0, 20).map(float) if counts else
              st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False))
    cells = draw(st.lists(st.lists(values, min_size=n_features, max_size=n_features),
                          min_size=n_rows, max_size=n_rows))
    if not counts:  # extreme scales: the estimator may refuse them, the CLI must still say so in one line
        cells = np.array(cells) * 10.0 ** draw(st.sampled_from([0] * 6 + [-300, -8, 8, 300]), label="scale")
    frame = pd.DataFrame(cells, columns=FEATURES[:n_features], dtype=object)
    frame.insert(draw(st.integers(0, n_features)), CLIENT, np.repeat([f"c{i}" for i in range(n_clients)], sizes))
    needles = {"csv"} if min(sizes) < 2 else set()  # one-row client: the estimator names it (and the file)
    defect = "none" if clean else draw(st.sampled_from(["none"] * 3 + CSV_DEFECTS))
    row, col = draw(st.integers(0, n_rows - 1)), draw(st.sampled_from(FEATURES[:n_features]))
    if defect in ("text", "inf", "blank"):
        frame.loc[row, col] = {"text": "oops", "inf": "inf", "blank": ""}[defect]
        if defect != "blank" or not counts:  # (counts: the imputer takes blanks)
            needles |= {col, "csv"}
    elif defect == "blank-client":
        frame.loc[row, CLIENT] = ""
        needles.add(CLIENT)
    elif defect in ("no-client", "only-client"):
        frame = frame.drop(columns=CLIENT if defect == "no-client" else FEATURES[:n_features])
        needles |= {CLIENT, "csv"}
    text = frame.to_csv(index=False)
    if defect == "empty":
        text, needles = "", needles | {"csv"}
    elif defect == "header":
        text, needles = text.splitlines()[0] + "\n", needles | {"csv"}
    return text.encode(), needles, n_rows, n_clients, n_features


# ------------------------------------------------------------------ running and checking
def _run(argv):
    """(status, stdout, stderr) of ``main(argv)``; any exception but SystemExit propagates."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code
            assert status == USAGE, f"argparse exit {status}"
    return status, out.getvalue(), err.getvalue()


def _check_failure(status, err, needles):
    assert status != 0
    assert "Traceback" not in err, err
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert "internal error" not in lines[0], lines[0]
    assert any(n in lines[0] for n in needles), (needles, lines[0])


def _check_fit_output(out, n_components, n_features, rounds):
    payload = json.loads(out.read_text())  # strict enough: NaN would not be written
    means = np.array(payload["means"])
    assert means.shape == (n_components, n_features) and np.isfinite(means).all()
    assert np.isclose(sum(payload["weights"]), 1.0)
    assert len(payload["history"]) == rounds + 1


def _check_impute_output(out, data, n_features):
    source, filled = pd.read_csv(data), pd.read_csv(out)
    assert list(filled.columns) == list(source.columns)  # the input's columns, in its order
    assert len(filled) == len(source) and not filled.isna().any().any()
    observed = source[FEATURES[:n_features]].notna().to_numpy()
    np.testing.assert_allclose(filled[FEATURES[:n_features]].to_numpy()[observed],
                               source[FEATURES[:n_features]].to_numpy(dtype=float)[observed], rtol=1e-12)


#: examples in ten drawn without any defect (so the success path is exercised, not only errors)
CLEAN_IN_TEN = 4
#: fit as often as impute (which has three models)
COMMANDS = st.sampled_from([("fit", "gmm")] * 3 + [("impute", "gaussian"), ("impute", "gmm"), ("impute", "poisson")])


@dataclass
class Scenario:
    """One generated command line: what to run and which texts an error must name."""
    command: tuple
    csv: bytes
    csv_needles: set
    options: list  # [(argv tokens, needle or None)]
    data_kind: str
    out_kind: str
    n_rows: int
    n_clients: int
    n_features: int

    def valid_option(self, flag, default):
        given_values = {tokens[0]: tokens[1] for tokens, needle in self.options if tokens and not needle}
        return given_values.get(flag, default)

    def materialise(self, tmp):
        """Write the files under ``tmp``; return (argv, data path, out path, needles)."""
        path = {"file": tmp / "in.csv", "missing": tmp / "nope.csv", "directory": tmp}[self.data_kind]
        (tmp / "in.csv").write_bytes(self.csv)
        (tmp / "old.res").write_bytes(OLD_RESULT)
        out = {"new": tmp / "out.res", "existing": tmp / "old.res", "directory": tmp,
               "missing-dir": tmp / "no_dir" / "out.res"}[self.out_kind]
        argv = [*self.command, str(path), "--client-column", CLIENT, "--out", str(out)]
        for tokens, _ in self.options:
            argv += tokens
        needles = {n for _, n in self.options if n}
        if self.data_kind != "file":
            needles.add(str(path))
        else:
            needles |= {str(path) if n == "csv" else n for n in self.csv_needles}
        if self.out_kind in ("directory", "missing-dir"):
            needles.add("--out")
        if self.command[1] != "gaussian" and int(self.n_components) > self.n_rows:
            needles.add("--n-components")
        part = self.valid_option("--participation", "1.0")
        if "." not in part and int(part) > self.n_clients:
            needles.add("--participation")
        if not needles:
            argv += ["--rounds", str(self.rounds)]  # keep valid fits short
        return argv, path, out, needles

    @property
    def n_components(self):
        return self.valid_option("--n-components", "1" if self.command[0] == "fit" else "3")

    @property
    def rounds(self):
        return min(int(self.valid_option("--rounds", "100")), VALID_ROUNDS_MAX)


@st.composite
def scenarios(draw):
    command = draw(COMMANDS)
    counts = command[0] == "impute"  # the imputer's CSVs may have blanks; Poisson needs counts
    clean = draw(st.integers(0, 9), label="clean") < CLEAN_IN_TEN  # many valid runs, not only errors
    csv, needles, n_rows, n_clients, n_features = draw(csv_cases(counts, clean), label="csv")
    options = draw(st.permutations([draw(o, label="option") for o in _options(clean)]), label="order")
    data_kind = "file" if clean else draw(st.sampled_from(["file"] * 4 + ["missing", "directory"]))
    out_kind = draw(st.sampled_from(["new", "existing"] if clean else
                                    ["new", "existing", "directory", "missing-dir"]))
    return Scenario(command, csv, needles, options, data_kind, out_kind, n_rows, n_clients, n_features)


@CLI_SETTINGS
@given(scenario=scenarios())
def test_main_succeeds_or_names_the_problem_in_one_line(scenario):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        argv, path, out, needles = scenario.materialise(tmp)
        note(f"argv={argv}\nneedles={needles}\ncsv={scenario.csv!r}")
        status, _, err = _run(argv)
        note(f"status={status} stderr={err!r}")
        assert (tmp / "old.res").read_bytes() == OLD_RESULT or (status == 0 and out.name == "old.res")
        assert not [p for p in tmp.iterdir() if TEMPORARY.match(p.name)]
        if needles:
            _check_failure(status, err, needles)
            event("outcome: error line naming a generated defect")
        elif status != 0:  # refused by the estimator: one line naming the file
            _check_failure(status, err, {str(path)})
            event(f"{scenario.command} refused: {error_lines(err)[0].split(': ', 2)[-1][:50]}")
        elif scenario.command[0] == "fit":
            _check_fit_output(out, int(scenario.n_components), scenario.n_features, scenario.rounds)
            event("outcome: fitted")
        else:
            _check_impute_output(out, path, scenario.n_features)
            event("outcome: imputed")


DEMO_ROUNDS_INVALID = st.one_of(NEGATIVE, st.just("0"), st.just(str(10**6 + 1)), HUGE, FRACTIONAL,
                                st.sampled_from(WORDS))


@CLI_SETTINGS
@given(rounds=st.one_of(st.none(), st.sampled_from(["1", "5"]), DEMO_ROUNDS_INVALID),
       out_kind=st.sampled_from(["file", "under-file", "folder"]))
def test_demo_refuses_bad_arguments_before_fitting(rounds, out_kind):
    rounds_ok = rounds in (None, "1", "5")
    with tempfile.TemporaryDirectory() as tmp:
        existing = Path(tmp) / "existing"
        existing.write_text("keep")
        out = {"file": existing, "under-file": existing / "sub", "folder": Path(tmp) / "new"}[out_kind]
        if rounds_ok and out_kind == "folder":
            return  # a valid demo takes seconds: covered by tests/test_cli.py
        argv = ["demo", "--out", str(out)] + ([] if rounds is None else ["--rounds", rounds])
        with mock.patch.object(FederatedGaussianMixture, "fit", side_effect=AssertionError("fit ran")):
            status, _, err = _run(argv)
        needles = ({"--out"} if out_kind != "folder" else set()) | ({"--rounds"} if not rounds_ok else set())
        _check_failure(status, err, needles)
        assert existing.read_text() == "keep" and not (Path(tmp) / "new").exists()
