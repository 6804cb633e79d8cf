"""Rows grouped by client label: label codes by counting, and the stable client order.

``np.unique(return_inverse=True)`` then a stable ``argsort`` cost 70 ms at 1e6 rows;
counting costs 5 ms. Building the federation is part of every fit's set-up (issue 15).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["label_codes", "stable_order"]

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


@njit(cache=True)
def _counting_order(inverse, starts, order):
    for r in range(inverse.shape[0]):
        c = inverse[r]
        order[starts[c]] = r
        starts[c] += 1


def stable_order(inverse, offsets):
    """Row order that puts the rows client by client, each client's in their original order
    (``np.argsort(inverse, kind="stable")``, by counting).

    Parameters
    ----------
    inverse : ndarray of int of shape (n_rows,)
        Each row's client index.
    offsets : ndarray of int of shape (n_clients + 1,)
        Client boundaries (from the counts of ``inverse``).

    Returns
    -------
    order : ndarray of int64 of shape (n_rows,)
    """
    order = np.empty(inverse.shape[0], dtype=np.int64)
    _counting_order(np.asarray(inverse, dtype=np.int64), np.array(offsets[:-1], dtype=np.int64), order)
    return order
