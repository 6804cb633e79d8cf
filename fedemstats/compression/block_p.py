"""Block-p quantisation (Mishchenko et al., DIANA; paper 003 appendix B; SPEC §6).

Per block b: Q(x)_j = ||x_b||_p sign(x_j) ξ_j with ξ_j ~ Bernoulli(|x_j| / ||x_b||_p).
Each coordinate is one of three symbols {0, +1, -1}. Wire format of one row: the
block norms as float32 (32 bits each), then the symbols packed five to a byte in
base 3 (3**5 = 243 <= 256): 8 * ceil(q / 5) bits, i.e. 1.6 bits per coordinate
instead of 2 (log2(3) ≈ 1.585 is the floor for a fixed-length code).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._threads import run
from .base import Compressor, Message, _as_rows, uniform_rows
from ._noise import max_norm_estimate, norm2_estimate
from .streams import ClientStreams, fill_uniform_row
from ._bits import (
    NORM_BITS, block_norms, check_blocks, expand_scale, float32_norms_up, norm_bytes,
    split_norms, stack_padded,
)

__all__ = ["BlockP"]

#: symbols per byte of the base-3 packing, and the number of symbols
TRITS_PER_BYTE = 5
_N_SYMBOLS = 3
_BYTE_BITS = 8
_MINUS = 2  # symbol of -1 (0 -> 0, +1 -> 1)
_PLACE = np.array([_N_SYMBOLS ** t for t in range(TRITS_PER_BYTE)], dtype=np.int64)


def _n_bytes(q: int) -> int:
    return -(-q // TRITS_PER_BYTE)


@njit(cache=True)
def _quantise_pack_row(x, xi, norms, blocks, out):
    for b in range(blocks.size - 1):
        nrm = np.float64(norms[b])
        for j in range(blocks[b], blocks[b + 1]):
            sym = 0
            # |x| <= nrm (norm rounded up): the probability is in [0, 1], no clipping.
            if nrm > 0.0 and xi[j] < abs(x[j]) / nrm:
                sym = _MINUS if x[j] < 0 else 1
            out[j // TRITS_PER_BYTE] += sym * _PLACE[j % TRITS_PER_BYTE]


@njit(cache=True)
def _quantise_pack(x, xi, norms, blocks, out):
    for i in range(x.shape[0]):
        _quantise_pack_row(x[i], xi[i], norms[i], blocks, out[i])


@njit(cache=True, parallel=True)
def _quantise_pack_stream(x, keys, lane, norms, blocks, out):
    # each client's uniforms drawn a row at a time: no (n_rows, q) array of them.
    # Rows are independent streams, so the result does not depend on the threads.
    for i in prange(x.shape[0]):
        xi = np.empty(x.shape[1])
        fill_uniform_row(keys[i, 0], keys[i, 1], lane, xi)
        _quantise_pack_row(x[i], xi, norms[i], blocks, out[i])


@njit(cache=True)
def _unpack(packed, q, out):
    for i in range(packed.shape[0]):
        for k in range(packed.shape[1]):
            v = np.int64(packed[i, k])
            for t in range(TRITS_PER_BYTE):
                j = k * TRITS_PER_BYTE + t
                sym = v % _N_SYMBOLS
                v //= _N_SYMBOLS
                if j < q:
                    out[i, j] = -1 if sym == _MINUS else sym
                elif sym != 0:
                    return False
            if v != 0:
                return False
    return True


class BlockP(Compressor):
    """Unbiased block-p quantisation, one norm per statistic block.

    Parameters
    ----------
    p : {2, inf}, default=2
        Norm of each block. ``omega = 1/alpha_p(d_max) - 1`` with
        ``alpha_2(d) = d**-0.5`` and ``alpha_inf(d) = 2 / (1 + sqrt(d))``,
        ``d_max`` the largest block size.

    Notes
    -----
    Without ``blocks`` the whole vector is one block. Norms are rounded up to
    float32 and the Bernoulli draws use that float32 value, so E[Q(x)] = x holds
    for what the receiver decodes. With p = 2 only about ||x_b||_1/||x_b||_2 <=
    sqrt(d) symbols per block are non-zero; a run-length Elias code would then be
    shorter than the fixed 1.6 bits per coordinate used here.
    """

    name = "blockp"

    def __init__(self, p=2):
        if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) \
                or p not in (2, float("inf")):
            raise ValueError(f"block-p quantisation needs p = 2 or p = inf; got p={p!r}.")
        self.p = float(p)

    def _check_codec(self, message):
        if message.codec != self.name:
            raise ValueError(f"BlockP cannot decode a {message.codec!r} message.")

    def compress(self, x, rng, blocks=None) -> Message:
        """Quantise rows; ``arrays``: ``norms`` float32 (n_rows, n_blocks), ``codes`` uint8 (n_rows, ceil(q/5))."""
        x = _as_rows(x)
        bl = check_blocks(blocks, x.shape[1])
        norms = float32_norms_up(block_norms(x, bl, self.p))
        codes = np.zeros((x.shape[0], _n_bytes(x.shape[1])), dtype=np.uint8)
        if isinstance(rng, ClientStreams):
            run(_quantise_pack_stream, x.size, x, *rng.reserve(x.shape[0]), norms, bl, codes)
        else:
            _quantise_pack(x, uniform_rows(rng, *x.shape), norms, bl, codes)
        return self._message(x.shape[0], x.shape[1], {"norms": norms, "codes": codes}, bl)

    def _message(self, n_rows, q, arrays, bl):
        meta = {"p": self.p, "blocks": tuple(int(b) for b in bl)}
        return Message(self.name, n_rows, q, arrays, meta)

    def _symbols(self, codes, q) -> np.ndarray:
        out = np.empty((codes.shape[0], q), dtype=np.int8)
        if not _unpack(codes, q, out):
            raise ValueError("corrupt block-p payload: a byte is not a valid base-3 code for q.")
        return out

    def decompress(self, message: Message) -> np.ndarray:
        """Decode to float64 rows (n_rows, q): ``norm_b * symbol`` with symbol in {-1, 0, 1}."""
        self._check_codec(message)
        bl = np.asarray(message.meta["blocks"], dtype=np.int64)
        return expand_scale(self._symbols(message.arrays["codes"], message.q),
                            message.arrays["norms"], bl, 1.0)

    def noise_estimate(self, message: Message) -> tuple:
        """``(signal_sq, noise_sq)`` of each row; see :meth:`Compressor.noise_estimate`.

        E||Q_b(x) − x_b||² = N_b||x_b||₁ − ||x_b||² and E||q_b||² = N_b||x_b||₁.

        * p = 2: N_b² is ||x_b||² (rounded up to float32): signal_sq = Σ_b N_b² and
          noise_sq = ||q||² − Σ_b N_b² = Σ_b N_b² (n_b − 1), n_b the block's non-zero
          symbols, is unbiased up to a relative ``2**-22 ||x||²`` low.
        * p = inf: no unbiased estimate exists; noise_sq = Σ_b N_b² n'_b (d_b − 1 − n'_b)/(d_b − 2),
          n'_b = n_b − 1 and d_b the block size (Cauchy-Schwarz; ``n'_b`` if d_b = 2),
          is an upper estimate and signal_sq = ||q||² − noise_sq a lower one
          (derivation in ``_noise``). Exact on flat and one-spike blocks.
        """
        self._check_codec(message)
        bl = np.asarray(message.meta["blocks"], dtype=np.int64)
        norms = message.arrays["norms"]
        symbols = self._symbols(message.arrays["codes"], message.q)
        decoded = expand_scale(symbols, norms, bl, 1.0)
        if message.meta["p"] == 2:
            return norm2_estimate(decoded, norms)
        return max_norm_estimate(decoded, symbols, norms, bl)

    def _check_payload(self, message) -> None:
        """Norms non-negative. Invalid base-3 codes are refused by :meth:`decompress`, which
        :meth:`~.base.Compressor.validate` calls next (decoding them here too decoded every reply twice)."""
        if np.any(message.arrays["norms"] < 0):
            raise ValueError("a block-p norm is negative.")

    def omega(self, q, blocks=None) -> float:
        """1/alpha_p(d_max) - 1: sqrt(d) - 1 for p = 2, (sqrt(d) - 1)/2 for p = inf."""
        d = float(np.max(np.diff(check_blocks(blocks, int(q)))))
        inv_alpha = np.sqrt(d) if self.p == 2 else (1.0 + np.sqrt(d)) / 2.0
        return float(inv_alpha - 1.0)

    def row_bits(self, message: Message) -> np.ndarray:
        """32 bits per block norm + 8 * ceil(q / 5) bits of base-3 symbols."""
        self._check_codec(message)
        per_row = NORM_BITS * (len(message.meta["blocks"]) - 1) + _BYTE_BITS * _n_bytes(message.q)
        return np.full(message.n_rows, per_row, dtype=np.int64)

    def encode(self, message: Message) -> list:
        """One ``bytes`` per row: float32 norms (little endian), then the base-3 bytes."""
        self._check_codec(message)
        return [norm_bytes(nrm) + codes.tobytes()
                for nrm, codes in zip(message.arrays["norms"], message.arrays["codes"])]

    def decode(self, payloads, q, blocks=None) -> Message:
        """Inverse of :meth:`encode`; ValueError if a payload does not fit ``q`` and ``blocks``."""
        q = int(q)
        bl = check_blocks(blocks, q)
        parts = [split_norms(p, bl.size - 1) for p in payloads]
        if any(len(p[1]) != _n_bytes(q) for p in parts):
            raise ValueError(f"block-p payload length does not match q={q} and {bl.size - 1} blocks.")
        norms = np.stack([p[0] for p in parts]).reshape(len(parts), bl.size - 1)
        codes = stack_padded([p[1] for p in parts]).reshape(len(parts), _n_bytes(q))
        self._symbols(codes, q)  # validates every byte
        return self._message(len(parts), q, {"norms": norms, "codes": codes}, bl)
