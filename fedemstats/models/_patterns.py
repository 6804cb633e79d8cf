"""Missingness patterns and chunked per-client (segment) sums of per-row vectors.

Rows with the same pattern of observed coordinates share their linear algebra (a
pattern's observed block is factorised once), and per-row quantities are summed per
client over bounded row chunks with one ``np.add.reduceat`` each: one vectorised
pass over all clients, never a Python loop over clients (SPEC §2).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._threads import run

__all__ = ["CHUNK_FLOATS", "BLAS_MIN_ROWS", "missing_patterns", "rows_per_chunk", "segment_owner", "segment_sums",
           "segment_scatter", "segment_column_sums"]

#: Floats held by one chunk's per-row temporaries; bounds memory at ~32 MB per array
#: whatever n and d are (per-row second moments are d*d each).
CHUNK_FLOATS = 2 ** 22
#: Segments with at least this many rows get their scatter from one BLAS product (in
#: chunks of CHUNK_FLOATS); smaller ones from one compiled pass over all of them (a
#: Python-level product per tiny segment would cost more than the product).
BLAS_MIN_ROWS = 512


def missing_patterns(observed):
    """Group rows by their pattern of observed coordinates.

    Parameters
    ----------
    observed : ndarray of bool of shape (n, d)

    Returns
    -------
    patterns : ndarray of bool of shape (n_patterns, d)
        The distinct patterns (True = observed).
    inverse : ndarray of int64 of shape (n,)
        ``patterns[inverse[i]]`` is row ``i``'s pattern.
    """
    if observed.shape[0] == 0:
        return np.ones((0, observed.shape[1]), dtype=bool), np.zeros(0, dtype=np.int64)
    packed = np.packbits(observed, axis=1)
    _, first, inverse = np.unique(packed, axis=0, return_index=True, return_inverse=True)
    return observed[first], np.asarray(inverse, dtype=np.int64).ravel()


def rows_per_chunk(floats_per_row: int) -> int:
    """Rows per chunk so that one per-row temporary holds about :data:`CHUNK_FLOATS`."""
    return max(1, CHUNK_FLOATS // max(1, int(floats_per_row)))


def segment_owner(seg) -> np.ndarray:
    """Segment (client) index of every row, shape (seg[-1],)."""
    return np.repeat(np.arange(seg.size - 1), np.diff(seg))


def segment_sums(row_fn, seg, width, chunk):
    """Per-segment sums of per-row vectors computed chunk by chunk.

    Parameters
    ----------
    row_fn : callable ``(start, stop) -> ndarray of shape (stop - start, width)``
    seg : ndarray of int of shape (n_seg + 1,)
        Segment boundaries (clients), contiguous and non-empty.
    width : int
    chunk : int
        Rows per call of ``row_fn``.

    Returns
    -------
    sums : ndarray of shape (n_seg, width)
    """
    n, owner = int(seg[-1]), segment_owner(seg)
    out = np.zeros((seg.size - 1, width))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        own = owner[start:stop]
        heads = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
        out[own[heads]] += np.add.reduceat(row_fn(start, stop), heads, axis=0)
    return out


@njit(cache=True, parallel=True)
def _small_segment_scatter(X, seg, which, centre, scale, sums, scatter):
    """Moments of the listed segments of ``(X − centre) / scale``, NaN counted as 0."""
    d = X.shape[1]
    for wi in prange(which.shape[0]):
        g = which[wi]
        c = centre[g]
        z = np.empty(d)
        for r in range(seg[g], seg[g + 1]):
            for i in range(d):
                v = (X[r, i] - c[i]) / scale[i]
                z[i] = 0.0 if np.isnan(v) else v
                sums[g, i] += z[i]
            for i in range(d):
                zi = z[i]
                for j in range(i, d):
                    scatter[g, i, j] += zi * z[j]
        for i in range(d):
            for j in range(i + 1, d):
                scatter[g, j, i] = scatter[g, i, j]


def _blas_scatter(X, a, b, centre, scale, sums, scatter):
    """Sum and scatter of rows a:b of ``(X − centre) / scale`` by chunked BLAS products."""
    for start in range(a, b, rows_per_chunk(X.shape[1])):
        Z = (X[start:min(b, start + rows_per_chunk(X.shape[1]))] - centre) / scale
        np.nan_to_num(Z, copy=False, nan=0.0)
        sums += Z.sum(axis=0)
        scatter += Z.T @ Z


def segment_scatter(X, seg, centre, scale):
    """Per-segment sum and scatter of the standardised rows, missing values counted as 0.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        NaN where missing.
    seg : ndarray of int of shape (n_seg + 1,)
        Segment boundaries (contiguous, non-empty).
    centre : ndarray of shape (d,) or (n_seg, d)
        Subtracted before the products (one point, or one per segment).
    scale : ndarray of shape (d,)

    Returns
    -------
    sums : ndarray of shape (n_seg, d)
        ``Σ z`` with ``z = (x − centre) / scale`` and 0 where x is missing.
    scatter : ndarray of shape (n_seg, d, d)
        ``Σ z zᵀ`` (symmetric).
    """
    n_seg, d = seg.size - 1, X.shape[1]
    centre = np.ascontiguousarray(np.broadcast_to(np.asarray(centre, dtype=np.float64), (n_seg, d)))
    scale = np.asarray(scale, dtype=np.float64)
    sums, scatter = np.zeros((n_seg, d)), np.zeros((n_seg, d, d))
    sizes = np.diff(seg)
    for g in np.flatnonzero(sizes >= BLAS_MIN_ROWS):  # at most n / BLAS_MIN_ROWS of them
        _blas_scatter(X, seg[g], seg[g + 1], centre[g], scale, sums[g], scatter[g])
    small = np.flatnonzero(sizes < BLAS_MIN_ROWS)
    if small.size:
        X = np.ascontiguousarray(X)
        run(_small_segment_scatter, X.size * X.shape[1], X, np.asarray(seg, dtype=np.int64), small, centre, scale,
            sums, scatter)
    return sums, scatter


@njit(cache=True, parallel=True)
def _column_sums(X, seg, centre, square, out):
    for g in prange(seg.shape[0] - 1):
        for r in range(seg[g], seg[g + 1]):
            for i in range(X.shape[1]):
                v = X[r, i] - centre[g, i]
                out[g, i] += v * v if square else v


def segment_column_sums(X, seg, centre=None, square=False) -> np.ndarray:
    """Per-segment column sums, shape (n_seg, d), in one parallel pass over the rows
    (``np.add.reduceat`` along axis 0 is four times slower).

    With ``centre`` of shape (n_seg, d), the sums are of ``x − centre[g]``; with ``square``,
    of its squares (the diagonal of :func:`segment_scatter` for a tenth of its flops).
    """
    n_seg = seg.size - 1
    centre = np.zeros((n_seg, X.shape[1])) if centre is None else np.ascontiguousarray(centre, dtype=np.float64)
    out = np.zeros((n_seg, X.shape[1]))
    X = np.ascontiguousarray(X)
    run(_column_sums, X.size, X, np.asarray(seg, dtype=np.int64), centre, bool(square), out)
    return out
