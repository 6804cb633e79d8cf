"""FedEM as a Flower message-based ``Strategy`` (SPEC §3, §9).

``configure_train`` only selects and instructs: it samples *clients* (partitions)
with :mod:`fedemstats.participation` from the seeded server generator, exactly as
:meth:`FedEM.round` does, and sends each sampled node Ŝ_k, its memory V_{k,i} and
the round config. ``aggregate_train`` is a pure reduction: it decodes the replies
and calls the engine's own server half (:meth:`~fedemstats.algorithms.base.Algorithm.server_step`:
direction, step rule, safeguard), so a Flower run takes the steps an in-process run takes.
A sampled node that fails or does not answer within the round timeout simply does
not participate in that round (see ``docs/flower.md`` for what this does to the
round's unbiasedness); its memory V_i is left unchanged, so V = Σ w_i V_i holds.
Every reply is checked first (:mod:`.validation`); a refused one, or one above the optional
contribution bound, is handled exactly like a failed node's.
"""
from __future__ import annotations

import json
import logging

import numpy as np
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import Strategy

from .._io import write_atomic
from ..algorithms.base import draw_entropy
from ..algorithms.server import decode_messages, memory_update, weighted_sums
from ..ledger import FLOAT64_BITS
from ..models._summaries import public_scale
from . import protocol as P
from .node_state import NO_ROUND
from .nodes import NodeRegistry, describe_nodes, pooled_moments, wait_for_nodes
from .round_zero import NodesRoundZero
from .records import payload_size, to_array_record, wire_bytes
from .updates import encode_update, updates_to_records
from .validation import InvalidReply, check_round_reply, over_bound

__all__ = ["FedEMStrategy"]

logger = logging.getLogger(__name__)


class FedEMStrategy(NodesRoundZero, Strategy):
    """FedEM over a Flower ``Grid``; the server keeps Ŝ, V and a mirror of every V_i.

    Parameters
    ----------
    problem : GMMProblem, FactorAnalysisProblem or ImputerProblem
        Model spec and θ_0 initialisation (sent to and checked by every node).
    settings : FedEMSettings

    Attributes
    ----------
    algorithm : FedEM
        The in-process algorithm of these settings (built at round 0): its round 0,
        α, step sizes and participation sampler are the ones applied here.
    state : AlgorithmState
        Ŝ_k, V_k, the V_{k,i} mirror (n_clients, q), round and stream entropy.
    partitions : list of int
        Client i is partition ``partitions[i]`` (sorted partition ids).
    history : list of dict
        Round 0 then one row per round (see :meth:`aggregate_train`).
    """

    def __init__(self, problem, settings):
        self.problem, self.settings = problem, settings
        self.rng = np.random.default_rng(settings.seed)
        self.registry = NodeRegistry()
        self.history, self.state, self.model, self.algorithm, self.partitions = [], None, None, None, []
        self._pending = None

    # ------------------------------------------------------------------ round 0
    def setup(self, grid) -> None:
        """Round 0 as :meth:`FedEM.init_state`: moments -> shift, weights, θ_0; Ŝ_0; V_{0,i}."""
        s = self.settings
        node_ids = wait_for_nodes(grid, s.min_nodes, s.node_wait)
        descs = [d for d in describe_nodes(grid, node_ids, s.node_wait, self.problem) if self.registry.register(d)]
        descs = sorted(descs, key=lambda d: d.partition_id)
        if len(descs) < s.min_nodes:
            raise RuntimeError(f"{len(descs)} node(s) described themselves; {s.min_nodes} required.")
        self.partitions = [d.partition_id for d in descs]
        sizes = np.array([d.n_rows for d in descs], dtype=np.int64)
        self.weights = sizes / sizes.sum()  # = Federation(weights="samples")
        mean, cov = pooled_moments(descs)
        self.shift, self.column_scale = mean, public_scale(cov, mean)
        self.model = self.problem.build_model(mean.shape[0], mean, self.column_scale)
        self.algorithm = algo = s.algorithm(self.model)
        theta0 = self.problem.init_theta(self.model, mean, cov, self.rng)
        entropy = draw_entropy(self.rng)
        n = len(self.partitions)
        self.state, loglik, mean_field, traffic = self.round_zero(grid, theta0, entropy)
        self.alphas = algo.resolved_alphas(algo.client_geometry(self.model.t_map(self.state.s_hat), self.state.s_hat))
        self.received = np.full(n, NO_ROUND, dtype=np.int64)
        # the round each node is known to hold (it answered an instruction of that round), and
        # whether it then had a full copy only (no previous iterate for a revert)
        self.confirmed = np.full(n, 0 if mean_field else NO_ROUND, dtype=np.int64)
        self.confirmed_fresh = np.ones(n, dtype=bool)
        self.resync_v = np.full(n, not mean_field)
        self.updates = [None]  # update j turns Ŝ_{j-1} into Ŝ_j, as it travels (encode_update)
        self._log_round(round=0, n_sampled=n, n_active=n, failed_partitions=[], refused_partitions=[], loglik=loglik,
                        step_size=float("nan"), **traffic)

    def _public(self) -> dict:
        """The model's public constructor arrays every instruction carries: the shift (the pooled
        mean) and the column scale (in whose units the T-map floors eigenvalues); a model of first
        moments only (Poisson) has neither and ignores them."""
        return {"shift": self.shift, "column_scale": self.column_scale}

    def _content(self, client, config, **arrays) -> RecordDict:
        config = {"client": int(client), P.PARTITION_ID: int(self.partitions[client]), **config}
        return RecordDict({P.CONFIG: ConfigRecord(config), P.SPEC: ConfigRecord(self.problem.spec()),
                           P.ARRAYS: to_array_record(**arrays)})

    # ------------------------------------------------------------------ rounds
    def _refresh_nodes(self, grid) -> None:
        """Describe nodes seen for the first time (e.g. a restarted node's new id); a partition
        served by a new node starts over from the full Ŝ and the mirror of its V_i."""
        unknown = self.registry.unknown(grid.get_node_ids())
        if unknown:
            for desc in describe_nodes(grid, unknown, self.settings.round_timeout, self.problem):
                if self.registry.register(desc, allowed=set(self.partitions)):
                    self._resynchronise(self.partitions.index(desc.partition_id))

    def configure_train(self, server_round, arrays, config, grid):
        """Sample clients as the engine does and instruct the nodes serving them."""
        self._refresh_nodes(grid)
        st, n = self.state, len(self.partitions)
        active, pi = self.algorithm.sample_round(st.round, n, self.rng)
        messages, client_of_node, self._pending_full = [], {}, {}
        for client in (int(c) for c in active):
            node = self.registry.node_of.get(self.partitions[client])
            if node is None:
                continue
            messages.append(Message(self._instruction(client), dst_node_id=node, message_type=P.ROUND,
                                    group_id=str(server_round)))
            client_of_node[node] = client
        # every active client fetches Ŝ_k, as in process (a node that then fails has it too)
        downlink_bits = self.algorithm.broadcast.catch_up(st.downlink, active, st.round)
        self._pending = {"active": active, "pi": pi, "client_of_node": client_of_node,
                         "downlink_bits": downlink_bits, "downlink_bytes": sum(wire_bytes(m) for m in messages)}
        return messages

    def _instruction(self, client) -> RecordDict:
        """Round k's instruction: the updates since the round the node is known to hold (it
        skips those it already applied), or the full Ŝ_k (and V_i after a lost state)."""
        st, s = self.state, self.settings
        base = int(self.confirmed[client])
        needs_full, _ = self.algorithm.broadcast.plan(st.downlink, np.array([client]), st.round, synced=[base],
                                                      fresh=[self.confirmed_fresh[client]])
        full = bool(needs_full[0] or self.resync_v[client])
        config = {"round": int(st.round), "entropy": int(st.entropy),
                  "alpha": self.algorithm.round_alpha(self.alphas, st.round),
                  "compressor": s.compressor, "downlink": s.downlink_compressor, "precondition": s.precondition,
                  "mode": "full" if full else "updates", "base": base, "received": int(self.received[client])}
        arrays = self._public()
        if full:
            arrays["s_hat"] = st.s_hat
            if self.resync_v[client]:
                arrays["v"] = st.v_clients[client]
        content = self._content(client, config, **arrays)
        if not full:
            content[P.UPDATES], content[P.UPDATES_META] = updates_to_records(self.updates[base + 1:], base + 1)
        self._pending_full[client] = full
        return content

    def _decode(self, replies, coords):
        """client -> (message, loglik, reply bytes, payload bytes) of the valid replies of this round, and
        client -> reason of the replies refused (:mod:`.validation`; logged)."""
        client_of_node, got, refused = self._pending["client_of_node"], {}, {}
        compressor = self.algorithm.uplink_compressor(self.state.round)
        for reply in replies:
            node = int(reply.metadata.src_node_id)
            if reply.has_error() or node not in client_of_node:
                logger.warning("round reply from node %d dropped: %s", node,
                               reply.error.reason if reply.has_error() else "not instructed this round")
                if reply.has_error() and node in client_of_node and P.STATE_ERROR in str(reply.error.reason):
                    self._resynchronise(client_of_node[node])
                continue
            client = client_of_node[node]
            pid = self.partitions[client]
            try:
                message, loglik = check_round_reply(reply.content, compressor, self.model.q,
                                                    coords.blocks, pid, self.registry.rows_of.get(pid))
            except InvalidReply as exc:
                refused[client] = str(exc)
                continue
            got[client] = (message, loglik, wire_bytes(reply), payload_size(reply.content[P.PAYLOAD]))
        if self.settings.contribution_bound:  # off (0) by default: no norm to decode then
            norms = {c: float(np.linalg.norm(compressor.decompress(m))) for c, (m, *_) in got.items()}
            for client, reason in over_bound(norms, self.settings.contribution_bound).items():
                refused[client] = reason
                del got[client]
        for client, reason in sorted(refused.items()):
            # treated as a failed node: its q_i is not applied and its pending commit not confirmed
            # named by the round the reply would have completed, as the history row and the
            # "failed partitions" line that follow
            logger.warning("round %d: reply of partition %d refused: %s", self.state.round + 1,
                           self.partitions[client], reason)
        return got, refused

    def _resynchronise(self, client) -> None:
        """The node lost (or never had) its state: send it the full Ŝ and V_i next time."""
        self.confirmed[client] = NO_ROUND
        self.resync_v[client] = True

    def aggregate_train(self, server_round, replies):
        """Decode the q_i received and apply the engine's server half (a pure reduction)."""
        st, pend, algo, n = self.state, self._pending, self.algorithm, len(self.partitions)
        geometries = algo.round_geometries(self.model.t_map(st.s_hat), st.s_hat, n)
        got, refused = self._decode(replies, geometries[1])
        idx = np.array(sorted(got), dtype=np.int64)
        pi_of = dict(zip((int(a) for a in pend["active"]), pend["pi"]))
        pi = np.array([pi_of[int(i)] for i in idx], dtype=np.float64)
        messages = [got[int(i)][0] for i in idx]
        q_rows, noise, bits = decode_messages(algo.uplink_compressor(st.round), messages, geometries[1], self.model.q)
        loglik = np.array([got[int(i)][1] for i in idx], dtype=np.float64)
        # the mirror applies the same q_i the node will commit: V_{k+1,i} = V_{k,i} + α q_i
        alpha = algo.round_alpha(self.alphas, st.round)
        st.v_clients[idx] = memory_update(st.v_clients[idx], q_rows, alpha)
        self.received[idx] = st.round
        self.confirmed[idx] = st.round
        for i in idx:
            # a node sent the full Ŝ holds no previous iterate; one sent updates does
            self.confirmed_fresh[i] = self._pending_full[int(i)]
            self.resync_v[i] = self.resync_v[i] and not self._pending_full[int(i)]
        step = algo.server_step(st, self.weights, idx, pi, weighted_sums(q_rows, self.weights[idx], pi), loglik, noise,
                                geometries, alpha)
        # encoded once here, not once per instruction that carries it
        self.updates.append(encode_update(st.downlink.last, algo.broadcast.compressor_at(st.round - 1)))
        failed = sorted(self.partitions[int(c)] for c in pend["active"] if int(c) not in got)
        row = self._log_round(
            round=st.round, n_sampled=int(pend["active"].size), n_active=int(idx.size),
            failed_partitions=failed, refused_partitions=sorted(self.partitions[c] for c in refused),
            uplink_bits=int(bits) + int(idx.size) * FLOAT64_BITS,
            reply_bytes=int(sum(got[int(i)][2] for i in idx)), payload_bytes=int(sum(got[int(i)][3] for i in idx)),
            downlink_bits=pend["downlink_bits"],
            downlink_bytes=pend["downlink_bytes"],
            **{k: _plain(v) for k, v in step.items()})
        metrics = {k: row[k] for k in ("n_sampled", "n_active", "uplink_bits", "downlink_bits", "reply_bytes")}
        return to_array_record(s_hat=st.s_hat), MetricRecord(metrics)

    def configure_evaluate(self, server_round, arrays, config, grid):
        return []

    def aggregate_evaluate(self, server_round, replies):
        return None

    def summary(self) -> None:
        logger.info("FedEM on Flower: %r, %s", self.problem, self.settings)

    # ------------------------------------------------------------------ driver
    def start(self, grid, initial_arrays=None, num_rounds=None, timeout=None, **_):
        """Round 0, then ``num_rounds`` (default ``settings.n_rounds``) FedEM rounds.

        Returns
        -------
        dict
            The result written to ``settings.output`` (see :meth:`result`).
        """
        self.summary()
        self.setup(grid)
        timeout = self.settings.round_timeout if timeout is None else timeout
        rounds = self.settings.n_rounds if num_rounds is None else num_rounds
        for server_round in range(1, rounds + 1):
            messages = self.configure_train(server_round, None, ConfigRecord(), grid)
            replies = grid.send_and_receive(messages, timeout=timeout)
            self.aggregate_train(server_round, replies)
        return self.result()

    def _log_round(self, **row):
        row["n_failed"] = len(row["failed_partitions"])
        # partial: fewer clients than the federation contributed (by design or by failure)
        row["partial"] = row["n_active"] < len(self.partitions)
        self.history.append(row)
        logger.info("round %d: %d/%d active (failed partitions %s), loglik %.6g, reply bytes %d",
                    row["round"], row["n_active"], row["n_sampled"], row["failed_partitions"],
                    row["loglik"], row["reply_bytes"])
        self._write_output()
        return row

    def result(self) -> dict:
        """JSON-ready result: Ŝ, V, θ = T(Ŝ) (the model's named arrays), client weights, partitions, history."""
        theta = self.model.params_to_dict(self.model.t_map(self.state.s_hat))
        return {"problem": self.problem.spec(), "settings": self.settings.as_dict(),
                "partitions": list(self.partitions), "weights": self.weights.tolist(),
                "shift": self.shift.tolist(), "column_scale": self.column_scale.tolist(),
                "entropy": int(self.state.entropy),
                "round": int(self.state.round), "s_hat": self.state.s_hat.tolist(),
                "v": self.state.v.tolist(), "v_clients": self.state.v_clients.tolist(),
                "theta": {name: value.tolist() for name, value in theta.items()},
                "history": self.history}

    def _write_output(self) -> None:
        path = self.settings.output
        if not path or self.state is None:
            return
        write_atomic(path, json.dumps(self.result()))  # readers never see a half-written file


def _plain(value):
    """A JSON-ready scalar (history rows go to the result file)."""
    return value.item() if isinstance(value, np.generic) else value
