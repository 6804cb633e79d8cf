"""Lossless entropy coding of binary masks (SPEC §8: bits per parameter of FedPM).

An adaptive binary arithmetic coder (Witten, Neal & Cleary 1987, integer
implementation with "bits to follow") driven by the Krichevsky-Trofimov (KT)
estimator ``P(1) = (n_1 + 1/2) / (n + 1)`` of the bits seen so far. Encoder and
decoder update the same counts, so no probability is transmitted, and for a
mask of ``n`` iid Bernoulli(p) bits the code length is

    n H(p_hat) + (1/2) log2(n) + O(1) bits

(the KT regret), i.e. within a fraction of a percent of ``n H(p)`` for the mask
sizes of the neural bridge. This is the number FedPM (paper 002, eq. 13)
estimates with the binary entropy; :func:`encode_mask` makes it an actual
message whose length the ledger can count.

The hot loops are numba-compiled: a pure Python loop over ~2e5 bits per client
and round takes about half a second, the compiled one about a millisecond.
"""
from __future__ import annotations

import numba
import numpy as np

from .._validation import check_int

__all__ = ["encode_mask", "decode_mask", "coded_bits", "binary_entropy", "empirical_entropy_bits"]

# 32-bit code register (WNC 1987): interval bounds live in [0, 2^32).
_CODE_BITS = 32
_TOP = (1 << _CODE_BITS) - 1
_HALF = 1 << (_CODE_BITS - 1)
_QUARTER = 1 << (_CODE_BITS - 2)
_THREE_QUARTERS = 3 * _QUARTER
# Probabilities are quantised to 16 bits. After renormalisation the interval is
# wider than a quarter (2^30), so both sub-intervals are >= 2^14 > 0: every
# symbol stays decodable, and a symbol never costs more than 16 bits.
_PROB_BITS = 16
_PROB_ONE = 1 << _PROB_BITS
# Worst-case output: 16 bits per symbol + a 2-bit flush, rounded up to bytes.
_MAX_BITS_PER_SYMBOL = _PROB_BITS
_FLUSH_BYTES = 8


@numba.njit(cache=True, inline="always")
def _p0_fixed(c0, c1):
    """KT estimate of P(bit = 0) in units of 2^-16, clipped to [1, 2^16 - 1]."""
    f0 = ((2 * c0 + 1) * _PROB_ONE) // (2 * (c0 + c1) + 2)
    return min(max(f0, 1), _PROB_ONE - 1)


@numba.njit(cache=True, inline="always")
def _put_bit(out, pos, bit):
    if bit:
        out[pos >> 3] |= np.uint8(0x80 >> (pos & 7))
    return pos + 1


@numba.njit(cache=True)
def _encode(bits, out):
    """Arithmetic-code ``bits`` (uint8 0/1) into the zeroed ``out``; returns the bit count."""
    low, high, pending, pos = 0, _TOP, 0, 0
    c0, c1 = 0, 0
    for b in bits:
        split = low + (((high - low + 1) * _p0_fixed(c0, c1)) >> _PROB_BITS) - 1
        if b:
            low = split + 1
            c1 += 1
        else:
            high = split
            c0 += 1
        while True:
            if high < _HALF:
                pos = _put_bit(out, pos, 0)
                for _ in range(pending):
                    pos = _put_bit(out, pos, 1)
                pending = 0
            elif low >= _HALF:
                pos = _put_bit(out, pos, 1)
                for _ in range(pending):
                    pos = _put_bit(out, pos, 0)
                pending = 0
                low -= _HALF
                high -= _HALF
            elif low >= _QUARTER and high < _THREE_QUARTERS:
                pending += 1
                low -= _QUARTER
                high -= _QUARTER
            else:
                break
            low = 2 * low
            high = 2 * high + 1
    # Flush: two more bits pin a value inside [low, high] (the decoder pads zeros).
    pending += 1
    first = 0 if low < _QUARTER else 1
    pos = _put_bit(out, pos, first)
    for _ in range(pending):
        pos = _put_bit(out, pos, 1 - first)
    return pos


@numba.njit(cache=True, inline="always")
def _get_bit(data, pos):
    if (pos >> 3) >= data.size:
        return 0
    return (data[pos >> 3] >> (7 - (pos & 7))) & 1


@numba.njit(cache=True)
def _decode(data, n, out):
    value, pos = 0, 0
    for _ in range(_CODE_BITS):
        value = 2 * value + _get_bit(data, pos)
        pos += 1
    low, high = 0, _TOP
    c0, c1 = 0, 0
    for i in range(n):
        split = low + (((high - low + 1) * _p0_fixed(c0, c1)) >> _PROB_BITS) - 1
        if value <= split:
            out[i] = 0
            high = split
            c0 += 1
        else:
            out[i] = 1
            low = split + 1
            c1 += 1
        while True:
            if high < _HALF:
                pass
            elif low >= _HALF:
                low -= _HALF
                high -= _HALF
                value -= _HALF
            elif low >= _QUARTER and high < _THREE_QUARTERS:
                low -= _QUARTER
                high -= _QUARTER
                value -= _QUARTER
            else:
                break
            low = 2 * low
            high = 2 * high + 1
            value = 2 * value + _get_bit(data, pos)
            pos += 1


def _as_bits(mask) -> np.ndarray:
    arr = np.asarray(mask)
    if arr.ndim != 1:
        raise ValueError(f"mask must be 1-D; got shape {arr.shape}. Flatten it first.")
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8)
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise ValueError("mask must hold only 0/1 (or booleans).")
    return arr.astype(np.uint8)


def encode_mask(mask) -> bytes:
    """Losslessly encode a binary mask.

    Parameters
    ----------
    mask : array-like of bool or {0, 1} of shape (n,)

    Returns
    -------
    code : bytes
        The arithmetic code, trailing zero bytes dropped (the decoder pads
        zeros). Its length in bits, ``8 * len(code)``, is what a client sends;
        the mask length ``n`` is known to both sides (it is the model size).
    """
    bits = _as_bits(mask)
    out = np.zeros(bits.size * _MAX_BITS_PER_SYMBOL // 8 + _FLUSH_BYTES, dtype=np.uint8)
    n_bits = _encode(bits, out)
    code = out[: (n_bits + 7) // 8]
    nonzero = np.flatnonzero(code)
    return code[: nonzero[-1] + 1].tobytes() if nonzero.size else b""


def decode_mask(code, n) -> np.ndarray:
    """Inverse of :func:`encode_mask`.

    Parameters
    ----------
    code : bytes
    n : int
        Mask length.

    Returns
    -------
    mask : ndarray of bool of shape (n,)
    """
    n = check_int(n, "mask length n", minimum=0)
    if not isinstance(code, (bytes, bytearray, memoryview)):
        raise ValueError(f"code must be bytes; got {type(code).__name__}.")
    out = np.empty(n, dtype=np.uint8)
    _decode(np.frombuffer(bytes(code), dtype=np.uint8), n, out)
    return out.astype(bool)


def coded_bits(mask) -> int:
    """Exact size in bits of :func:`encode_mask` ``(mask)`` (a multiple of 8)."""
    return 8 * len(encode_mask(mask))


def binary_entropy(p) -> np.ndarray:
    """Binary entropy ``H(p) = -p log2 p - (1-p) log2(1-p)`` in bits, elementwise (H(0) = H(1) = 0)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1.0 - p) * np.log2(1.0 - p))
    return np.nan_to_num(h, nan=0.0)


def empirical_entropy_bits(mask) -> float:
    """Bits per entry of a memoryless source fitted to ``mask``: ``H(mean(mask))`` (paper 002, eq. 13)."""
    bits = _as_bits(mask)
    return float(binary_entropy(bits.mean())) if bits.size else 0.0
