"""An in-process Flower ``Grid`` for tests and debugging (no Ray, no network).

:class:`LocalGrid` delivers each instruction to a ``ClientApp`` called in this
process with the node's own ``Context``, and can make a node fail (no reply) or
restart (new node id, empty ``context.state``) to exercise the strategy's
fault handling deterministically. Node ids are drawn above 2^63, as Flower's
are, so code that squeezes them through NumPy int64 or float64 fails here too.
"""
from __future__ import annotations

import itertools
import logging

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from . import protocol as P

__all__ = ["LocalGrid", "FIRST_NODE_ID", "write_partitions"]

logger = logging.getLogger(__name__)

#: node ids start above 2^63 (the uint64 range Flower uses)
FIRST_NODE_ID = 2**63 + 12345
#: run id of the local grid's messages
LOCAL_RUN_ID = 1
#: error code of a ClientApp exception (Flower reports such failures as error replies)
CLIENT_APP_ERROR = 1


class LocalGrid(Grid):
    """A Grid whose nodes are ``ClientApp`` calls in this process.

    Parameters
    ----------
    client_app : flwr.clientapp.ClientApp
    node_configs : list of dict
        One node config per node (e.g. ``{"partition-id": 0, "data-path": ...}``).
    run_config : dict, optional
    """

    def __init__(self, client_app, node_configs, run_config=None):
        self.client_app = client_app
        self.run_config = dict(run_config or {})
        self._ids = itertools.count(FIRST_NODE_ID, 7919)
        self.contexts = {}          # node id -> Context
        self.silent = set()         # node ids that never answer (a crashed node still listed)
        self.sent_to = []           # (message_type, node id) of every instruction
        for config in node_configs:
            self._add_node(dict(config))
        # outside a Flower runtime the process identity Message() needs is unset
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = LOCAL_RUN_ID, 0, 0

    def _add_node(self, node_config) -> int:
        node_id = next(self._ids)
        self.contexts[node_id] = Context(run_id=LOCAL_RUN_ID, node_id=node_id, node_config=node_config,
                                         state=RecordDict(), run_config=dict(self.run_config))
        return node_id

    def node_of_partition(self, partition_id) -> int:
        return next(n for n, c in self.contexts.items() if int(c.node_config[P.PARTITION_ID]) == partition_id)

    def restart(self, node_id) -> int:
        """Replace a node by a fresh one (new id, empty state) serving the same partition."""
        config = self.contexts.pop(node_id).node_config
        self.silent.discard(node_id)
        return self._add_node(config)

    # ------------------------------------------------------------------ Grid API
    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return getattr(self, "_run", None)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        raise NotImplementedError("LocalGrid answers synchronously; use send_and_receive.")

    def pull_messages(self, message_ids):
        raise NotImplementedError("LocalGrid answers synchronously; use send_and_receive.")

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for message in messages:
            node_id = message.metadata.dst_node_id
            self.sent_to.append((message.metadata.message_type, node_id))
            if node_id in self.silent or node_id not in self.contexts:
                continue  # as a timed-out node: no reply at all
            # what a transport delivers, a serialised copy: a node must not see (or change) the
            # server's objects; Flower's SecAgg+ builds one message content for every node, and
            # its mod pops the stage key from what it receives
            message = message_from_proto(message_to_proto(message))
            try:
                replies.append(self.client_app(message, self.contexts[node_id]))
            except Exception as exc:  # noqa: BLE001 - Flower turns ClientApp failures into error replies
                logger.info("node %d failed: %s", node_id, exc)
                replies.append(Message(Error(CLIENT_APP_ERROR, repr(exc)), reply_to=message))
        return replies


def write_partitions(folder, n_partitions, rows, dim, n_components=2, seed=0, spread=3.0):
    """Write heterogeneous Gaussian-mixture partitions ``partition-<i>.csv`` and read them back.

    Partition ``i`` holds ``rows + i`` rows centred mostly on component ``i mod K``,
    so clients differ in size and in content.

    Returns
    -------
    list of ndarray
        The partitions as the nodes will read them (CSV round trip, exact with 17 digits).
    """
    import os

    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=spread, size=(n_components, dim))
    out = []
    for i in range(n_partitions):
        path = os.path.join(str(folder), f"partition-{i}.csv")
        X = centres[i % n_components] + rng.normal(size=(rows + i, dim))
        np.savetxt(path, X, delimiter=",", fmt="%.17g")
        out.append(np.loadtxt(path, delimiter=",", ndmin=2))
    return out
