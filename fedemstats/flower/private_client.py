"""ClientApp of differentially private FedEM under secure aggregation (issue 14).

The node answers Flower's SecAgg+ protocol (``flwr.client.mod.secaggplus_mod``, which wraps
this app): in its "collect masked vectors" stage the mod calls :meth:`_PrivateNode.share`,
which returns the node's share u_i on SecAgg+'s grid (:mod:`fedemstats.algorithms.private_secagg`)
as the legacy ``FitRes`` the mod expects; the mod masks it, and the server only ever
reconstructs the sum over the nodes. What a node sends besides masked integers: its partition
id and number of features (``query.describe``). Its row count, moments and statistics stay
on it.

The noise key: on a deployment each node draws its own 128-bit secret once and keeps it in
``context.state`` (the server cannot recompute the noise and subtract it). A test that must
reproduce an in-process run gives the run's entropy in the node config ``dp-noise-key``.
"""
from __future__ import annotations

import secrets

import flwr.compat.common.recorddict_compat as compat
import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

from .._validation import check_array_2d
from ..algorithms.private_secagg import Release, count_share, stats_shares
from ..algorithms.private_stats import noise_geometry, public_federation, public_model
from ..federation import Federation
from ..privacy.secagg import SecAggGrid
from . import protocol as P
from .client import MIN_ROWS, load_csv_partition, partition_id_of
from .private_records import KIND_COUNT, KIND_STATS, privacy_from_config, problem_and_theta

__all__ = ["make_private_client_app", "NOISE_KEY"]

#: node-config key of a fixed noise key (tests reproducing an in-process run only)
NOISE_KEY = "dp-noise-key"
#: where a node keeps its own secret noise key
_KEY_RECORD = "fedem-dp-key"
_KEY_BYTES = 16


def noise_key(context: Context) -> int:
    """The node's noise key: ``dp-noise-key`` from the node config, else its own secret."""
    if NOISE_KEY in context.node_config:
        return int(context.node_config[NOISE_KEY])
    if _KEY_RECORD not in context.state.config_records:
        context.state.config_records[_KEY_RECORD] = ConfigRecord({"key": secrets.token_bytes(_KEY_BYTES)})
    return int.from_bytes(context.state.config_records[_KEY_RECORD]["key"], "big")


class _PrivateNode:
    """The handlers of one private ClientApp, bound to a data loader."""

    def __init__(self, problem_type, load_partition):
        self.problem_type, self.load_partition = problem_type, load_partition

    def _data(self, context):
        # complete rows only: the private problems have no missing-value model
        X = check_array_2d(self.load_partition(context), name="the node's partition")
        if X.shape[0] < MIN_ROWS:
            raise ValueError(f"partition has {X.shape[0]} row(s); at least {MIN_ROWS} are needed.")
        return X

    def describe(self, message: Message, context: Context) -> Message:
        """Partition id and number of features only (the row count is private)."""
        X = self._data(context)
        content = RecordDict({P.METRICS: MetricRecord({P.PARTITION_ID: partition_id_of(context),
                                                        "n-features": int(X.shape[1])})})
        return Message(content, reply_to=message)

    def share(self, message: Message, context: Context) -> Message:
        """This node's share of one release (the count, or the statistics at the θ sent)."""
        fitins = compat.recorddict_to_fitins(message.content, keep_input=True)
        config = fitins.config
        if int(config[P.PARTITION_ID]) != partition_id_of(context):
            raise ValueError(f"instruction for partition {config[P.PARTITION_ID]} reached "
                             f"partition {partition_id_of(context)}.")
        X = self._data(context)
        privacy = privacy_from_config(config, fitins.parameters)
        grid = SecAggGrid(float(config["clip-range"]), int(config["target-range"]))
        client, key = int(config["client"]), noise_key(context)
        if config["kind"] == KIND_COUNT:
            count = X.shape[0] if privacy.level == "row" else 1
            value = np.array([count_share(count, float(config["sigma"]), int(config["n-clients"]), grid, key,
                                          client)])
        elif config["kind"] == KIND_STATS:
            problem, theta = problem_and_theta(config, fitins.parameters, self.problem_type)
            model = public_model(problem.build_model(X.shape[1], np.zeros(X.shape[1])), privacy)
            federation = public_federation(Federation(X, [0, X.shape[0]]), model, privacy)
            release = Release(float(config["sigma"]), float(config["sensitivity"]), float(config["count"]), grid,
                              int(config["n-active"]), int(config["stream"]))
            value = stats_shares(model, federation, theta, np.array([0]), np.array([client]), privacy,
                                 noise_geometry(model, privacy, theta), release, key)[0]
        else:
            raise ValueError(f"unknown release kind {config['kind']!r}.")
        # weight 1 = SecAgg+'s max_weight: the mod multiplies by 1.0 and the server divides the
        # sum by the number of shares, which it multiplies back
        fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([value]), num_examples=1, metrics={})
        return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=message)


def make_private_client_app(problem_type=None, load_partition=load_csv_partition) -> ClientApp:
    """A Flower ``ClientApp`` for private FedEM with secure aggregation.

    Parameters
    ----------
    problem_type : class, optional
        The problem class this node serves; ``None`` accepts any registered problem.
    load_partition : callable, default=load_csv_partition
        ``load_partition(context) -> ndarray (m_i, n_features)``: this node's rows.

    Returns
    -------
    flwr.clientapp.ClientApp
        With Flower's ``secaggplus_mod``: handles ``query.describe`` and the SecAgg+
        ``train`` stages (see :class:`fedemstats.flower.PrivateFedEMStrategy`).
    """
    node = _PrivateNode(problem_type, load_partition)
    app = ClientApp(mods=[secaggplus_mod])
    app.query("describe")(node.describe)
    app.train()(node.share)
    return app
