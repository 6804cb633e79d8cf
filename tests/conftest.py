"""Shared fixtures: scikit-learn's digits, split once per session; every test leaves the
process environment as it found it. numba's cache goes to a directory per state of the
compiled sources (``_numba_cache_key.py``), set before anything imports numba."""
import os

from _numba_cache_key import numba_cache_dir

os.environ.setdefault("NUMBA_CACHE_DIR", numba_cache_dir())

import pytest  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from fedemstats.neural.partition import iid_clients  # noqa: E402

DIGITS_TEST_SIZE = 0.3
DIGITS_PIXEL_MAX = 16.0


@pytest.fixture
def flower_env(tmp_path, monkeypatch):
    """Flower's telemetry off and a temporary FLWR_HOME, so no test writes to the machine's own."""
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr_home"))


@pytest.fixture(autouse=True)
def _environment_restored():
    """Undo what a test wrote to ``os.environ``. Importing ``scripts/_common.py`` in process
    sets NUMBA_NUM_THREADS=1; numba rereads its environment at every compilation and then
    refused to compile anything once its pool had started with 2 threads (CI failure)."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


def _split(X, y):
    return train_test_split(X, y, test_size=DIGITS_TEST_SIZE, random_state=0, stratify=y)


@pytest.fixture(scope="session")
def digits_standardised():
    """(X_train, X_test, y_train, y_test), standardised on the training part."""
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = _split(X, y)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


@pytest.fixture(scope="session")
def digits_iid20():
    """(20 iid clients as (X, y) pairs, (X_test, y_test)), pixels scaled to [0, 1]."""
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = _split(X / DIGITS_PIXEL_MAX, y)
    return iid_clients(Xtr, ytr, 20, random_state=0), (Xte, yte)
