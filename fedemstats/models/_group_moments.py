"""Moments of the observed values per (client, missingness pattern) group (issue 15 item 2).

For a Gaussian model (factor analysis, a Gaussian with values missing at random) the
E-step statistics of a row are polynomials of degree <= 2 in its observed values whose
coefficients depend only on the row's missingness pattern. So the sum of a client's
statistics over its rows of one pattern is a function of that group's count ``n_g``,
sum ``s_g = Σ x_o`` and scatter ``M_g = Σ x_o x_oᵀ`` (zero-filled on the missing
coordinates). These moments are computed once per fit (:func:`._patterns.segment_scatter`)
and every EM round is then a few
batched products per group instead of per-row temporaries.

Groups are ordered by client (segment), so per-client sums are one ``np.add.reduceat``.
The values are standardised, ``(x − c) / σ``, before the moments are taken (SPEC §2).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..federation import concat_ranges
from ._patterns import missing_patterns, segment_owner, segment_scatter

__all__ = ["GroupMoments", "group_moments", "cached_group_moments", "moments_or_rows", "MIN_ROWS_PER_FEATURE"]

#: Moments are used when ``n_rows >= MIN_ROWS_PER_FEATURE * n_features * n_groups``,
#: i.e. when the (n_groups, d, d) scatter matrices take no more memory than the data.
#: Below it (many patterns, tiny clients or mini-batches) the per-row path is used.
MIN_ROWS_PER_FEATURE = 1.0


@dataclass(frozen=True, eq=False)
class GroupMoments:
    """Count, sum and scatter of the standardised observed values of each group.

    Attributes
    ----------
    patterns : ndarray of bool of shape (P, d)
        Distinct patterns (True = observed).
    pattern : ndarray of int of shape (G,)
        Pattern of each group.
    seg : ndarray of int of shape (n_seg + 1,)
        Groups ``seg[i]:seg[i + 1]`` belong to segment (client) ``i``.
    count : ndarray of shape (G,)
    sums : ndarray of shape (G, d)
    scatter : ndarray of shape (G, d, d)
        Symmetric; zero rows / columns on the missing coordinates.
    """

    patterns: np.ndarray
    pattern: np.ndarray
    seg: np.ndarray
    count: np.ndarray
    sums: np.ndarray
    scatter: np.ndarray

    @property
    def n_rows(self) -> np.ndarray:
        """Rows per segment, shape (n_seg,)."""
        return self.segment_sums(self.count)

    def segment_sums(self, values) -> np.ndarray:
        """Per-segment sums of per-group values ``(G, ...)``, shape ``(n_seg, ...)``."""
        return np.add.reduceat(values, self.seg[:-1], axis=0)

    def select(self, segments) -> "GroupMoments":
        """The groups of the listed segments, in that order."""
        segments = np.asarray(segments, dtype=np.int64)
        starts, counts = self.seg[segments], np.diff(self.seg)[segments]
        idx = concat_ranges(starts, counts)
        seg = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return GroupMoments(self.patterns, self.pattern[idx], seg, self.count[idx], self.sums[idx],
                            self.scatter[idx])


def _groups(X, seg):
    """Row order, group boundaries, group patterns and segment boundaries in groups.

    Returns ``None`` when there are too many groups for their moments to pay off
    (:data:`MIN_ROWS_PER_FEATURE`).
    """
    n, d = X.shape
    observed = ~np.isnan(X)
    if observed.all():  # one pattern: the groups are the segments
        if n < MIN_ROWS_PER_FEATURE * d * (seg.size - 1):
            return None
        return (None, seg, np.zeros(seg.size - 1, dtype=np.int64), np.ones((1, d), dtype=bool),
                np.arange(seg.size, dtype=np.int64))
    patterns, pat = missing_patterns(observed)
    key = segment_owner(seg) * patterns.shape[0] + pat
    order = np.argsort(key, kind="stable")
    key = key[order]
    heads = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    if n < MIN_ROWS_PER_FEATURE * d * heads.size:
        return None
    group_seg = key[heads] // patterns.shape[0]
    seg_groups = np.searchsorted(group_seg, np.arange(seg.size), side="left").astype(np.int64)
    return order, np.r_[heads, n].astype(np.int64), key[heads] % patterns.shape[0], patterns, seg_groups


def group_moments(X, seg, shift, scale):
    """:class:`GroupMoments` of ``(X − shift) / scale`` per (segment, pattern) group.

    Parameters
    ----------
    X : ndarray of shape (n, d), NaN where missing
    seg : ndarray of int of shape (n_seg + 1,)
        Segment (client) boundaries; no segment is empty.
    shift, scale : ndarray of shape (d,)

    Returns
    -------
    GroupMoments or None
        ``None`` when groups are too small for moments to pay off (use the rows).
    """
    grouped = _groups(X, np.asarray(seg, dtype=np.int64))
    if grouped is None:
        return None
    order, gseg, pattern, patterns, seg_groups = grouped
    rows = X if order is None else X[order]
    sums, scatter = segment_scatter(rows, gseg, shift, scale)
    return GroupMoments(patterns, pattern, seg_groups, np.diff(gseg).astype(np.float64), sums, scatter)


#: federation -> (its X, shift, scale, GroupMoments or None): computed once per fit
_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def cached_group_moments(federation, shift, scale):
    """:func:`group_moments` of all the federation's clients, computed once per
    (federation, shift, scale) and kept while the federation lives.

    Only full local batches may use it: a mini-batch's rows change every round.
    """
    entry = _CACHE.get(federation)
    if entry is not None and entry[0] is federation.X and np.array_equal(entry[1], shift) \
            and np.array_equal(entry[2], scale):
        return entry[3]
    moments = group_moments(federation.X, federation.offsets, shift, scale)
    _CACHE[federation] = (federation.X, np.array(shift), np.array(scale), moments)
    return moments


def moments_or_rows(federation, shift, scale, clients=None, batch=None, rng=None):
    """What a model's E-step runs on: group moments when they pay off, else the rows.

    Full local batches use the federation's cached moments (selected per client);
    mini-batches take the moments of the drawn rows.

    Returns
    -------
    moments : GroupMoments or None
    rows : tuple (X, seg) or None
        The selected rows when ``moments`` is ``None``.
    """
    if batch is None:
        moments = cached_group_moments(federation, shift, scale)
        if moments is not None:
            if clients is None:
                return moments, None
            return moments.select(federation.client_ids(clients)), None
    X, seg = federation.select(clients, batch, rng)
    moments = group_moments(X, seg, shift, scale) if batch is not None else None
    return moments, (None if moments is not None else (X, seg))
