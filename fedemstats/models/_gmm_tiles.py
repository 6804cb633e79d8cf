"""Register tiles of the full (and tied) Gaussian mixture pass: the triangular
log-density and the weighted second moments.

Both work on the rows of a chunk held transposed (features x rows, see
:mod:`._gmm_kernels`); the innermost loop runs over rows with unit stride (SIMD over
rows), and the order of every sum depends on the chunk's rows only, never on the thread
count. Loops that formed one or two columns per pass over the chunk loaded and stored
them again for every few entries: they were bound by loads and stores, not arithmetic.

- :func:`log_prob_tri`, ``||x_t U_k - mu_k U_k||^2``: every pass works on a
  :data:`TILE` x :data:`TILE` block of ``U_k`` held in registers: four loads of x and
  four of the partial columns feed sixteen multiply-adds, and the last pass of a column
  block, U's diagonal block, adds the squares instead of storing the columns and skips
  the zeros below U's diagonal.
- :func:`weighted_upper`, ``sum_t r_t x_t x_t^T`` (packed upper triangle): a TILE x TILE
  block of sums stays in registers over the whole chunk; diagonal blocks sum only their
  upper half.

Edge tiles clamp their indices to valid rows and columns; surplus entries get zero weight
(log-density) or are not written (moments), so no buffer needs padding.
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
def _clamped(i0, d):
    """Indices i0 + 1 .. i0 + 3 clamped to d - 1."""
    return min(i0 + 1, d - 1), min(i0 + 2, d - 1), min(i0 + 3, d - 1)


@njit(cache=True, inline="always")
def _tile_edges(i0, d):
    """Indices i0 + 1 .. i0 + 3 clamped to d - 1, and the weights (1, or 0 for a surplus
    index past the edge) that make a clamped entry count for nothing."""
    i1, i2, i3 = _clamped(i0, d)
    return i1, i2, i3, 1.0 if i0 + 1 < d else 0.0, 1.0 if i0 + 2 < d else 0.0, 1.0 if i0 + 3 < d else 0.0


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
    the last row tile, the diagonal block (i0 == j0), adds the squares instead of storing the
    columns and skips U_k's zeros below the diagonal (d = 10: 55 multiply-adds per row and
    component instead of 72)."""
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
                y0 = yb[0, t] + x0 * u00
                y1 = yb[1, t] + x0 * u01 + x1 * u11
                y2 = yb[2, t] + x0 * u02 + x1 * u12 + x2 * u22
                y3 = yb[3, t] + x0 * u03 + x1 * u13 + x2 * u23 + x3 * u33
                lpk[t] += y0 * y0 + y1 * y1 + y2 * y2 + y3 * y3


@njit(cache=True, fastmath=FAST_SUMS)
def _columns2(xt, n, means, prec, k, j0, yb, lpk):
    """:func:`_columns4` for the last one or two columns (d - j0 <= 2; j0 is a multiple of
    TILE, so the last row tile is the diagonal block)."""
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
                x0, x1 = xt[i0, t], xt[i1, t]
                y0 = yb[0, t] + x0 * u00
                y1 = yb[1, t] + x0 * u01 + x1 * u11
                lpk[t] += y0 * y0 + y1 * y1


@njit(cache=True, inline="always")
def _row_start(i, d):
    """Stored index of entry (i, i) of a packed upper triangle (layout.py: row-major)."""
    return i * d - i * (i - 1) // 2


@njit(cache=True, fastmath=FAST_SUMS)
def weighted_upper(xt, t0, n, r, acc, base, first):
    """acc[base + packed(i, j)] += sum_t r_t x_ti x_tj (i <= j) over chunk rows t0:n, and
    acc[first + i] += sum_t r_t x_ti when ``first >= 0``.

    ``t0`` and ``n`` must be unsigned (numba's negative-index wraparound on a signed bound
    kept LLVM from vectorising a loop that does not start at 0). TILE x TILE blocks of the
    upper triangle are summed in registers, ``r_t x_ti`` formed on the fly: per row, four
    loads of x_i, four of x_j and one of r feed sixteen multiply-adds, where a
    one-row-at-a-time product re-read its weighted column for every few entries (d = 10,
    K = 5: 24 against 17 ns per row on this machine). Diagonal blocks sum only their upper
    half (and the first moments); the last one or two columns take a TILE x 2 block, so
    no block is half surplus (d = 10: 55 multiply-adds per row and component, one per entry,
    and 22 products r_t x_ti).
    """
    d = xt.shape[0]
    for i0 in range(0, d, TILE):
        if d - i0 <= 2:
            _diagonal2(xt, t0, n, r, acc, base, first, i0)
        else:
            _diagonal4(xt, t0, n, r, acc, base, first, i0)
        for j0 in range(i0 + TILE, d, TILE):
            if d - j0 <= 2:
                _moments42(xt, t0, n, r, acc, base, i0, j0)
            else:
                _moments44(xt, t0, n, r, acc, base, i0, j0)


@njit(cache=True, inline="always")
def _add_block(acc, base, first, d, i0, j0, A, F):
    """Scatter a block's sums: entries on or above the diagonal and inside d (clamped
    surplus rows and columns repeat index d - 1 and are dropped), first moments on request."""
    for a in range(len(A)):
        i = i0 + a
        if i >= d:
            break
        if first >= 0:
            acc[first + i] += F[a]
        for b in range(len(A[a])):
            j = j0 + b
            if i <= j < d:
                acc[base + _row_start(i, d) + j - i] += A[a][b]


@njit(cache=True, fastmath=FAST_SUMS)
def _moments44(xt, t0, n, r, acc, base, i0, j0):
    """An off-diagonal TILE x TILE block of :func:`weighted_upper` (rows i0.., columns j0..)."""
    d = xt.shape[0]
    i1, i2, i3 = _clamped(i0, d)
    j1, j2, j3 = _clamped(j0, d)
    a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = 0.0
    a20 = a21 = a22 = a23 = a30 = a31 = a32 = a33 = 0.0
    for t in range(t0, n):
        rt = r[t]
        w0, w1, w2, w3 = rt * xt[i0, t], rt * xt[i1, t], rt * xt[i2, t], rt * xt[i3, t]
        y0, y1, y2, y3 = xt[j0, t], xt[j1, t], xt[j2, t], xt[j3, t]
        a00 += w0 * y0
        a01 += w0 * y1
        a02 += w0 * y2
        a03 += w0 * y3
        a10 += w1 * y0
        a11 += w1 * y1
        a12 += w1 * y2
        a13 += w1 * y3
        a20 += w2 * y0
        a21 += w2 * y1
        a22 += w2 * y2
        a23 += w2 * y3
        a30 += w3 * y0
        a31 += w3 * y1
        a32 += w3 * y2
        a33 += w3 * y3
    _add_block(acc, base, -1, d, i0, j0,
               ((a00, a01, a02, a03), (a10, a11, a12, a13), (a20, a21, a22, a23), (a30, a31, a32, a33)),
               (0.0, 0.0, 0.0, 0.0))


@njit(cache=True, fastmath=FAST_SUMS)
def _moments42(xt, t0, n, r, acc, base, i0, j0):
    """:func:`_moments44` for the last one or two columns (d - j0 <= 2)."""
    d = xt.shape[0]
    i1, i2, i3 = _clamped(i0, d)
    j1 = min(j0 + 1, d - 1)
    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = 0.0
    for t in range(t0, n):
        rt = r[t]
        w0, w1, w2, w3 = rt * xt[i0, t], rt * xt[i1, t], rt * xt[i2, t], rt * xt[i3, t]
        y0, y1 = xt[j0, t], xt[j1, t]
        a00 += w0 * y0
        a01 += w0 * y1
        a10 += w1 * y0
        a11 += w1 * y1
        a20 += w2 * y0
        a21 += w2 * y1
        a30 += w3 * y0
        a31 += w3 * y1
    _add_block(acc, base, -1, d, i0, j0, ((a00, a01), (a10, a11), (a20, a21), (a30, a31)), (0.0, 0.0, 0.0, 0.0))


@njit(cache=True, fastmath=FAST_SUMS)
def _diagonal4(xt, t0, n, r, acc, base, first, i0):
    """The diagonal TILE x TILE block at (i0, i0): its upper half and the first moments of its rows."""
    d = xt.shape[0]
    i1, i2, i3 = _clamped(i0, d)
    a00 = a01 = a02 = a03 = a11 = a12 = a13 = a22 = a23 = a33 = 0.0
    f0 = f1 = f2 = f3 = 0.0
    for t in range(t0, n):
        rt = r[t]
        x0, x1, x2, x3 = xt[i0, t], xt[i1, t], xt[i2, t], xt[i3, t]
        w0, w1, w2, w3 = rt * x0, rt * x1, rt * x2, rt * x3
        f0 += w0
        f1 += w1
        f2 += w2
        f3 += w3
        a00 += w0 * x0
        a01 += w0 * x1
        a02 += w0 * x2
        a03 += w0 * x3
        a11 += w1 * x1
        a12 += w1 * x2
        a13 += w1 * x3
        a22 += w2 * x2
        a23 += w2 * x3
        a33 += w3 * x3
    _add_block(acc, base, first, d, i0, i0,
               ((a00, a01, a02, a03), (0.0, a11, a12, a13), (0.0, 0.0, a22, a23), (0.0, 0.0, 0.0, a33)),
               (f0, f1, f2, f3))


@njit(cache=True, fastmath=FAST_SUMS)
def _diagonal2(xt, t0, n, r, acc, base, first, i0):
    """:func:`_diagonal4` for the last one or two rows (d - i0 <= 2)."""
    d = xt.shape[0]
    i1 = min(i0 + 1, d - 1)
    a00 = a01 = a11 = f0 = f1 = 0.0
    for t in range(t0, n):
        rt = r[t]
        x0, x1 = xt[i0, t], xt[i1, t]
        w0, w1 = rt * x0, rt * x1
        f0 += w0
        f1 += w1
        a00 += w0 * x0
        a01 += w0 * x1
        a11 += w1 * x1
    _add_block(acc, base, first, d, i0, i0, ((a00, a01), (0.0, a11)), (f0, f1))
