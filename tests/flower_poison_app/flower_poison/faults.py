"""Fault injection for the poisoning tests (issue 13): corrupt a node's ``train`` reply.

The one place the poisoning tests take their faults from: the in-process test
(``tests/test_flower_validation.py``, on :class:`~fedemstats.flower.testing.LocalGrid`)
and the loopback deployment (``tests/test_flower_poisoning_deployment.py``, inside the
SuperNodes' ``flwr-clientapp`` processes) run the same :func:`poisoned_client_app`.

The faults come from the run config (key :data:`RUN_CONFIG_KEY`, e.g.
``"2:2:nan,2:5:blow-up"``), so a deployment chooses them with ``flwr run
--run-config`` and ``fedemstats`` itself holds no fault injection. The node runs
normally and only its reply is corrupted on the way out: its state holds the pending
α q_i of that round, so the server's refusal must be handled like a reply lost after
the node computed it.
"""
from __future__ import annotations

import logging

import numpy as np
from flwr.app import ConfigRecord
from flwr.clientapp import ClientApp

from fedemstats.compression import Message
from fedemstats.flower import make_client_app
from fedemstats.flower import protocol as P
from fedemstats.flower.client import _algorithm, _problem_from
from fedemstats.flower.node_state import load_state
from fedemstats.flower.records import from_array_record

__all__ = ["FAULTS", "BLOW_UP", "RUN_CONFIG_KEY", "INJECTED", "parse_faults", "format_faults", "absent_of",
           "poison_mod", "poisoned_client_app"]

logger = logging.getLogger(__name__)

#: run-config key holding the faults ("" = none)
RUN_CONFIG_KEY = "poison"
#: the poisoned norm: a well-formed message scaled by this (about 1e6; a power of two keeps
#: a 16-bit wire norm a 16-bit wire norm)
BLOW_UP = 2.0 ** 20
#: logged (WARNING) by the node for each fault it injects; the tests count these lines
INJECTED = "poison: round %d, partition %d: %s reply injected"


def _nan(payload, codec):
    # the first norm's bytes (one float32, or two 16-bit norms) become all ones: NaN
    return b"\xff" * 4 + payload[4:]


def _blow_up(payload, codec):
    # still well formed (finite norms of the wire's precision, legal levels): only the contribution bound can tell
    comp, q, blocks = codec()
    message = comp.decode([payload], q, blocks)
    norms = (message.arrays["norms"] * BLOW_UP).astype(np.float32)
    return comp.encode(Message(message.codec, 1, q, {**message.arrays, "norms": norms}, message.meta))[0]


def _truncate(payload, codec):
    return payload[:-1]


#: fault kind -> corruption ``fault(payload, codec)`` of the encoded bytes of a dithering
#: (``dither:s=...``) reply; ``codec()`` gives (compressor, q, blocks) as the node coded it
FAULTS = {"nan": _nan, "blow-up": _blow_up, "wrong-length": _truncate}


def _node_codec(message, context):
    """(compressor, q, blocks) of the node's reply to ``message``: its geometry at its copy of
    Ŝ_k, rebuilt as the node built it (:mod:`fedemstats.flower.client`)."""
    content, config = message.content, message.content[P.CONFIG]
    public = from_array_record(content[P.ARRAYS])
    model = _problem_from(content, None).build_model(public["shift"].size, public["shift"], public["column_scale"])
    algo = _algorithm(model, config)
    node = load_state(context, int(config["entropy"]))
    return (algo.uplink_compressor(int(config["round"])), model.q,
            algo.client_geometry(model.t_map(node.s_hat), node.s_hat).blocks)


def parse_faults(text: str) -> dict:
    """``"2:2:nan,3:5:blow-up"`` -> ``{(2, 2): "nan", (3, 5): "blow-up"}`` ((Flower round, partition) -> kind).

    Raises
    ------
    ValueError
        On a malformed item or an unknown kind: a typo must not quietly poison nothing.
    """
    faults = {}
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        fields = item.split(":")
        if len(fields) != 3 or fields[2] not in FAULTS:
            raise ValueError(f"fault {item!r}: expected '<round>:<partition>:<kind>' with kind in {sorted(FAULTS)}.")
        faults[(int(fields[0]), int(fields[1]))] = fields[2]
    return faults


def format_faults(faults: dict) -> str:
    """Inverse of :func:`parse_faults` (the run-config value)."""
    return ",".join(f"{r}:{p}:{kind}" for (r, p), kind in sorted(faults.items()))


def absent_of(faults: dict) -> dict:
    """Flower round -> sorted partitions whose reply is poisoned (``reference_run(absent=...)``
    when partition ``i`` is client ``i``)."""
    out = {}
    for round_, pid in sorted(faults):
        out.setdefault(round_, []).append(pid)
    return out


def poison_mod(message, context, call_next):
    """Flower mod: run the node's handler, then corrupt its reply if the run config says so.

    The key is (Flower round, partition): the instruction's ``round`` is the engine's
    k, and Flower round r runs engine round r − 1.
    """
    reply = call_next(message, context)
    faults = parse_faults(context.run_config.get(RUN_CONFIG_KEY, ""))
    if not faults or message.metadata.message_type != P.ROUND or reply.has_error():
        return reply
    config = message.content[P.CONFIG]
    key = (int(config["round"]) + 1, int(config[P.PARTITION_ID]))
    if key in faults:
        record = reply.content[P.PAYLOAD]
        payload = FAULTS[faults[key]](record["bytes"], lambda: _node_codec(message, context))
        reply.content[P.PAYLOAD] = ConfigRecord({**dict(record), "bytes": payload})
        logger.warning(INJECTED, *key, faults[key])
    return reply


def poisoned_client_app(problem_type=None, **kwargs) -> ClientApp:
    """The production ClientApp (:func:`fedemstats.flower.make_client_app`) with
    :func:`poison_mod` on its ``train`` handler.

    Flower applies mods when a handler is registered, so the production app's handlers
    are registered again here, each delegating to it (it routes by message type).
    """
    inner = make_client_app(problem_type, **kwargs)
    app = ClientApp()
    app.query(P.DESCRIBE.split(".")[1])(inner)
    app.train(P.STATS.split(".")[1])(inner)
    app.train(mods=[poison_mod])(inner)
    return app
