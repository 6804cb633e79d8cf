"""The broadcast updates a node missed, as Flower records (no pickle).

Update j turns Ŝ_{j−1} into Ŝ_j (``fedemstats.algorithms.broadcast``); an instruction for
round k to a node that holds Ŝ_base carries updates base + 1 ... k, each a compressed
step (the downlink compressor's encoded bytes, as the ledger counts them), the float64
step (lossless downlink), a flag ("zero": no move, "revert": back to the previous
iterate), or a snap of the iterate to E_θ[s] with the compressed move from there or none
("snap"). A compressed step is decoded by the node in the geometry of the iterate it
moves (:func:`~fedemstats.algorithms.broadcast.replay`), so its bytes travel alone.
"""
from __future__ import annotations

from flwr.app import ConfigRecord

from ..algorithms.broadcast import UPDATE_KINDS
from .records import from_array_record, to_array_record

__all__ = ["encode_update", "updates_to_records", "updates_from_records"]

#: joins an update's number and its field ("<j>/bytes", "<j>/step")
_SEP = "/"
#: the kinds whose payload is a compressed step (optional for "snap")
_ENCODED = ("message", "snap")


def encode_update(update, compressor):
    """An update (kind, payload) as it travels: a compressed step's Message becomes its encoded
    ``bytes`` (``compressor`` is the downlink's); other kinds are unchanged."""
    kind, payload = update
    return (kind, compressor.encode(payload)[0]) if kind in _ENCODED and payload is not None else update


def updates_to_records(updates, first):
    """(ArrayRecord of the float steps, ConfigRecord of the kinds and encoded steps) of
    ``updates`` (list of (kind, payload) as :func:`encode_update` gives them) numbered from ``first``."""
    arrays, meta = {}, {"kinds": [kind for kind, _ in updates]}
    for j, (kind, payload) in enumerate(updates, start=first):
        if kind in _ENCODED and payload is not None:
            meta[f"{j}{_SEP}bytes"] = payload
        elif kind == "float":
            arrays[f"{j}{_SEP}step"] = payload
    return to_array_record(**arrays), ConfigRecord(meta)


def updates_from_records(arrays, meta, first):
    """Inverse of :func:`updates_to_records`: the list of (kind, payload), a compressed
    step's payload being its encoded ``bytes``.

    Raises
    ------
    ValueError
        If a kind is unknown or an update's payload is missing.
    """
    arrays, meta = from_array_record(arrays), dict(meta)
    out = []
    for j, kind in enumerate(meta.get("kinds", []), start=first):
        kind = str(kind)
        if kind not in UPDATE_KINDS:
            raise ValueError(f"unknown broadcast update kind {kind!r}.")
        if kind in _ENCODED:
            payload = meta.get(f"{j}{_SEP}bytes")
            if not isinstance(payload, bytes) and (kind == "message" or payload is not None):
                raise ValueError(f"broadcast update {j} has no encoded step.")
            out.append((kind, payload))
        elif kind == "float":
            if f"{j}{_SEP}step" not in arrays:
                raise ValueError(f"broadcast update {j} has no step.")
            out.append((kind, arrays[f"{j}{_SEP}step"]))
        else:
            out.append((kind, None))
    return out
