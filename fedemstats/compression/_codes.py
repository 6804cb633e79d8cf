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
from numba import njit

from ._bits import MAX_CODE_WIDTH, _flush, _get, _put

__all__ = ["RICE_K_BITS", "elias_row_bits", "pack_elias", "unpack_elias", "rice_parameters", "pack_rice",
           "unpack_rice"]

#: bits of a row's Rice parameter: k <= 31 covers every level below 2**32
RICE_K_BITS = 5
_RICE_K_MAX = 2 ** RICE_K_BITS - 1
_BYTE = 8


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
@njit(cache=True)
def _rice_cost(row, k):
    total = 0
    for j in range(row.size):
        a = abs(np.int64(row[j]))
        total += (a >> k) + (1 if a > 0 else 0)
    return total + row.size * (1 + k)


@njit(cache=True)
def _rice_parameters_kernel(levels, ks, bits):
    for i in range(levels.shape[0]):
        top = 0
        for j in range(levels.shape[1]):
            top = max(top, abs(np.int64(levels[i, j])))
        best_k, best = 0, _rice_cost(levels[i], 0)
        # once every magnitude is below 2^k a larger k only adds a bit per coordinate
        k = 1
        while k <= _RICE_K_MAX and (top >> (k - 1)) > 0:
            cost = _rice_cost(levels[i], k)
            if cost < best:
                best_k, best = k, cost
            k += 1
        ks[i] = best_k
        bits[i] = RICE_K_BITS + best


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
    _rice_parameters_kernel(levels, ks, bits)
    return ks, bits


@njit(cache=True)
def _set_bits(row, pos, value, width):
    # the row is zero-filled: only the one bits are written
    for t in range(width):
        if (value >> (width - 1 - t)) & 1:
            p = pos + t
            row[p >> 3] |= np.uint8(0x80 >> (p & 7))
    return pos + width


@njit(cache=True)
def _pack_rice_kernel(levels, ks, out):
    for i in range(levels.shape[0]):
        k = ks[i]
        row = out[i]
        pos = _set_bits(row, 0, k, RICE_K_BITS)
        low = (np.int64(1) << k) - 1
        for j in range(levels.shape[1]):
            lev = np.int64(levels[i, j])
            a = abs(lev)
            pos += a >> k  # the unary zeros are already in the row
            pos = _set_bits(row, pos, (np.int64(1) << k) | (a & low), k + 1)
            if lev != 0:
                pos = _set_bits(row, pos, np.int64(1 if lev < 0 else 0), 1)


def pack_rice(levels, ks, row_bits) -> np.ndarray:
    """Rice pack signed levels (n_rows, q) with parameters ``ks`` -> uint8 (n_rows,
    ceil(max(row_bits)/8)), zero padded (``ks``, ``row_bits`` from :func:`rice_parameters`)."""
    nbytes = -(-int(row_bits.max(initial=0)) // _BYTE)
    out = np.zeros((levels.shape[0], nbytes), dtype=np.uint8)
    _pack_rice_kernel(levels, ks, out)
    return out


@njit(cache=True)
def _bit(row, p):
    # past the row's end reads zeros: a truncated code then fails the zero-run bound
    b = p >> 3
    return (row[b] >> (7 - (p & 7))) & 1 if b < row.size else 0


@njit(cache=True)
def _read(row, pos, width):
    value = 0
    for t in range(width):
        value = (value << 1) | _bit(row, pos + t)
    return value, pos + width


@njit(cache=True)
def _unpack_rice_kernel(packed, levels, nbits, max_level):
    for i in range(levels.shape[0]):
        row = packed[i]
        k, pos = _read(row, 0, RICE_K_BITS)
        max_zeros = max_level >> k
        for j in range(levels.shape[1]):
            z = 0
            while _bit(row, pos) == 0:
                z += 1
                pos += 1
                if z > max_zeros:
                    return False
            rest, pos = _read(row, pos + 1, k)
            mag = (np.int64(z) << k) | rest
            if mag > max_level:
                return False
            if mag > 0:
                sign, pos = _read(row, pos, 1)
                mag = -mag if sign == 1 else mag
            levels[i, j] = mag
        if pos > _BYTE * row.size:
            return False
        nbits[i] = pos
    return True


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
    if not _unpack_rice_kernel(packed, levels, nbits, int(max_level)):
        raise ValueError("corrupt Rice payload: a code runs past its row's length or codes a level above s.")
    return levels, nbits
