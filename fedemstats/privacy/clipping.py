"""Clipping: rows in the public geometry, statistic vectors to a norm."""
from __future__ import annotations

import numpy as np

__all__ = ["clip_rows", "clip_vectors"]


def clip_rows(X, center, scale, radius):
    """Rows clipped to norm ``radius`` in the public geometry u = (x − center) / scale.

    Missing entries (NaN) stay missing; the norm is over the observed entries.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    center, scale : ndarray of shape (d,)
        Public (never computed from the data).
    radius : float

    Returns
    -------
    ndarray of shape (n, d)
        center + scale · u · min(1, radius / ‖u‖); rows inside the ball are unchanged.
    """
    u = (np.asarray(X, dtype=np.float64) - center) / scale
    return center + scale * _shrink(u, np.sqrt(np.nansum(u * u, axis=1)), radius)


def clip_vectors(V, bound):
    """Each row of ``V`` (shape (n, q)) scaled down to norm ≤ ``bound``; returns a new array."""
    V = np.asarray(V, dtype=np.float64)
    return _shrink(V, np.linalg.norm(V, axis=1), bound)


def _shrink(V, norms, bound):
    """Rows of ``V`` times min(1, bound / norm) (a zero row stays zero)."""
    return V * np.minimum(1.0, bound / np.maximum(norms, np.finfo(float).tiny))[:, None]
