"""Quantisation blocks in a model's geometry: which coordinates share one norm (issue 12).

Every model geometry cuts its statistic vector into blocks, each quantised under its own norm
(``Geometry.blocks``); :func:`split_blocks` decides them from the layout. See
``docs/geometry.md`` (*Contract*, blocks).
"""
from __future__ import annotations

import numpy as np

__all__ = ["MIN_BLOCK_SIZE", "MERGE_FACTOR", "split_blocks"]

#: Fewest coordinates under one quantisation norm in a model's geometry (``split_blocks``). A
#: norm costs 16 bits at the default 4 levels, what about 8 coordinates' levels cost in the Rice
#: code (32 bits at 64 levels and up, about 4 coordinates' levels): a block below 8 coordinates
#: spends more on its norm than on its values. In the geometry every block is on the scale of
#: its component's weight (that is what whitening does), so a short block can share its
#: neighbour's norm. Where blocks differ in scale they keep their own norms: in raw coordinates
#: (``IdentityGeometry``) and in the Poisson geometry (rates scaled by sqrt(λ), not whitened).
#: Measured on iris (d = 4, ``bench_bits``): the diagonal mixture's 7 blocks become 2 and the
#: imputer's 2 become 1.
MIN_BLOCK_SIZE = 8
#: ... but a short block joins a neighbour only if the two hold at most MERGE_FACTOR x
#: MIN_BLOCK_SIZE coordinates: sharing a norm, a short block's noise grows with the union's
#: norm (about sqrt(union / its length) per coordinate), and next to a long block a saved norm
#: is a small part of the message. A mixture's 2 weights merged into 36 means (the Portal
#: notebook's mixture) saved 0.5% of a message and raised the weights' noise 4.4x.
MERGE_FACTOR = 2


def split_blocks(layout, parts, min_size=MIN_BLOCK_SIZE) -> np.ndarray:
    """Block boundaries that cut each layout block into equal consecutive chunks of at least ``min_size``.

    Sizes come from the layout's *stored* sizes (``layout.offsets``), never from the
    block shapes, so packed symmetric blocks are cut correctly. A layout block asked for
    ``n`` chunks gets the largest divisor of ``n`` whose chunks keep ``min_size``
    coordinates (1 if none does); then every block still shorter than ``min_size`` joins
    its shorter neighbour if the two hold at most ``MERGE_FACTOR * min_size`` coordinates
    (repeatedly, leftmost first). See :data:`MIN_BLOCK_SIZE` and :data:`MERGE_FACTOR`.

    Parameters
    ----------
    layout : StatLayout
    parts : dict of str -> int
        Number of chunks of each named block (1 when absent), e.g. ``{"sum_x": K}``.
    min_size : int, default=MIN_BLOCK_SIZE
        Fewest coordinates under one norm; 1 keeps every requested chunk.

    Returns
    -------
    ndarray of int64 of shape (n_chunks + 1,)
    """
    off = layout.offsets
    sizes = []
    for b, name in enumerate(layout.names):
        n = int(parts.get(name, 1))
        size = int(off[b + 1] - off[b])
        if size % n:
            raise ValueError(f"block {name!r} of stored size {size} does not split into {n} chunks.")
        n = max(m for m in range(1, n + 1) if n % m == 0 and (m == 1 or size // m >= min_size))
        sizes += [size // n] * n
    return np.concatenate([[0], np.cumsum(_merge_short(sizes, min_size))]).astype(np.int64)


def _merge_short(sizes, min_size) -> list:
    """Block sizes after joining every block shorter than ``min_size`` to its shorter neighbour
    while the union stays within ``MERGE_FACTOR * min_size`` coordinates (leftmost short block first)."""
    while (i := _first_merge(sizes, min_size, MERGE_FACTOR * min_size)) is not None:
        sizes[i:i + 2] = [sizes[i] + sizes[i + 1]]
    return sizes


def _first_merge(sizes, min_size, limit):
    """Index i of the pair (i, i + 1) to join: the leftmost short block and its shorter
    neighbour whose union is within ``limit``; None when no short block can join one."""
    for i, size in enumerate(sizes):
        if size >= min_size:
            continue
        fits = [j for j in (i - 1, i + 1) if 0 <= j < len(sizes) and size + sizes[j] <= limit]
        if fits:
            return min(i, min(fits, key=lambda j: sizes[j]))
    return None
