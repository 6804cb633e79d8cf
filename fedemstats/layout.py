"""Named statistic blocks laid out in one flat float64 vector (SPEC §2).

Algorithms and compressors only see flat vectors of length ``q``; models use a
:class:`StatLayout` to pack and unpack their named blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

__all__ = ["StatLayout"]


@dataclass(frozen=True)
class StatLayout:
    """Ordered named blocks with shapes, mapped onto a flat vector.

    Parameters
    ----------
    blocks : sequence of (name, shape) pairs
        E.g. ``[("weights", (K,)), ("sum_x", (K, d)), ("sum_xx", (K, d, d))]``.

    Attributes
    ----------
    size : int
        ``q``, the total length of the flat vector.
    offsets : ndarray of shape (n_blocks + 1,)
        Block boundaries; block ``b`` occupies ``offsets[b]:offsets[b + 1]``.
        Compressors use these for per-block quantisation.

    Examples
    --------
    >>> lay = StatLayout([("w", (2,)), ("m", (2, 3))])
    >>> v = lay.pack({"w": np.ones(2), "m": np.zeros((2, 3))})
    >>> lay.size, lay.unpack(v)["m"].shape
    (8, (2, 3))
    """

    blocks: tuple = field()

    def __init__(self, blocks):
        norm = tuple((str(name), tuple(int(s) for s in shape)) for name, shape in blocks)
        names = [n for n, _ in norm]
        if len(set(names)) != len(names):
            raise ValueError(f"StatLayout block names must be unique; got {names}.")
        object.__setattr__(self, "blocks", norm)

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.blocks]

    @property
    def offsets(self) -> np.ndarray:
        sizes = [prod(shape) for _, shape in self.blocks]
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def slice(self, name: str) -> slice:
        """The slice of the flat vector that holds block ``name``."""
        idx = self.names.index(name)
        off = self.offsets
        return slice(int(off[idx]), int(off[idx + 1]))

    def shape(self, name: str) -> tuple:
        return dict(self.blocks)[name]

    def unpack(self, s: np.ndarray) -> dict:
        """Views of the blocks of ``s``.

        Parameters
        ----------
        s : ndarray of shape (q,) or (n, q)
            One flat vector or a stack of them.

        Returns
        -------
        dict of name -> ndarray of shape ``block_shape`` or ``(n, *block_shape)``
        """
        s = np.asarray(s)
        if s.shape[-1] != self.size:
            raise ValueError(f"expected last axis of length {self.size}; got shape {s.shape}.")
        lead = s.shape[:-1]
        return {n: s[..., self.slice(n)].reshape(lead + shape) for n, shape in self.blocks}

    def pack(self, parts: dict) -> np.ndarray:
        """Inverse of :meth:`unpack`: concatenate blocks into a flat float64 vector."""
        first = np.asarray(parts[self.names[0]])
        lead = first.shape[: first.ndim - len(self.blocks[0][1])]
        out = np.empty(lead + (self.size,), dtype=np.float64)
        for n, shape in self.blocks:
            block = np.asarray(parts[n], dtype=np.float64)
            if block.shape != lead + shape:
                raise ValueError(f"block {n!r} has shape {block.shape}; expected {lead + shape}.")
            out[..., self.slice(n)] = block.reshape(lead + (-1,))
        return out
