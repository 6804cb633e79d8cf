"""Model-agnostic federated summaries: what a client sends before the first EM round.

No raw row leaves a client (SPEC §3). Each function below is written in two halves:
the *client part* is a per-client (segment) sum over that client's own rows only,
computed for all clients in one vectorised pass; the *server part* combines those
sums. The summaries are

* counts, means and locally centred scatter matrices (:func:`client_moments`,
  combined by :func:`combine_moments` into :func:`global_moments`);
* sums and pairwise sums of the observed values of rows with missing entries
  (:func:`nan_moments`; a deployment's nodes send :mod:`._pair_moments` instead), and the
  public shift / scale derived from them;
* local k-means centroids of clusters holding at least ``min_rows`` rows
  (:mod:`._kmeans_summaries`, with the row samples of the k-means start).
"""
from __future__ import annotations

import weakref

import numpy as np

from .._linalg import safe_cholesky
from ._pair_moments import (MIN_OBSERVED_ROWS, drop_rare_pairs, observed_means, pair_products, pairwise_covariance,
                            withhold_rare_cells)
from ._patterns import segment_column_sums, segment_scatter

__all__ = ["SUMMARY_MIN_ROWS", "INIT_METHODS", "TooFewSummariesError", "check_init_method",
           "client_moments", "client_means", "global_mean", "combine_moments", "global_moments", "global_variances",
           "global_mean_and_variances", "shared_cells", "nan_mean", "nan_moments", "regularised_nan_moments",
           "regularise_moments", "shrink_to_positive_definite", "INIT_MIN_CORRELATION_EIGENVALUE", "public_scale",
           "constant_columns", "CONSTANT_REL_SD", "check_shift_scale", "standardising_shift_scale"]

#: No client summary (local k-means centroid) is computed from fewer rows than this,
#: so that no centroid is close to a single raw row.
SUMMARY_MIN_ROWS = 5
#: Federated initialisations of the mixtures: k-means summaries or random draws from global moments.
INIT_METHODS = ("kmeans", "random")


class TooFewSummariesError(ValueError):
    """Clients are too small to send ``n_components`` centroids of ``min_rows`` rows.

    Callers that document a fallback (e.g. to global moments) catch exactly this,
    never a bare ValueError, so real input errors still surface.
    """


def check_init_method(method) -> str:
    """``method`` if it is one of :data:`INIT_METHODS`, else ``ValueError``."""
    if method not in INIT_METHODS:
        raise ValueError(f"method must be one of {INIT_METHODS}; got {method!r}.")
    return method


# ---------------------------------------------------------------------- complete rows
def client_moments(federation):
    """Client part of the global moments: each client's count, mean and centred scatter.

    Client ``i`` centres its rows on its own mean, so no precision is lost to a large
    offset: ``M_i = sum_j (x_j - xbar_i)(x_j - xbar_i)^T`` (:func:`._patterns.segment_scatter`:
    BLAS products for large clients, one compiled pass for many small ones).

    Returns
    -------
    sizes : ndarray of shape (n_clients,)
    means : ndarray of shape (n_clients, n_features)
    scatters : ndarray of shape (n_clients, n_features, n_features)
    """
    sizes, means = client_means(federation)
    _, scatters = segment_scatter(federation.X, federation.offsets, means, np.ones(federation.n_features))
    return sizes, means, scatters


def client_means(federation):
    """Each client's count (n_clients,) and mean (n_clients, n_features): one pass over the rows."""
    sizes = federation.sizes
    return sizes, segment_column_sums(federation.X, federation.offsets) / sizes[:, None]


def global_mean(federation) -> np.ndarray:
    """Pooled mean, shape (n_features,), from the clients' counts and means (rows pooled)."""
    sizes, means = client_means(federation)
    return sizes @ means / sizes.sum()


def combine_moments(sizes, client_means, within):
    """Server part: Chan et al.'s parallel combination of per-client moments.

    Parameters
    ----------
    sizes : ndarray of shape (n_clients,)
    client_means : ndarray of shape (n_clients, n_features)
    within : ndarray of shape (n_features, n_features)
        Sum of the clients' centred scatter matrices, sum_i M_i.

    Returns
    -------
    mean : ndarray of shape (n_features,)
    cov : ndarray of shape (n_features, n_features)
        ``(sum_i M_i + sum_i m_i (xbar_i - xbar)(xbar_i - xbar)^T) / N``.
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    mean = sizes @ client_means / sizes.sum()
    dev = client_means - mean
    cov = (within + (dev * sizes[:, None]).T @ dev) / sizes.sum()
    return mean, 0.5 * (cov + cov.T)


def global_variances(federation) -> np.ndarray:
    """Pooled maximum-likelihood variance of each column, shape (n_features,): the diagonal of
    :func:`global_moments`' covariance from the clients' counts, means and centred sums of
    squares (one pass, no d × d scatter)."""
    return global_mean_and_variances(federation)[1]


def global_mean_and_variances(federation):
    """Pooled mean and maximum-likelihood column variances, both of shape (n_features,), from
    the clients' counts, means and sums of squares centred on their own means (two passes)."""
    sizes, means = client_means(federation)
    within = segment_column_sums(federation.X, federation.offsets, centre=means, square=True).sum(axis=0)
    mean = sizes @ means / sizes.sum()
    return mean, (within + sizes @ (means - mean) ** 2) / sizes.sum()


def global_moments(federation):
    """Pooled mean and maximum-likelihood (divide by N) covariance from client summaries.

    Rows are pooled (sample weights), whatever the federation weights.

    Returns
    -------
    mean : ndarray of shape (n_features,)
    cov : ndarray of shape (n_features, n_features)
    """
    sizes, means, scatters = client_moments(federation)
    return combine_moments(sizes, means, scatters.sum(axis=0))


# ---------------------------------------------------------------------- rows with missing values
def shared_cells(federation):
    """The federation's rows as its clients share them in the start's moments: NaN also at
    the cells of a column that the cell's client observes in fewer than
    :data:`._pair_moments.MIN_OBSERVED_ROWS` rows (:func:`._pair_moments.withhold_rare_cells`).

    Returns
    -------
    X : ndarray of shape (n, d)
    counts : ndarray of int of shape (n_clients, d)
        Each client's shared values per column.

    Raises
    ------
    ValueError
        If a column is observed, but by no client in that many rows.
    """
    X, counts = withhold_rare_cells(federation.X, federation.offsets)
    if X is not federation.X:
        lost = np.flatnonzero((counts.sum(axis=0) == 0) & ~np.isnan(federation.X).all(axis=0))
        if lost.size:
            raise ValueError(
                f"column(s) {lost.tolist()} are observed in fewer than {MIN_OBSERVED_ROWS} rows of every client "
                f"that observes them: a client's mean of one value is that value, which never leaves it, so no "
                f"start can be computed for them. Drop these columns, or group the rows into larger clients.")
    return X, counts


def nan_mean(federation) -> np.ndarray:
    """Mean of the observed values of each column from the clients' sums and counts, shape (d,);
    a client's column it observes in one row only is left out (:func:`shared_cells`)."""
    return observed_means(shared_cells(federation)[0])


#: federation -> (its X, nan_moments): round 1 is run once per fit (centring, then init)
_NAN_MOMENTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def nan_moments(federation):
    """Mean and pairwise-complete covariance of rows with missing values (two client rounds).

    Clients send their column sums and counts; the server broadcasts the mean ``c``;
    clients send the pairwise sums ``sum (x_j - c_j)(x_l - c_l)`` and pairwise counts over
    their rows where both are observed; the server adds them up. A client leaves out a column
    it observes in one row only (:func:`shared_cells`), and a pair of columns it observes
    together in one row only (:func:`._pair_moments.drop_rare_pairs`), as a deployment's nodes
    do. Computed once per federation (the public centring and the initialisation both ask for it).

    Parameters
    ----------
    federation : Federation
        NaN where missing; every column needs an observed value.

    Returns
    -------
    mean : ndarray of shape (d,)
    cov : ndarray of shape (d, d)
        Symmetric, not necessarily positive definite (pairwise deletion); pairs never
        observed together get 0.
    """
    cached = _NAN_MOMENTS.get(federation)
    if cached is not None and cached[0] is federation.X:
        return cached[1][0].copy(), cached[1][1].copy()
    X, seen = shared_cells(federation)
    mean = observed_means(X)
    # each client's sums are over its own rows; the server only needs their total, computed here
    # over all rows at once (the same numbers), less the pairs a client observes too rarely
    counts, _, products = pair_products(X, mean)
    counts, products = drop_rare_pairs(X, federation.offsets, seen, mean, counts, products)
    result = (mean, pairwise_covariance(products, counts))
    _NAN_MOMENTS[federation] = (federation.X, result)
    return result[0].copy(), result[1].copy()


def regularised_nan_moments(federation, reg_covar, scale=None):
    """:func:`regularise_moments` of :func:`nan_moments`."""
    return regularise_moments(*nan_moments(federation), reg_covar, scale)


def regularise_moments(mean, cov, reg_covar, scale=None):
    """Pairwise-complete moments made a sane start: correlations shrunk toward the identity by the
    least amount that keeps every eigenvalue at least :data:`INIT_MIN_CORRELATION_EIGENVALUE`
    (:func:`shrink_to_positive_definite`), then ``reg_covar`` on the diagonal, in units of the
    public ``scale`` (shape (d,); default ones: original units).

    Returns
    -------
    mean : ndarray of shape (d,)
        ``mean`` itself.
    cov : ndarray of shape (d, d)
        Positive definite.
    """
    units = 1.0 if scale is None else np.outer(scale, scale)
    cov = shrink_to_positive_definite(cov) / units + reg_covar * np.eye(cov.shape[0])
    # the shrinkage already bounds the correlations' eigenvalues (scale-free): a floor relative to
    # the largest eigenvalue (rel > 0) raised a unit-scale column's variance 100x next to one of
    # scale 1e6, and the fitted correlations fell from 0.42 to 0.03 (imputations: the column mean)
    return mean, safe_cholesky(cov, reg_covar, rel=0.0)[1] * units


def shrink_to_positive_definite(cov, min_eigenvalue=None):
    """``D^{1/2} ((1 − λ) R + λ I) D^{1/2}`` with the smallest λ in [0, 1] giving the correlation
    part eigenvalues ≥ ``min_eigenvalue`` (default :data:`INIT_MIN_CORRELATION_EIGENVALUE`).

    Pairwise-complete moments (values missing at random) can be indefinite; flooring their
    negative eigenvalues (the old repair) left an almost singular start whose first
    log-likelihood was hundreds of nats per row below the data's. Shrinking the correlations
    toward the diagonal keeps every variance and the correlations' directions, and is the
    least change (in λ) that makes the start well conditioned; λ is exact, since the
    eigenvalues of (1 − λ) R + λ I are (1 − λ) ℓ + λ.

    Parameters
    ----------
    cov : ndarray of shape (d, d)
        Symmetric; zero variances are left alone (their rows and columns stay zero).
    min_eigenvalue : float, optional

    Returns
    -------
    ndarray of shape (d, d)
    """
    floor = INIT_MIN_CORRELATION_EIGENVALUE if min_eigenvalue is None else float(min_eigenvalue)
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    live = sd > 0
    if live.sum() < 2:
        return cov
    corr = cov[np.ix_(live, live)] / np.outer(sd[live], sd[live])
    smallest = float(np.linalg.eigvalsh(0.5 * (corr + corr.T))[0])
    if smallest >= floor:
        return cov
    lam = (floor - smallest) / (1.0 - smallest)
    shrunk = cov.copy()
    block = (1.0 - lam) * corr + lam * np.eye(corr.shape[0])
    shrunk[np.ix_(live, live)] = block * np.outer(sd[live], sd[live])
    return shrunk


#: Smallest eigenvalue the initial correlation matrix of a missing-value model may have
#: (:func:`shrink_to_positive_definite`): 1% of a unit variance keeps the start's
#: conditional variances away from zero without visibly changing a well-conditioned matrix.
INIT_MIN_CORRELATION_EIGENVALUE = 1e-2


# ---------------------------------------------------------------------- public shift and scale
def check_shift_scale(shift, scale, d):
    """Validated public centre ``c`` (default zeros) and positive scales ``σ`` (default ones).

    Returns
    -------
    shift, scale : ndarray of shape (d,)
    """
    shift = np.zeros(d) if shift is None else np.array(shift, dtype=np.float64).ravel()
    scale = np.ones(d) if scale is None else np.array(scale, dtype=np.float64).ravel()
    if shift.shape != (d,) or not np.all(np.isfinite(shift)):
        raise ValueError(f"shift must be a finite array of shape ({d},).")
    if scale.shape != (d,) or not np.all(np.isfinite(scale)) or (scale <= 0).any():
        raise ValueError(f"scale must be a finite positive array of shape ({d},).")
    return shift, scale


def public_scale(cov, mean=None):
    """Standard deviations from a (pairwise) covariance; constant columns get the data's scale.

    A column whose standard deviation is at most :data:`CONSTANT_REL_SD` times its mean's
    magnitude is constant up to the round-off of the mean (which spreads a constant column
    by about ``n eps |mean|``). Its scale is the median scale of the other columns (the
    whole data's magnitude when every column is constant, 1 if that is zero): a scale that
    moves with the data keeps the models' relative variance floors equivariant to
    rescaling, where a fixed 1 would make them absolute.

    Parameters
    ----------
    cov : ndarray of shape (d, d)
    mean : ndarray of shape (d,), optional
        The columns' means (default zeros: only exact zero variances are constant).

    Returns
    -------
    ndarray of shape (d,)
        Positive.
    """
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    mean = np.zeros_like(sd) if mean is None else np.asarray(mean, dtype=np.float64)
    constant = constant_columns(sd, mean)
    if not constant.any():
        return sd
    if (~constant).any():
        fill = float(np.median(sd[~constant]))
    else:
        fill = float(np.max(np.abs(mean))) or 1.0
    return np.where(constant, fill, sd)


def constant_columns(sd, mean):
    """Whether each column is constant up to the round-off of its mean, shape (d,):
    standard deviation at most :data:`CONSTANT_REL_SD` times the mean's magnitude."""
    return np.asarray(sd) <= CONSTANT_REL_SD * np.abs(mean)


#: Relative standard deviation (to the column's mean) below which a column is constant
#: up to round-off (see :func:`public_scale`): about 4500 eps, above the rounding of a
#: pairwise-summed mean; genuine data that varies less than this relative to its offset
#: has lost all but 12 of its digits to the offset anyway.
CONSTANT_REL_SD = 1e-12


def standardising_shift_scale(federation) -> dict:
    """``{"shift": mean, "scale": sd}`` from :func:`nan_moments` (round 1, public afterwards)."""
    mean, cov = nan_moments(federation)
    return {"shift": mean, "scale": public_scale(cov, mean)}
