"""Conversions between fedemstats objects and Flower records (no pickle anywhere).

Everything that travels is either a NumPy array in an ``ArrayRecord`` (Flower
serialises it with ``numpy.save`` semantics, never with pickle), a scalar / list of
scalars in a ``ConfigRecord`` / ``MetricRecord``, or a compressed row's encoded
``bytes`` (:meth:`fedemstats.compression.Compressor.encode`) in a ``ConfigRecord``. Parameter sets are
rebuilt only for dataclass types on an explicit allow-list
(:data:`PARAMS_TYPES`), so a message can never name an arbitrary class.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from ..compression.short_floats import decode_short_floats, encode_short_floats, mantissa_bits
from ..models.factor import FactorParams
from ..models.gaussian_missing import GaussianParams
from ..models.gmm_params import GMMParams
from ..models.poisson_mixture import PoissonMixtureParams

__all__ = [
    "PARAMS_TYPES", "register_params_type", "to_array_record", "from_array_record",
    "compressed_to_record", "compressed_from_record", "payload_size", "params_to_records",
    "params_from_records", "wire_bytes", "encode_theta", "decode_theta",
]

#: class name -> parameter dataclass a node may rebuild from a message
PARAMS_TYPES = {cls.__name__: cls for cls in (GMMParams, FactorParams, GaussianParams, PoissonMixtureParams)}
#: ConfigRecord key naming the parameter class
_TYPE_KEY = "__type__"
#: ConfigRecord keys of a compressed payload: the codec's name and the encoded row
_CODEC_KEY, _BYTES_KEY = "codec", "bytes"


def register_params_type(cls) -> None:
    """Allow a frozen parameter dataclass (arrays + scalars) to travel in messages."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass; only dataclass parameters can travel.")
    PARAMS_TYPES[cls.__name__] = cls


def to_array_record(**arrays) -> ArrayRecord:
    """An ``ArrayRecord`` of C-contiguous copies of the given NumPy arrays."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def from_array_record(record: ArrayRecord) -> dict:
    """``{name: ndarray}`` of an ``ArrayRecord``."""
    return {k: v.numpy() for k, v in record.items()}


def compressed_to_record(compressor, message) -> ConfigRecord:
    """One row of a compressor :class:`~fedemstats.compression.Message` as it travels: the
    bytes of :meth:`~fedemstats.compression.Compressor.encode` (``ceil(row_bits / 8)`` of
    them, what the ledger counts) and the codec's name, in one ``ConfigRecord``.

    A ``ConfigRecord`` carries ``bytes`` as they are; an ``ArrayRecord`` would add a NumPy
    header and an array object per payload array, several times a 4-bit payload's size.
    """
    if message.n_rows != 1:
        raise ValueError(f"a payload carries one row; got {message.n_rows}.")
    return ConfigRecord({_CODEC_KEY: message.codec, _BYTES_KEY: compressor.encode(message)[0]})


def compressed_from_record(record: ConfigRecord, compressor, q, blocks):
    """Inverse of :func:`compressed_to_record` by the receiver's own ``compressor``, length
    ``q`` and ``blocks`` (never the sender's claims).

    Raises
    ------
    ValueError
        If the codec is not ``compressor``'s, or the bytes are not a row it could have encoded
        (:meth:`~fedemstats.compression.Compressor.decode`).
    """
    codec, payload = record.get(_CODEC_KEY), record.get(_BYTES_KEY)
    if codec != compressor.name:
        raise ValueError(f"the payload's codec is {codec!r}; this round's is {compressor.name!r}.")
    if not isinstance(payload, bytes):
        raise ValueError(f"the payload's {_BYTES_KEY!r} is {type(payload).__name__}, not bytes.")
    return compressor.decode([payload], int(q), blocks)


def payload_size(record: ConfigRecord) -> int:
    """Bytes of the encoded row a :func:`compressed_to_record` record carries."""
    return len(record[_BYTES_KEY])


def encode_theta(message) -> tuple:
    """The quantised start's θ_0 message (short floats, :meth:`RoundZero.theta_message
    <fedemstats.algorithms.start.RoundZero.theta_message>`) as it travels: ``(packed, bits)``, its
    packed bytes as uint8 (array ``theta``) and their mantissa bits (config ``theta_mantissa``)."""
    bits = mantissa_bits(message)
    return np.frombuffer(encode_short_floats(message, bits), dtype=np.uint8), bits


def decode_theta(packed, q: int, bits: int) -> np.ndarray:
    """Inverse of :func:`encode_theta` for a model of ``q`` statistics: float32 of shape (q,)."""
    return decode_short_floats(np.asarray(packed, dtype=np.uint8).tobytes(), q, bits)


def params_to_records(theta):
    """A parameter dataclass as (ArrayRecord of its arrays, ConfigRecord of its scalars)."""
    name = type(theta).__name__
    if PARAMS_TYPES.get(name) is not type(theta):
        raise TypeError(f"parameters of type {name} are not registered; see register_params_type.")
    arrays, scalars = {}, {_TYPE_KEY: name}
    for f in dataclasses.fields(theta):
        value = getattr(theta, f.name)
        if isinstance(value, np.ndarray):
            arrays[f.name] = value
        else:
            scalars[f.name] = value
    return to_array_record(**arrays), ConfigRecord(scalars)


def params_from_records(arrays: ArrayRecord, scalars: ConfigRecord):
    """Inverse of :func:`params_to_records` (only for registered types)."""
    fields = dict(scalars)
    name = fields.pop(_TYPE_KEY, None)
    if name not in PARAMS_TYPES:
        raise ValueError(f"unknown parameter type {name!r} in message; registered: {sorted(PARAMS_TYPES)}.")
    fields.update(from_array_record(arrays))
    return PARAMS_TYPES[name](**fields)


def wire_bytes(message) -> int:
    """Bytes of a Flower ``Message`` as Flower serialises it for transport.

    The sum of the deflated sizes of the message and all nested objects
    (RecordDict, records, arrays, array chunks): what a SuperNode uploads to the
    SuperLink, without the HTTP/TLS framing.
    """
    return int(sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values()))
