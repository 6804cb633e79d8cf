"""Estimator-level failures seen through the command line (issue 13, class 1: scale).

The command line already turns them into one error line naming the file (see
test_cli_properties); what remains needs a fix inside the estimators, owned by
another part of issue 13: the estimators refuse data whose second moments float64
cannot represent (:func:`fedemstats._validation.check_data_range`) in terms of the data.
"""
import re
import warnings

import pandas as pd
import pytest

from _cli_helpers import assert_one_error, write_sample_csv
from fedemstats.cli import main

#: an acceptable refusal speaks of the data's magnitude, never of the step size
DATA_SCALE_MESSAGE = re.compile(r"float64|magnitude|too large|too small|representable", re.IGNORECASE)


def test_fit_gmm_on_data_scaled_by_1e16_succeeds(tmp_path, capsys):
    data = _scaled_sample(tmp_path, 1e16, missing=False)
    argv = ["fit", "gmm", str(data), "--client-column", "site", "--n-components", "3", "--rounds", "5",
            "--out", str(tmp_path / "m.json")]
    assert main(argv) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command, model", [("fit", "gmm"), ("impute", "gaussian"), ("impute", "gmm")])
def test_data_scaled_by_1e300_fits_or_says_the_data_is_out_of_range(command, model, tmp_path, capsys):
    data = _scaled_sample(tmp_path, 1e300, missing=command == "impute")
    argv = [command, model, str(data), "--client-column", "site", "--n-components", "3", "--rounds", "5",
            "--out", str(tmp_path / "out")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow may happen on the way to the refusal
        code = main(argv)
    if code != 0:
        line = assert_one_error(capsys.readouterr().err, str(data))
        assert "step" not in line and DATA_SCALE_MESSAGE.search(line), line


def _scaled_sample(tmp_path, scale, *, missing):
    path = write_sample_csv(tmp_path / "sample.csv", missing=missing)
    frame = pd.read_csv(path)
    frame[["a", "b"]] *= scale
    frame.to_csv(path, index=False)
    return path
