"""Round 0 over the nodes: :mod:`fedemstats.algorithms.start` on a Flower ``Grid``.

The strategy makes the transfers the in-process round 0 makes and logs the same ledger bits
(:meth:`~fedemstats.algorithms.start.RoundZero.float_start_bits`,
:meth:`~fedemstats.algorithms.start.RoundZero.quantised_start_bits`), with the bytes Flower
put on the wire beside them (``reply_bytes``, ``payload_bytes``, ``downlink_bytes``). In the
quantised start θ_0 travels once, with the upload instruction (its short floats packed,
:func:`.records.encode_theta`); the node keeps it for the
mean-field one (:func:`.node_state.save_start_theta`).
"""
from __future__ import annotations

import logging

import numpy as np
from flwr.app import Message

from ..algorithms.server import decode_messages
from ..algorithms.start import round0_compressor
from . import protocol as P
from .records import compressed_to_record, encode_theta, params_to_records, payload_size, wire_bytes
from .validation import InvalidReply, check_round_reply, check_stats_reply

__all__ = ["NodesRoundZero"]

logger = logging.getLogger(__name__)


class NodesRoundZero:
    """Round 0 of :class:`~.strategy.FedEMStrategy` (a mixin: it uses the strategy's
    ``algorithm``, ``model``, ``weights``, ``partitions``, ``registry``, ``settings``,
    ``_content`` and ``_public``)."""

    def round_zero(self, grid, theta0, entropy) -> tuple:
        """Ŝ_0 and V_{0,i} over the nodes, as :meth:`FedEM.init_state` in process.

        Returns
        -------
        state : AlgorithmState
        loglik : float
            Σ w_i ℓ_i(θ_0).
        mean_field : bool
            Whether the nodes hold Ŝ_0 and V_{0,i} (the mean-field pass was made).
        traffic : dict
            ``uplink_bits`` and ``downlink_bits`` (the ledger's), ``reply_bytes``, ``payload_bytes``
            and ``downlink_bytes`` (the wire's).
        """
        algo, n = self.algorithm, len(self.partitions)
        self._traffic = {"reply_bytes": 0, "payload_bytes": 0, "downlink_bytes": 0}
        if algo.quantised_start(n):
            state, loglik, bits = self._quantised_start(grid, theta0, entropy)
            return state, loglik, True, {**bits, **self._traffic}
        upload0 = self._collect_stats(grid, {"entropy": entropy}, params=theta0)
        point = algo.mean_field_point(upload0[0], self.weights)
        # the mean-field pass sends Ŝ_0 itself: the nodes keep it and their V_{0,i}
        upload1 = None if point is None else self._collect_stats(
            grid, {"entropy": entropy}, s_hat=self.weights @ upload0[0])
        state, loglik = algo.initial_state(upload0, upload1, self.weights, entropy)
        uplink, downlink = algo.float_start_bits(n, theta0)
        return state, loglik, upload1 is not None, {"uplink_bits": uplink, "downlink_bits": downlink,
                                                    **self._traffic}

    def _collect_stats(self, grid, config, params=None, **arrays):
        """s̄_i of every client (uncompressed) at θ = ``params`` or at T(``s_hat``)."""
        rows = self._round_zero_replies(grid, config, params, None, lambda content, pid: check_stats_reply(
            content, self.model.q, pid, self.registry.rows_of[pid]), **arrays)
        self._traffic["payload_bytes"] += sum(int(stats.nbytes) for stats, _ in rows)
        return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])

    def _quantised_start(self, grid, theta0, entropy):
        """The quantised mean-field start (:mod:`fedemstats.algorithms.start`) over the nodes:
        the upload at θ_0, the broadcast of Ŝ_0, the mean-field upload; returns
        ``(state, loglik, {"uplink_bits", "downlink_bits"})``."""
        algo, s, q, n = self.algorithm, self.settings, self.model.q, len(self.partitions)
        config = {"entropy": entropy, "compressor": s.compressor, "precondition": s.precondition,
                  "downlink": s.downlink_compressor}
        # θ_0 travels as its short-float statistics (packed in array ``theta``, their mantissa bits in
        # the config) when their rounding is small, else as it is; every side starts from the same θ
        start, message = algo.start_theta(theta0)
        if message is None:
            params, arrays = start, {}
        else:
            packed, config["theta_mantissa"] = encode_theta(message)
            params, arrays = None, {"theta": packed}
        a0, geometry0 = algo.start_point(start)

        def check(blocks):
            return lambda content, pid: check_round_reply(content, round0_compressor(), q, blocks, pid,
                                                          self.registry.rows_of[pid])
        up0 = self._round_zero_replies(grid, {**config, "start": "upload"}, params, None, check(geometry0.blocks),
                                       **arrays)
        q0, _, bits0 = decode_messages(round0_compressor(), [m for m, _ in up0], geometry0, q)
        broadcast, s0 = algo.start_broadcast(a0, geometry0, q0, self.weights, entropy)
        theta1 = self.model.t_map(s0)
        geometry1 = self.model.geometry(theta1, s0)
        up1 = self._round_zero_replies(grid, {**config, "start": "mean-field"}, None, broadcast,
                                       check(geometry1.blocks))
        q1, _, bits1 = decode_messages(round0_compressor(), [m for m, _ in up1], geometry1, q)
        state = algo.quantised_state(s0, q1, [ll for _, ll in up1], self.weights, entropy)
        uplink, downlink = algo.quantised_start_bits(n, theta0, message, bits0 + bits1, broadcast)
        return state, float(self.weights @ np.array([ll for _, ll in up0])), {"uplink_bits": uplink,
                                                                               "downlink_bits": downlink}

    def _round_zero_replies(self, grid, config, params, payload, check, **arrays):
        """Every client's checked round-0 reply (``check(content, pid)``), in client order."""
        messages = []
        for client, pid in enumerate(self.partitions):
            content = self._content(client, config, **self._public(), **arrays)
            if params is not None:
                content[P.PARAMS], content[P.PARAMS_META] = params_to_records(params)
            if payload is not None:
                content[P.PAYLOAD] = compressed_to_record(round0_compressor(), payload)
            messages.append(Message(content, dst_node_id=self.registry.node_of[pid], message_type=P.STATS))
        self._traffic["downlink_bytes"] += sum(wire_bytes(m) for m in messages)
        by_pid = {}
        # round 0 needs everyone, so it waits as long as for the nodes to connect
        pid_of_node = {m.metadata.dst_node_id: int(self.partitions[c]) for c, m in enumerate(messages)}
        for reply in grid.send_and_receive(messages, timeout=self.settings.node_wait):
            pid = pid_of_node.get(int(reply.metadata.src_node_id))
            if reply.has_error() or pid is None:
                if pid is not None:
                    logger.warning("round 0: partition %d failed: %s", pid, reply.error.reason)
                continue
            try:
                by_pid[pid] = check(reply.content, pid)
            except InvalidReply as exc:
                logger.warning("round 0: reply of partition %d refused: %s", pid, exc)
                continue
            self._traffic["reply_bytes"] += wire_bytes(reply)
            if P.PAYLOAD in reply.content:
                self._traffic["payload_bytes"] += payload_size(reply.content[P.PAYLOAD])
        missing = sorted(set(self.partitions) - set(by_pid))
        if missing:
            raise RuntimeError(f"round 0 needs every client; partitions {missing} did not answer validly "
                               "(see the log).")
        return [by_pid[pid] for pid in self.partitions]
