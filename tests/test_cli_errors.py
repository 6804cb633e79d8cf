"""Every usage error of ``fedemstats`` is one ``error:`` line naming the culprit, before any fit.

Failure classes of issue 13 (3: messages that do not name the problem; 4: paths that
ended in a traceback after the whole fit). Each test runs with estimator ``fit``
replaced by a failure (``no_fit``), so an error reported only after fitting fails too.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _cli_helpers import assert_one_error, forbid_fits, write_sample_csv
from fedemstats.cli import main

USAGE = 2


@pytest.fixture
def no_fit(monkeypatch):
    """Estimators' ``fit`` fails the test: every error below must come before fitting."""
    forbid_fits(monkeypatch)


@pytest.fixture
def data(tmp_path):
    return write_sample_csv(tmp_path / "data.csv")


def fit_argv(data, out, *extra):
    return ["fit", "gmm", str(data), "--client-column", "site", "--out", str(out), *extra]


def run(argv, capsys):
    """(exit status, stderr) of ``main(argv)``, whether it returns or argparse exits."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: allowed for option values, must be status 2
        code = exc.code
    return code, capsys.readouterr().err


# ------------------------------------------------------------------ class 4: paths
@pytest.mark.parametrize("command", ["fit", "impute"])
def test_missing_input_file(command, tmp_path, capsys, no_fit):
    missing = tmp_path / "nope.csv"
    argv = [command, "gmm", str(missing), "--client-column", "site", "--out", str(tmp_path / "o")]
    code, err = run(argv, capsys)
    assert code == USAGE
    assert_one_error(err, str(missing), "does not exist")


def test_input_is_a_directory(tmp_path, capsys, no_fit):
    code, err = run(fit_argv(tmp_path, tmp_path / "m.json"), capsys)
    assert code == USAGE
    assert_one_error(err, str(tmp_path), "is a directory")


@pytest.mark.parametrize("command", ["fit", "impute"])
def test_output_in_missing_directory(command, data, tmp_path, capsys, no_fit):
    out = tmp_path / "no_such_dir" / "m.out"
    argv = [command, "gmm", str(data), "--client-column", "site", "--out", str(out)]
    code, err = run(argv, capsys)
    assert code == USAGE
    assert_one_error(err, "--out", str(out), "does not exist")
    assert not out.parent.exists()


@pytest.mark.parametrize("command", ["fit", "impute"])
def test_output_is_a_directory(command, data, tmp_path, capsys, no_fit):
    argv = [command, "gmm", str(data), "--client-column", "site", "--out", str(tmp_path)]
    code, err = run(argv, capsys)
    assert code == USAGE
    assert_one_error(err, "--out", str(tmp_path), "is a directory")


def test_output_under_a_file(data, tmp_path, capsys, no_fit):
    out = data / "m.json"  # data.csv is a file, not a folder
    code, err = run(fit_argv(data, out), capsys)
    assert code == USAGE
    assert_one_error(err, "--out", str(out), "not a directory")


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_demo_out_is_an_existing_file(where, tmp_path, capsys, no_fit):
    existing = tmp_path / "results"
    existing.write_text("keep me")
    out = existing if where == "file" else existing / "sub"
    code, err = run(["demo", "--out", str(out), "--rounds", "2"], capsys)
    assert code == USAGE
    assert_one_error(err, "--out", str(existing))
    assert existing.read_text() == "keep me"


# ------------------------------------------------------------------ class 3: option values
@pytest.mark.parametrize("value", ["abc", "0", "-0.5", "nan", "inf", "1e400", ""])
def test_bad_step_size_names_the_option(value, data, tmp_path, capsys, no_fit):
    code, err = run(fit_argv(data, tmp_path / "m.json", "--step-size", value), capsys)
    assert code == USAGE
    assert_one_error(err, "--step-size", "expected a positive number or 'auto'", repr(value))


@pytest.mark.parametrize("command", ["fit", "impute"])
@pytest.mark.parametrize("value", ["-1", "-100", "1.5", "abc", "nan", "1000000001"])
def test_bad_rounds_names_the_option(command, value, data, tmp_path, capsys, no_fit):
    argv = [command, "gmm", str(data), "--client-column", "site", "--out", str(tmp_path / "o"),
            "--rounds", value]
    code, err = run(argv, capsys)
    assert code == USAGE
    assert_one_error(err, "--rounds", "expected an integer from 0", repr(value))


@pytest.mark.parametrize("value", ["0", "-1"])
def test_demo_rounds_below_one_is_refused(value, tmp_path, capsys, no_fit):
    """`demo --rounds 0` used to run the default 150 rounds silently."""
    code, err = run(["demo", "--out", str(tmp_path / "d"), "--rounds", value], capsys)
    assert code == USAGE
    assert_one_error(err, "--rounds", "expected an integer from 1", repr(value))
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("option, value, needle", [
    ("--participation", "0", "fraction in (0, 1]"),
    ("--participation", "-1", "fraction in (0, 1]"),
    ("--participation", "1.5", "fraction in (0, 1]"),
    ("--participation", "nan", "fraction in (0, 1]"),
    ("--n-components", "0", "expected an integer from 1"),
    ("--n-components", "two", "expected an integer from 1"),
    ("--seed", "-1", "expected an integer from 0"),
    ("--seed", str(2**32), "expected an integer from 0"),
])
def test_bad_option_values_name_the_option(option, value, needle, data, tmp_path, capsys, no_fit):
    code, err = run(fit_argv(data, tmp_path / "m.json", option, value), capsys)
    assert code == USAGE
    assert_one_error(err, option, needle)


@pytest.mark.parametrize("option, value, needle", [
    ("--compressor", "zip:x=1", "unknown compressor"),
    ("--compressor", "dither:q=3", "has no argument"),
    ("--n-components", "1000", "more than the 360 data rows"),
    ("--participation", "50", "12 client(s)"),
])
def test_option_values_checked_against_the_data(option, value, needle, data, tmp_path, capsys, no_fit):
    code, err = run(fit_argv(data, tmp_path / "m.json", option, value), capsys)
    assert code == USAGE
    assert_one_error(err, option, needle)


# ------------------------------------------------------------------ CSV contents
CSV_CASES = {  # name -> (CSV text, needles of the error line)
    "empty": ("", ["is empty"]),
    "header only": ("a,b,site\n", ["no data rows"]),
    "no client column": ("a,b\n1,2\n3,4\n", ["'site' (--client-column) is not in", "['a', 'b']"]),
    "client cell empty": ("a,site\n1,x\n2,\n3,x\n", ["'site'", "empty in 1 row(s) (rows 2)"]),
    "text cell": ("a,b,site\n1,2,x\n3,oops,x\n5,6,y\n7,8,y\n", ["['b']", "not numeric", "row 2: 'oops'"]),
    "infinite cell": ("a,b,site\n1,inf,x\n3,4,x\n5,6,y\n7,8,y\n", ["['b']", "infinite"]),
    "empty cell (fit)": ("a,b,site\n1,,x\n3,4,x\n5,6,y\n7,8,y\n", ["['b']", "empty cells", "impute"]),
    "only the client column": ("site\nx\nx\n", ["no data column besides", "'site'"]),
    "not a CSV": ('a,b,site\n1,2,x\n3,"4\n', ["not a valid CSV"]),
    "not UTF-8": (b"a,b,site\n1,\xff\xfe,x\n", ["not UTF-8"]),
}


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_bad_csv_is_one_error_line_naming_the_problem(case, tmp_path, capsys, no_fit):
    text, needles = CSV_CASES[case]
    path = tmp_path / "in.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    code, err = run(fit_argv(path, tmp_path / "m.json"), capsys)
    assert code == USAGE
    line = assert_one_error(err, *needles)
    assert str(path) in line or "--client-column" in line or "column" in line


@pytest.mark.parametrize("text, needles", [
    ("a,b,site\n,,x\n1,2,x\n3,4,y\n5,6,y\n", ["1 data row(s)", "(rows 1)", "no value besides"]),
    ("a,b,site\n1,,x\n2,,x\n3,,y\n5,,y\n", ["['b']", "entirely empty"]),
])
def test_impute_rejects_uninformative_rows_and_columns_by_name(text, needles, tmp_path, capsys, no_fit):
    path = tmp_path / "in.csv"
    path.write_text(text)
    argv = ["impute", "gaussian", str(path), "--client-column", "site", "--out", str(tmp_path / "o.csv")]
    code, err = run(argv, capsys)
    assert code == USAGE
    assert_one_error(err, str(path), *needles)


def test_estimator_refusal_names_the_file(tmp_path, capsys):
    """A client with one row is refused by the estimator (its mean would be the row): one line."""
    path = tmp_path / "in.csv"
    path.write_text("a,site\n1,x\n2,x\n3,y\n")
    code, err = run(fit_argv(path, tmp_path / "m.json", "--rounds", "1"), capsys)
    assert code == USAGE
    assert_one_error(err, str(path), "['y']")
    assert not (tmp_path / "m.json").exists()


FAST_CHECK = """
import sys
from fedemstats.cli import main
code = main(sys.argv[1:])
print(code, "fedemstats.estimators" in sys.modules)
"""


def test_usage_errors_answer_without_loading_the_estimators(tmp_path):
    """Fast: a bad path is reported before numba and scikit-learn are even imported."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[1]),
                                                                    os.environ.get("PYTHONPATH")])))
    argv = fit_argv(tmp_path / "nope.csv", tmp_path / "m.json")
    run = subprocess.run([sys.executable, "-c", FAST_CHECK, *argv], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.stdout.split() == ["2", "False"], run.stderr
    assert_one_error(run.stderr, "nope.csv", "does not exist")
