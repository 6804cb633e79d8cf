"""Every client's local k-means (k-means++ seeding, then Lloyd steps) in one compiled pass.

Each client's computation reads only its own rows; clients run in parallel on
numba's threads. The randomness of the seeding comes from one vectorised draw of
uniforms (one row per client), used by inverse-CDF sampling: the first seed is row
``floor(u n)``, the next ones follow the k-means++ distribution ``d² / Σ d²`` (uniform
when all rows coincide with the seeds). A large client runs on an evenly spread
random sample of its rows, so that the whole initialisation costs less than one E-step.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._threads import run

__all__ = ["local_kmeans_all", "systematic_rows"]


@njit(cache=True)
def _pick(d2, u, n):
    """Index drawn with probabilities d2 / sum(d2) from the uniform u (uniform if d2 is all 0)."""
    total = 0.0
    for t in range(n):
        total += d2[t]
    if total <= 0.0:
        return min(int(u * n), n - 1)
    target, acc = u * total, 0.0
    for t in range(n):
        acc += d2[t]
        if acc > target:
            return t
    return n - 1


@njit(cache=True)
def _transposed(X, rows, a, n):
    """Rows ``rows[a:a+n]`` of X as a (d, n) array (the client's sample, gathered here
    rather than copied out first): the distance loops then run over rows with unit stride
    and vectorise (row by row, over d = 10 features and k centres, they did not)."""
    xt = np.empty((X.shape[1], n))
    for t in range(n):
        r = rows[a + t]
        for i in range(X.shape[1]):
            xt[i, t] = X[r, i]
    return xt


@njit(cache=True)
def _squared_distances(xt, n, c, out):
    """out[t] = sum_i (x_ti - c_i)^2, summed over i in order (the same sum, bit for bit,
    as a row-by-row loop: no reassociation is allowed here)."""
    out[:n] = 0.0
    for i in range(xt.shape[0]):
        ci = c[i]
        for t in range(n):
            diff = xt[i, t] - ci
            out[t] += diff * diff


@njit(cache=True)
def _seed(xt, n, k, u, C, d2, dist):
    """k-means++ seeding of a client's rows (``xt``: them transposed) into C[:k]."""
    C[0, :] = xt[:, min(int(u[0] * n), n - 1)]
    d2[:n] = np.inf
    for j in range(k):
        if j > 0:
            C[j, :] = xt[:, _pick(d2, u[j], n)]
        _squared_distances(xt, n, C[j], dist)
        for t in range(n):
            d2[t] = min(d2[t], dist[t])


@njit(cache=True)
def _lloyd(xt, n, k, n_iter, C, counts, sums, labels, dist):
    """Lloyd steps on a client's rows (``xt``: them transposed) from the centres C[:k]; counts
    are those of the last assignment.

    Stops once an assignment repeats the previous one: the centres it would give are the
    ones it was made from, so every later step would repeat it too (the result is that of
    all ``n_iter`` steps, bit for bit, usually after two or three)."""
    labels[:n] = -1
    for _ in range(n_iter):
        for j in range(k):
            _squared_distances(xt, n, C[j], dist[j])
        changed = False
        for t in range(n):
            best, arg = np.inf, 0
            for j in range(k):
                if dist[j, t] < best:
                    best, arg = dist[j, t], j
            if labels[t] != arg:
                changed = True
            labels[t] = arg
        if not changed:
            break
        counts[:k] = 0
        sums[:k, :] = 0.0
        for t in range(n):
            counts[labels[t]] += 1
            for i in range(xt.shape[0]):
                sums[labels[t], i] += xt[i, t]
        for j in range(k):
            if counts[j] > 0:
                C[j, :] = sums[j] / counts[j]


def systematic_rows(offsets, max_rows, u):
    """Each client's evenly spread random sample of at most ``max_rows`` of its rows.

    Client ``i`` with ``m_i > max_rows`` rows keeps rows ``a_i + floor((j + u_i) m_i / max_rows)``,
    ``j < max_rows`` (systematic sampling: every stretch of its rows is represented);
    smaller clients keep all their rows.

    Parameters
    ----------
    offsets : ndarray of int of shape (n_clients + 1,)
    max_rows : int
    u : ndarray of shape (n_clients,)
        Uniforms in [0, 1), one per client.

    Returns
    -------
    rows : ndarray of int64 of shape (n_kept,) or None
        The kept rows, client by client; None when no client holds more than ``max_rows``.
    sample_offsets : ndarray of int64 of shape (n_clients + 1,)
    """
    sizes = np.diff(offsets)
    if not np.any(sizes > max_rows):
        return None, np.asarray(offsets, dtype=np.int64)
    keep = np.minimum(sizes, max_rows)
    ends = np.cumsum(keep)
    j = np.arange(ends[-1]) - np.repeat(ends - keep, keep)
    m, kept = np.repeat(sizes, keep), np.repeat(keep, keep)
    rows = np.repeat(offsets[:-1], keep) + np.minimum(((j + np.repeat(u, keep)) * m / kept).astype(np.int64), m - 1)
    return rows, np.concatenate([[0], ends]).astype(np.int64)


@njit(cache=True, parallel=True)
def _all_clients(X, rows, seg, ks, u, n_iter, centres, counts, labels):
    K, d = centres.shape[1], X.shape[1]
    for i in prange(seg.shape[0] - 1):
        k = ks[i]
        if k == 0:
            continue
        a, n = seg[i], seg[i + 1] - seg[i]
        xt, dist = _transposed(X, rows, a, n), np.empty((K, n))
        _seed(xt, n, k, u[i], centres[i], np.empty(n), dist[0])
        _lloyd(xt, n, k, n_iter, centres[i], counts[i], np.empty((K, d)), labels[a:a + n], dist)


def local_kmeans_all(X, seg, ks, rng, n_iter, max_rows):
    """Local k-means of every client on its own rows.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    seg : ndarray of int of shape (n_clients + 1,)
        Client boundaries.
    ks : ndarray of int of shape (n_clients,)
        Clusters per client (0 = the client sends nothing), at most its rows.
    rng : numpy.random.Generator
        One draw of ``(n_clients, max(ks) + 1)`` uniforms.
    n_iter : int
        Lloyd steps.
    max_rows : int
        A client with more rows runs on an evenly spread random sample of ``max_rows``
        of them (centroids of iid rows need no more; the cost stays below one E-step).

    Returns
    -------
    centres : ndarray of shape (n_clients, max(ks), d)
        Client ``i``'s centroids in rows ``:ks[i]``.
    counts : ndarray of int of shape (n_clients, max(ks))
        Rows (of the sample) assigned to each centroid by the last assignment step.
    used : ndarray of int of shape (n_clients,)
        Rows each client's k-means ran on, ``min(m_i, max_rows)``.
    rows : ndarray of int of shape (n_used,)
        Those rows, client by client.
    labels : ndarray of int of shape (n_used,)
        Each one's centroid (its last assignment: a centroid is the mean of its rows); -1 for
        a client with no centroid.
    """
    K = int(ks.max()) if ks.size else 0
    u = rng.random((seg.size - 1, K + 1))
    centres = np.zeros((seg.size - 1, K, X.shape[1]))
    counts = np.zeros((seg.size - 1, K), dtype=np.int64)
    rows, labels = np.arange(0), np.full(0, -1, dtype=np.int64)
    if K:
        rows, sample_seg = systematic_rows(np.asarray(seg, dtype=np.int64), max_rows, u[:, K])
        rows = np.arange(X.shape[0]) if rows is None else rows
        labels = np.full(rows.size, -1, dtype=np.int64)
        run(_all_clients, rows.size * X.shape[1] * K * int(n_iter), np.asarray(X, dtype=np.float64), rows, sample_seg,
            np.asarray(ks, dtype=np.int64), u, int(n_iter), centres, counts, labels)
    return centres, counts, np.minimum(np.diff(seg), max_rows), rows, labels
