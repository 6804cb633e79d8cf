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

import numpy as np

from .._linalg import safe_cholesky
from .._validation import check_int, check_rng
from ..federation import Federation
from ._patterns import rows_per_chunk, segment_owner, segment_sums

__all__ = ["SUMMARY_MIN_ROWS", "LOCAL_LLOYD_ITER", "INIT_METHODS", "TooFewSummariesError", "check_init_method",
           "client_moments", "combine_moments", "global_moments", "nan_mean", "nan_moments",
           "regularised_nan_moments", "shrink_to_positive_definite", "INIT_MIN_CORRELATION_EIGENVALUE", "public_scale", "CONSTANT_REL_SD", "check_shift_scale", "standardising_shift_scale",
           "local_kmeans", "init_kmeans_summaries", "filled_kmeans_summaries"]

#: No client summary (local k-means centroid) is computed from fewer rows than this,
#: so that no centroid is close to a single raw row.
SUMMARY_MIN_ROWS = 5
#: Lloyd iterations of each client's local k-means (a summary, not a final clustering).
LOCAL_LLOYD_ITER = 10
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
    offset: ``M_i = sum_j (x_j - xbar_i)(x_j - xbar_i)^T``. Both sums run chunk by chunk
    over all clients (no (n, d) copy of the data).

    Returns
    -------
    sizes : ndarray of shape (n_clients,)
    means : ndarray of shape (n_clients, n_features)
    scatters : ndarray of shape (n_clients, n_features, n_features)
    """
    X, seg, sizes = federation.X, federation.offsets, federation.sizes
    d = X.shape[1]
    means = segment_sums(lambda a, b: X[a:b], seg, d, rows_per_chunk(d)) / sizes[:, None]
    owner = segment_owner(seg)

    def centred_outer(a, b):
        Z = X[a:b] - means[owner[a:b]]
        return (Z[:, :, None] * Z[:, None, :]).reshape(b - a, d * d)

    scatters = segment_sums(centred_outer, seg, d * d, rows_per_chunk(d * d)).reshape(-1, d, d)
    return sizes, means, scatters


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
def _client_nan_sums(X, seg, observed):
    """Client part 1: per-client column sums and counts of observed values, (n_clients, d) each."""
    d = X.shape[1]

    def rows(a, b):
        return np.concatenate([np.where(observed[a:b], X[a:b], 0.0), observed[a:b]], axis=1)

    sums = segment_sums(rows, seg, 2 * d, rows_per_chunk(2 * d))
    return sums[:, :d], sums[:, d:]


def _client_pair_sums(X, seg, observed, centre):
    """Client part 2, after the server broadcast the mean ``c``: per-client sums of
    ``(x_j - c_j)(x_l - c_l)`` and counts over rows where both are observed, (n_clients, d, d) each."""
    d = X.shape[1]

    def rows(a, b):
        obs = observed[a:b].astype(np.float64)
        Z = np.where(observed[a:b], X[a:b] - centre, 0.0)
        return np.concatenate([(Z[:, :, None] * Z[:, None, :]).reshape(b - a, d * d),
                               (obs[:, :, None] * obs[:, None, :]).reshape(b - a, d * d)], axis=1)

    sums = segment_sums(rows, seg, 2 * d * d, rows_per_chunk(2 * d * d))
    return sums[:, :d * d].reshape(-1, d, d), sums[:, d * d:].reshape(-1, d, d)


def nan_mean(federation, observed=None) -> np.ndarray:
    """Mean of the observed values of each column from the clients' sums and counts, shape (d,)."""
    observed = ~np.isnan(federation.X) if observed is None else observed
    sums, counts = _client_nan_sums(federation.X, federation.offsets, observed)
    return sums.sum(axis=0) / np.maximum(counts.sum(axis=0), 1.0)


def nan_moments(federation):
    """Mean and pairwise-complete covariance of rows with missing values (two client rounds).

    Clients send their column sums and counts; the server broadcasts the mean ``c``;
    clients send the pairwise sums ``sum (x_j - c_j)(x_l - c_l)`` and pairwise counts over
    their rows where both are observed; the server adds them up.

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
    observed = ~np.isnan(federation.X)
    mean = nan_mean(federation, observed)
    pair_sums, pair_counts = _client_pair_sums(federation.X, federation.offsets, observed, mean)
    pair_n = pair_counts.sum(axis=0)
    cov = np.where(pair_n > 0, pair_sums.sum(axis=0) / np.maximum(pair_n, 1.0), 0.0)
    return mean, 0.5 * (cov + cov.T)


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


# ---------------------------------------------------------------------- k-means summaries
def local_kmeans(Xi, k, rng):
    """k-means++ seeding and a few Lloyd steps on one client's rows: (centroids, counts)."""
    centers = [Xi[rng.integers(Xi.shape[0])]]
    d2 = np.sum((Xi - centers[0]) ** 2, axis=1)
    for _ in range(1, k):
        p = d2 / d2.sum() if d2.sum() > 0 else None
        centers.append(Xi[rng.choice(Xi.shape[0], p=p)])
        d2 = np.minimum(d2, np.sum((Xi - centers[-1]) ** 2, axis=1))
    C = np.array(centers)
    sq_rows = np.sum(Xi ** 2, 1)[:, None]
    for _ in range(LOCAL_LLOYD_ITER):
        labels = np.argmin(sq_rows - 2 * Xi @ C.T + np.sum(C ** 2, 1), axis=1)
        onehot = (labels[:, None] == np.arange(k)).astype(np.float64)
        counts = onehot.sum(axis=0).astype(np.int64)
        sums = onehot.T @ Xi
        nonempty = counts > 0
        C[nonempty] = sums[nonempty] / counts[nonempty, None]
    return C, counts


def init_kmeans_summaries(federation, n_components, rng=None, min_rows=SUMMARY_MIN_ROWS):
    """Initial centres from clients' local k-means summaries.

    Client ``i`` runs k-means with ``min(n_components, m_i // min_rows)`` clusters on its
    own rows and sends only the centroids and counts of clusters with at least
    ``min_rows`` rows (so no centroid is a single row); the server runs weighted
    k-means++ (scikit-learn ``KMeans`` with ``sample_weight`` = counts) on them.

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
    cents, counts = [], []
    for i in range(federation.n_clients):  # each client's k-means is its own computation
        k = min(n_components, int(federation.sizes[i]) // min_rows)
        if k == 0:
            continue
        C, cnt = local_kmeans(federation.client(i), k, rng)
        keep = cnt >= min_rows
        cents.append(C[keep])
        counts.append(cnt[keep])
    n_sent = int(sum(c.shape[0] for c in cents))
    if n_sent < n_components:
        raise TooFewSummariesError(
            f"k-means init: clients sent {n_sent} centroid(s) of >= {min_rows} rows, fewer than "
            f"n_components={n_components}; use init_params='random' or a smaller min_rows.")
    C, w = np.vstack(cents), np.concatenate(counts).astype(np.float64)
    from sklearn.cluster import KMeans  # lazy: node processes that never init stay light

    km = KMeans(n_clusters=n_components, n_init=SERVER_N_INIT,
                random_state=int(rng.integers(np.iinfo(np.int32).max)))
    return km.fit(C, sample_weight=w).cluster_centers_


def filled_kmeans_summaries(federation, fill, n_components, rng, min_rows=SUMMARY_MIN_ROWS):
    """:func:`init_kmeans_summaries` on rows whose missing entries each client fills with
    the public ``fill`` (d,); ``None`` when the clients are too small to send them."""
    filled = np.where(np.isnan(federation.X), fill, federation.X)
    try:
        return init_kmeans_summaries(Federation(filled, federation.offsets), n_components, rng, min_rows=min_rows)
    except TooFewSummariesError:
        return None  # the callers document a fallback to random draws
