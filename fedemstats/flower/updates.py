"""The broadcast updates a node missed, as Flower records (no pickle).

Update j turns Ŝ_{j−1} into Ŝ_j (``fedemstats.algorithms.broadcast``); an instruction for
round k to a node that holds Ŝ_base carries updates base + 1 ... k, each a compressed
message (its compact arrays and meta), the float64 step (lossless downlink), or a flag
("zero": no move, "revert": back to the previous iterate).
"""
from __future__ import annotations

from flwr.app import ConfigRecord

from ..algorithms.broadcast import UPDATE_KINDS
from ..compression import message_from_record, message_to_record
from .records import from_array_record, to_array_record

__all__ = ["updates_to_records", "updates_from_records"]

#: joins an update's number and an array or meta name ("<j>/<array>", "<j>/step", "<j>/<key>")
_SEP = "/"


def updates_to_records(updates, first):
    """(ArrayRecord, ConfigRecord) of ``updates`` (list of (kind, payload)) numbered from ``first``."""
    arrays, meta = {}, {"kinds": [kind for kind, _ in updates]}
    for j, (kind, payload) in enumerate(updates, start=first):
        if kind == "message":
            msg_arrays, msg_meta = message_to_record(payload)
            arrays.update({f"{j}{_SEP}{name}": a for name, a in msg_arrays.items()})
            meta.update({f"{j}{_SEP}{key}": value for key, value in msg_meta.items()})
        elif kind == "float":
            arrays[f"{j}{_SEP}step"] = payload
    return to_array_record(**arrays), ConfigRecord(meta)


def updates_from_records(arrays, meta, first):
    """Inverse of :func:`updates_to_records`: the list of (kind, payload).

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
        prefix = f"{j}{_SEP}"
        if kind == "message":
            msg_meta = {k[len(prefix):]: v for k, v in meta.items() if k.startswith(prefix)}
            msg_arrays = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
            if not msg_meta or not msg_arrays:
                raise ValueError(f"broadcast update {j} has no payload.")
            out.append((kind, message_from_record(msg_arrays, msg_meta)))
        elif kind == "float":
            out.append((kind, arrays[f"{prefix}step"]))
        else:
            out.append((kind, None))
    return out
