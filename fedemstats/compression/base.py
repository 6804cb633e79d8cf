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

__all__ = ["Message", "Compressor", "Identity", "uniform_rows", "seed_rows"]


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

    Subclasses implement :meth:`compress`, :meth:`decompress`, :meth:`omega` and
    :meth:`row_bits`. Randomness always comes from the ``rng`` argument.
    """

    name = "base"

    def compress(self, x, rng, blocks=None) -> Message:
        """Encode rows.

        Parameters
        ----------
        x : ndarray of shape (n_rows, q) or (q,)
        rng : numpy.random.Generator or sequence of Generators
            One Generator, or one per row (each client's own stream).
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

    def omega(self, q: int, blocks=None) -> float:
        """Variance bound: ``E||Q(x)||^2 <= (1 + omega) ||x||^2`` for x in R^q."""
        raise NotImplementedError

    def row_bits(self, message: Message) -> np.ndarray:
        """Exact encoded size in bits of each row's message, shape (n_rows,)."""
        raise NotImplementedError

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


def uniform_rows(rng, n_rows: int, width: int) -> np.ndarray:
    """U[0, 1) draws of shape (n_rows, width).

    ``rng`` is one Generator, or a sequence of ``n_rows`` Generators (one per row):
    then row j comes from ``rng[j]`` alone, so a client can reproduce its own
    quantisation noise without the other clients (in-process == Flower runs).
    """
    if isinstance(rng, np.random.Generator):
        return rng.random((n_rows, width))
    rngs = list(rng)
    if len(rngs) != n_rows:
        raise ValueError(f"got {len(rngs)} generators for {n_rows} rows; pass one per row.")
    out = np.empty((n_rows, width))
    for j, g in enumerate(rngs):
        g.random(width, out=out[j])
    return out


def seed_rows(rng, n_rows: int, high: int) -> np.ndarray:
    """One uint64 seed in [0, high) per row, from one Generator or one Generator per row."""
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, high, size=n_rows, dtype=np.uint64)
    rngs = list(rng)
    if len(rngs) != n_rows:
        raise ValueError(f"got {len(rngs)} generators for {n_rows} rows; pass one per row.")
    return np.array([g.integers(0, high, dtype=np.uint64) for g in rngs], dtype=np.uint64)


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

    def row_bits(self, message):
        per = FLOAT64_BITS if self.dtype == "float64" else FLOAT32_BITS
        return np.full(message.n_rows, per * message.q, dtype=np.int64)

    def encode(self, message):
        return [row.tobytes() for row in message.arrays["values"]]

    def decode(self, payloads, q, blocks=None):
        values = np.vstack([np.frombuffer(p, dtype=self.dtype, count=q) for p in payloads])
        return Message(self.name, values.shape[0], q, {"values": values})
