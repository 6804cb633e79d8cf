"""Floats with a short mantissa: IEEE float32 cut to its sign, its 8 exponent bits and the top
``k`` of its 23 mantissa bits, ``9 + k`` bits each on the wire (SPEC §6).

The quantised start sends θ_0 as its statistics in this form, at the shortest ``k`` whose
rounding stays within its tolerance (:mod:`fedemstats.algorithms.start`). A value carries its own
width: :func:`mantissa_bits` reads the ``k`` a vector of rounded floats needs, so the sender's
array alone fixes its bits in the ledger and its encoding.
"""
from __future__ import annotations

import numpy as np

from ._bits import pack_fixed, unpack_fixed

__all__ = ["FLOAT32_MANTISSA_BITS", "SIGN_EXPONENT_BITS", "round_mantissa", "mantissa_bits", "short_float_bits",
           "encode_short_floats", "decode_short_floats"]

#: mantissa bits of an IEEE float32
FLOAT32_MANTISSA_BITS = 23
#: bits of a short float besides its mantissa: the sign and float32's 8 exponent bits
SIGN_EXPONENT_BITS = 9
_MANTISSA_MASK = np.uint32(2 ** FLOAT32_MANTISSA_BITS - 1)


def _check_bits(bits) -> int:
    if not 0 <= int(bits) <= FLOAT32_MANTISSA_BITS:
        raise ValueError(f"a short float keeps 0 to {FLOAT32_MANTISSA_BITS} mantissa bits, got {bits}.")
    return int(bits)


def round_mantissa(x, bits) -> np.ndarray:
    """``x`` (float32, any shape) rounded to the nearest float with ``bits`` mantissa bits
    (halves away from zero), float32. A value too large for the shorter mantissa becomes inf,
    which callers reject as they reject any overflow."""
    x = np.asarray(x, dtype=np.float32)
    drop = FLOAT32_MANTISSA_BITS - _check_bits(bits)
    if drop == 0:
        return x.copy()
    pattern = x.view(np.uint32).astype(np.uint64)
    # the sign is the top bit: adding half a unit to the low bits rounds the magnitude, and a carry
    # out of the mantissa is the correct step to the next exponent
    pattern = ((pattern + (1 << (drop - 1))) >> drop) << drop
    return pattern.astype(np.uint32).view(np.float32)


def mantissa_bits(x) -> int:
    """The fewest mantissa bits that hold every value of float32 ``x`` exactly."""
    fraction = np.asarray(x, dtype=np.float32).view(np.uint32) & _MANTISSA_MASK
    used = np.bitwise_or.reduce(fraction.ravel(), initial=np.uint32(0))
    if used == 0:
        return 0
    trailing_zeros = (int(used) & -int(used)).bit_length() - 1
    return FLOAT32_MANTISSA_BITS - trailing_zeros


def short_float_bits(size: int, bits: int) -> int:
    """Wire bits of ``size`` short floats with ``bits`` mantissa bits."""
    return int(size) * (SIGN_EXPONENT_BITS + _check_bits(bits))


def encode_short_floats(x, bits: int) -> bytes:
    """float32 vector ``x``, whose values hold ``bits`` mantissa bits, as ``ceil(short_float_bits / 8)``
    bytes, most significant bit first."""
    x = np.asarray(x, dtype=np.float32).ravel()
    if mantissa_bits(x) > _check_bits(bits):
        raise ValueError(f"the values carry more than {bits} mantissa bits; round them first (round_mantissa).")
    codes = (x.view(np.uint32) >> np.uint32(FLOAT32_MANTISSA_BITS - bits)).astype(np.int64)
    return pack_fixed(codes[None, :], SIGN_EXPONENT_BITS + bits)[0].tobytes()


def decode_short_floats(payload: bytes, size: int, bits: int) -> np.ndarray:
    """Inverse of :func:`encode_short_floats`: float32 vector of ``size`` values."""
    width = SIGN_EXPONENT_BITS + _check_bits(bits)
    expected = -(-int(size) * width // 8)
    packed = np.frombuffer(bytes(payload), dtype=np.uint8)
    if packed.size != expected:
        raise ValueError(f"{size} short floats of {bits} mantissa bits take {expected} bytes, got {packed.size}.")
    codes = unpack_fixed(packed[None, :], int(size), width)[0]
    return (codes.astype(np.uint32) << np.uint32(FLOAT32_MANTISSA_BITS - bits)).view(np.float32)
