"""Per-client random streams without a Generator per client (issue 15): Philox4x64-10 in numba.

Client ``c`` in round ``k`` of a run with public ``entropy`` owns the Philox key
``key(entropy, k, c)`` (a bijective splitmix64 mixing, so distinct ``(k, c)`` of a run
get distinct keys). The ``t``-th draw of a :class:`ClientStreams` (``t`` = draws made
before it) reads that client's Philox blocks at counters ``(b, t, 0, 0)``,
``b = 0, 1, ...``. Row ``j`` of every draw therefore depends only on
``(entropy, round, clients[j], t)``: drawing all ``m`` clients at once (in process)
or one client alone (a Flower node) gives the same bits.

The generator is NumPy's: row ``j`` of the ``t``-th ``uniform(width)`` equals
``numpy.random.Generator(numpy_philox(key_j, t)).random(width)`` bit for bit
(Philox4x64-10, Salmon et al. 2011; doubles as ``(word >> 11) * 2**-53``), so a
client can also reproduce its stream with NumPy alone.
"""
from __future__ import annotations

import numbers

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from .._threads import run

__all__ = ["ClientStreams", "stream_keys", "numpy_philox", "fill_uniform_row", "fmix64", "philox4x64", "MAX_ID"]

#: round numbers and client ids are packed into one uint64 as (round << 32) | client
MAX_ID = 2 ** 32
_ID_BITS = np.uint64(32)
_MAX_ENTROPY = 2 ** 64
#: Philox4x64-10 constants (Salmon et al. 2011; Random123, NumPy's philox.h)
PHILOX_ROUNDS = 10
WORDS_PER_BLOCK = 4
_M0 = np.uint64(0xD2E7470EE14C6C93)
_M1 = np.uint64(0xCA5A826395121157)
_W0 = np.uint64(0x9E3779B97F4A7C15)
_W1 = np.uint64(0xBB67AE8584CAA73B)
_ZERO = np.uint64(0)
#: a double in [0, 1) from the top 53 bits of a word, as NumPy's ``random()``
_DOUBLE_SHIFT = np.uint64(11)
_DOUBLE_SCALE = 2.0 ** -53
# splitmix64 (Steele, Lea & Flood 2014): golden-ratio increment and finaliser constants
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_FMIX_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))


@intrinsic
def _mulhilo(typingctx, a, b):
    """(hi, lo) words of the 128-bit product of two uint64: one ``mul`` instruction via LLVM i128."""
    if a != types.uint64 or b != types.uint64:
        return None
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        wide, word = ir.IntType(128), ir.IntType(64)
        prod = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        hi = builder.trunc(builder.lshr(prod, ir.Constant(wide, 64)), word)
        return context.make_tuple(builder, signature.return_type, [hi, builder.trunc(prod, word)])

    return sig, codegen


@njit(cache=True)
def fmix64(z):
    """splitmix64's finaliser: a bijection of uint64 with full avalanche."""
    z = (z ^ (z >> _FMIX_SHIFTS[0])) * _MIX1
    z = (z ^ (z >> _FMIX_SHIFTS[1])) * _MIX2
    return z ^ (z >> _FMIX_SHIFTS[2])


@njit(cache=True)
def philox4x64(c0, c1, c2, c3, k0, k1):
    """Philox4x64-10 of counter ``(c0, c1, c2, c3)`` under key ``(k0, k1)``: four uint64 words."""
    # each round: two 64x64 -> 128 products, the key xored into the high words,
    # a Weyl bump of the key between rounds (Salmon et al. 2011, Random123)
    x0, x1, x2, x3 = c0, c1, c2, c3
    for r in range(PHILOX_ROUNDS):
        if r > 0:
            k0 += _W0
            k1 += _W1
        hi0, lo0 = _mulhilo(_M0, x0)
        hi1, lo1 = _mulhilo(_M1, x2)
        x0, x1, x2, x3 = hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0
    return x0, x1, x2, x3


@njit(cache=True)
def _keys_kernel(entropy, ids, out):
    salt1 = fmix64(entropy + GOLDEN)
    salt0 = fmix64(entropy + GOLDEN + GOLDEN)
    for i in range(ids.size):
        # fmix64 is a bijection and xor with a salt is one: distinct ids -> distinct k1
        k1 = fmix64(ids[i] ^ salt1)
        out[i, 0] = fmix64(k1 ^ salt0)
        out[i, 1] = k1


@njit(cache=True)
def _store(row, j, word):
    row[j] = np.float64(word >> _DOUBLE_SHIFT) * _DOUBLE_SCALE


@njit(cache=True)
def fill_uniform_row(k0, k1, lane, row):
    """Fill the float64 ``row`` with one client's uniforms of draw ``lane`` (key ``(k0, k1)``).

    For compiled consumers (the quantisers) that draw a row at a time instead of
    holding an (m, width) array: same values as :meth:`ClientStreams.uniform`.
    """
    width = row.size
    n_full = width // WORDS_PER_BLOCK
    for b in range(n_full):
        # unrolled stores: indexing the returned tuple with a loop variable is slower
        w0, w1, w2, w3 = philox4x64(np.uint64(b), lane, _ZERO, _ZERO, k0, k1)
        j = b * WORDS_PER_BLOCK
        _store(row, j, w0)
        _store(row, j + 1, w1)
        _store(row, j + 2, w2)
        _store(row, j + 3, w3)
    if n_full * WORDS_PER_BLOCK < width:
        words = philox4x64(np.uint64(n_full), lane, _ZERO, _ZERO, k0, k1)
        for t in range(width - n_full * WORDS_PER_BLOCK):
            _store(row, n_full * WORDS_PER_BLOCK + t, words[t])


@njit(cache=True, parallel=True)
def _uniform_kernel(keys, lane, out):
    # rows are independent streams: the result does not depend on the threads
    for i in prange(out.shape[0]):
        fill_uniform_row(keys[i, 0], keys[i, 1], lane, out[i])


@njit(cache=True)
def _word_kernel(keys, lane, out):
    for i in range(out.size):
        out[i] = philox4x64(_ZERO, lane, _ZERO, _ZERO, keys[i, 0], keys[i, 1])[0]


def _check_id(value, name, bound):
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)) \
            or not 0 <= int(value) < bound:
        raise ValueError(f"{name} must be an integer in [0, {bound}); got {value!r}.")
    return int(value)


def stream_keys(entropy, round_, clients) -> np.ndarray:
    """Philox keys of ``clients`` in round ``round_``, uint64 of shape (m, 2).

    Parameters
    ----------
    entropy : int
        The run's public entropy, ``0 <= entropy < 2**64``.
    round_ : int
        Round number, ``0 <= round_ < 2**32``.
    clients : array-like of int of shape (m,)
        Client ids, each in ``[0, 2**32)``.
    """
    e = np.uint64(_check_id(entropy, "entropy", _MAX_ENTROPY))
    k = np.uint64(_check_id(round_, "round", MAX_ID))
    ids = np.asarray(clients)
    if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"clients must be a 1-D array of integer ids; got {clients!r}.")
    if ids.size and (ids.min() < 0 or ids.max() >= MAX_ID):
        raise ValueError(f"client ids must lie in [0, 2**32); got range [{ids.min()}, {ids.max()}].")
    packed = (k << _ID_BITS) | ids.astype(np.uint64)
    out = np.empty((ids.size, 2), dtype=np.uint64)
    _keys_kernel(e, packed, out)
    return out


def numpy_philox(key, draw: int) -> np.random.Philox:
    """NumPy's Philox bit generator positioned at a stream's ``draw``-th draw.

    ``Generator(numpy_philox(keys[j], t)).random(w)`` equals row ``j`` of the
    ``t``-th ``ClientStreams.uniform(w)``, and ``.bit_generator.random_raw()`` its
    ``uint64()``. NumPy increments the counter before each block, so the counter
    is set one below ``(0, t, 0, 0)``.
    """
    top = _MAX_ENTROPY - 1
    counter = [top, top, top, top] if draw == 0 else [top, draw - 1, 0, 0]
    return np.random.Philox(key=np.asarray(key, dtype=np.uint64), counter=np.array(counter, dtype=np.uint64))


class ClientStreams:
    """The random streams of ``m`` clients in one round, drawn in one compiled call.

    Parameters
    ----------
    entropy : int
        The run's public entropy (``draw_entropy``), ``0 <= entropy < 2**64``.
    round_ : int
        Round number, ``0 <= round_ < 2**32``.
    clients : array-like of int of shape (m,)
        Client ids (row ``j`` is client ``clients[j]``), each in ``[0, 2**32)``.

    Notes
    -----
    Like a Generator, each draw advances the stream (attribute ``draws``); unlike
    one Generator shared by all rows, row ``j`` depends only on
    ``(entropy, round_, clients[j])`` and on how many draws came before, never on
    the other rows nor on the widths of earlier draws. So a Flower node that builds
    ``ClientStreams(entropy, round_, [i])`` and makes the same calls draws exactly
    the row of client ``i`` of the in-process batch.

    Examples
    --------
    >>> together = ClientStreams(7, 3, [10, 11, 12]).uniform(5)
    >>> alone = ClientStreams(7, 3, [11]).uniform(5)
    >>> bool((together[1] == alone[0]).all())
    True
    """

    def __init__(self, entropy, round_, clients):
        self.keys = stream_keys(entropy, round_, clients)
        self.entropy, self.round = int(entropy), int(round_)
        self.clients = np.asarray(clients, dtype=np.int64)
        self.draws = 0

    @property
    def n_rows(self) -> int:
        """Number of clients ``m`` (rows of every draw)."""
        return int(self.keys.shape[0])

    def _lane(self) -> np.uint64:
        lane = np.uint64(self.draws)
        self.draws += 1
        return lane

    def check_rows(self, n_rows: int) -> None:
        """Raise ValueError unless ``n_rows`` (rows to compress) is the number of clients ``m``."""
        if int(n_rows) != self.n_rows:
            raise ValueError(f"these streams have {self.n_rows} rows (clients) but {n_rows} rows are "
                             "compressed; pass one stream per row.")

    def reserve(self, n_rows: int) -> tuple:
        """``(keys, lane)`` of the next draw, for a compiled consumer; advances ``draws``.

        A kernel draws row ``i`` with ``fill_uniform_row(keys[i, 0], keys[i, 1], lane, buf)``;
        ``n_rows`` is checked with :meth:`check_rows`.
        """
        self.check_rows(n_rows)
        return self.keys, self._lane()

    def uniform(self, width: int) -> np.ndarray:
        """U[0, 1) doubles of shape (m, width); row ``j`` from client ``clients[j]``'s stream."""
        out = np.empty((self.n_rows, int(width)), dtype=np.float64)
        run(_uniform_kernel, out.size, self.keys, self._lane(), out)
        return out

    def uint64(self) -> np.ndarray:
        """One uniform uint64 per row, shape (m,) (e.g. a shared-seed sparsifier's seed)."""
        out = np.empty(self.n_rows, dtype=np.uint64)
        _word_kernel(self.keys, self._lane(), out)
        return out

    def rows(self, idx) -> "ClientStreams":
        """The streams of rows ``idx`` at the same draw count (e.g. the active clients)."""
        sub = object.__new__(ClientStreams)
        idx = np.atleast_1d(np.asarray(idx, dtype=np.int64))
        sub.keys, sub.clients = self.keys[idx], self.clients[idx]
        sub.entropy, sub.round, sub.draws = self.entropy, self.round, self.draws
        return sub

    def __repr__(self):
        return (f"ClientStreams(entropy={self.entropy}, round_={self.round}, "
                f"clients=<{self.n_rows} ids>, draws={self.draws})")
