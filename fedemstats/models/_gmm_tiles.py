"""Register-tiled triangular log-density of the full (and tied) Gaussian mixture pass.

``||x_t U_k - mu_k U_k||^2`` for the rows of a chunk held transposed (features x rows,
see :mod:`._gmm_kernels`). A loop forming one or two columns of ``x U_k`` per pass over
the chunk loads and stores them again for every few rows of ``U_k``: it was bound by
loads and stores, not arithmetic. Here every pass works on a :data:`TILE` x
:data:`TILE` block of ``U_k`` held in registers: four loads of x and four of the
partial columns feed sixteen multiply-adds, and the last pass of a column block adds
the squares instead of storing the columns. The innermost loop still runs over rows
with unit stride (SIMD over rows). Edge tiles clamp their indices to valid rows and
columns and give the surplus entries zero weight, so no buffer needs padding. The
order of every sum depends on the chunk's rows only, never on the thread count.
"""
from __future__ import annotations

from numba import njit

#: Rows x columns of U per tile of the triangular product: 4 + 4 loads feed 16 multiply-adds,
#: and the 16 factors, 4 x values and 4 partial columns fit the vector registers.
TILE = 4
#: Let LLVM reassociate the row sums (SIMD reductions) and fuse multiply-adds, but keep
#: IEEE inf/NaN semantics (log pi_k = -inf for an empty component must stay -inf).
#: Shared by :mod:`._gmm_kernels`.
FAST_SUMS = {"reassoc", "contract", "nsz"}


@njit(cache=True, inline="always")
def _mu_u(means, prec, k, j):
    """Column j of mu_k U_k (U_k upper triangular: rows 0..j)."""
    c = 0.0
    for i in range(j + 1):
        c += means[k, i] * prec[k, i, j]
    return c


@njit(cache=True, inline="always")
def _tile_edges(i0, d):
    """Indices i0 + 1 .. i0 + 3 clamped to d - 1, and the weights (1, or 0 for a surplus
    index past the edge) that make a clamped entry count for nothing."""
    return (min(i0 + 1, d - 1), min(i0 + 2, d - 1), min(i0 + 3, d - 1),
            1.0 if i0 + 1 < d else 0.0, 1.0 if i0 + 2 < d else 0.0, 1.0 if i0 + 3 < d else 0.0)


@njit(cache=True, fastmath=FAST_SUMS)
def log_prob_tri(xt, n, means, prec, const, yb, lp):
    """lp[k, t] = const[k] - 0.5 ||x_t U_k - mu_k U_k||^2, U_k upper triangular.

    Columns of ``x U_k`` are built TILE at a time (:func:`_columns4`; two at a time for
    the last one or two, :func:`_columns2`, so no tile is half surplus) and their squares
    added to ``lp[k]``.
    """
    K, d = means.shape
    for k in range(K):
        lpk = lp[k]
        lpk[:n] = 0.0
        for j0 in range(0, d, TILE):
            if d - j0 <= 2:
                _columns2(xt, n, means, prec, k, j0, yb, lpk)
            else:
                _columns4(xt, n, means, prec, k, j0, yb, lpk)
        for t in range(n):
            lpk[t] = const[k] - 0.5 * lpk[t]


@njit(cache=True, fastmath=FAST_SUMS)
def _columns4(xt, n, means, prec, k, j0, yb, lpk):
    """lpk[t] += sum_{j0 <= j < j0 + 4} y_tj^2, y = x U_k - mu_k U_k, in ``yb`` (TILE, >= n)
    over row tiles i0..i0+3 of U_k (only i0 <= j0 + 3: the rest of these columns is zero);
    the last row tile adds the squares instead of storing the columns."""
    d = means.shape[1]
    c0 = j0
    c1, c2, c3, m1, m2, m3 = _tile_edges(j0, d)
    yb[0, :n] = -_mu_u(means, prec, k, c0)  # (x - mu) U = x U - mu U: mu U is the start
    yb[1, :n] = -_mu_u(means, prec, k, c1) * m1
    yb[2, :n] = -_mu_u(means, prec, k, c2) * m2
    yb[3, :n] = -_mu_u(means, prec, k, c3) * m3
    i_end = min(j0 + TILE, d)
    for i0 in range(0, i_end, TILE):
        i1, i2, i3, w1, w2, w3 = _tile_edges(i0, d)
        u00, u01, u02, u03 = (prec[k, i0, c0], prec[k, i0, c1] * m1,
                              prec[k, i0, c2] * m2, prec[k, i0, c3] * m3)
        u10, u11, u12, u13 = (prec[k, i1, c0] * w1, prec[k, i1, c1] * m1 * w1,
                              prec[k, i1, c2] * m2 * w1, prec[k, i1, c3] * m3 * w1)
        u20, u21, u22, u23 = (prec[k, i2, c0] * w2, prec[k, i2, c1] * m1 * w2,
                              prec[k, i2, c2] * m2 * w2, prec[k, i2, c3] * m3 * w2)
        u30, u31, u32, u33 = (prec[k, i3, c0] * w3, prec[k, i3, c1] * m1 * w3,
                              prec[k, i3, c2] * m2 * w3, prec[k, i3, c3] * m3 * w3)
        if i0 + TILE < i_end:
            for t in range(n):
                x0, x1, x2, x3 = xt[i0, t], xt[i1, t], xt[i2, t], xt[i3, t]
                yb[0, t] += x0 * u00 + x1 * u10 + x2 * u20 + x3 * u30
                yb[1, t] += x0 * u01 + x1 * u11 + x2 * u21 + x3 * u31
                yb[2, t] += x0 * u02 + x1 * u12 + x2 * u22 + x3 * u32
                yb[3, t] += x0 * u03 + x1 * u13 + x2 * u23 + x3 * u33
        else:
            for t in range(n):
                x0, x1, x2, x3 = xt[i0, t], xt[i1, t], xt[i2, t], xt[i3, t]
                y0 = yb[0, t] + x0 * u00 + x1 * u10 + x2 * u20 + x3 * u30
                y1 = yb[1, t] + x0 * u01 + x1 * u11 + x2 * u21 + x3 * u31
                y2 = yb[2, t] + x0 * u02 + x1 * u12 + x2 * u22 + x3 * u32
                y3 = yb[3, t] + x0 * u03 + x1 * u13 + x2 * u23 + x3 * u33
                lpk[t] += y0 * y0 + y1 * y1 + y2 * y2 + y3 * y3


@njit(cache=True, fastmath=FAST_SUMS)
def _columns2(xt, n, means, prec, k, j0, yb, lpk):
    """:func:`_columns4` for the last one or two columns (d - j0 <= 2)."""
    d = means.shape[1]
    c1, _, _, m1, _, _ = _tile_edges(j0, d)
    yb[0, :n] = -_mu_u(means, prec, k, j0)
    yb[1, :n] = -_mu_u(means, prec, k, c1) * m1
    for i0 in range(0, d, TILE):
        i1, i2, i3, w1, w2, w3 = _tile_edges(i0, d)
        u00, u01 = prec[k, i0, j0], prec[k, i0, c1] * m1
        u10, u11 = prec[k, i1, j0] * w1, prec[k, i1, c1] * m1 * w1
        u20, u21 = prec[k, i2, j0] * w2, prec[k, i2, c1] * m1 * w2
        u30, u31 = prec[k, i3, j0] * w3, prec[k, i3, c1] * m1 * w3
        if i0 + TILE < d:
            for t in range(n):
                x0, x1, x2, x3 = xt[i0, t], xt[i1, t], xt[i2, t], xt[i3, t]
                yb[0, t] += x0 * u00 + x1 * u10 + x2 * u20 + x3 * u30
                yb[1, t] += x0 * u01 + x1 * u11 + x2 * u21 + x3 * u31
        else:
            for t in range(n):
                x0, x1, x2, x3 = xt[i0, t], xt[i1, t], xt[i2, t], xt[i3, t]
                y0 = yb[0, t] + x0 * u00 + x1 * u10 + x2 * u20 + x3 * u30
                y1 = yb[1, t] + x0 * u01 + x1 * u11 + x2 * u21 + x3 * u31
                lpk[t] += y0 * y0 + y1 * y1
