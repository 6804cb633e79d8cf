"""Which node serves which partition, and the ``query.describe`` exchange.

Flower node ids are unsigned 64-bit integers (often above 2^63): they are kept as
Python ``int`` in dicts and never put in a NumPy array (int64 would overflow,
float64 would round them to a different node).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict

from ..federation import MIN_CLIENT_ROWS
from ..models._pair_moments import MIN_OBSERVED_ROWS, PAIR_MOMENT_NAMES, combine_pair_moments
from ..models._summaries import combine_moments
from . import protocol as P
from .validation import InvalidReply, check_description

__all__ = ["NodeRegistry", "Description", "describe_nodes", "wait_for_nodes", "pooled_moments", "POLL_SECONDS"]

logger = logging.getLogger(__name__)

#: pause between two looks at the connected nodes while waiting for them
POLL_SECONDS = 0.5


@dataclass(frozen=True)
class Description:
    """What a node told about its partition (aggregates only).

    ``moments`` holds ``mean`` (d,) and ``scatter`` (d, d): the local mean and centred scatter,
    or, for a problem whose rows may miss values (``problem.allow_nan``), the pairwise-complete
    moments of :func:`fedemstats.models._pair_moments.client_pair_moments`.
    """

    node_id: int
    partition_id: int
    n_rows: int
    moments: dict


def wait_for_nodes(grid, min_nodes: int, timeout: float) -> list:
    """Node ids once at least ``min_nodes`` are connected (RuntimeError after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        node_ids = [int(n) for n in grid.get_node_ids()]
        if len(node_ids) >= min_nodes:
            return node_ids
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(node_ids)} node(s) connected after {timeout:g} s; "
                               f"{min_nodes} required (settings.min_nodes).")
        time.sleep(POLL_SECONDS)


def describe_nodes(grid, node_ids, timeout: float, problem) -> list:
    """Ask nodes for their partition id, row count and local moments (``problem``'s kind).

    Returns
    -------
    list of Description
        One per node that answered without error with a valid description
        (:func:`.validation.check_description`; others are logged and skipped).
    """
    messages = [Message(RecordDict({P.SPEC: ConfigRecord(problem.spec())}), dst_node_id=int(n),
                        message_type=P.DESCRIBE) for n in node_ids]
    out = []
    for reply in grid.send_and_receive(messages, timeout=timeout):
        if reply.has_error():
            logger.warning("node %d could not describe itself: %s", reply.metadata.src_node_id,
                           reply.error.reason)
            continue
        try:
            pid, rows, moments = check_description(reply.content, MIN_CLIENT_ROWS, problem.allow_nan)
        except InvalidReply as exc:
            logger.warning("node %d's description refused: %s", reply.metadata.src_node_id, exc)
            continue
        out.append(Description(int(reply.metadata.src_node_id), pid, rows, moments))
    return out


class NodeRegistry:
    """Map partitions (clients) to the node currently serving them.

    A partition whose node restarts re-appears under a new node id; the registry
    then points the partition to the new node, provided it reports the same row
    count (otherwise its data changed and its weight w_i would be wrong).
    """

    def __init__(self):
        self.node_of = {}      # partition id -> node id (int)
        self.rows_of = {}      # partition id -> m_i
        self.seen = set()      # node ids already described (served or ignored)

    def unknown(self, node_ids) -> list:
        return [int(n) for n in node_ids if int(n) not in self.seen]

    def register(self, desc: Description, allowed=None) -> bool:
        """Record ``desc``; False (node ignored) if its partition is not a client of
        this run or its row count changed."""
        self.seen.add(desc.node_id)
        pid = desc.partition_id
        if allowed is not None and pid not in allowed:
            logger.warning("node %d serves partition %d, which is not a client of this run; ignored.",
                           desc.node_id, pid)
            return False
        if pid in self.rows_of and self.rows_of[pid] != desc.n_rows:
            logger.warning("partition %d came back with %d rows instead of %d; node %d ignored.",
                           pid, desc.n_rows, self.rows_of[pid], desc.node_id)
            return False
        previous = self.node_of.get(pid)
        if previous is not None and previous != desc.node_id:
            logger.info("partition %d is now served by node %d (was %d).", pid, desc.node_id, previous)
        self.node_of[pid] = desc.node_id
        self.rows_of[pid] = desc.n_rows
        return True


def pooled_moments(descriptions):
    """Pooled mean and ML covariance from the nodes' descriptions.

    The server part of :func:`fedemstats.models._summaries.global_moments` (Chan et al.'s
    parallel combination, ``M = Σ M_i + Σ m_i (x̄_i - x̄)(x̄_i - x̄)^T``, divided by N), or, for
    pairwise-complete descriptions, of :func:`fedemstats.models._summaries.nan_moments`
    (:func:`fedemstats.models._pair_moments.combine_pair_moments`).

    Raises
    ------
    RuntimeError
        If a column has no observed value on any node, or only on nodes that observe it in one
        row (pairwise descriptions: such a node leaves it out, its mean would be that row's value).
    """
    if "pair_counts" in descriptions[0].moments:
        stacked = {name: np.array([d.moments[name] for d in descriptions]) for name in PAIR_MOMENT_NAMES}
        empty = np.flatnonzero(np.diagonal(stacked["pair_counts"].sum(axis=0)) == 0)
        if empty.size:
            raise RuntimeError(f"column(s) {empty.tolist()} are observed in at least {MIN_OBSERVED_ROWS} rows on no "
                               "node (a node shares no column it observes in one row only); a model cannot be "
                               "fitted for them: drop these columns on every node.")
        return combine_pair_moments(*(stacked[name] for name in PAIR_MOMENT_NAMES))
    sizes = np.array([d.n_rows for d in descriptions], dtype=np.int64)
    client_means = np.array([d.moments["mean"] for d in descriptions])
    return combine_moments(sizes, client_means, np.sum([d.moments["scatter"] for d in descriptions], axis=0))
