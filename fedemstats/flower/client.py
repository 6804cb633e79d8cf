"""ClientApp factory: the client half of a FedEM round on a node's own partition.

A node keeps its copy of the public iterate and its memory V_i in Flower's per-node
``context.state`` (:mod:`.node_state`); the server sends the compressed updates it
missed (or, to a node that lost its state, the full iterate and the server's mirror of
V_i). Nothing but statistics, counts and log-likelihoods leaves the node.
"""
from __future__ import annotations

import functools
import logging
import os

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .._validation import check_array_2d
from ..algorithms import FedEM
from ..algorithms.broadcast import replay
from ..algorithms.server import client_update
from ..algorithms.start import round0_compressor
from ..algorithms.streams import round_streams
from ..federation import MIN_CLIENT_ROWS, Federation
from ..models._pair_moments import client_pair_moments
from ..models._summaries import client_moments
from . import protocol as P
from .problems import problem_from_spec
from .node_state import NO_ROUND, NodeState, load_start_theta, load_state, save_start_theta, save_state
from .records import (compressed_from_record, compressed_to_record, decode_theta, from_array_record,
                      params_from_records, to_array_record)
from .updates import updates_from_records

__all__ = ["make_client_app", "load_csv_partition", "partition_id_of", "MIN_ROWS"]

logger = logging.getLogger(__name__)

#: fewest rows a node accepts: a "mean" of one row would be the raw row itself
MIN_ROWS = MIN_CLIENT_ROWS


def partition_id_of(context: Context) -> int:
    """The node's partition id (``--node-config "partition-id=..."``; set by simulations)."""
    if P.PARTITION_ID not in context.node_config:
        raise ValueError("node config has no 'partition-id'; start the SuperNode with "
                         "--node-config \"partition-id=<i> data-path=<csv>\".")
    return int(context.node_config[P.PARTITION_ID])


@functools.lru_cache(maxsize=4)
def _read_csv(path: str, mtime: float) -> np.ndarray:
    # mtime is part of the cache key so an edited file is read again
    # NaN (a missing value, written "nan") is read; whether the problem accepts it is checked later
    return check_array_2d(np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2), name=path, allow_nan=True)


def load_csv_partition(context: Context) -> np.ndarray:
    """Rows of this node: node config ``data-path``, else ``<data-dir>/partition-<id>.csv``
    with ``data-dir`` from the node or run config. Comma-separated numbers, no header; ``nan``
    marks a missing value (accepted by problems with ``allow_nan`` only)."""
    path = context.node_config.get(P.DATA_PATH)
    if not path:
        folder = context.node_config.get(P.DATA_DIR) or context.run_config.get(P.DATA_DIR)
        if not folder:
            raise ValueError("set node config 'data-path' or node/run config 'data-dir'.")
        path = os.path.join(str(folder), f"partition-{partition_id_of(context)}.csv")
    path = str(path)
    return _read_csv(path, os.path.getmtime(path))


def _problem_from(content: RecordDict, problem_type):
    return problem_from_spec(dict(content[P.SPEC]), problem_type)


def _reply(message, arrays=None, metrics=None, **records) -> Message:
    content = RecordDict(records)
    if arrays:
        content[P.ARRAYS] = to_array_record(**arrays)
    content[P.METRICS] = MetricRecord(metrics or {})
    return Message(content, reply_to=message)


def _algorithm(model, config) -> FedEM:
    """The run's FedEM on this node, from the instruction's config (compressor, geometry, downlink)."""
    return FedEM(model, compressor=str(config["compressor"]), precondition=bool(config["precondition"]),
                 downlink_compressor=str(config["downlink"]))


class _Node:
    """The handlers of one ClientApp, bound to a problem type and a data loader."""

    def __init__(self, problem_type, load_partition):
        self.problem_type = problem_type
        self.load_partition = load_partition

    def _data(self, context, problem):
        # any loader's rows, not only the CSV reader's: NaN (unless the problem allows it), inf, a
        # wrong shape or what the problem's model cannot learn from fail here, loudly
        X = check_array_2d(self.load_partition(context), name="the node's partition", allow_nan=problem.allow_nan)
        if X.shape[0] < MIN_ROWS:
            raise ValueError(f"partition has {X.shape[0]} row(s); at least {MIN_ROWS} are needed "
                             "so that no statistic is a single raw row.")
        problem.check_partition(X)
        return X

    def _model_and_federation(self, message, context):
        problem = _problem_from(message.content, self.problem_type)
        X = self._data(context, problem)
        public = from_array_record(message.content[P.ARRAYS])
        return (problem.build_model(X.shape[1], public["shift"], public["column_scale"]),
                Federation(X, [0, X.shape[0]], allow_nan=problem.allow_nan))

    def _check_partition(self, config, context):
        expected, own = int(config[P.PARTITION_ID]), partition_id_of(context)
        if expected != own:
            raise ValueError(f"instruction for partition {expected} reached partition {own}.")

    def describe(self, message: Message, context: Context) -> Message:
        """Partition id, row count and the client part of the global moments: local mean and
        centred scatter, or, for a problem whose rows may miss values, pairwise-complete moments
        (:func:`fedemstats.models._pair_moments.client_pair_moments`)."""
        problem = _problem_from(message.content, self.problem_type)
        X = self._data(context, problem)
        if problem.allow_nan:
            arrays = client_pair_moments(X)
        else:
            _, means, scatters = client_moments(Federation(X, [0, X.shape[0]]))  # the client part of global_moments
            arrays = {"mean": means[0], "scatter": scatters[0]}
        return _reply(message, arrays=arrays, metrics={P.PARTITION_ID: partition_id_of(context),
                                                       "n-rows": int(X.shape[0])})

    def stats(self, message: Message, context: Context) -> Message:
        """Round 0 (:mod:`fedemstats.algorithms.start`). Exact: s̄_i(θ) at the θ sent, or at
        T(Ŝ_0) for the mean-field pass, which also starts the node's state (Ŝ_0 and
        V_{0,i} = s̄_i(T(Ŝ_0)) − Ŝ_0, the value the server's mirror computes). Quantised
        (config ``start``; θ_0 arrives with the first transfer only, as its statistics in short
        floats, packed in ``theta`` with their mantissa bits in config ``theta_mantissa``, or, when
        their rounding is too large, as parameters, see
        :mod:`fedemstats.algorithms.start`; the node keeps it for the second):
        s̄_i(θ_0) − E_θ0[s] dithered (``upload``), or, from the server's
        broadcast of Ŝ_0, s̄_i(T(Ŝ_0)) − Ŝ_0 dithered (``mean-field``), whose decoded value
        is V_{0,i}; the node keeps Ŝ_0 and V_{0,i}."""
        config = message.content[P.CONFIG]
        self._check_partition(config, context)
        model, fed = self._model_and_federation(message, context)
        arrays = from_array_record(message.content[P.ARRAYS])
        metrics = {P.PARTITION_ID: partition_id_of(context), "n-rows": fed.n_rows}
        if "start" in config:
            return self._quantised_stats(message, context, model, fed, arrays, metrics)
        if "s_hat" in arrays:
            s_hat = arrays["s_hat"]
            stats, loglik = model.client_stats(fed, model.t_map(s_hat))
            save_state(context, NodeState(int(config["entropy"]), 0, s_hat, stats[0] - s_hat))
        else:
            theta = params_from_records(message.content[P.PARAMS], message.content[P.PARAMS_META])
            stats, loglik = model.client_stats(fed, theta)
        return _reply(message, arrays={"stats": stats[0]}, metrics={**metrics, "loglik": float(loglik[0])})

    def _quantised_stats(self, message, context, model, fed, arrays, metrics):
        config, content = message.content[P.CONFIG], message.content
        algo = _algorithm(model, config)
        entropy, client, transfer = int(config["entropy"]), [int(config["client"])], str(config["start"])
        if transfer == "upload":  # θ_0 travels with the first transfer only: the node keeps it
            theta0 = (algo.received_theta(decode_theta(arrays["theta"], model.q, int(config["theta_mantissa"])))
                      if "theta" in arrays else params_from_records(content[P.PARAMS], content[P.PARAMS_META]))
            save_start_theta(context, entropy, theta0)
        else:
            theta0 = load_start_theta(context, entropy)
        a0, geometry0 = algo.start_point(theta0)
        if transfer == "upload":
            stats, loglik = model.client_stats(fed, theta0)
            compressed, _ = algo.start_upload(stats, a0, geometry0, entropy, client, "upload")
        else:
            broadcast = compressed_from_record(content[P.PAYLOAD], round0_compressor(), model.q, geometry0.blocks)
            s0 = algo.received_start(a0, geometry0, broadcast)
            theta1 = model.t_map(s0)
            stats, loglik = model.client_stats(fed, theta1)
            compressed, q_rows = algo.start_upload(stats, s0, model.geometry(theta1, s0), entropy, client,
                                                   "mean-field")
            save_state(context, NodeState(entropy, 0, s0, q_rows[0]))
        return _reply(message, metrics={**metrics, "loglik": float(loglik[0])},
                      **{P.PAYLOAD: compressed_to_record(round0_compressor(), compressed)})

    def train(self, message: Message, context: Context) -> Message:
        """One FedEM round: bring Ŝ up to date, S_i at T(Ŝ_k), q_i = P⁻¹ Quant(P Δ_i) via
        ``client_update``; α q_i stays pending until the server confirms it received it."""
        config = message.content[P.CONFIG]
        self._check_partition(config, context)
        model, fed = self._model_and_federation(message, context)
        algo = _algorithm(model, config)
        node = self._updated_state(message.content, context, algo)
        theta = model.t_map(node.s_hat)
        stats, loglik = model.client_stats(fed, theta)
        streams = round_streams(int(config["entropy"]), int(config["round"]), [int(config["client"])])
        compressor = algo.uplink_compressor(int(config["round"]))
        compressed, q_rows, _, _ = client_update(stats, node.s_hat, node.v[None, :], compressor,
                                              float(config["alpha"]), streams, algo.client_geometry(theta, node.s_hat))
        node.pending, node.pending_round = float(config["alpha"]) * q_rows[0], int(config["round"])
        save_state(context, node)
        return _reply(message, metrics={P.PARTITION_ID: partition_id_of(context), "n-rows": fed.n_rows,
                                        "loglik": float(loglik[0])},
                      **{P.PAYLOAD: compressed_to_record(compressor, compressed)})

    @staticmethod
    def _updated_state(content, context, algo) -> NodeState:
        """The node's state brought to round k: the full Ŝ (and V_i) sent, or the updates replayed.

        Raises
        ------
        ValueError
            (``STATE_ERROR``) if the node has no state, or another round's, for an
            instruction that assumes it: the server then resends everything next time.
        """
        config, arrays = content[P.CONFIG], from_array_record(content[P.ARRAYS])
        k, received = int(config["round"]), int(config["received"])
        node = load_state(context, int(config["entropy"]))
        if node is not None:
            node.commit(received)
        if str(config["mode"]) == "full":
            if "v" not in arrays and node is None:
                raise ValueError(f"{P.STATE_ERROR}: no memory V_i on this node; resend it.")
            v = arrays["v"] if "v" in arrays else node.v
            return NodeState(int(config["entropy"]), k, arrays["s_hat"], v)
        base = int(config["base"])
        if node is None or node.round < base:
            held = NO_ROUND if node is None else node.round
            raise ValueError(f"{P.STATE_ERROR}: the node holds round {held}, the server assumed {base}.")
        updates = updates_from_records(content[P.UPDATES], content[P.UPDATES_META], base + 1)
        # skip what the node applied already (its reply to a later round was lost)
        node.s_hat, node.prev = replay(algo, node.s_hat, node.prev, updates[node.round - base:], node.round + 1)
        node.round = k
        return node


def make_client_app(problem_type=None, load_partition=load_csv_partition) -> ClientApp:
    """A Flower ``ClientApp`` running the client half of FedEM.

    Parameters
    ----------
    problem_type : class, optional
        The problem class this node serves (e.g. :class:`~fedemstats.flower.GMMProblem`);
        the model spec itself comes from the server with every instruction and is
        rebuilt from an allow-list. ``None`` accepts any registered problem.
    load_partition : callable, default=load_csv_partition
        ``load_partition(context) -> ndarray (m_i, n_features)``: this node's rows.

    Returns
    -------
    flwr.clientapp.ClientApp
        Handles ``query.describe``, ``train.stats`` and ``train`` (see
        :mod:`fedemstats.flower.protocol`); keeps its FedEM state in ``context.state``.
    """
    node = _Node(problem_type, load_partition)
    app = ClientApp()
    app.query("describe")(node.describe)
    app.train("stats")(node.stats)
    app.train()(node.train)
    return app

