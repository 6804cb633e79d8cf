"""Parameter constraints, array checks and random-state handling, in one place.

Every public entry point validates its input here so that bad input fails early
with a message that says what to do, instead of producing NaN downstream.
"""
from __future__ import annotations

import numbers

import numpy as np

from ._ranges import column_ranges

__all__ = [
    "check_rng",
    "check_array_2d",
    "check_positive",
    "check_probability",
    "check_int",
    "client_round_rng",
    "check_missing_input",
    "check_data_range",
    "column_labels",
    "MAX_DATA_MAGNITUDE",
    "MIN_DATA_SPREAD",
]

#: Largest |x| the second-moment models accept: their statistics hold x² and the step-size
#: controller squares statistic norms (x⁴), so 1e70 keeps x⁴ = 1e280 and its sums over
#: up to 1e28 rows and coordinates below float64's largest value (1.8e308).
MAX_DATA_MAGNITUDE = 1e70
#: Smallest non-zero spread (max - min) of a column: by the same argument x⁴ stays above
#: 1e-280, and variances and their inverses (precisions) stay normal float64 numbers
#: (the smallest normal float64 is 2.2e-308).
MIN_DATA_SPREAD = 1e-70
#: Columns named in one error message (the rest are left out).
SHOWN_COLUMNS = 10


def column_labels(idx, columns=None) -> list:
    """The first :data:`SHOWN_COLUMNS` of the columns ``idx`` as the user knows them: their names
    when ``columns`` (e.g. an estimator's ``feature_names_in_``) is given, else their indices."""
    idx = np.asarray(idx, dtype=np.int64)[:SHOWN_COLUMNS]
    return [str(columns[i]) for i in idx] if columns is not None else idx.tolist()


def check_rng(random_state) -> np.random.Generator:
    """Return a :class:`numpy.random.Generator` from a seed, a Generator or ``None``.

    A legacy :class:`numpy.random.RandomState` is converted by drawing a seed from
    it, so scikit-learn style ``random_state`` arguments are accepted everywhere.
    The same value always gives the same stream (``None`` stays unseeded).
    """
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        random_state = random_state.randint(np.iinfo(np.int32).max)
    if random_state is None or isinstance(random_state, (numbers.Integral, np.integer, np.random.SeedSequence)):
        return np.random.default_rng(random_state)
    raise ValueError(
        f"random_state must be None, an int, a numpy Generator or RandomState; got {random_state!r}."
    )


def check_array_2d(X, *, name: str = "X", allow_nan: bool = False, min_rows: int = 1) -> np.ndarray:
    """Return ``X`` as a C-contiguous float64 array of shape (n_rows, n_features).

    Raises
    ------
    ValueError
        If ``X`` is not 2-D, has fewer than ``min_rows`` rows, no columns, or holds
        inf (always) or NaN (unless ``allow_nan``).
    """
    try:
        arr = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric; could not convert to float64: {exc}") from exc
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D of shape (n_samples, n_features); got {arr.ndim}-D "
            f"shape {arr.shape}. Reshape 1-D data with x.reshape(-1, 1)."
        )
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has 0 features; at least one column is required.")
    if arr.shape[0] < min_rows:
        raise ValueError(f"{name} has {arr.shape[0]} rows; at least {min_rows} are required.")
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains inf; remove or clip infinite values.")
    if not allow_nan and np.isnan(arr).any():
        raise ValueError(
            f"{name} contains NaN; this model does not accept missing values "
            "(use FederatedImputer or a missing-value model)."
        )
    return arr


def check_positive(value, name: str, *, strict: bool = True) -> float:
    """Return ``value`` as a float, checking it is finite and > 0 (or >= 0)."""
    if not isinstance(value, (numbers.Real, np.floating, np.integer)) or isinstance(value, bool):
        raise ValueError(f"{name} must be a real number; got {value!r}.")
    v = float(value)
    if not np.isfinite(v) or (v <= 0 if strict else v < 0):
        bound = "> 0" if strict else ">= 0"
        raise ValueError(f"{name} must be finite and {bound}; got {value!r}.")
    return v


def check_probability(value, name: str) -> float:
    """Return ``value`` as a float in (0, 1]."""
    v = check_positive(value, name)
    if v > 1.0:
        raise ValueError(f"{name} must lie in (0, 1]; got {value!r}.")
    return v


def check_int(value, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")
    if int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def client_round_rng(entropy: int, round_: int, client: int) -> np.random.Generator:
    """The random stream of client ``client`` in round ``round_``.

    Derived from a public ``entropy`` with :class:`numpy.random.SeedSequence`
    spawn keys, so a client can reproduce it alone (e.g. a Flower node given the
    run's entropy): in-process runs and framework runs then draw the same
    quantisation noise, and clients need no persistent random state.

    Legacy: it builds a SeedSequence and a Generator per client per round (about
    15 µs each). :class:`fedemstats.compression.ClientStreams` gives every client
    of a round its own counter-based stream (Philox keyed by entropy, round and
    client) in one compiled call, with the same reproducibility; the two draw
    different numbers, so a run must use one of them on every client.
    """
    return np.random.default_rng(np.random.SeedSequence(int(entropy), spawn_key=(int(round_), int(client))))


def check_missing_input(X, observed=None, *, fitting=True, columns=None, all_columns=True) -> np.ndarray:
    """Reject inputs the missing-value models cannot learn from.

    Parameters
    ----------
    X : ndarray of shape (n, d), NaN where missing
    observed : ndarray of bool of shape (n, d), optional
        ``~np.isnan(X)`` when not given.
    fitting : bool, default=True
        Also reject rows with no observed value.
    columns : sequence of str, optional
        Column names for the error (the estimator's ``feature_names_in_``); indices otherwise.
    all_columns : bool, default=True
        Reject a column with no observed value (off for one client's part of the data: another
        client may observe it).

    Returns
    -------
    observed : ndarray of bool of shape (n, d)

    Raises
    ------
    ValueError
        If a column (when ``all_columns``) has no observed value, or (when ``fitting``) a row has none:
        such rows carry no information and are *not* skipped silently.
    """
    observed = ~np.isnan(X) if observed is None else observed
    empty_cols = np.flatnonzero(~observed.any(axis=0))
    if all_columns and empty_cols.size:
        raise ValueError(f"column(s) {column_labels(empty_cols, columns)} have no observed value; a model "
                         "cannot be fitted for them: drop these columns.")
    if fitting:
        empty_rows = np.flatnonzero(~observed.any(axis=1))
        if empty_rows.size:
            raise ValueError(
                f"{empty_rows.size} row(s) (e.g. {empty_rows[:5].tolist()}) have no observed value. "
                "They carry no information about the parameters and are not skipped "
                "silently: drop them before fit, e.g. X[~np.isnan(X).all(axis=1)] "
                "(transform imputes such rows with the fitted marginal means).")
    return observed


def check_data_range(X, *, name: str = "X", columns=None) -> None:
    """Reject data whose second moments float64 cannot represent.

    The estimators are equivariant to rescaling the data; this is the one place where the
    data's magnitude matters: a variance of values of magnitude 1e300 overflows, one of a
    spread of 1e-300 underflows to zero. Constant columns (spread exactly 0) are accepted, unless
    every column is constant and tiny (their magnitude is then the columns' scale).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Finite where not NaN.
    name : str
        The argument named in the error.
    columns : sequence of str, optional
        Column names for the error (the estimator's ``feature_names_in_``); indices otherwise.

    Raises
    ------
    ValueError
        Naming ``name``, the columns, the magnitude found and the float64 limit it breaks.
    """
    if X.size == 0:
        return
    lo, hi = column_ranges(X)
    seen = lo <= hi
    if not seen.any():
        return
    size = np.where(seen, np.maximum(np.abs(lo), np.abs(hi)), 0.0)
    magnitude = float(np.max(size))
    if magnitude > MAX_DATA_MAGNITUDE:
        huge = np.flatnonzero(size > MAX_DATA_MAGNITUDE)
        raise ValueError(
            f"column(s) {column_labels(huge, columns)} of {name} hold values of magnitude up to {magnitude:.3g}, above "
            f"{MAX_DATA_MAGNITUDE:.0e}: their squares and sums of squares are too large for float64 (largest "
            "1.8e308), so the variances cannot be represented. Rescale those column(s) (results are "
            f"equivariant to rescaling a column), e.g. divide them by {magnitude:.0e}.")
    spread = np.where(seen, hi - lo, np.nan)  # an all-NaN column is reported by its own check
    if not np.any(spread > 0) and 0.0 < magnitude < MIN_DATA_SPREAD:
        # every column constant: the data's own magnitude becomes the public scale of its columns
        raise ValueError(
            f"{name} is constant with values of magnitude at most {magnitude:.3g}, below {MIN_DATA_SPREAD:.0e}: "
            "their squares are too small for float64 (smallest normal 2.2e-308), so the variances cannot be "
            f"represented. Rescale {name} (results are equivariant to rescaling), e.g. multiply it by "
            f"{1.0 / magnitude:.0e}.")
    tiny = np.flatnonzero((spread > 0) & (spread < MIN_DATA_SPREAD))
    if tiny.size:
        smallest = float(spread[tiny].min())
        raise ValueError(
            f"column(s) {column_labels(tiny, columns)} of {name} vary by at most {smallest:.3g}, below "
            f"{MIN_DATA_SPREAD:.0e}: their variances are too small for float64 (smallest normal 2.2e-308) "
            f"and cannot be represented. Rescale those column(s) (results are equivariant to rescaling a "
            f"column), e.g. multiply them by {1.0 / smallest:.0e}.")
