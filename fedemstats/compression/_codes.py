"""Variable-length codes of signed quantisation levels (SPEC §6): Elias-gamma and Rice.

Both code a level l as its magnitude |l| followed by a sign bit when l != 0, most
significant bit first, on the bit writer of :mod:`._bits`. Each packs a matrix of levels
(n_rows, q) row by row into uint8 rows zero-padded to the longest, and returns or takes
the exact length of every row's code in bits (``code_bits``), which is what the ledger
counts. Decoders take untrusted bytes: a code that is longer than any valid level or than
its row is an error, never a read past the array.

* **Elias-gamma**: |l| + 1 = 2^z + r is sent as z zeros and the z + 1 bits of |l| + 1.
* **Rice** (Golomb with a power-of-two divisor, as in lossless audio coders): the row
  starts with its parameter k (:data:`RICE_K_BITS` bits); |l| is sent as |l| >> k zeros, a
  one, and the k low bits of |l|. Each row takes the k that makes it shortest, so the
  code adapts to the scale of its levels: dithered statistics at s = 4 in the model's
  geometry (levels mostly 0 and ±1) take about 2 bits per coordinate instead of the
  fixed code's 4, and at s = 1024 about 9.5 instead of 12 (measured on the
  ``bench_real_data`` tables).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._threads import run
from ._bits import MAX_CODE_WIDTH, _flush, _get, _put, _put_tail, _put_word

__all__ = ["RICE_K_BITS", "elias_row_bits", "pack_elias", "unpack_elias", "rice_parameters", "pack_rice",
           "unpack_rice"]

#: bits of a row's Rice parameter: k <= 31 covers every level below 2**32
RICE_K_BITS = 5
_RICE_K_MAX = 2 ** RICE_K_BITS - 1
_BYTE = 8
_WORD = 32
_U0, _U1, _U_BYTE = np.uint64(0), np.uint64(1), np.uint64(0xFF)
#: leading zeros of each byte value (8 for 0)
_LEADING_ZEROS = np.array([8 - int(v).bit_length() for v in range(256)], dtype=np.int64)


# ---------------------------------------------------------------------- Elias-gamma
@njit(cache=True)
def _floor_log2(v):
    z = 0
    while v > 1:
        v >>= 1
        z += 1
    return z


@njit(cache=True)
def _elias_row_bits_kernel(levels, out):
    for i in range(levels.shape[0]):
        total = 0
        for j in range(levels.shape[1]):
            a = abs(np.int64(levels[i, j]))
            total += 2 * _floor_log2(a + 1) + 1 + (1 if a > 0 else 0)
        out[i] = total


def elias_row_bits(levels) -> np.ndarray:
    """Exact Elias-gamma size of each row of signed levels, int64 (n_rows,).

    Per coordinate: gamma(|l| + 1) = 2 floor(log2(|l| + 1)) + 1 bits, then one sign
    bit only when l != 0 (a zero level needs no sign).
    """
    out = np.empty(levels.shape[0], dtype=np.int64)
    _elias_row_bits_kernel(levels, out)
    return out


@njit(cache=True)
def _pack_elias_kernel(levels, out):
    for i in range(levels.shape[0]):
        pos, acc, nacc = 0, 0, 0
        for j in range(levels.shape[1]):
            lev = np.int64(levels[i, j])
            v = abs(lev) + 1
            z = _floor_log2(v)
            pos, acc, nacc = _put(out[i], pos, acc, nacc, np.int64(0), z)
            pos, acc, nacc = _put(out[i], pos, acc, nacc, v, z + 1)
            if lev != 0:
                pos, acc, nacc = _put(out[i], pos, acc, nacc, np.int64(1 if lev < 0 else 0), 1)
        _flush(out[i], pos, acc, nacc)


def pack_elias(levels, row_bits) -> np.ndarray:
    """Elias-gamma pack signed levels (n_rows, q) -> uint8 (n_rows, ceil(max(row_bits)/8)), zero padded."""
    nbytes = -(-int(row_bits.max(initial=0)) // _BYTE)
    out = np.zeros((levels.shape[0], nbytes), dtype=np.uint8)
    _pack_elias_kernel(levels, out)
    return out


@njit(cache=True)
def _unpack_elias_kernel(packed, levels, nbits, max_zeros):
    for i in range(levels.shape[0]):
        pos, acc, nacc, used = 0, 0, 0, 0
        for j in range(levels.shape[1]):
            z = 0
            bit, pos, acc, nacc = _get(packed[i], pos, acc, nacc, 1)
            while bit == 0:
                z += 1
                if z > max_zeros:
                    return False
                bit, pos, acc, nacc = _get(packed[i], pos, acc, nacc, 1)
            rest, pos, acc, nacc = _get(packed[i], pos, acc, nacc, z)
            mag = ((1 << z) | rest) - 1
            used += 2 * z + 1
            if mag > 0:
                sign, pos, acc, nacc = _get(packed[i], pos, acc, nacc, 1)
                used += 1
                mag = -mag if sign == 1 else mag
            levels[i, j] = mag
        nbits[i] = used
    return True


def unpack_elias(packed, q: int) -> tuple:
    """Inverse of :func:`pack_elias`.

    Returns
    -------
    levels : ndarray of int64 of shape (n_rows, q)
    nbits : ndarray of int64 of shape (n_rows,)
        Bits consumed by each row's code (its exact length).
    """
    levels = np.empty((packed.shape[0], q), dtype=np.int64)
    nbits = np.empty(packed.shape[0], dtype=np.int64)
    if not _unpack_elias_kernel(packed, levels, nbits, MAX_CODE_WIDTH - 1):
        raise ValueError("corrupt Elias-gamma payload: a code is longer than any valid level.")
    return levels, nbits


# ---------------------------------------------------------------------- Rice
# The Rice kernels run rows on numba's threads (rows are independent: the result does not
# depend on the thread count); with 100,000 clients a round codes 3e7 levels.
@njit(cache=True, parallel=True)
def _rice_parameters_kernel(levels, ks, bits):
    # cost(k) = Σ_j (|l_j| >> k) + q (1 + k) + #{l_j != 0}: the shift sums of every k in one pass
    for i in prange(levels.shape[0]):
        sums = np.zeros(_RICE_K_MAX + 1, dtype=np.int64)
        nonzero, top = 0, 0
        for j in range(levels.shape[1]):
            a = abs(np.int64(levels[i, j]))
            nonzero += 1 if a > 0 else 0
            top = max(top, a)
            k = 0
            while a > 0:
                sums[k] += a
                a >>= 1
                k += 1
        q = levels.shape[1]
        best_k, best = 0, sums[0] + q
        # once every magnitude is below 2^k a larger k only adds a bit per coordinate
        k = 1
        while k <= _RICE_K_MAX and (top >> (k - 1)) > 0:
            cost = sums[k] + q * (1 + k)
            if cost < best:
                best_k, best = k, cost
            k += 1
        ks[i] = best_k
        bits[i] = RICE_K_BITS + best + nonzero


def rice_parameters(levels) -> tuple:
    """Each row's shortest Rice parameter and the length of its code.

    Returns
    -------
    ks : ndarray of int64 of shape (n_rows,)
    row_bits : ndarray of int64 of shape (n_rows,)
        :data:`RICE_K_BITS` + Σ_j (|l_j| >> k + 1 + k + [l_j != 0]).
    """
    ks = np.empty(levels.shape[0], dtype=np.int64)
    bits = np.empty(levels.shape[0], dtype=np.int64)
    run(_rice_parameters_kernel, levels.size, levels, ks, bits)
    return ks, bits


@njit(cache=True, parallel=True)
def _pack_rice_kernel(levels, ks, out):
    # a code is at most 1 + 31 + 1 bits after its zeros, so the accumulator (< 32 bits between
    # codes) never holds more than 64
    for i in prange(levels.shape[0]):
        k = np.uint64(ks[i])
        low = (_U1 << k) - _U1
        row = out[i]
        pos, acc, nacc = 0, np.uint64(ks[i]), RICE_K_BITS
        for j in range(levels.shape[1]):
            lev = np.int64(levels[i, j])
            a = np.uint64(abs(lev))
            zeros = np.int64(a >> k)
            while zeros > 0:  # the unary zeros (rare: k fits the row's levels), a word at a time
                w = min(zeros, _WORD - 1)
                acc <<= np.uint64(w)
                nacc += w
                zeros -= w
                if nacc >= _WORD:
                    pos, acc, nacc = _put_word(row, pos, acc, nacc)
            # the one ending the unary part, the k low bits, then the sign of a non-zero level
            tail = (_U1 << k) | (a & low)
            width = 1 + ks[i]
            if lev != 0:
                tail = (tail << _U1) | (_U1 if lev < 0 else _U0)
                width += 1
            acc = (acc << np.uint64(width)) | tail
            nacc += width
            if nacc >= _WORD:
                pos, acc, nacc = _put_word(row, pos, acc, nacc)
        _put_tail(row, pos, acc, nacc)


def pack_rice(levels, ks, row_bits) -> np.ndarray:
    """Rice pack signed levels (n_rows, q) with parameters ``ks`` -> uint8 (n_rows,
    ceil(max(row_bits)/8)), zero padded (``ks``, ``row_bits`` from :func:`rice_parameters`)."""
    nbytes = -(-int(row_bits.max(initial=0)) // _BYTE)
    out = np.zeros((levels.shape[0], nbytes), dtype=np.uint8)
    run(_pack_rice_kernel, levels.size, levels, ks, out)
    return out


@njit(cache=True)
def _refill(row, pos, buf, nb):
    # the reader holds nb unread bits at the bottom of buf; past the row's end it reads zeros,
    # so a truncated code fails the zero-run bound or the length check instead of reading on
    while nb <= 56:
        byte = np.uint64(row[pos]) if pos < row.size else _U0
        buf = (buf << np.uint64(_BYTE)) | byte
        pos += 1
        nb += _BYTE
    return pos, buf, nb


@njit(cache=True)
def _unpack_rice_row(row, out, max_level):
    """Decode one row into ``out``; returns the bits it used, or -1 if the code is invalid."""
    pos, buf, nb = _refill(row, 0, _U0, 0)
    nb -= RICE_K_BITS
    k = np.int64((buf >> np.uint64(nb)) & np.uint64(_RICE_K_MAX))
    max_zeros = max_level >> k
    low_mask = (_U1 << np.uint64(k)) - _U1
    for j in range(out.size):
        z = 0
        while True:  # the unary zeros, a byte at a time
            if nb < _BYTE:
                pos, buf, nb = _refill(row, pos, buf, nb)
            lead = _LEADING_ZEROS[(buf >> np.uint64(nb - _BYTE)) & _U_BYTE]
            z += lead
            if z > max_zeros:
                return -1
            if lead < _BYTE:
                nb -= lead + 1
                break
            nb -= _BYTE
        if nb < k + 1:
            pos, buf, nb = _refill(row, pos, buf, nb)
        nb -= k
        mag = (np.int64(z) << k) | np.int64((buf >> np.uint64(nb)) & low_mask)
        if mag > max_level:
            return -1
        if mag > 0:
            nb -= 1
            if (buf >> np.uint64(nb)) & _U1:
                mag = -mag
        out[j] = mag
    used = _BYTE * pos - nb
    return used if used <= _BYTE * row.size else -1


@njit(cache=True, parallel=True)
def _unpack_rice_kernel(packed, levels, nbits, max_level):
    for i in prange(levels.shape[0]):
        nbits[i] = _unpack_rice_row(packed[i], levels[i], max_level)


def unpack_rice(packed, q: int, max_level: int) -> tuple:
    """Inverse of :func:`pack_rice`.

    Parameters
    ----------
    packed : ndarray of uint8 of shape (n_rows, n_bytes)
    q : int
        Levels per row.
    max_level : int
        Largest valid magnitude (the dithering's s): a longer code is an error.

    Returns
    -------
    levels : ndarray of int64 of shape (n_rows, q)
    nbits : ndarray of int64 of shape (n_rows,)
        Bits consumed by each row's code (its exact length).

    Raises
    ------
    ValueError
        If a code is longer than its row or codes a level above ``max_level``.
    """
    levels = np.empty((packed.shape[0], q), dtype=np.int64)
    nbits = np.empty(packed.shape[0], dtype=np.int64)
    run(_unpack_rice_kernel, levels.size, packed, levels, nbits, int(max_level))
    if np.any(nbits < 0):
        raise ValueError("corrupt Rice payload: a code runs past its row's length or codes a level above s.")
    return levels, nbits
