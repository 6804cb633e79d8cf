"""Numba kernels of the Gaussian mixture: weighted log-probabilities and segment statistics.

Work is split into contiguous *row blocks* (a number that depends on the rows only, so
results do not depend on the thread count) regardless of client boundaries, so that both
"100 small clients" and "one client with 1M rows" keep all cores busy (SPEC §2: one
vectorised pass, no Python loop over clients). Inside a block, rows are processed in
chunks of :data:`CHUNK_ROWS` held *transposed* (features x rows), so every inner loop
runs over rows with unit stride and vectorises; chunks also ignore client boundaries
(100,000 clients of 10 rows: per-client chunks of 10 rows spent their time in loop
overheads), only the sums are cut per client. A block writes the
sums of the clients it holds entirely; the client pieces at its two ends go to
per-block head/tail buffers that are added serially afterwards (no write races, memory
O(n_blocks * q) beyond the output).

Precisions come in two forms: ``prec_tri`` (K, d, d) upper-triangular factors U with
U U^T = Sigma^{-1} (full; tied is broadcast to K copies) and ``prec_diag`` (K, d)
(diag; spherical is broadcast to d columns). Full and tied second moments are
accumulated and written as packed upper triangles, the layout's storage order. The
triangular log-density and the second moments are register-tiled in :mod:`._gmm_tiles`.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._gmm_tiles import FAST_SUMS, TILE, log_prob_tri, weighted_upper
from ._vexp import exp_shifted, sum_log_norm

#: Covariance-type codes shared with gmm.py.
COV_FULL, COV_TIED, COV_DIAG, COV_SPHERICAL = 0, 1, 2, 3
#: Rows per inner chunk: the (d x chunk) row buffers stay in L1/L2 for d ~ 10-50.
CHUNK_ROWS = 256
#: Extra (unused) columns of the chunk buffers: one cache line, see :func:`_buffers`.
CHUNK_PAD = 8
#: Blocks are not made smaller than this, so tiny inputs run as one block.
MIN_BLOCK_ROWS = 2048
#: At most this many row blocks. The split depends on the number of rows only, never on
#: the number of threads, so the sums (their order of addition) and hence the results
#: are bitwise the same whatever the thread count; 64 blocks keep up to ~32 threads busy.
MAX_ROW_BLOCKS = 64
#: Below this many floating-point operations (about a millisecond of one core) a pass
#: runs serially: waking the thread pool costs more than it saves (see gmm.py).
PARALLEL_MIN_FLOPS = 1e7


@njit(cache=True)
def _load_chunk(X, r0, n, shift, xt):
    # unsigned row index: numba's wraparound test of a signed r0 + t kept this copy scalar
    r0 = np.uint64(r0)
    for t in range(np.uint64(n)):
        for i in range(np.uint64(X.shape[1])):
            xt[i, t] = X[r0 + t, i] - shift[i]


@njit(cache=True, fastmath=FAST_SUMS)
def _log_prob_diag(xt, n, means, prec, const, sq, lp):
    K, d = means.shape
    for k in range(K):
        sq[:n] = 0.0
        for i in range(d):
            m = means[k, i]
            p = prec[k, i]
            for t in range(n):
                z = (xt[i, t] - m) * p
                sq[t] += z * z
        for t in range(n):
            lp[k, t] = const[k] - 0.5 * sq[t]


@njit(cache=True)
def _chunk_log_prob(xt, n, means, prec_tri, prec_diag, const, yb, sq, lp):
    if prec_tri.shape[0] > 0:
        log_prob_tri(xt, n, means, prec_tri, const, yb, lp)
    else:
        _log_prob_diag(xt, n, means, prec_diag, const, sq, lp)


@njit(cache=True)
def _responsibilities(lp, n, hard, mx, sm, bits, e, cuts, n_pieces, ll):
    """In place: lp (K, n) -> responsibilities; ll[p] = sum of the log-norms of rows
    cuts[p]:cuts[p + 1] (the pieces of the clients that share the chunk).

    Log-sum-exp with the row maximum subtracted (stable). ``hard`` gives one-hot
    argmax rows (first maximum), i.e. k-means labels for identity covariances.
    """
    K = lp.shape[0]
    mx[:n] = lp[0, :n]
    for k in range(1, K):
        for t in range(n):
            mx[t] = max(mx[t], lp[k, t])
    sm[:n] = 0.0
    for k in range(K):
        exp_shifted(lp[k], mx, n, bits, e)
        for t in range(n):
            sm[t] += e[t]
            if not hard:
                lp[k, t] = e[t]
    for p in range(n_pieces):
        ll[p] = sum_log_norm(mx, sm, cuts[p + 1], cuts[p])
    if hard:
        for t in range(n):
            found = False
            for k in range(K):
                win = (not found) and lp[k, t] == mx[t]
                found = found or win
                lp[k, t] = 1.0 if win else 0.0
        return
    for t in range(n):
        sm[t] = 1.0 / sm[t]
    for k in range(K):
        for t in range(n):
            lp[k, t] *= sm[t]


def row_flops(K, d, code) -> int:
    """Floating-point operations per row of a pass (the cost model of the serial/parallel choice).

    Per component: the difference, the triangular (or diagonal) product and squared norm,
    the responsibility, ``r x`` and the weighted second moment.
    """
    full = code in (COV_FULL, COV_TIED)
    logp = d + d * (d + 1) + 2 * d if full else 3 * d
    second = {COV_FULL: d * (d + 1), COV_TIED: 0}.get(code, 2 * d)
    return K * (logp + 4 + 2 * d + second) + (d * (d + 1) if code == COV_TIED else 0)


@njit(cache=True, fastmath=FAST_SUMS)
def _accumulate(xt, t0, n, r, code, w, acc):
    """acc += sums over chunk rows t0:n of (r_k, r_k x, second moment) in layout order
    (full and tied second moments as packed upper triangles, :mod:`fedemstats.layout`).
    ``w`` is a free row buffer (the tied pass's unit weights)."""
    K = r.shape[0]
    d = xt.shape[0]
    t0, n = np.uint64(t0), np.uint64(n)  # see weighted_upper
    tri = d * (d + 1) // 2
    o1 = K
    o2 = K + K * d
    for k in range(K):
        rk = r[k]
        s0 = 0.0
        for t in range(t0, n):
            s0 += rk[t]
        acc[k] += s0
        if code == COV_FULL:
            weighted_upper(xt, t0, n, rk, acc, o2 + k * tri, o1 + k * d)
            continue
        for i in range(d):
            s1 = s2 = 0.0
            for t in range(t0, n):
                v = rk[t] * xt[i, t]
                s1 += v
                s2 += v * xt[i, t]
            acc[o1 + k * d + i] += s1
            if code != COV_TIED:
                acc[o2 + (k * d + i if code == COV_DIAG else k)] += s2
    if code == COV_TIED:
        w[t0:n] = 1.0
        weighted_upper(xt, t0, n, w, acc, o2, -1)


@njit(cache=True)
def _buffers(K, d):
    """Chunk buffers: xt (d, .), lp (K, .), the partial columns of :func:`._gmm_tiles.log_prob_tri`
    (TILE, .) and six row vectors (sq, w, mx, sm, exponent bits, exp)."""
    c = CHUNK_ROWS
    # rows of the 2-D buffers CHUNK_PAD apart from a power of two: a 2 KB row stride maps
    # every row to the same few L1 sets (at d = 50: 40% slower than d = 49)
    p = c + CHUNK_PAD
    return (np.empty((d, p)), np.empty((K, p)), np.empty((TILE, p)),
            np.empty(c), np.empty(c), np.empty(c), np.empty(c), np.empty(c, dtype=np.int64), np.empty(c))


@njit(cache=True)
def _chunk_pieces(seg, s, c0, n, cuts):
    """Cut chunk rows c0:c0 + n at client boundaries, client ``s`` holding row c0:
    cuts[0] = 0 < cuts[1] < ... < cuts[n_pieces] = n (chunk-local). Returns n_pieces."""
    n_pieces, t = 0, 0
    cuts[0] = 0
    while t < n:
        while seg[s + 1] <= c0 + t:  # clients without rows
            s += 1
        t = min(n, seg[s + 1] - c0)
        n_pieces += 1
        cuts[n_pieces] = t
    return n_pieces


@njit(cache=True)
def _block_pass(X, seg, a, e, shift, means, prec_tri, prec_diag, const, code, hard, out, head, tail):
    """Rows a:e, in chunks of CHUNK_ROWS rows that run across client boundaries: with
    many small clients a chunk holds several of them, and the per-chunk work (log-densities,
    responsibilities) is done once for all; only the sums are cut per client. Clients wholly
    inside go to ``out``; the piece of a client that began before ``a`` goes to ``head``,
    of one that continues past ``e`` to ``tail``. Returns the (head, tail) client ids, -1
    when absent."""
    K, d = means.shape
    xt, lp, yb, sq, w, mx, sm, bits, ex = _buffers(K, d)
    cuts = np.empty(CHUNK_ROWS + 1, dtype=np.int64)
    ll = np.empty(CHUNK_ROWS)
    q = out.shape[1] - 1
    acc = np.zeros(q + 1)
    head_seg, tail_seg = -1, -1
    s = np.searchsorted(seg, a, side="right") - 1
    for c0 in range(a, e, CHUNK_ROWS):
        n = min(CHUNK_ROWS, e - c0)
        _load_chunk(X, c0, n, shift, xt)
        _chunk_log_prob(xt, n, means, prec_tri, prec_diag, const, yb, sq, lp)
        n_pieces = _chunk_pieces(seg, s, c0, n, cuts)
        _responsibilities(lp, n, hard, mx, sm, bits, ex, cuts, n_pieces, ll)
        for p in range(n_pieces):
            while seg[s + 1] <= c0 + cuts[p]:
                s += 1
            _accumulate(xt, cuts[p], cuts[p + 1], lp, code, w, acc)
            acc[q] += ll[p]
            end = c0 + cuts[p + 1]
            if end < seg[s + 1] and end < e:
                continue  # the client goes on in the next chunk
            if seg[s] < a:
                head[:] = acc
                head_seg = s
            elif seg[s + 1] > e:
                tail[:] = acc
                tail_seg = s
            else:
                out[s, :] = acc
            acc[:] = 0.0
    return head_seg, tail_seg


@njit(cache=True)
def _plan(seg, q):
    """Row blocks and output buffers of a segment pass: (nb, out, head, tail, head_seg, tail_seg)."""
    n_seg = seg.shape[0] - 1
    nb = max(1, min(seg[n_seg] // MIN_BLOCK_ROWS, MAX_ROW_BLOCKS))
    return (nb, np.zeros((n_seg, q + 1)), np.zeros((nb, q + 1)), np.zeros((nb, q + 1)),
            np.full(nb, -1, dtype=np.int64), np.full(nb, -1, dtype=np.int64))


@njit(cache=True)
def _run_block(b, nb, X, seg, shift, means, prec_tri, prec_diag, const, code, hard, plan):
    """Row block ``b`` of ``nb`` (see :func:`_block_pass`); records its head/tail client ids."""
    _, out, head, tail, head_seg, tail_seg = plan
    n_rows = seg[seg.shape[0] - 1]
    a, e = n_rows * b // nb, n_rows * (b + 1) // nb
    head_seg[b], tail_seg[b] = _block_pass(X, seg, a, e, shift, means, prec_tri, prec_diag, const, code,
                                           hard, out, head[b], tail[b])


@njit(cache=True)
def _merge(plan):
    """Add the clients' pieces cut by block boundaries; returns the (n_seg, q + 1) sums."""
    nb, out, head, tail, head_seg, tail_seg = plan
    for b in range(nb):
        if head_seg[b] >= 0:
            out[head_seg[b], :] += head[b, :]
        if tail_seg[b] >= 0:
            out[tail_seg[b], :] += tail[b, :]
    return out


@njit(cache=True, parallel=True)
def segment_sums(X, seg, shift, means, prec_tri, prec_diag, const, code, q, hard):
    """Per-segment sums of the statistics and of the log-likelihood, row blocks on numba's threads.

    Parameters
    ----------
    X : ndarray of shape (n_rows, d), C-contiguous
    seg : ndarray of int64 of shape (n_seg + 1,)
        Segment ``s`` is ``X[seg[s]:seg[s + 1]]``; ``seg[-1] == n_rows``.
    shift : (d,);  means : (K, d) already shifted (mu - c)
    prec_tri : (K, d, d) or (0, 0, 0);  prec_diag : (K, d) or (0, 0)
    const : (K,) log pi_k + log det U_k - d/2 log(2 pi)
    code : int covariance code;  q : int statistic length (packed layout);  hard : bool

    Returns
    -------
    out : ndarray of shape (n_seg, q + 1)
        Sums (not means) of the statistics; column ``q`` holds sum of log p(x).
    """
    plan = _plan(seg, q)
    for b in prange(plan[0]):
        _run_block(b, plan[0], X, seg, shift, means, prec_tri, prec_diag, const, code, hard, plan)
    return _merge(plan)


@njit(cache=True)
def segment_sums_serial(X, seg, shift, means, prec_tri, prec_diag, const, code, q, hard):
    """:func:`segment_sums` without a parallel region, for inputs of one row block.

    A distinct Python function on purpose: numba's cache key ignores the jit options,
    so ``njit(segment_sums.py_func)`` would share (and overwrite) the parallel kernel's
    cache entry, and every later process would run whichever compiled first (issue 15).
    Same blocks, same order of addition, but not always the same machine code: LLVM optimises
    the block pass inside each kernel on its own (with ``fastmath`` reassociation it may
    vectorise or contract the sums differently), and in some test sessions the two kernels were
    measured 1 ulp apart on a few sums. Which kernel runs depends on the rows, the model and
    the data's shape only (``GaussianMixtureModel.client_stats``), never on the thread count,
    so a fit is reproducible either way.
    """
    plan = _plan(seg, q)
    for b in range(plan[0]):
        _run_block(b, plan[0], X, seg, shift, means, prec_tri, prec_diag, const, code, hard, plan)
    return _merge(plan)


@njit(cache=True, parallel=True)
def weighted_log_prob(X, shift, means, prec_tri, prec_diag, const):
    """log pi_k + log N(x_t | mu_k, Sigma_k) for every row, shape (n_rows, K)."""
    n_rows, d = X.shape
    K = means.shape[0]
    out = np.empty((n_rows, K))
    n_chunks = (n_rows + CHUNK_ROWS - 1) // CHUNK_ROWS
    for c in prange(n_chunks):
        xt, lp, yb, sq, w, mx, sm, _, _ = _buffers(K, d)
        r0 = c * CHUNK_ROWS
        n = min(CHUNK_ROWS, n_rows - r0)
        _load_chunk(X, r0, n, shift, xt)
        _chunk_log_prob(xt, n, means, prec_tri, prec_diag, const, yb, sq, lp)
        for t in range(n):
            for k in range(K):
                out[r0 + t, k] = lp[k, t]
    return out
