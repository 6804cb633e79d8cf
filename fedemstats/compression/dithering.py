"""Random dithering, the QSGD-style quantiser of paper 003 §2 (SPEC §6).

Q(x) = (||x||_r / s) sign(x) ⊙ ⌊ s |x| / ||x||_r + ξ ⌋,  ξ ~ U[0, 1]^q,
optionally with one norm per statistic block. Wire format of one row: the block
norms (16 bits each at s <= 4, else float32), then the levels: by default a Rice code with the
row's own parameter (:mod:`._codes`; about 2 bits per coordinate at s = 4 in the model's
geometry), else a fixed-width signed level (⌈log2(2s + 1)⌉ bits, code = level + s) or
the Elias-gamma code of |level| + 1, each non-zero level followed by a sign bit.
"""
from __future__ import annotations

import numbers

import numpy as np
from numba import njit, prange

from .._threads import run
from .base import Compressor, Message, _as_rows, uniform_rows
from ._noise import max_norm_estimate, norm2_estimate
from .streams import ClientStreams, fill_uniform_row
from ._bits import (
    MAX_CODE_WIDTH, NORM_BITS, SHORT_NORM_BITS, block_norms, check_blocks, check_wire_norms, expand_scale,
    split_blocks, fixed_width, norm_bytes, pack_fixed, split_norms, stack_padded, unpack_fixed, wire_norms_up,
)
from ._codes import elias_row_bits, pack_elias, pack_rice, rice_parameters, unpack_elias, unpack_rice

__all__ = ["RandomDithering"]

#: largest number of levels: keeps a fixed code (and |level| + 1 in Elias-gamma) within MAX_CODE_WIDTH bits
MAX_LEVELS = 2 ** (MAX_CODE_WIDTH - 2)
_CODINGS = ("rice", "fixed", "elias")
#: zero bytes appended before decoding an untrusted Elias code: more than one longest
#: level code (2 MAX_CODE_WIDTH bits), so a truncated code fails inside the padding
_ELIAS_PAD_BYTES = 2 * MAX_CODE_WIDTH // 8 + 1
#: Most levels whose norms travel in SHORT_NORM_BITS by default (``norm_bits="auto"``): a
#: short norm is up to 2**-8 above the float32 one, which lowers the receiver's noise estimate
#: by up to 2**-7 ||x||² (half that on average). At s = 4 the quantisation noise of a block
#: of 10 whitened coordinates is about ||x||² / 10 (of 64, about 0.8 ||x||²): an
#: underestimate of 1-8%. At s = 8 it would reach 30%, at s = 1024 it would exceed the noise.
SHORT_NORM_MAX_LEVELS = 4
_NORM_BITS_CHOICES = ("auto", NORM_BITS, SHORT_NORM_BITS)
#: Default largest block under one norm (see ``block_size``).
DEFAULT_BLOCK_SIZE = 64


@njit(cache=True)
def _levels_row(x, xi, norms, blocks, s, offset, out):
    for b in range(blocks.size - 1):
        nrm = np.float64(norms[b])
        for j in range(blocks[b], blocks[b + 1]):
            if nrm == 0.0:
                out[j] = offset
                continue
            # |x| <= nrm (norm rounded up), so |x|/nrm <= 1 and u <= s exactly
            # under correctly rounded arithmetic: no level above s, no clipping.
            u = s * (abs(x[j]) / nrm)
            low = np.floor(u)
            # round up with probability frac(u): same law as ⌊u + ξ⌋, but
            # immune to u + ξ rounding up to the next integer.
            lev = np.int64(low) + (1 if xi[j] < u - low else 0)
            out[j] = offset + (-lev if x[j] < 0 else lev)


@njit(cache=True)
def _levels_kernel(x, xi, norms, blocks, s, offset, out):
    for i in range(x.shape[0]):
        _levels_row(x[i], xi[i], norms[i], blocks, s, offset, out[i])


@njit(cache=True, parallel=True)
def _levels_stream_kernel(x, keys, lane, norms, blocks, s, offset, out):
    # each client's uniforms drawn a row at a time: no (n_rows, q) array of them.
    # Rows are independent streams, so the result does not depend on the threads.
    for i in prange(x.shape[0]):
        xi = np.empty(x.shape[1])
        fill_uniform_row(keys[i, 0], keys[i, 1], lane, xi)
        _levels_row(x[i], xi, norms[i], blocks, s, offset, out[i])


class RandomDithering(Compressor):
    """Unbiased random dithering with ``s`` levels in the ``r``-norm.

    Parameters
    ----------
    s : int, default=4
        Number of levels, ``1 <= s <= 2**30``.
    r : {2, inf}, default=2
        Norm used for scaling.
    per_block : bool, default=True
        One norm per statistic block (``blocks`` passed to :meth:`compress`);
        without ``blocks`` the whole vector is one block. On by default (SPEC §2:
        block quantisation uses the layout's blocks): statistic blocks differ in scale
        (weights vs second moments), and one global norm lets the largest block's
        scale swamp the small ones with noise — observed to collapse a mixture
        component under mini-batch FedEM with a single norm.
    coding : {"rice", "fixed", "elias"}, default="rice"
        How levels travel (the levels, and so the decoded values, are the same whatever
        the coding):

        * ``"rice"``: a Rice code whose parameter each row chooses to be shortest. Levels
          small against ``s`` are the usual case: at s = 4 in the model's geometry it
          takes about 2 bits per coordinate against the fixed code's 4, at s = 1024 about
          9.5 against 12. Levels spread evenly over [−s, s] cost up to one bit more per
          coordinate than the fixed code.
        * ``"fixed"``: fixed-width signed levels, ⌈log2(2s + 1)⌉ bits each.
        * ``"elias"``: Elias-gamma codes, shortest when most levels are 0 (``s`` small
          against ``sqrt(q)``).
    block_size : int or None, default=64
        Largest number of coordinates sharing one norm: longer blocks are cut into
        near-equal chunks of at most ``block_size``. ω grows with the block's length d
        (min(d/(4s²), √d/s)), and the bound is nearly attained on flat vectors, so a
        d × d second-moment block quantised under one norm is noisy at large d; chunks
        of 64 keep ω ≤ 1 at s = 4 for 0.25 extra bit per coordinate (one 16-bit norm):
        measured on breast cancer (d = 30), FedEM then needs 3× fewer rounds and 3× fewer
        bits to converge. None: the blocks as given (paper 003's dithering).
    norm_bits : {"auto", 32, 16}, default="auto"
        Bits of each block norm on the wire: float32, or a 16-bit unsigned float
        (float32's exponent and 8 mantissa bits). ``"auto"``: 16 at s <= 4
        (:data:`SHORT_NORM_MAX_LEVELS`), else 32. At s = 4 in the model's geometry the
        levels of a block of 10 take about 25 bits in the Rice code: a float32 norm is
        more than the levels.

    Notes
    -----
    The norm is rounded *up* to what travels (float32, or 16 bits) before quantising, and
    the levels are drawn w.r.t. that value, so ``E[Q(x)] = x`` holds for what the receiver
    decodes. The variance bound then holds with ``||x||`` replaced by the sent norm, i.e.
    up to a relative ``2**-22`` on ``omega`` (float32 norms) or ``2**-7`` (16-bit norms).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> comp = RandomDithering(s=4, coding="fixed", norm_bits=32)
    >>> msg = comp.compress(rng.normal(size=(2, 100)), rng)
    >>> comp.row_bits(msg).tolist()         # 2 chunks of 50: 2 * 32 + 100 * ceil(log2(9))
    [464, 464]
    >>> rice = RandomDithering(s=4)         # Rice-coded levels, 16-bit norms
    >>> msg = rice.compress(rng.normal(size=(2, 100)), rng)
    >>> bool(np.all(rice.row_bits(msg) < 464 - 2 * 16))
    True
    """

    name = "dither"

    def __init__(self, s=4, r=2, per_block=True, coding="rice", block_size=DEFAULT_BLOCK_SIZE, norm_bits="auto"):
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or not 1 <= s <= MAX_LEVELS:
            raise ValueError(f"dithering needs an integer number of levels 1 <= s <= 2**30; got s={s!r}.")
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or r not in (2, float("inf")):
            raise ValueError(f"dithering norm r must be 2 or inf (omega bound needs r >= 2); got r={r!r}.")
        if not isinstance(per_block, (bool, np.bool_)):
            raise ValueError(f"per_block must be True or False; got {per_block!r}.")
        if coding not in _CODINGS:
            raise ValueError(f"dithering coding must be one of {_CODINGS}; got coding={coding!r}.")
        self.s = int(s)
        self.r = float(r)
        self.per_block = bool(per_block)
        self.coding = coding
        if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral)
                                       or block_size < 1):
            raise ValueError(f"dithering block_size must be None or an integer >= 1; got {block_size!r}.")
        self.block_size = None if block_size is None else int(block_size)
        if isinstance(norm_bits, bool) or norm_bits not in _NORM_BITS_CHOICES:
            raise ValueError(f"dithering norm_bits must be one of {_NORM_BITS_CHOICES}; got {norm_bits!r}.")
        self.norm_bits = norm_bits if norm_bits == "auto" else int(norm_bits)

    # -- helpers ---------------------------------------------------------------
    def _blocks(self, q, blocks):
        return split_blocks(check_blocks(blocks if self.per_block else None, q), self.block_size)

    def _norm_bits(self) -> int:
        if self.norm_bits == "auto":
            return SHORT_NORM_BITS if self.s <= SHORT_NORM_MAX_LEVELS else NORM_BITS
        return self.norm_bits

    @staticmethod
    def _width(s):
        return fixed_width(2 * s + 1)

    def _check_codec(self, message):
        if message.codec != self.name:
            raise ValueError(f"{type(self).__name__} cannot decode a {message.codec!r} message.")

    # -- contract --------------------------------------------------------------
    def compress(self, x, rng, blocks=None) -> Message:
        """Quantise rows; see :meth:`Compressor.compress`.

        ``message.arrays``: ``norms`` float32 (n_rows, n_blocks), ``codes`` uint8
        (n_rows, n_bytes) and, for the Rice and Elias codes, ``code_bits`` int64
        (n_rows,), the exact length of each row's level code (bookkeeping, not sent: the
        code is self-delimiting given q).
        """
        return self._pack(*self._quantise(x, rng, blocks))

    def compress_decoded(self, x, rng, blocks=None) -> tuple:
        """:meth:`compress` and the decoded rows and noise estimate from the levels drawn
        (no decoding of the message); see :meth:`Compressor.compress_decoded`."""
        levels, norms, bl = self._quantise(x, rng, blocks)
        signed = levels - self.s if self.coding == "fixed" else levels
        return (self._pack(levels, norms, bl), *self._values_and_noise(signed, norms, bl, self.s, self.r))

    def decompress_and_noise(self, message: Message) -> tuple:
        """:meth:`decompress` and :meth:`noise_estimate` from one decoding of the levels."""
        self._check_codec(message)
        bl = np.asarray(message.meta["blocks"], dtype=np.int64)
        return self._values_and_noise(self._levels(message), message.arrays["norms"], bl, message.meta["s"],
                                      message.meta["r"])

    @staticmethod
    def _values_and_noise(levels, norms, bl, s, r) -> tuple:
        """(decoded rows, (signal², noise²)) of signed ``levels`` under ``norms``."""
        decoded = expand_scale(levels, norms, bl, 1.0 / s)
        if r == 2:
            return decoded, norm2_estimate(decoded, norms)
        return decoded, max_norm_estimate(decoded, levels, norms, bl, s)

    def _quantise(self, x, rng, blocks):
        """(levels int32 (n_rows, q), float32 norms (n_rows, n_blocks), blocks); levels are
        offset by s for the fixed code."""
        x = _as_rows(x)
        bl = self._blocks(x.shape[1], blocks)
        norms = wire_norms_up(block_norms(x, bl, self.r), self._norm_bits())
        offset = self.s if self.coding == "fixed" else 0
        levels = np.empty(x.shape, dtype=np.int32)
        if isinstance(rng, ClientStreams):
            run(_levels_stream_kernel, x.size, x, *rng.reserve(x.shape[0]), norms, bl, self.s, offset, levels)
        else:
            _levels_kernel(x, uniform_rows(rng, *x.shape), norms, bl, self.s, offset, levels)
        return levels, norms, bl

    def _pack(self, levels, norms, bl) -> Message:
        arrays = {"norms": norms}
        if self.coding == "fixed":
            arrays["codes"] = pack_fixed(levels, self._width(self.s))
        elif self.coding == "elias":
            arrays["code_bits"] = elias_row_bits(levels)
            arrays["codes"] = pack_elias(levels, arrays["code_bits"])
        else:
            ks, arrays["code_bits"] = rice_parameters(levels)
            arrays["codes"] = pack_rice(levels, ks, arrays["code_bits"])
        return self._message(levels.shape[0], levels.shape[1], arrays, bl)

    def _message(self, n_rows, q, arrays, bl):
        meta = {"s": self.s, "r": self.r, "coding": self.coding, "norm_bits": self._norm_bits(),
                "blocks": tuple(int(b) for b in bl)}
        return Message(self.name, n_rows, q, arrays, meta)

    @staticmethod
    def _unpack(codes, q, s, coding) -> tuple:
        """(levels (n_rows, q), code bits per row or None) of a level code."""
        if coding == "elias":
            return unpack_elias(codes, q)
        if coding == "rice":
            return unpack_rice(codes, q, s)
        return unpack_fixed(codes, q, RandomDithering._width(s)) - s, None

    def _levels(self, message) -> np.ndarray:
        return self._unpack(message.arrays["codes"], message.q, int(message.meta["s"]), message.meta["coding"])[0]

    def decompress(self, message: Message) -> np.ndarray:
        """Decode to float64 rows (n_rows, q): ``norm_b / s * level``."""
        self._check_codec(message)
        bl = np.asarray(message.meta["blocks"], dtype=np.int64)
        return expand_scale(self._levels(message), message.arrays["norms"], bl, 1.0 / message.meta["s"])

    def _variable_width(self, template) -> tuple:
        # a Rice or Elias code's length depends on the levels it codes
        return () if template.meta["coding"] == "fixed" else ("codes",)

    def _check_payload(self, message) -> None:
        """Norms non-negative, levels within [-s, s], a variable-length code as long as it says."""
        check_wire_norms(message.arrays["norms"], int(message.meta["norm_bits"]))
        s, codes, coding = int(message.meta["s"]), message.arrays["codes"], message.meta["coding"]
        if coding == "fixed":
            levels = self._levels(message)
        else:
            # zero padding makes a truncated Elias code fail inside the padding instead of
            # reading past the array (a run of zeros longer than any level is invalid); the
            # Rice decoder checks its row's end itself
            padded = np.concatenate([codes, np.zeros((codes.shape[0], _ELIAS_PAD_BYTES), np.uint8)], axis=1) \
                if coding == "elias" else codes
            levels, nbits = self._unpack(padded, message.q, s, coding)
            if np.any(nbits != message.arrays["code_bits"]) or np.any(-(-nbits // 8) != codes.shape[1]):
                raise ValueError(f"the {coding.capitalize()} code's length does not match its bytes and code_bits.")
        if levels.size and np.abs(levels).max() > s:
            raise ValueError(f"a dithering level is outside [-{s}, {s}].")

    @property
    def unbiased_noise(self) -> bool:
        """r = 2 sends each block's 2-norm, from which the noise is estimated without bias."""
        return self.r == 2.0

    def omega(self, q, blocks=None) -> float:
        """min(d/(4 s^2), sqrt(d)/s) with d = q, or the largest block size if per_block."""
        d = int(np.max(np.diff(self._blocks(int(q), blocks))))
        return float(min(d / (4.0 * self.s ** 2), np.sqrt(d) / self.s))

    def noise_estimate(self, message: Message) -> tuple:
        """``(signal_sq, noise_sq)`` of each row; see :meth:`Compressor.noise_estimate`.

        With levels ⌊u_j + ξ_j⌋, u_j = s|x_j|/N_b = a_j + p_j, E||Q(x) − x||² =
        Σ_b (N_b/s)² Σ_j p_j(1 − p_j) = E||q||² − ||x||².

        * r = 2: N_b² is ||x_b||² (rounded up to what travels), so signal_sq = Σ_b N_b²
          and noise_sq = ||q||² − Σ_b N_b² is unbiased, up to ``2**-22 ||x||²`` low
          (float32 norms) or ``2**-7 ||x||²`` (16-bit norms: 1-8% of the noise at
          s = 4, see :data:`SHORT_NORM_MAX_LEVELS`).
        * r = inf: ||x_b|| is not sent and no unbiased estimate exists; noise_sq is
          an upper estimate and signal_sq = ||q||² − noise_sq a lower one. For s >= 2,
          noise_sq = Σ_b (N_b/s)² (#{|l_j| = 1} + #{|l_j| >= 2}/4); s = 1 is block-p
          with p = inf and uses its bound (derivations in ``_noise``).
        """
        return self.decompress_and_noise(message)[1]

    def row_bits(self, message: Message) -> np.ndarray:
        """``norm_bits`` per block norm + the level code (fixed width, or the exact Rice or Elias length)."""
        self._check_codec(message)
        head = int(message.meta["norm_bits"]) * (len(message.meta["blocks"]) - 1)
        if message.meta["coding"] != "fixed":
            return head + message.arrays["code_bits"].astype(np.int64)
        per_row = message.q * self._width(int(message.meta["s"]))
        return np.full(message.n_rows, head + per_row, dtype=np.int64)

    def encode(self, message: Message) -> list:
        """One ``bytes`` per row: the norms (little endian, ``norm_bits`` each), then the level code."""
        bits = int(message.meta["norm_bits"])
        code_bytes = -(-(self.row_bits(message) - bits * message.arrays["norms"].shape[1]) // 8)
        return [norm_bytes(nrm, bits) + codes[:nb].tobytes()
                for nrm, codes, nb in zip(message.arrays["norms"], message.arrays["codes"], code_bytes)]

    def decode(self, payloads, q, blocks=None) -> Message:
        """Inverse of :meth:`encode` for this compressor's parameters.

        Raises
        ------
        ValueError
            If a payload's length or a level does not fit ``q``, ``s`` and ``blocks``.
        """
        q = int(q)
        bl = self._blocks(q, blocks)
        parts = [split_norms(p, bl.size - 1, self._norm_bits()) for p in payloads]
        norms = np.stack([p[0] for p in parts]).reshape(len(parts), bl.size - 1)
        codes = stack_padded([p[1] for p in parts])
        arrays = {"norms": norms, "codes": codes}
        levels, code_bits = self._unpack(codes, q, self.s, self.coding)
        if code_bits is None:
            expected = np.full(len(parts), -(-q * self._width(self.s) // 8))
        else:
            arrays["code_bits"], expected = code_bits, -(-code_bits // 8)
        lengths = np.array([len(p[1]) for p in parts], dtype=np.int64)
        if np.any(lengths != expected):
            raise ValueError(f"payload length does not match this dithering's q={q}, s={self.s}, "
                             f"coding={self.coding!r} and {bl.size - 1} blocks.")
        if levels.size and np.abs(levels).max() > self.s:
            raise ValueError(f"a dithering level is outside [-{self.s}, {self.s}].")
        return self._message(len(parts), q, arrays, bl)
