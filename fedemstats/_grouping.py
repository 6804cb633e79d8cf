"""Rows grouped by client label: label codes by counting, and the stable client order.

``np.unique(return_inverse=True)``, a stable ``argsort`` and a gather cost 95 ms at 1e6 x 10;
counting and one parallel scatter cost about 21 ms. Building the federation is part of every fit's set-up (issue 15).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._threads import run

__all__ = ["label_codes", "group_rows"]

#: Integer labels spanning at most this many times the number of rows are coded by counting
#: (np.bincount) instead of np.unique's sort: 2 ms against 56 ms at 1e6 rows.
COUNTING_SPAN_PER_ROW = 4


def label_codes(groups):
    """Sorted distinct labels, each row's client index, and the rows per client.

    Returns
    -------
    labels : ndarray of shape (n_clients,)
    inverse : ndarray of int of shape (n_rows,)
        ``labels[inverse] == groups``.
    counts : ndarray of int64 of shape (n_clients,)
    """
    if groups.dtype.kind in "iub" and groups.size:
        low, high = int(groups.min()), int(groups.max())
        if high - low <= COUNTING_SPAN_PER_ROW * groups.size and high < 2 ** 63:
            shifted = groups.astype(np.int64) - low
            present = np.bincount(shifted)
            seen = np.flatnonzero(present)
            code = np.zeros(present.size, dtype=np.int64)
            code[seen] = np.arange(seen.size)
            return (seen + low).astype(groups.dtype), code[shifted], present[seen].astype(np.int64)
    labels, inverse = np.unique(groups, return_inverse=True)
    return labels, inverse, np.bincount(inverse, minlength=labels.size).astype(np.int64)


#: Row blocks of :func:`group_rows`' parallel scatter (a fixed number: the result is a
#: permutation, the same whatever the split, and a few blocks per core balance the load).
SCATTER_BLOCKS = 8
#: Below this many rows the scatter runs as one block.
SCATTER_MIN_ROWS = 65536


@njit(cache=True, parallel=True)
def _scatter_rows(X, inverse, offsets, nb, out, order):
    """out[p] = X[r] and order[p] = r, p running through each client's slot in row order."""
    n, n_clients = inverse.shape[0], offsets.shape[0] - 1
    counts = np.zeros((nb, n_clients), dtype=np.int64)
    for b in prange(nb):
        for r in range(n * b // nb, n * (b + 1) // nb):
            counts[b, inverse[r]] += 1
    # block b writes each client's rows after those of blocks 0..b-1: the order stays stable
    starts = np.empty((nb, n_clients), dtype=np.int64)
    for c in range(n_clients):
        p = offsets[c]
        for b in range(nb):
            starts[b, c] = p
            p += counts[b, c]
    for b in prange(nb):
        pos = starts[b]
        for r in range(n * b // nb, n * (b + 1) // nb):
            c = inverse[r]
            p = pos[c]
            pos[c] = p + 1
            order[p] = r
            for j in range(X.shape[1]):
                out[p, j] = X[r, j]


def group_rows(X, inverse, offsets):
    """The rows client by client, each client's in their original order, in one parallel pass.

    ``X[np.argsort(inverse, kind="stable")]`` by counting and scattering: rows are read in
    order and written to their client's slot (``np.take`` gathers them, a random read per
    row: 25 ms at 1e6 x 10 against 18 ms here, of which about 10 ms is the first touch of the
new array's pages; part of every fit's set-up, issue 15).

    Parameters
    ----------
    X : ndarray of shape (n_rows, d)
    inverse : ndarray of int of shape (n_rows,)
        Each row's client index.
    offsets : ndarray of int of shape (n_clients + 1,)
        Client boundaries (from the counts of ``inverse``).

    Returns
    -------
    rows : ndarray of shape (n_rows, d)
        ``X[order]``.
    order : ndarray of int64 of shape (n_rows,)
    """
    X = np.ascontiguousarray(X)
    n = X.shape[0]
    rows, order = np.empty_like(X), np.empty(n, dtype=np.int64)
    nb = SCATTER_BLOCKS if n >= SCATTER_MIN_ROWS else 1
    run(_scatter_rows, X.size, X, np.asarray(inverse, dtype=np.int64), np.asarray(offsets, dtype=np.int64), nb,
        rows, order)
    return rows, order
