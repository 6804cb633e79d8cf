"""Named statistic blocks laid out in one flat float64 vector (SPEC §2).

Algorithms and compressors only see flat vectors of length ``q``; models use a
:class:`StatLayout` to pack and unpack their named blocks.

A block may be declared *symmetric* (``(name, (..., d, d), "sym")``): each trailing
``d × d`` matrix is stored as its upper triangle including the diagonal, row by row
(``d (d + 1) / 2`` entries), the matrices of the leading axes one after the other, so
that a per-component sub-block stays contiguous. Half of a second moment is a mirror
of the other half; sending it would double the uplink and the compression noise
(issue 12 item 3).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

__all__ = ["StatLayout", "SYMMETRIC", "sym_size", "upper_indices"]

#: Marker of a symmetric block in a layout specification.
SYMMETRIC = "sym"


def sym_size(d: int) -> int:
    """Stored entries of one symmetric ``d × d`` matrix: ``d (d + 1) / 2``."""
    return d * (d + 1) // 2


def upper_indices(d: int):
    """Row and column indices of the stored entries, in storage order (row-major upper triangle)."""
    return np.triu_indices(d)


def _stored_shape(shape, symmetric):
    return shape[:-2] + (sym_size(shape[-1]),) if symmetric else shape


@dataclass(frozen=True)
class StatLayout:
    """Ordered named blocks with shapes, mapped onto a flat vector.

    Parameters
    ----------
    blocks : sequence of (name, shape) or (name, shape, "sym")
        E.g. ``[("resp", (K,)), ("sum_x", (K, d)), ("sum_xx", (K, d, d), "sym")]``.
        A ``"sym"`` block has shape ``(..., d, d)`` and is stored packed (module doc).

    Attributes
    ----------
    blocks : tuple of (name, shape)
        The *logical* shapes (full matrices for symmetric blocks).
    symmetric : frozenset of str
        Names of the symmetric blocks.
    size : int
        ``q``, the total *stored* length of the flat vector.
    offsets : ndarray of shape (n_blocks + 1,)
        Stored block boundaries; block ``b`` occupies ``offsets[b]:offsets[b + 1]``.
        Compressors use these for per-block quantisation.

    Examples
    --------
    >>> lay = StatLayout([("w", (2,)), ("m", (2, 3))])
    >>> v = lay.pack({"w": np.ones(2), "m": np.zeros((2, 3))})
    >>> lay.size, lay.unpack(v)["m"].shape
    (8, (2, 3))
    >>> sym = StatLayout([("c", (2, 3, 3), "sym")])
    >>> sym.size, sym.unpack(np.arange(12.0))["c"][1, 2, 0]
    (12, 8.0)
    """

    blocks: tuple = field()
    symmetric: frozenset = field()

    def __init__(self, blocks):
        norm, sym = [], set()
        for spec in blocks:
            name, shape = str(spec[0]), tuple(int(s) for s in spec[1])
            if len(spec) > 2:
                if spec[2] != SYMMETRIC or len(shape) < 2 or shape[-1] != shape[-2]:
                    raise ValueError(f"block {name!r}: only {SYMMETRIC!r} blocks of shape (..., d, d) may "
                                     f"carry a third element; got {spec[2]!r} with shape {shape}.")
                sym.add(name)
            norm.append((name, shape))
        names = [n for n, _ in norm]
        if len(set(names)) != len(names):
            raise ValueError(f"StatLayout block names must be unique; got {names}.")
        object.__setattr__(self, "blocks", tuple(norm))
        object.__setattr__(self, "symmetric", frozenset(sym))
        # computed once: algorithms ask for the offsets every round and every client
        sizes = [prod(_stored_shape(shape, name in sym)) for name, shape in norm]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        offsets.setflags(write=False)
        object.__setattr__(self, "_offsets", offsets)
        object.__setattr__(self, "_slices", {name: slice(int(offsets[b]), int(offsets[b + 1]))
                                             for b, (name, _) in enumerate(norm)})

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.blocks]

    def is_symmetric(self, name: str) -> bool:
        return name in self.symmetric

    def stored_shape(self, name: str) -> tuple:
        """Shape of the block as stored: ``(..., d (d + 1) / 2)`` for a symmetric block."""
        return _stored_shape(self.shape(name), self.is_symmetric(name))

    def block_size(self, name: str) -> int:
        """Stored entries of block ``name``."""
        return prod(self.stored_shape(name))

    @property
    def offsets(self) -> np.ndarray:
        """Stored block boundaries, shape (n_blocks + 1,) (read-only)."""
        return self._offsets

    @property
    def size(self) -> int:
        return int(self._offsets[-1])

    def slice(self, name: str) -> slice:
        """The slice of the flat vector that holds block ``name`` (stored entries)."""
        return self._slices[name]

    def shape(self, name: str) -> tuple:
        """Logical shape of block ``name`` (full matrices for a symmetric block)."""
        return dict(self.blocks)[name]

    def entry_weights(self) -> np.ndarray:
        """Multiplicity of each stored entry in the full blocks, shape (q,).

        1 everywhere except 2 for the off-diagonal entries of symmetric blocks, so that
        ``sum(entry_weights() * s**2)`` is the squared Frobenius norm of the unpacked
        statistic (what a per-block quantiser in the model's geometry needs).
        """
        w = np.ones(self.size)
        for name in self.symmetric:
            d = self.shape(name)[-1]
            iu, ju = upper_indices(d)
            mult = np.where(iu == ju, 1.0, 2.0)
            w[self.slice(name)] = np.tile(mult, prod(self.shape(name)[:-2]))
        return w

    def unpack(self, s: np.ndarray) -> dict:
        """The blocks of ``s``: views, except full symmetric matrices (new arrays) for symmetric blocks.

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
        return {n: self.unpack_block(n, s[..., self.slice(n)]) for n, _ in self.blocks}

    def unpack_block(self, name: str, stored: np.ndarray) -> np.ndarray:
        """Block ``name`` from its stored entries ``(..., block_size)``: a view, or full
        symmetric matrices (a new array) for a symmetric block."""
        stored = np.asarray(stored)
        lead, shape = stored.shape[:-1], self.shape(name)
        if not self.is_symmetric(name):
            return stored.reshape(lead + shape)
        d = shape[-1]
        tri = stored.reshape(lead + self.stored_shape(name))
        full = np.empty(lead + shape, dtype=np.result_type(stored.dtype, np.float64))
        iu, ju = upper_indices(d)
        full[..., iu, ju] = tri
        full[..., ju, iu] = tri
        return full

    def pack_block(self, name: str, block) -> np.ndarray:
        """Stored entries ``(..., block_size)`` of block ``name`` given in its logical shape.

        A symmetric block stores ``(A + Aᵀ) / 2`` of each matrix ``A`` (its upper
        triangle when ``A`` is symmetric, exactly: ``0.5 * (a + a) == a`` in floating point).
        """
        block = np.asarray(block, dtype=np.float64)
        shape = self.shape(name)
        lead = block.shape[: block.ndim - len(shape)]
        if block.shape != lead + shape:
            raise ValueError(f"block {name!r} has shape {block.shape}; expected {lead + shape}.")
        if self.is_symmetric(name):
            iu, ju = upper_indices(shape[-1])
            block = 0.5 * (block[..., iu, ju] + block[..., ju, iu])
        return block.reshape(lead + (-1,))

    def pack(self, parts: dict) -> np.ndarray:
        """Inverse of :meth:`unpack`: blocks in their logical shapes -> flat float64 vector(s)."""
        first = np.asarray(parts[self.names[0]])
        lead = first.shape[: first.ndim - len(self.blocks[0][1])]
        out = np.empty(lead + (self.size,), dtype=np.float64)
        for n, shape in self.blocks:
            block = np.asarray(parts[n], dtype=np.float64)
            if block.shape != lead + shape:
                raise ValueError(f"block {n!r} has shape {block.shape}; expected {lead + shape}.")
            out[..., self.slice(n)] = self.pack_block(n, block)
        return out
