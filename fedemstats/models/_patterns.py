"""Missingness patterns and chunked per-client (segment) sums of per-row vectors.

Rows with the same pattern of observed coordinates share their linear algebra (a
pattern's observed block is factorised once), and per-row quantities are summed per
client over bounded row chunks with one ``np.add.reduceat`` each: one vectorised
pass over all clients, never a Python loop over clients (SPEC §2).
"""
from __future__ import annotations

import numpy as np

__all__ = ["CHUNK_FLOATS", "missing_patterns", "rows_per_chunk", "segment_owner", "segment_sums"]

#: Floats held by one chunk's per-row temporaries; bounds memory at ~32 MB per array
#: whatever n and d are (per-row second moments are d*d each).
CHUNK_FLOATS = 2 ** 22


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
