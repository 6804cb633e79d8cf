"""The command line on messy CSV files a user brings (sweep of real-world spreadsheets): cells are
written back as read, the header is checked, and surprises are one ``note:`` line."""
import numpy as np
import pytest

from fedemstats.cli import main

from _cli_helpers import assert_one_error, forbid_fits

#: a small table with integer counts, gaps, a client column in the middle and clients spelled like numbers
MESSY = """a,site,b,c
1,002,5,7
2,002,,8
3,2,6,
4,2,5,9
5,002,7,10
6,2,,11
2,01,4,6
3,01,5,
4,01,6,8
5,1,4,7
6,1,,9
7,1,5,10
"""


@pytest.fixture
def messy(tmp_path):
    path = tmp_path / "messy.csv"
    path.write_text(MESSY)
    return path


def test_impute_writes_untouched_cells_and_client_labels_back_as_read(messy, tmp_path, capsys):
    """'002' and '2' (or '01' and '1') are different sites and come back as written; integers stay
    integers; the client column stays where it was; only the empty cells change."""
    out = tmp_path / "out.csv"
    assert main(["impute", "gaussian", str(messy), "--client-column", "site", "--rounds", "5",
                 "--out", str(out)]) == 0
    assert "from 4 clients" in capsys.readouterr().out
    source = [line.split(",") for line in MESSY.splitlines()]
    written = [line.split(",") for line in out.read_text().splitlines()]
    assert written[0] == source[0] and len(written) == len(source)
    for before, after in zip(source[1:], written[1:]):
        for cell, filled in zip(before, after):
            if cell:
                assert filled == cell
            else:
                assert np.isfinite(float(filled))


def test_a_boolean_column_is_refused_by_name(tmp_path, capsys, monkeypatch):
    forbid_fits(monkeypatch)
    path = tmp_path / "flags.csv"
    path.write_text("site,x,flag\n" + "".join(f"s{i % 2},{i},{i % 3 == 0}\n" for i in range(8)))
    assert main(["fit", "gmm", str(path), "--client-column", "site", "--out", str(tmp_path / "o.json")]) == 2
    assert_one_error(capsys.readouterr().err, "['flag']", "True/False", "0/1")


@pytest.mark.parametrize("header, needles", [
    ("site,a,a\n", ["['a']", "more than once"]),
    ("site,a,b,\n", ["no name", "[4]", "trailing comma"]),
])
def test_header_defects_are_named(tmp_path, capsys, monkeypatch, header, needles):
    forbid_fits(monkeypatch)
    path = tmp_path / "h.csv"
    width = header.count(",") + 1
    path.write_text(header + "".join(",".join([f"s{i % 2}"] + [str(i + j) for j in range(width - 1)]) + "\n"
                                     for i in range(8)))
    assert main(["impute", "gaussian", str(path), "--client-column", "site", "--out", str(tmp_path / "o.csv")]) == 2
    assert_one_error(capsys.readouterr().err, *needles)


def test_an_empty_column_is_named_as_empty_by_fit_and_impute(tmp_path, capsys, monkeypatch):
    """fit used to say 'has empty cells; fill them with fedemstats impute', which then refused it."""
    forbid_fits(monkeypatch)
    path = tmp_path / "e.csv"
    path.write_text("site,a,e\n" + "".join(f"s{i % 2},{i},\n" for i in range(8)))
    for command in (["fit", "gmm"], ["impute", "gaussian"]):
        assert main(command + [str(path), "--client-column", "site", "--out", str(tmp_path / "o")]) == 2
        assert_one_error(capsys.readouterr().err, "['e']", "entirely empty")


@pytest.mark.parametrize("text, needles", [
    ("site;a;b\ns0;1;2\ns1;3;4\n", ["--client-column", "';'-separated"]),
    ("site\ta\tb\ns0\t1\t2\ns1\t3\t4\n", ["--client-column", "tab-separated"]),
    ("sep=,\nsite,a\ns0,1\ns1,2\n", ["Excel's 'sep=,' line", "remove it"]),
])
def test_a_file_that_is_not_comma_separated_gets_a_hint(tmp_path, capsys, monkeypatch, text, needles):
    forbid_fits(monkeypatch)
    path = tmp_path / "d.csv"
    path.write_text(text)
    assert main(["fit", "gmm", str(path), "--client-column", "site", "--out", str(tmp_path / "o.json")]) == 2
    assert_one_error(capsys.readouterr().err, *needles)


def test_participation_one_and_no_participant_are_notes(tmp_path, capsys):
    """'--participation 1' is one client per round (a note says so); a run in which no client took
    part says that its output is the initial model, and prints a finite log-likelihood."""
    from _cli_helpers import write_sample_csv
    data = write_sample_csv(tmp_path / "s.csv")
    assert main(["fit", "gmm", str(data), "--client-column", "site", "--rounds", "2", "--participation", "1",
                 "--out", str(tmp_path / "one.json")]) == 0
    err = capsys.readouterr().err
    assert "note: --participation 1 is one client per round" in err
    assert main(["fit", "gmm", str(data), "--client-column", "site", "--rounds", "3", "--participation", "0.001",
                 "--out", str(tmp_path / "none.json")]) == 0
    captured = capsys.readouterr()
    assert "note: no client took part in rounds 1-3" in captured.err
    assert "loglik nan" not in captured.out and "loglik -" in captured.out


def test_estimator_warnings_are_one_note_line(tmp_path, capsys):
    """The k-means fallback on tiny clients printed a Python warning with its source line."""
    path = tmp_path / "tiny.csv"
    rng = np.random.default_rng(0)
    path.write_text("site,a,b\n" + "".join(f"s{i // 2},{rng.normal():.3f},{rng.normal():.3f}\n" for i in range(40)))
    assert main(["fit", "gmm", str(path), "--client-column", "site", "--n-components", "2", "--rounds", "2",
                 "--out", str(tmp_path / "o.json")]) == 0
    err = capsys.readouterr().err
    assert "note: clients are too small" in err and "warnings.warn" not in err and "UserWarning" not in err


@pytest.mark.parametrize("spec, needles", [
    ("dither:s=4,s=8", ["'s'", "twice"]),
    ("randk", ["needs the argument(s) ['k']", "randk:k=..."]),
])
def test_compressor_spec_defects_are_named(tmp_path, capsys, monkeypatch, spec, needles):
    forbid_fits(monkeypatch)
    from _cli_helpers import write_sample_csv
    data = write_sample_csv(tmp_path / "s.csv")
    assert main(["fit", "gmm", str(data), "--client-column", "site", "--compressor", spec,
                 "--out", str(tmp_path / "o.json")]) == 2
    assert_one_error(capsys.readouterr().err, "--compressor", *needles)


def test_a_whole_number_written_as_a_float_is_a_whole_number():
    from fedemstats.compression import make_compressor
    assert make_compressor("dither:s=1e3").s == 1000
    with pytest.raises(ValueError, match="integer number of levels"):
        make_compressor("dither:s=2.5")


def test_estimator_refusals_name_the_csv_columns_and_rows(tmp_path, capsys):
    """The estimator names column numbers of X and rows from 0; the command line says 'x' and the data
    row a spreadsheet shows, and the command instead of the estimator's argument."""
    path = tmp_path / "counts.csv"
    path.write_text("site,w,x\n" + "".join(f"s{i % 2},{i},{i}\n" for i in range(6)) + "s1,2,-3\ns0,1,2.5\n")
    assert main(["impute", "poisson", str(path), "--client-column", "site", "--out", str(tmp_path / "o.csv")]) == 2
    assert_one_error(capsys.readouterr().err, "column(s) ['x']", "data row 7: -3.0")
    path.write_text("site,w,x\n" + "".join(f"s{i % 2},{i},{i}\n" for i in range(6)) + "s0,1,2.5\n")
    assert main(["impute", "poisson", str(path), "--client-column", "site", "--out", str(tmp_path / "o.csv")]) == 2
    assert_one_error(capsys.readouterr().err, "column(s) ['x']", "data row 7: 2.5", "'fedemstats impute gaussian'")


def test_constant_columns_and_look_alike_client_labels_are_noted(tmp_path, capsys):
    path = tmp_path / "n.csv"
    rows = ["Site A", "Site A ", " site a", "B", "B"] * 4
    path.write_text("site,x,k\n" + "".join(f"{s},{i * 0.37 % 1:.3f},5\n" for i, s in enumerate(rows)))
    assert main(["fit", "gmm", str(path), "--client-column", "site", "--rounds", "2",
                 "--out", str(tmp_path / "o.json")]) == 0
    captured = capsys.readouterr()
    assert "note: column(s) ['k'] are constant" in captured.err
    assert "differ only in spaces or case; they are different clients" in captured.err
    assert "from 4 clients" in captured.out


def test_a_single_column_with_gaps_says_why_it_cannot_be_imputed(tmp_path, capsys, monkeypatch):
    forbid_fits(monkeypatch)
    path = tmp_path / "one.csv"
    path.write_text("site,x\n" + "".join(f"s{i % 2},{'' if i % 3 == 0 else i}\n" for i in range(9)))
    assert main(["impute", "gaussian", str(path), "--client-column", "site", "--out", str(tmp_path / "o.csv")]) == 2
    assert_one_error(capsys.readouterr().err, "no value besides the client", "one data column cannot be imputed")
