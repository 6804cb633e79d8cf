"""Helpers shared by the command-line tests: sample data, the one-error-line check, a fit guard."""
import re

import numpy as np
import pandas as pd
import pytest

#: data rows per client and clients of the small sample CSV
SAMPLE_CLIENTS = 12
SAMPLE_ROWS_PER_CLIENT = 30
#: the names a temporary of output NAME may have (fedemstats._io.temporary_name)
TEMPORARY = re.compile(r"^\..+\.\d+-[0-9a-f]+\.tmp$")


def write_sample_csv(path, *, rows_per_client=SAMPLE_ROWS_PER_CLIENT, missing=False):
    """Three well separated 2-D clusters spread over 12 clients ('site'); optionally 10% empty cells."""
    rng = np.random.default_rng(0)
    n = SAMPLE_CLIENTS * rows_per_client
    X = np.vstack([rng.normal(m, 1.0, size=(n // 3 + 1, 2)) for m in (-4, 0, 4)])[:n]
    if missing:
        X[rng.random(X.shape) < 0.1] = np.nan
        X[np.isnan(X).all(axis=1), 0] = 0.0  # keep every row informative
    frame = pd.DataFrame(X, columns=["a", "b"])
    frame["site"] = np.tile(np.arange(SAMPLE_CLIENTS), rows_per_client)
    frame.to_csv(path, index=False)
    return path


def error_lines(err):
    """The lines of ``err`` that report an error (argparse's and ours)."""
    return [line for line in err.splitlines() if "error:" in line]


def assert_one_error(err, *needles):
    """``err`` holds exactly one error line, mentioning every needle, and no traceback."""
    assert "Traceback" not in err, err
    lines = error_lines(err)
    assert len(lines) == 1, err
    for needle in needles:
        assert str(needle) in lines[0], (needle, lines[0])
    return lines[0]


def forbid_fits(monkeypatch):
    """Fail the test if any estimator's ``fit`` is called (errors must come before fitting)."""
    from fedemstats.estimators import FederatedGaussianMixture, FederatedImputer

    def forbidden(self, *args, **kwargs):
        pytest.fail(f"{type(self).__name__}.fit ran although the command line was invalid")

    for cls in (FederatedGaussianMixture, FederatedImputer):
        monkeypatch.setattr(cls, "fit", forbidden)
