"""Wire-format helpers shared by the compressors (SPEC §6).

Bit packing (fixed width, most significant bit first; the variable-length level codes
are in :mod:`._codes`), block norms sent as float32 (or 16 bits) rounded *up*, the byte
layout of a row's norms, and block-boundary checks.

The bit writers keep a small integer accumulator that is flushed byte by byte,
so at most ``7 + MAX_CODE_WIDTH`` bits are ever held: that is why a single
write is limited to :data:`MAX_CODE_WIDTH` bits.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "MAX_CODE_WIDTH", "NORM_BITS", "SHORT_NORM_BITS", "wire_norms_up", "check_wire_norms", "check_blocks",
    "split_blocks", "block_norms", "float32_norms_up",
    "fixed_width", "pack_fixed", "unpack_fixed", "expand_scale", "norm_bytes", "split_norms", "stack_padded",
]

#: largest number of bits written by one call of the bit writer (see module docstring)
MAX_CODE_WIDTH = 32
#: a block norm travels as one IEEE float32 ...
NORM_BITS = 32
#: ... or, for coarse quantisers, as a 16-bit unsigned float: float32's 8 exponent bits and
#: the top 8 of its 23 mantissa bits (a norm has no sign bit), rounded up (:func:`wire_norms_up`)
SHORT_NORM_BITS = 16
#: the float32 bits below a short norm: its sign bit (always 0) is dropped above, 15 mantissa bits here
_SHORT_SHIFT = 32 - 1 - SHORT_NORM_BITS
_SHORT_DROP = np.uint32(2 ** _SHORT_SHIFT - 1)
_BYTE = 8
_BYTE_MASK = 0xFF
# the fixed-width packer's flush unit: one 32-bit word
_WORD_BITS = 32
_WORD_BYTES = _WORD_BITS // _BYTE
_U0, _U1, _U_BYTE_MASK = np.uint64(0), np.uint64(1), np.uint64(_BYTE_MASK)


def check_blocks(blocks, q: int) -> np.ndarray:
    """Validate block boundaries; ``None`` means one block ``[0, q]``.

    Returns
    -------
    ndarray of int64 of shape (n_blocks + 1,)
        Starts at 0, ends at ``q``, non-decreasing.
    """
    if blocks is None:
        return np.array([0, q], dtype=np.int64)
    arr = np.asarray(blocks)
    if arr.ndim != 1 or arr.size < 2 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"blocks must be a 1-D integer array of boundaries (n_blocks + 1,); got {blocks!r}.")
    arr = arr.astype(np.int64)
    if arr[0] != 0 or arr[-1] != q or np.any(np.diff(arr) < 0):
        raise ValueError(
            f"blocks must start at 0, end at q={q} and be non-decreasing (StatLayout.offsets); got {arr}."
        )
    return arr


@njit(cache=True)
def _block_norms_kernel(x, blocks, use_inf, out):
    n = x.shape[0]
    for i in range(n):
        for b in range(blocks.size - 1):
            m = 0.0
            for j in range(blocks[b], blocks[b + 1]):
                m = max(m, abs(x[i, j]))
            if use_inf or m == 0.0:
                out[i, b] = m
                continue
            # scale by the max so that squares neither overflow nor underflow
            acc = 0.0
            for j in range(blocks[b], blocks[b + 1]):
                t = x[i, j] / m
                acc += t * t
            out[i, b] = m * np.sqrt(acc)


def split_blocks(blocks, max_size):
    """Cut every block longer than ``max_size`` into near-equal chunks of at most ``max_size``.

    Parameters
    ----------
    blocks : ndarray of int64 of shape (n_blocks + 1,)
        Validated boundaries (:func:`check_blocks`).
    max_size : int or None
        None returns ``blocks`` unchanged.

    Returns
    -------
    ndarray of int64 of shape (n_chunks + 1,)
    """
    if max_size is None:
        return blocks
    cuts = [np.array([blocks[0]])]
    for start, stop in zip(blocks[:-1], blocks[1:]):
        n_chunks = max(1, -(-int(stop - start) // int(max_size)))
        cuts.append(np.linspace(start, stop, n_chunks + 1).round().astype(np.int64)[1:])
    return np.concatenate(cuts).astype(np.int64)


def block_norms(x, blocks, r) -> np.ndarray:
    """r-norm (r = 2 or inf) of each block of each row, shape (n_rows, n_blocks), float64.

    The 2-norm is computed as ``m * sqrt(sum((x/m)^2))`` with ``m`` the block's
    max-abs, so it is never below ``m`` (needed for levels <= s, see dithering).
    """
    out = np.empty((x.shape[0], blocks.size - 1), dtype=np.float64)
    _block_norms_kernel(x, blocks, bool(np.isinf(r)), out)
    return out


def float32_norms_up(norms) -> np.ndarray:
    """Round norms to the nearest float32 that is >= the float64 value.

    Rounding *up* keeps ``|x_j| / norm <= 1``, so dithering levels stay in
    ``[0, s]`` and block-p probabilities in ``[0, 1]`` without clipping (which
    would bias Q). The compressors then quantise with this float32 value, which
    is what the receiver sees: E[Q(x)] = x holds w.r.t. the sent norm.
    """
    f = norms.astype(np.float32)
    low = f.astype(np.float64) < norms
    f[low] = np.nextafter(f[low], np.float32(np.inf))
    if not np.all(np.isfinite(f)):
        raise ValueError("a block norm exceeds the float32 range (~3.4e38); rescale the statistics.")
    return f


def wire_norms_up(norms, bits=NORM_BITS) -> np.ndarray:
    """Norms rounded up to what travels in ``bits`` (NORM_BITS or SHORT_NORM_BITS) per norm, float32.

    A short norm is float32 with its low 15 bits cleared, rounded up: at most 2**-8 above the
    float32 value. Rounding up keeps unbiasedness exactly (see :func:`float32_norms_up`); the
    variance bound grows by the square of the ratio, at most 2**-7.
    """
    f = float32_norms_up(norms)
    if bits == NORM_BITS:
        return f
    # round up to a multiple of 2**15 in the bit pattern (a finite norm cannot overflow the uint32)
    out = ((f.view(np.uint32) + _SHORT_DROP) & ~_SHORT_DROP).view(np.float32)
    if not np.all(np.isfinite(out)):
        raise ValueError("a block norm exceeds the short norms' range (~3.4e38); rescale the statistics.")
    return out


def check_wire_norms(norms, bits) -> None:
    """ValueError unless float32 ``norms`` hold no more than ``bits`` bits each and none is negative."""
    if np.any(norms < 0):
        raise ValueError("a block norm is negative.")
    if bits != NORM_BITS and np.any(np.asarray(norms, dtype=np.float32).view(np.uint32) & _SHORT_DROP):
        raise ValueError(f"a block norm carries more than its {bits} wire bits.")


def fixed_width(n_symbols: int) -> int:
    """Bits of a fixed-width code for ``n_symbols`` symbols: ceil(log2(n_symbols))."""
    return max(int(n_symbols - 1).bit_length(), 1)


@njit(cache=True)
def _put(row, pos, acc, nacc, value, width):
    acc = (acc << width) | value
    nacc += width
    while nacc >= _BYTE:
        nacc -= _BYTE
        row[pos] = (acc >> nacc) & _BYTE_MASK
        pos += 1
    acc &= (1 << nacc) - 1
    return pos, acc, nacc


@njit(cache=True)
def _flush(row, pos, acc, nacc):
    if nacc > 0:
        row[pos] = (acc << (_BYTE - nacc)) & _BYTE_MASK


@njit(cache=True)
def _get(row, pos, acc, nacc, width):
    while nacc < width:
        byte = row[pos] if pos < row.size else 0
        acc = (acc << _BYTE) | byte
        pos += 1
        nacc += _BYTE
    nacc -= width
    value = (acc >> nacc) & ((1 << width) - 1)
    acc &= (1 << nacc) - 1
    return value, pos, acc, nacc


@njit(cache=True)
def _put_word(row, pos, acc, nacc):
    """Word writer of the packers: the top 32 of the accumulator's ``nacc`` (32..64) bits go
    out, most significant byte first; returns the new (pos, acc, nacc)."""
    nacc -= _WORD_BITS
    word = acc >> np.uint64(nacc)
    for t in range(_WORD_BYTES):
        row[pos + t] = (word >> np.uint64(_BYTE * (_WORD_BYTES - 1 - t))) & _U_BYTE_MASK
    return pos + _WORD_BYTES, acc & ((_U1 << np.uint64(nacc)) - _U1), nacc


@njit(cache=True)
def _put_tail(row, pos, acc, nacc):
    """The accumulator's last ``nacc`` (< 32) bits, zero padded to whole bytes."""
    while nacc >= _BYTE:
        nacc -= _BYTE
        row[pos] = (acc >> np.uint64(nacc)) & _U_BYTE_MASK
        pos += 1
    if nacc > 0:
        row[pos] = (acc << np.uint64(_BYTE - nacc)) & _U_BYTE_MASK


@njit(cache=True)
def _pack_fixed_kernel(codes, width, out):
    # Fixed widths flush four bytes at a time: the accumulator holds < 32 bits
    # before a write of <= MAX_CODE_WIDTH bits, so at most 63 bits, and the
    # per-code work is one shift-or (10x faster than byte-by-byte _put).
    w = np.uint64(width)
    for i in range(codes.shape[0]):
        row = out[i]
        pos, acc, nacc = 0, _U0, 0
        for j in range(codes.shape[1]):
            acc = (acc << w) | np.uint64(codes[i, j])
            nacc += width
            if nacc >= _WORD_BITS:
                pos, acc, nacc = _put_word(row, pos, acc, nacc)
        _put_tail(row, pos, acc, nacc)


def pack_fixed(codes, width: int) -> np.ndarray:
    """Pack non-negative int codes (n_rows, q) at ``width`` bits each -> uint8 (n_rows, ceil(q*width/8))."""
    out = np.zeros((codes.shape[0], -(-codes.shape[1] * width // _BYTE)), dtype=np.uint8)
    _pack_fixed_kernel(codes, width, out)
    return out


@njit(cache=True)
def _unpack_fixed_kernel(packed, width, out):
    for i in range(out.shape[0]):
        pos, acc, nacc = 0, 0, 0
        for j in range(out.shape[1]):
            code, pos, acc, nacc = _get(packed[i], pos, acc, nacc, width)
            out[i, j] = code


def unpack_fixed(packed, q: int, width: int) -> np.ndarray:
    """Inverse of :func:`pack_fixed`: int64 codes of shape (n_rows, q)."""
    out = np.empty((packed.shape[0], q), dtype=np.int64)
    _unpack_fixed_kernel(packed, width, out)
    return out


@njit(cache=True)
def _expand_scale_kernel(levels, norms, blocks, scale, out):
    for i in range(levels.shape[0]):
        for b in range(blocks.size - 1):
            f = np.float64(norms[i, b]) * scale
            for j in range(blocks[b], blocks[b + 1]):
                out[i, j] = f * levels[i, j]


def expand_scale(levels, norms, blocks, scale: float) -> np.ndarray:
    """``out[i, j] = norms[i, block(j)] * scale * levels[i, j]``, float64 (n_rows, q)."""
    out = np.empty(levels.shape, dtype=np.float64)
    _expand_scale_kernel(levels, norms, blocks, float(scale), out)
    return out


def norm_bytes(norms_row, bits=NORM_BITS) -> bytes:
    """Little-endian bytes of one row's block norms: float32, or bits 15..30 of each (short norms)."""
    f = np.asarray(norms_row, dtype="<f4")
    if bits == NORM_BITS:
        return f.tobytes()
    return (f.view(np.uint32) >> np.uint32(_SHORT_SHIFT)).astype("<u2").tobytes()


def split_norms(payload: bytes, n_blocks: int, bits=NORM_BITS) -> tuple:
    """Split one row's payload into (float32 norms (n_blocks,), remaining bytes)."""
    head = n_blocks * bits // _BYTE
    if len(payload) < head:
        raise ValueError(f"payload of {len(payload)} bytes is too short for {n_blocks} {bits}-bit norms.")
    if bits == NORM_BITS:
        norms = np.frombuffer(payload[:head], dtype="<f4").astype(np.float32)
    else:
        words = np.frombuffer(payload[:head], dtype="<u2").astype(np.uint32) << np.uint32(_SHORT_SHIFT)
        norms = words.view(np.float32)
    return norms, payload[head:]


def stack_padded(chunks) -> np.ndarray:
    """Stack byte strings into a zero-padded uint8 array (n, max_len)."""
    width = max((len(c) for c in chunks), default=0)
    out = np.zeros((len(chunks), width), dtype=np.uint8)
    for i, c in enumerate(chunks):
        out[i, : len(c)] = np.frombuffer(c, dtype=np.uint8)
    return out
