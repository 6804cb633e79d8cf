"""Parse compressor specs such as ``"dither:s=4,r=inf"`` (SPEC §7)."""
from __future__ import annotations

import inspect

from .base import Compressor, Identity
from .block_p import BlockP
from .dithering import RandomDithering
from .sparsify import RandK

__all__ = ["make_compressor", "REGISTRY"]

#: spec name -> compressor class; classes take the spec's key=value pairs as kwargs
REGISTRY = {"identity": Identity, "dither": RandomDithering, "blockp": BlockP, "randk": RandK}


def _parse_value(text: str):
    low = text.strip().lower()
    if low in ("inf", "infinity"):
        return float("inf")
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for cast in (int, float):
        try:
            value = cast(low)
        except ValueError:
            continue
        # "1e9" is a whole number: levels and counts must not be refused for their spelling
        return int(value) if cast is float and value.is_integer() and abs(value) < 2 ** 53 else value
    return text.strip()


def make_compressor(spec) -> Compressor:
    """Build a compressor from a spec string, ``None`` (identity) or an instance.

    Examples: ``"identity"``, ``"dither:s=4"``, ``"dither:s=4,r=inf"``,
    ``"dither:s=4,coding=fixed,norm_bits=32"`` (the wire format before the Rice code and
    16-bit norms), ``"blockp:p=2"``, ``"randk:k=10"``.
    """
    if isinstance(spec, Compressor):
        return spec
    if spec is None:
        return Identity()
    if not isinstance(spec, str):
        raise ValueError(f"compressor must be a spec string or a Compressor; got {spec!r}.")
    name, _, args = spec.partition(":")
    name = name.strip().lower()
    if name not in REGISTRY:
        raise ValueError(
            f"unknown compressor {name!r} in spec {spec!r}; choose one of {sorted(REGISTRY)} "
            "(e.g. 'dither:s=4', 'blockp:p=2', 'randk:k=10')."
        )
    kwargs = {}
    for item in filter(None, (a.strip() for a in args.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"compressor argument {item!r} in {spec!r} must be key=value.")
        if key.strip() in kwargs:
            raise ValueError(f"compressor argument {key.strip()!r} is given twice in {spec!r}; give it once.")
        kwargs[key.strip()] = _parse_value(value)
    params = inspect.signature(REGISTRY[name]).parameters
    known = [k for k in params if k != "self"]
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise ValueError(f"compressor {name!r} in {spec!r} has no argument(s) {unknown}; its arguments are "
                         f"{known}.")
    required = [k for k in known if params[k].default is inspect.Parameter.empty and k not in kwargs]
    if required:
        example = ",".join(f"{k}=..." for k in required)
        raise ValueError(f"compressor {name!r} in {spec!r} needs the argument(s) {required}, "
                         f"e.g. '{name}:{example}'.")
    try:
        return REGISTRY[name](**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad arguments for compressor {name!r} in {spec!r}: {exc}") from exc
