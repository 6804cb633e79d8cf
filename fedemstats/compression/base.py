"""Compressor contract (SPEC §2, §6) and the lossless identity compressor.

A compressor maps rows ``x`` of shape (n_rows, q) to a compact :class:`Message`
(e.g. bit-packed levels + float32 norms), never to decoded floats. Every
compressor is unbiased, ``E[Q(x)] = x``, with a variance bound
``E||Q(x)||^2 <= (1 + omega) ||x||^2``. Compressors know nothing of models;
block boundaries (from a :class:`~fedemstats.layout.StatLayout`) are passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ledger import FLOAT32_BITS, FLOAT64_BITS
from .streams import ClientStreams

__all__ = ["Message", "Compressor", "Identity", "uniform_rows", "seed_rows", "row_sq_norms"]

#: a ClientStreams word is a full uint64: seeds below 2**64 need no reduction
_WORD_HIGH = 2 ** 64
#: seed of the template message :meth:`Compressor.validate` compares with (a zero row: its
#: shapes and meta do not depend on the draws)
_TEMPLATE_SEED = 0


@dataclass(frozen=True)
class Message:
    """Compact encoded rows.

    Attributes
    ----------
    codec : str
        Name of the compressor that produced it.
    n_rows, q : int
        Shape of the decoded rows.
    arrays : dict of str -> ndarray
        Compact payload arrays (first axis ``n_rows`` for per-row arrays).
        Only numeric NumPy arrays: they travel as-is (e.g. in a Flower ArrayRecord).
    meta : dict of str -> int or float
        Small scalars needed to decode (levels ``s``, ``k``...).
    """

    codec: str
    n_rows: int
    q: int
    arrays: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def rows(self, idx) -> "Message":
        """The sub-message of rows ``idx`` (e.g. one client's part)."""
        idx = np.atleast_1d(np.asarray(idx, dtype=np.int64))
        arrays = {k: v[idx] for k, v in self.arrays.items()}
        return Message(self.codec, int(idx.size), self.q, arrays, dict(self.meta))

    @property
    def nbytes_payload(self) -> int:
        """Bytes held by the payload arrays (what a framework puts on the wire)."""
        return int(sum(a.nbytes for a in self.arrays.values()))


class Compressor:
    """Base class of unbiased compressors.

    Subclasses implement :meth:`compress`, :meth:`decompress`, :meth:`omega`,
    :meth:`row_bits` and :meth:`noise_estimate`. Randomness always comes from the
    ``rng`` argument.
    """

    name = "base"
    #: Whether :meth:`noise_estimate` is unbiased (else an upper estimate): VR-FedEM tests
    #: convergence only with such a compressor (:meth:`~fedemstats.algorithms.VRFedEM.tests_convergence`).
    unbiased_noise = False

    def compress(self, x, rng, blocks=None) -> Message:
        """Encode rows.

        Parameters
        ----------
        x : ndarray of shape (n_rows, q) or (q,)
        rng : numpy.random.Generator, ClientStreams or sequence of Generators
            One Generator shared by the rows; or each client's own stream:
            a :class:`~fedemstats.compression.streams.ClientStreams` with one row
            per client (drawn in one compiled call), or one Generator per row (legacy).
        blocks : ndarray of int of shape (n_blocks + 1,), optional
            Block boundaries of the statistic layout (used by per-block variants).

        Returns
        -------
        Message
        """
        raise NotImplementedError

    def decompress(self, message: Message) -> np.ndarray:
        """Decode to rows of shape (n_rows, q), float64."""
        raise NotImplementedError

    def compress_decoded(self, x, rng, blocks=None) -> tuple:
        """What a sender knows after :meth:`compress`: ``(message, decompress(message),
        noise_estimate(message))``. A compressor whose decoding costs (variable-length codes)
        overrides it to take the decoded rows from its own quantisation instead of decoding
        its message again; the values are the same (tests)."""
        message = self.compress(x, rng, blocks)
        return (message, *self.decompress_and_noise(message))

    def decompress_and_noise(self, message: Message) -> tuple:
        """``(decompress(message), noise_estimate(message))``; a compressor with a costly
        decoding overrides it to decode once."""
        return self.decompress(message), self.noise_estimate(message)

    def omega(self, q: int, blocks=None) -> float:
        """Variance bound: ``E||Q(x)||^2 <= (1 + omega) ||x||^2`` for x in R^q."""
        raise NotImplementedError

    def check_size(self, q: int) -> None:
        """Raise ``ValueError`` if this compressor cannot code vectors of length ``q`` (called
        when an algorithm is built, so a bad spec fails before any round)."""

    def row_bits(self, message: Message) -> np.ndarray:
        """Exact encoded size in bits of each row's message, shape (n_rows,)."""
        raise NotImplementedError

    def noise_estimate(self, message: Message) -> tuple:
        """Signal and quantisation noise of what each row encoded, from the message alone.

        Returns
        -------
        signal_sq : ndarray of shape (n_rows,)
            Estimate of ``||x||^2`` for the ``x`` the row encoded.
        noise_sq : ndarray of shape (n_rows,)
            Estimate of ``E||Q(x) - x||^2`` given ``x``: unbiased where the message
            allows it, otherwise an upper estimate (``E[noise_sq] >= E||Q(x) - x||^2``);
            each compressor says which. ``signal_sq + noise_sq = ||Q(x)||^2``, which is
            unbiased for ``E||Q(x)||^2``, so an upper noise estimate comes with a lower
            signal estimate. One row's unbiased estimate can be negative: average
            over rows (clients) before taking ratios such as the empirical omega.

        The base class's estimate, for compressors that define nothing better, splits
        ``||Q(x)||^2`` by the variance bound: signal ``||Q(x)||^2 / (1 + ω)`` and noise
        ``ω ||Q(x)||^2 / (1 + ω)`` (an upper estimate when ω is a bound, not attained).
        """
        total = row_sq_norms(self.decompress(message))
        blocks = message.meta.get("blocks")
        omega = float(self.omega(message.q, None if blocks is None else np.asarray(blocks, dtype=np.int64)))
        return total / (1.0 + omega), total * omega / (1.0 + omega)

    def validate(self, message: Message, q: int, blocks=None) -> None:
        """Check that ``message`` is one row this compressor could have sent for length ``q``.

        For a receiver that does not trust the sender (e.g. a Flower server): the codec,
        shape, meta (levels, norm, block boundaries from the *receiver's* ``blocks``),
        array names, dtypes and shapes must be those of an honest message; floats must be
        finite; the compressor's own range checks (:meth:`_check_payload`: norms, levels)
        must pass; and the decoded row must be finite.

        Raises
        ------
        ValueError
            Naming the first thing that is wrong.
        """
        # what an honest sender produces in this round: same compressor, same q and blocks
        template = self.compress(np.zeros((1, int(q))), np.random.default_rng(_TEMPLATE_SEED), blocks)
        if (message.codec, message.n_rows, message.q) != (template.codec, 1, template.q):
            raise ValueError(f"expected one {template.codec!r} row of length {template.q}; got "
                             f"{message.n_rows} {message.codec!r} row(s) of length {message.q}.")
        if _plain_meta(message.meta) != _plain_meta(template.meta):
            raise ValueError(f"message meta {message.meta!r} differs from this round's {template.meta!r}.")
        if set(message.arrays) != set(template.arrays):
            raise ValueError(f"message arrays {sorted(message.arrays)} differ from {sorted(template.arrays)}.")
        variable = self._variable_width(template)
        for name, ref in template.arrays.items():
            arr = message.arrays[name]
            if not isinstance(arr, np.ndarray) or arr.dtype != ref.dtype:
                raise ValueError(f"array {name!r} has dtype {getattr(arr, 'dtype', type(arr))}, expected {ref.dtype}.")
            shape_ok = arr.shape == ref.shape or (name in variable and arr.shape[:1] == ref.shape[:1]
                                                  and arr.ndim == ref.ndim)
            if not shape_ok:
                raise ValueError(f"array {name!r} has shape {arr.shape}, expected {ref.shape}.")
            if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
                raise ValueError(f"array {name!r} holds NaN or inf.")
        self._check_payload(message)
        if not np.all(np.isfinite(self.decompress(message))):
            raise ValueError("the message decodes to NaN or inf.")

    def _variable_width(self, template) -> tuple:
        """Names of arrays whose second axis depends on the content (variable-length codes)."""
        return ()

    def _check_payload(self, message) -> None:
        """Compressor-specific range checks of a well-shaped message (ValueError if out of range)."""

    def bits(self, message: Message) -> int:
        """Exact encoded size in bits of the whole message (sum over rows)."""
        return int(np.sum(self.row_bits(message)))

    def encode(self, message: Message) -> list:
        """Serialise each row's message to ``bytes`` of length ``ceil(row_bits / 8)``."""
        raise NotImplementedError

    def decode(self, payloads, q: int, blocks=None) -> Message:
        """Inverse of :meth:`encode`: rebuild the message from per-row bytes."""
        raise NotImplementedError

    def __call__(self, x, rng, blocks=None) -> np.ndarray:
        """Compress then decompress: a draw of Q(x), shape like ``x``."""
        x = np.asarray(x, dtype=np.float64)
        out = self.decompress(self.compress(np.atleast_2d(x), rng, blocks))
        return out.reshape(x.shape)

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


def _generators(rng, n_rows: int) -> list:
    rngs = list(rng)
    if len(rngs) != n_rows:
        raise ValueError(f"got {len(rngs)} generators for {n_rows} rows; pass one per row.")
    return rngs


def uniform_rows(rng, n_rows: int, width: int) -> np.ndarray:
    """U[0, 1) draws of shape (n_rows, width).

    ``rng`` is one Generator, a :class:`ClientStreams` of ``n_rows`` clients, or a
    sequence of ``n_rows`` Generators (legacy). With per-client streams, row j comes
    from client j's stream alone, so a client can reproduce its own quantisation
    noise without the other clients (in-process == Flower runs). Only the legacy
    sequence loops over rows in Python.
    """
    if isinstance(rng, np.random.Generator):
        return rng.random((n_rows, width))
    if isinstance(rng, ClientStreams):
        rng.check_rows(n_rows)
        return rng.uniform(width)
    out = np.empty((n_rows, width))
    for j, g in enumerate(_generators(rng, n_rows)):
        g.random(width, out=out[j])
    return out


def seed_rows(rng, n_rows: int, high: int) -> np.ndarray:
    """One uint64 seed in [0, high) per row, from one Generator, ClientStreams or Generators.

    ClientStreams give a full 64-bit word per row, so they take only ``high = 2**64``.
    """
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, high, size=n_rows, dtype=np.uint64)
    if isinstance(rng, ClientStreams):
        if high != _WORD_HIGH:
            raise ValueError(f"ClientStreams draw full uint64 seeds (high = 2**64); got high={high}.")
        rng.check_rows(n_rows)
        return rng.uint64()
    return np.array([g.integers(0, high, dtype=np.uint64) for g in _generators(rng, n_rows)], dtype=np.uint64)


def row_sq_norms(rows) -> np.ndarray:
    """Squared 2-norm of each row of a 2-D array, float64 (n_rows,)."""
    rows = np.asarray(rows, dtype=np.float64)
    return np.einsum("ij,ij->i", rows, rows)


def _plain_meta(meta) -> dict:
    """Meta with sequences as tuples of Python scalars (a record may turn tuples into lists)."""
    return {k: tuple(v.tolist() if isinstance(v, np.ndarray) else v) if isinstance(v, (tuple, list, np.ndarray))
            else v for k, v in meta.items()}


def _as_rows(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"compressors take rows of shape (n_rows, q); got shape {x.shape}.")
    if not np.isfinite(x).all():
        raise ValueError("cannot compress NaN or inf values.")
    return np.ascontiguousarray(x)


class Identity(Compressor):
    """No compression (omega = 0): floats on the wire.

    Parameters
    ----------
    dtype : {"float64", "float32"}, default="float64"
        Wire dtype. ``"float32"`` halves the bits but is then only unbiased up to
        float32 rounding; declare it explicitly.
    """

    name = "identity"
    unbiased_noise = True

    def __init__(self, dtype="float64"):
        if dtype not in ("float64", "float32"):
            raise ValueError(f"Identity dtype must be 'float64' or 'float32'; got {dtype!r}.")
        self.dtype = dtype

    def compress(self, x, rng=None, blocks=None) -> Message:
        x = _as_rows(x)
        return Message(self.name, x.shape[0], x.shape[1], {"values": x.astype(self.dtype)})

    def decompress(self, message):
        return message.arrays["values"].astype(np.float64)

    def omega(self, q, blocks=None):
        return 0.0

    def noise_estimate(self, message):
        """``(||x||^2, 0)``, exact, for float64. For float32 the wire value is x rounded to
        nearest, a deterministic error ``|v - x| <= spacing(v) / 2``: noise_sq is that
        bound summed, an upper estimate (at most ``2**-48 ||x||^2``)."""
        values = message.arrays["values"]
        if values.dtype == np.float64:
            return row_sq_norms(values), np.zeros(message.n_rows)
        half_ulp = np.spacing(np.abs(values)).astype(np.float64) / 2.0
        return row_sq_norms(values), row_sq_norms(half_ulp)

    def row_bits(self, message):
        per = FLOAT64_BITS if self.dtype == "float64" else FLOAT32_BITS
        return np.full(message.n_rows, per * message.q, dtype=np.int64)

    def encode(self, message):
        return [row.tobytes() for row in message.arrays["values"]]

    def decode(self, payloads, q, blocks=None):
        """Inverse of :meth:`encode`; ValueError if a payload is not ``q`` values long."""
        size = int(q) * np.dtype(self.dtype).itemsize
        if any(len(p) != size for p in payloads):
            raise ValueError(f"identity payloads must be {size} bytes (q={q} {self.dtype} values).")
        values = np.vstack([np.frombuffer(p, dtype=self.dtype, count=q) for p in payloads])
        return Message(self.name, values.shape[0], q, {"values": values})
