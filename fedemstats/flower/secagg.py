"""One secure sum over Flower's SecAgg+ workflow (``flwr.server.workflow.SecAggPlusWorkflow``).

Flower's workflow drives a legacy ``Strategy`` through a ``LegacyContext``: it asks it for the
nodes' instructions (``configure_fit``), runs the four SecAgg+ stages, and hands it only the
unmasked aggregate (``aggregate_fit``). :class:`_OneSum` is that strategy for a single
release: its instructions are fixed in advance and it keeps the aggregate and the number of
shares in it — never a node's own vector, which the server does not receive (the node's
``secaggplus_mod`` clears its reply's arrays and sends masked integers).

The workflow returns the *mean* of the shares (it weights each by ``num_examples / max_weight``
= 1 here); :func:`secure_sum` multiplies it back by the number of shares.
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord
from flwr.common import parameters_to_ndarrays
from flwr.server import ServerConfig
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

from ..privacy.secagg import MODULUS_RANGE

__all__ = ["secure_sum", "SecureSum", "RECONSTRUCTION_THRESHOLD"]

logger = logging.getLogger(__name__)

#: share of a node's neighbours needed to rebuild its masks if it drops (SecAgg+'s t / n)
RECONSTRUCTION_THRESHOLD = 0.5


class SecureSum:
    """The result of one secure sum.

    Attributes
    ----------
    total : ndarray of shape (m,) or None
        Σ of the shares that arrived (None if the protocol halted).
    node_ids : list of int
        The nodes whose shares are in it.
    """

    def __init__(self, total, node_ids):
        self.total, self.node_ids = total, list(node_ids)


class _OneSum:
    """The legacy strategy one SecAgg+ round drives (only the two methods it calls)."""

    def __init__(self, fitins_by_node):
        self.fitins_by_node = fitins_by_node
        self.mean, self.node_ids = None, []

    def configure_fit(self, server_round, parameters, client_manager):
        return [(SimpleNamespace(node_id=int(nid)), fitins) for nid, fitins in self.fitins_by_node.items()]

    def aggregate_fit(self, server_round, results, failures):
        if results:
            # every FitRes carries the same aggregate: the workflow wrote it into each one
            self.mean = parameters_to_ndarrays(results[0][1].parameters)[0]
            self.node_ids = [int(proxy.node_id) for proxy, _ in results]
        for failure in failures:
            logger.warning("secure aggregation: a node failed: %s", failure)
        return None, {}


class _Manager:
    """What the workflow asks of a client manager (a count, for its log)."""

    def __init__(self, n):
        self.n = n

    def num_available(self):
        return self.n


def secure_sum(grid, context, fitins_by_node, secagg_grid, round_id, timeout=None) -> SecureSum:
    """Σ of the nodes' shares through SecAgg+.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    context : flwr.app.Context
        The ServerApp's context (the workflow keeps its round number in its state).
    fitins_by_node : dict of int -> FitIns
        Each node's instruction (:func:`.private_records.release_fitins`).
    secagg_grid : SecAggGrid
        The shares' grid: SecAgg+'s clipping and quantisation ranges.
    round_id : int
        Flower's group id of the exchange.
    timeout : float, optional
        Seconds per stage; a node that has not answered is dropped (its masks are rebuilt
        from its neighbours' key shares).
    """
    strategy = _OneSum(fitins_by_node)
    legacy = LegacyContext(context, config=ServerConfig(num_rounds=1), strategy=strategy,
                           client_manager=_Manager(len(fitins_by_node)))
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({Key.CURRENT_ROUND: int(round_id)})
    legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    workflow = SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=RECONSTRUCTION_THRESHOLD, max_weight=1.0,
                                  clipping_range=float(secagg_grid.clip_range),
                                  quantization_range=int(secagg_grid.target_range), modulus_range=MODULUS_RANGE,
                                  timeout=timeout)
    workflow(grid, legacy)
    if strategy.mean is None:
        return SecureSum(None, [])
    return SecureSum(np.asarray(strategy.mean, dtype=np.float64) * len(strategy.node_ids), strategy.node_ids)
