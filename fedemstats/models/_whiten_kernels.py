"""The GMM geometry's whitening of packed statistic rows (full and tied) as a sparse matrix.

:class:`.gmm_geometry.MomentWhitening` maps (S0, S1, S2) with NumPy over (rows x K x d x d)
arrays: with 100,000 clients a ``dither:s=4`` round spent two thirds of its time
unpacking every packed second moment to full matrices, building outer products, two
batched matrix products and packing again. The map is linear in the packed row, so it is
built once per geometry as a (q x q) matrix:

* per component k, on ``(S0_k, S1_k, packed S2_k)``: ``y1 = W1 (S1 − S0 m)`` and
  ``y2 = M (S2 − G (S0, S1))``, where ``M`` is the sandwich ``C ↦ W2 C W2ᵀ`` on packed
  symmetric matrices and ``G`` the packed cross term ``S1 mᵀ + m S1ᵀ − S0 m mᵀ``; the
  inverse is ``S1 = L y1 + y0 m``, ``S2 = M' y2 + G (y0, S1)``; tied: one second moment,
  the cross terms summed over the components;
* the matrix is assembled block by block in CSR form (about a tenth of a dense (q x q)
  product's terms are non-zero at d = 10, K = 5: blocks per component, triangular factors;
  the sandwich block has t² terms, so above :data:`MAX_PACKED_FEATURES` features the
  geometry uses the moment algebra instead) and applied by
  :func:`apply_rows`, row by row in a fixed order: a BLAS product would be faster per term
  but its bits depend on the batch, and a client must get the same bits alone as among others.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._threads import run
from ..layout import upper_indices

__all__ = ["PackedWhitening", "apply_rows", "MAX_PACKED_FEATURES"]

#: Most features for which the geometry whitens packed rows with these matrices: the
#: sandwich has t² = d² (d + 1)² / 4 terms per component against the moment algebra's
#: O(d³) products, and a geometry is built a few times a round. Measured (K = 20, 200 rows):
#: matrices built in 53 ms at d = 16, 244 ms at d = 24, 1.0 s at d = 32; forward 6.4 vs
#: 52.9 ms (moment algebra) at d = 16, 21.7 vs 88.3 ms at d = 24.
MAX_PACKED_FEATURES = 24

#: Rows per transposed chunk of :func:`apply_rows`: (q x ROW_CHUNK) buffers stay in L2.
ROW_CHUNK = 64
#: Groups of chunks run on numba's threads (each allocates its buffer once).
MAX_GROUPS = 64


def _sandwich_matrix(W):
    """(..., t, t) matrices of ``C ↦ W C Wᵀ`` on packed upper triangles (t = d (d + 1) / 2)."""
    iu, ju = upper_indices(W.shape[-1])
    Wp = W[..., iu, :]  # (..., t, d): rows i of the outputs
    Wq = W[..., ju, :]
    M = Wp[..., :, iu] * Wq[..., :, ju]
    off = iu != ju
    M[..., off] += Wp[..., :, ju][..., off] * Wq[..., :, iu][..., off]
    return M


def _cross_matrix(m):
    """(K, t, 1 + d): the packed ``S1 mᵀ + m S1ᵀ − S0 m mᵀ`` as a linear function of (S0, S1)."""
    K, d = m.shape
    iu, ju = upper_indices(d)
    t = iu.size
    G = np.zeros((K, t, 1 + d))
    G[:, :, 0] = -m[:, iu] * m[:, ju]
    rows = np.arange(t)
    G[:, rows, 1 + iu] += m[:, ju]
    G[:, rows, 1 + ju] += m[:, iu]
    return G


class PackedWhitening:
    """Forward and inverse whitening of packed rows as matrices (see the module docstring).

    Parameters
    ----------
    tied : bool
    m : (K, d) centres;  L, L_inv : (K, d, d) first-moment factors
    L2, L2_inv : (K, d, d) (full) or (d, d) (tied) second-moment factors
    """

    def __init__(self, tied, m, L, L_inv, L2, L2_inv):
        K, d = m.shape
        self.K, self.d, self.tied = K, d, tied
        t = d * (d + 1) // 2
        self.q = K + K * d + (t if tied else K * t)
        G = _cross_matrix(m)
        self.fwd_csr = self._csr(m, L_inv, _sandwich_matrix(L2_inv), G, True)
        self.inv_csr = self._csr(m, L, _sandwich_matrix(L2), G, False)

    def _csr(self, m, W1, M, G, forward):
        """CSR form (row pointers, columns, values; rows in order, columns ascending, no zeros)
        of the (q, q) forward (W1 = L⁻¹, M from L2⁻¹) or inverse map (W1 = L, M from L2),
        assembled block by block: the dense (q, q) matrix is K² / K times larger than its
        blocks (d = 64, K = 5: 0.9 GB and 4.5 s per geometry, built a few times a round)."""
        K, d = self.K, self.d
        t = d * (d + 1) // 2
        rows, cols, vals = [], [], []

        def put(r, c, v):
            rr, cc = np.meshgrid(r, c, indexing="ij")
            rows.append(rr.ravel()), cols.append(cc.ravel()), vals.append(np.asarray(v, dtype=np.float64).ravel())

        for k in range(K):
            c1 = K + k * d + np.arange(d)
            c2 = K + K * d + (0 if self.tied else k * t) + np.arange(t)
            Mk = M if M.ndim == 2 else M[0 if self.tied else k]
            put([k], [k], 1.0)
            # first moments: forward W1 S1 − (W1 m) S0, inverse W1 y1 + m y0
            put(c1, c1, W1[k])
            put(c1, [k], -(W1[k] @ m[k]) if forward else m[k])
            # second moments: forward M S2 − M G (S0, S1); inverse M y2 + G (y0, S1(y0, y1))
            if forward:
                lin = -Mk @ G[k]
            else:
                lin = G[k][:, :1] + G[k][:, 1:] @ m[k][:, None]
                lin = np.concatenate([lin, G[k][:, 1:] @ W1[k]], axis=1)
            put(c2, np.r_[k, c1], lin)
            if k == 0 or not self.tied:
                put(c2, c2, Mk)
        rows, cols, vals = (np.concatenate(a) for a in (rows, cols, vals))
        keep = vals != 0.0
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
        order = np.lexsort((cols, rows))
        rows, cols, vals = rows[order], cols[order], vals[order]
        ptr = np.zeros(self.q + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.q), out=ptr[1:])
        return ptr, cols.astype(np.int64), vals

    def apply(self, x, forward):
        """Forward (``forward``) or inverse map of rows x (n, q) -> (n, q)."""
        ptr, cols, vals = self.fwd_csr if forward else self.inv_csr
        x = np.ascontiguousarray(x, dtype=np.float64)
        return run(apply_rows, x.size, x, ptr, cols, vals)


@njit(cache=True)
def _apply_chunk(x, r0, m, ptr, cols, vals, xt, yt, out):
    """Rows r0:r0 + m (m <= ROW_CHUNK) of :func:`apply_rows`; the inner loops run over the
    rows of the chunk (unit stride: vectorised)."""
    q = x.shape[1]
    for t in range(m):
        for j in range(q):
            xt[j, t] = x[r0 + t, j]
    for o in range(q):
        for t in range(m):
            yt[o, t] = 0.0
        for p in range(ptr[o], ptr[o + 1]):
            c, v = cols[p], vals[p]
            for t in range(m):
                yt[o, t] += v * xt[c, t]
    for t in range(m):
        for j in range(q):
            out[r0 + t, j] = yt[j, t]


@njit(cache=True, parallel=True)
def apply_rows(x, ptr, cols, vals):
    """out[r] = P x[r] for P in CSR form, rows in transposed chunks of ROW_CHUNK on numba's threads.

    Each row's value is the same sequence of products and sums, in CSR order, whatever
    the chunk and its place in it, and without fastmath no multiply-add is fused: a row's
    result does not depend on the other rows nor on the thread count (a client alone gets
    the bits it gets in a batch; a BLAS product does not promise that).
    """
    n, q = x.shape
    out = np.empty((n, q))
    n_chunks = (n + ROW_CHUNK - 1) // ROW_CHUNK
    n_groups = min(n_chunks, MAX_GROUPS)
    for g in prange(n_groups):
        xt = np.empty((q, ROW_CHUNK))
        yt = np.empty((q, ROW_CHUNK))
        for c in range(n_chunks * g // n_groups, n_chunks * (g + 1) // n_groups):
            r0 = c * ROW_CHUNK
            _apply_chunk(x, r0, min(ROW_CHUNK, n - r0), ptr, cols, vals, xt, yt, out)
    return out
