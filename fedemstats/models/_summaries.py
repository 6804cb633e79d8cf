"""Model-agnostic federated summaries: what a client sends before the first EM round.

No raw row leaves a client (SPEC §3). Each function below is written in two halves:
the *client part* is a per-client (segment) sum over that client's own rows only,
computed for all clients in one vectorised pass; the *server part* combines those
sums. The summaries are

* counts, means and locally centred scatter matrices (:func:`client_moments`,
  combined by :func:`combine_moments` into :func:`global_moments`);
* sums and pairwise sums of the observed values of rows with missing entries
  (:func:`nan_moments`), and the public shift / scale derived from them;
* local k-means centroids of clusters holding at least ``min_rows`` rows
  (:func:`init_kmeans_summaries`).
"""
from __future__ import annotations

import weakref

import numpy as np
from threadpoolctl import ThreadpoolController

from .._linalg import safe_cholesky
from .._validation import check_int, check_rng
from ..federation import Federation
from ._local_kmeans import local_kmeans_all
from ._patterns import rows_per_chunk, segment_column_sums, segment_scatter

__all__ = ["SUMMARY_MIN_ROWS", "LOCAL_LLOYD_ITER", "INIT_METHODS", "TooFewSummariesError", "check_init_method",
           "client_moments", "client_means", "global_mean", "combine_moments", "global_moments", "global_variances", "client_row_sample", "nan_mean",
           "nan_moments", "regularised_nan_moments", "shrink_to_positive_definite",
           "INIT_MIN_CORRELATION_EIGENVALUE", "public_scale", "CONSTANT_REL_SD", "check_shift_scale",
           "standardising_shift_scale",
           "init_kmeans_summaries", "filled_kmeans_summaries"]

#: No client summary (local k-means centroid) is computed from fewer rows than this,
#: so that no centroid is close to a single raw row.
SUMMARY_MIN_ROWS = 5
#: Lloyd iterations of each client's local k-means (a summary, not a final clustering).
LOCAL_LLOYD_ITER = 10
#: A client's local k-means runs on at most this many of its rows (an evenly spread
#: random sample): enough for K ~ 10 centroids, and the initialisation then costs less
#: than one E-step whatever the client sizes (issue 15 item 4, set-up cost).
LOCAL_KMEANS_MAX_ROWS = 1024
#: Restarts of the server's weighted k-means on the pooled centroids.
SERVER_N_INIT = 4
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
    sizes, means = client_means(federation)
    within = segment_column_sums(federation.X, federation.offsets, centre=means, square=True).sum(axis=0)
    mean = sizes @ means / sizes.sum()
    return (within + sizes @ (means - mean) ** 2) / sizes.sum()


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
def nan_mean(federation, observed=None) -> np.ndarray:
    """Mean of the observed values of each column from the clients' sums and counts, shape (d,)."""
    X = federation.X
    observed = ~np.isnan(X) if observed is None else observed
    sums = np.where(observed, X, 0.0).sum(axis=0)
    return sums / np.maximum(observed.sum(axis=0), 1.0)


def _pair_sums(X, centre):
    """Sums of ``(x_j - c_j)(x_l - c_l)`` and counts over rows where both are observed, (d, d) each.

    Each client's sums are over its own rows; the server only needs their total, which
    is computed here as chunked BLAS products over all rows (the same numbers).
    """
    d = X.shape[1]
    sums, counts = np.zeros((d, d)), np.zeros((d, d))
    for start in range(0, X.shape[0], rows_per_chunk(2 * d)):
        Z = X[start:start + rows_per_chunk(2 * d)] - centre
        missing = np.isnan(Z)
        if missing.any():
            Z[missing] = 0.0
            obs = (~missing).astype(np.float64)
            counts += obs.T @ obs
        else:
            counts += Z.shape[0]
        sums += Z.T @ Z
    return sums, counts


#: federation -> (its X, nan_moments): round 1 is run once per fit (centring, then init)
_NAN_MOMENTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def nan_moments(federation):
    """Mean and pairwise-complete covariance of rows with missing values (two client rounds).

    Clients send their column sums and counts; the server broadcasts the mean ``c``;
    clients send the pairwise sums ``sum (x_j - c_j)(x_l - c_l)`` and pairwise counts over
    their rows where both are observed; the server adds them up. Computed once per
    federation (the public centring and the initialisation both ask for it).

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
    mean = nan_mean(federation)
    pair_sums, pair_n = _pair_sums(federation.X, mean)
    cov = np.where(pair_n > 0, pair_sums / np.maximum(pair_n, 1.0), 0.0)
    result = (mean, 0.5 * (cov + cov.T))
    _NAN_MOMENTS[federation] = (federation.X, result)
    return result[0].copy(), result[1].copy()


def regularised_nan_moments(federation, reg_covar):
    """:func:`nan_moments` made a sane start: correlations shrunk toward the identity by the
    least amount that keeps every eigenvalue at least :data:`INIT_MIN_CORRELATION_EIGENVALUE`
    (:func:`shrink_to_positive_definite`), then ``reg_covar`` on the diagonal."""
    mean, cov = nan_moments(federation)
    cov = shrink_to_positive_definite(cov) + reg_covar * np.eye(cov.shape[0])
    return mean, safe_cholesky(cov, reg_covar)[1]


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
    constant = sd <= CONSTANT_REL_SD * np.abs(mean)
    if not constant.any():
        return sd
    if (~constant).any():
        fill = float(np.median(sd[~constant]))
    else:
        fill = float(np.max(np.abs(mean))) or 1.0
    return np.where(constant, fill, sd)


#: Relative standard deviation (to the column's mean) below which a column is constant
#: up to round-off (see :func:`public_scale`): about 4500 eps, above the rounding of a
#: pairwise-summed mean; genuine data that varies less than this relative to its offset
#: has lost all but 12 of its digits to the offset anyway.
CONSTANT_REL_SD = 1e-12


def standardising_shift_scale(federation) -> dict:
    """``{"shift": mean, "scale": sd}`` from :func:`nan_moments` (round 1, public afterwards)."""
    mean, cov = nan_moments(federation)
    return {"shift": mean, "scale": public_scale(cov, mean)}


# ---------------------------------------------------------------------- row samples
def client_row_sample(federation, max_rows, rng):
    """Each client's evenly spread random sample of at most ``max_rows`` of its own rows.

    Client ``i`` with ``m_i > max_rows`` rows keeps rows ``floor((j + u_i) m_i / max_rows)``,
    ``j < max_rows`` (systematic sampling: every stretch of its rows is represented),
    with ``u_i`` uniform; smaller clients keep all their rows. A client's mean statistic on
    its sample is unbiased for the one on all its rows, and the sample never leaves it.

    Parameters
    ----------
    federation : Federation
    max_rows : int
    rng : numpy.random.Generator
        Drawn from (one uniform per client) only when some client is larger than ``max_rows``.

    Returns
    -------
    Federation
        The samples, with ``federation``'s client weights (``federation`` itself if no
        client is larger than ``max_rows``).
    """
    sizes = federation.sizes
    if not np.any(sizes > max_rows):
        return federation
    keep = np.minimum(sizes, max_rows)
    u = rng.random(federation.n_clients)
    ends = np.cumsum(keep)
    j = np.arange(ends[-1]) - np.repeat(ends - keep, keep)
    m, kept = np.repeat(sizes, keep), np.repeat(keep, keep)
    rows = np.repeat(federation.offsets[:-1], keep) + np.minimum(((j + np.repeat(u, keep)) * m / kept).astype(np.int64),
                                                                   m - 1)
    return Federation(np.take(federation.X, rows, axis=0), np.concatenate([[0], ends]), federation.weights,
                      allow_nan=True, check_input=False)


# ---------------------------------------------------------------------- k-means summaries
def init_kmeans_summaries(federation, n_components, rng=None, min_rows=SUMMARY_MIN_ROWS):
    """Initial centres from clients' local k-means summaries.

    Client ``i`` runs k-means with ``min(n_components, m_i // min_rows)`` clusters on its
    own rows (an evenly spread sample of :data:`LOCAL_KMEANS_MAX_ROWS` of them if it has
    more) and sends only the centroids and counts of clusters averaging at least
    ``min_rows`` rows (so no centroid is a single row), counts scaled to its ``m_i`` rows;
    the server runs weighted k-means++ (scikit-learn ``KMeans`` with ``sample_weight`` =
    counts) on them. All clients' k-means run in one parallel pass (:mod:`._local_kmeans`).

    Parameters
    ----------
    federation : Federation
    n_components : int
    rng : numpy.random.Generator or int, optional
    min_rows : int, default=5
        At least 2.

    Returns
    -------
    means : ndarray of shape (n_components, n_features)

    Raises
    ------
    TooFewSummariesError
        If fewer than ``n_components`` centroids survive (clients too small for
        ``min_rows``); use ``method="random"`` or a smaller ``min_rows``.
    """
    n_components = check_int(n_components, "n_components")
    min_rows = check_int(min_rows, "min_rows", minimum=2)
    rng = check_rng(rng)
    ks = np.minimum(n_components, federation.sizes // min_rows)
    # every client's k-means on its own rows, all clients in one parallel pass
    centres, counts, used = local_kmeans_all(federation.X, federation.offsets, ks, rng, LOCAL_LLOYD_ITER,
                                             LOCAL_KMEANS_MAX_ROWS)
    keep = counts >= min_rows  # (n_clients, max k); unused slots have count 0
    # weights: the client's rows a centroid stands for (counts of a sample scaled up)
    weights = counts * (federation.sizes / used)[:, None]
    C, w = centres[keep], weights[keep].astype(np.float64)
    n_sent = C.shape[0]
    if n_sent < n_components:
        raise TooFewSummariesError(
            f"k-means init: clients sent {n_sent} centroid(s) of >= {min_rows} rows, fewer than "
            f"n_components={n_components}; use init_params='random' or a smaller min_rows.")
    from sklearn.cluster import KMeans  # lazy: node processes that never init stay light

    km = KMeans(n_clusters=n_components, n_init=SERVER_N_INIT,
                random_state=int(rng.integers(np.iinfo(np.int32).max)))
    # a few hundred weighted points: one thread. scikit-learn's OpenMP threads next to
    # numba's (another OpenMP runtime, its threads spinning after the clients' pass) made
    # this fit 50x slower on 2 cores (1.2 s instead of 0.02 s)
    with _thread_pools().limit(limits=1):
        return km.fit(C, sample_weight=w).cluster_centers_


_CONTROLLER = []


def _thread_pools() -> ThreadpoolController:
    """One ThreadpoolController per process: building one scans the loaded libraries
    (2.5 ms per fit). Built after scikit-learn's import, so its OpenMP runtime is in it."""
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]


def filled_kmeans_summaries(federation, fill, n_components, rng, min_rows=SUMMARY_MIN_ROWS):
    """:func:`init_kmeans_summaries` on rows whose missing entries each client fills with
    the public ``fill`` (d,); ``None`` when the clients are too small to send them."""
    filled = np.where(np.isnan(federation.X), fill, federation.X)
    try:
        return init_kmeans_summaries(Federation(filled, federation.offsets), n_components, rng, min_rows=min_rows)
    except TooFewSummariesError:
        return None  # the callers document a fallback to random draws
