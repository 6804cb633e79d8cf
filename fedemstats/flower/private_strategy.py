"""Differentially private FedEM on Flower with secure aggregation (issue 14, ``docs/privacy.md``).

:class:`PrivateFedEMStrategy` runs :class:`~fedemstats.algorithms.private.PrivateFedEM` in
``mode="distributed"``: every release — the count at round 0, the statistics at θ_0, then one
per round — is a SecAgg+ secure sum (:func:`.secagg.secure_sum`) of the nodes' noisy shares on
SecAgg+'s integer grid, so the server holds Σ u_i and never a node's u_i. From that sum it
takes exactly the engine's server half (:func:`~fedemstats.algorithms.private_secagg.sums_from_total`,
:meth:`~fedemstats.algorithms.private.PrivateFedEM.step_on_release`), and draws θ_0, the noise
calibration and the participation from one seeded generator in the engine's order: with the
nodes' noise keys set to the run's entropy, a Flower run equals the in-process run to
rounding (``tests/test_flower_secagg.py``).

There are no client memories (private FedEM has α = 0), so there is no V_i to keep on the nodes
or to mirror; a restarted node loses nothing but its secret noise key, and draws a new one.
A node that drops out during a release is left out of that sum by SecAgg+ (its masks are
rebuilt from its neighbours' shares); the sum then lacks its noise share (logged).
"""
from __future__ import annotations

import json
import logging

import numpy as np
from flwr.app import Message, RecordDict

from .._io import write_atomic
from ..algorithms.private import MIN_COUNT, PrivateFedEM
from ..algorithms.private_secagg import count_grid, sums_from_total
from ..algorithms.private_stats import noise_geometry, public_model, public_theta
from ..ledger import FLOAT64_BITS
from ..privacy import DPConfig, check_privacy, epsilon_spent
from ..privacy.secagg import share_bits
from . import protocol as P
from .nodes import wait_for_nodes
from .private_records import KIND_COUNT, KIND_STATS, release_fitins
from .secagg import secure_sum

__all__ = ["PrivateFedEMStrategy", "privacy_from_run_config", "PRIVACY_RUN_CONFIG_KEYS"]

logger = logging.getLogger(__name__)

#: Flower run-config key -> DPConfig field (TOML has no null: 0 or "" leaves a field unset)
PRIVACY_RUN_CONFIG_KEYS = {"dp-epsilon": "epsilon", "dp-noise-multiplier": "noise_multiplier", "dp-delta": "delta",
                           "dp-clip": "clip", "dp-level": "level", "dp-geometry": "geometry", "dp-center": "center",
                           "dp-scale": "scale", "dp-public-count": "public_count", "dp-client-clip": "client_clip",
                           "dp-accountant": "accountant"}
#: optional DPConfig fields a run-config value 0 leaves unset (center 0 is the default anyway)
_UNSET_BY_ZERO = ("epsilon", "noise_multiplier", "public_count", "client_clip", "center")
#: the Flower group ids of round 0's two releases (the rounds use 1, 2, ...)
_COUNT_GROUP, _ROUND0_GROUP = -2, 0


def privacy_from_run_config(run_config, base=None) -> DPConfig:
    """A distributed-mode DPConfig from the run config (keys :data:`PRIVACY_RUN_CONFIG_KEYS`)
    over ``base``."""
    fields = {} if base is None else {f: getattr(base, f) for f in PRIVACY_RUN_CONFIG_KEYS.values()}
    for key, field in PRIVACY_RUN_CONFIG_KEYS.items():
        value = run_config.get(key)
        if value is None or value == "":
            continue
        fields[field] = None if field in _UNSET_BY_ZERO and value == 0 else value
    fields["mode"] = "distributed"
    return check_privacy(DPConfig(**fields))


class PrivateFedEMStrategy:
    """Private FedEM over a Flower ``Grid`` with SecAgg+.

    Parameters
    ----------
    problem : GMMProblem or FactorAnalysisProblem
    settings : FedEMSettings
        ``n_rounds``, ``participation``, ``step_size``, ``safeguard``, ``seed``, the waits
        and ``output`` apply; the compressor settings do not (the uplink is SecAgg+'s grid).
    privacy : DPConfig
        ``mode`` must be ``"distributed"``.
    """

    def __init__(self, problem, settings, privacy):
        if privacy.mode != "distributed":
            raise ValueError("PrivateFedEMStrategy runs mode='distributed' (secure aggregation); "
                             f"got mode={privacy.mode!r}.")
        if problem.allow_nan:
            raise ValueError(f"private FedEM on Flower runs complete-row problems only; {problem!r} has missing "
                             "values (fit it privately in-process, or without privacy on Flower).")
        self.problem, self.settings, self.privacy = problem, settings, privacy
        self.rng = np.random.default_rng(settings.seed)
        self.history, self.state, self.model, self.algorithm = [], None, None, None
        self.node_of, self.partitions = {}, []

    # ------------------------------------------------------------------ nodes
    def _describe(self, grid):
        s = self.settings
        node_ids = wait_for_nodes(grid, s.min_nodes, s.node_wait)
        messages = [Message(RecordDict(), dst_node_id=int(n), message_type=P.DESCRIBE) for n in node_ids]
        features = set()
        for reply in grid.send_and_receive(messages, timeout=s.node_wait):
            if reply.has_error():
                logger.warning("node %d could not describe itself: %s", reply.metadata.src_node_id, reply.error.reason)
                continue
            metrics = reply.content[P.METRICS]
            self.node_of[int(metrics[P.PARTITION_ID])] = int(reply.metadata.src_node_id)
            features.add(int(metrics["n-features"]))
        if len(self.node_of) < s.min_nodes or len(features) != 1:
            raise RuntimeError(f"{len(self.node_of)} node(s) described themselves with feature counts "
                               f"{sorted(features)}; {s.min_nodes} nodes with one feature count are required.")
        self.partitions = sorted(self.node_of)
        return features.pop()

    def _release(self, grid, kind, clients, group, secagg_grid, theta=None, **scalars):
        """One secure sum over ``clients``: (Σ u_i, the clients whose shares are in it)."""
        fitins = {self.node_of[self.partitions[i]]: release_fitins(
            kind, self.problem, self.privacy, self.model.n_features, theta, client=int(i),
            partition_id=int(self.partitions[i]), clip_range=float(secagg_grid.clip_range),
            target_range=int(secagg_grid.target_range), n_clients=len(self.partitions), **scalars)
            for i in clients}
        timeout = self.settings.node_wait if group <= _ROUND0_GROUP else self.settings.round_timeout
        result = secure_sum(grid, self._context, fitins, secagg_grid, group, timeout)
        if result.total is None:
            raise RuntimeError(f"secure aggregation of release {group} halted (too few nodes answered).")
        client_of = {self.node_of[self.partitions[i]]: i for i in clients}
        arrived = np.array(sorted(client_of[n] for n in result.node_ids), dtype=np.int64)
        if arrived.size < len(clients):
            logger.warning("release %d: %d of %d shares arrived; the sum lacks the missing noise shares",
                           group, arrived.size, len(clients))
        return result.total, arrived

    # ------------------------------------------------------------------ round 0 and the rounds
    def setup(self, grid) -> None:
        """Round 0 as :meth:`PrivateFedEM.init_state`: θ_0, σ, the count, then Ŝ_0."""
        d = self._describe(grid)
        n, cfg = len(self.partitions), self.privacy
        self.model = public_model(self.problem.build_model(d, np.zeros(d)), cfg)
        self.theta0 = theta0 = public_theta(self.model, cfg, self.rng, **self.problem.init_kwargs())
        algo = self.algorithm = PrivateFedEM(self.model, cfg, participation=self.settings.participation,
                                             step_size=self.settings.step_size, safeguard=self.settings.safeguard)
        algo.planned_rounds = self.settings.n_rounds
        dp = algo.new_dp(n, self.rng)
        everyone, uplink = np.arange(n), 0
        if cfg.public_count is None:
            grid_c = count_grid(dp["sigma"], n)
            total, _ = self._release(grid, KIND_COUNT, everyone, _COUNT_GROUP, grid_c, sigma=dp["sigma"])
            dp["count"], uplink = max(float(total[0]), MIN_COUNT), n * share_bits(1)
        else:
            dp["count"] = float(cfg.public_count)
        algo.distributed_setup(dp, n)
        geometry = noise_geometry(self.model, cfg, theta0)
        total, _ = self._release(grid, KIND_STATS, everyone, _ROUND0_GROUP, dp["grid"], theta0,
                                 **self._scalars(dp, n, 0))
        self.state = algo.state_from_release(geometry.inverse(total[None, :])[0], dp, geometry, n, theta0)
        self._log(round=0, n_active=n, uplink_bits=uplink + n * share_bits(self.model.q),
                  downlink_bits=n * self.model.n_parameters(theta0) * FLOAT64_BITS, step_size=float("nan"),
                  epsilon=epsilon_spent(dp["sigma"], dp["plan"], 1))

    @staticmethod
    def _scalars(dp, n_active, stream):
        return {"sigma": float(dp["sigma"]), "sensitivity": float(dp["sensitivity"]), "count": float(dp["count"]),
                "n_active": int(n_active), "stream": int(stream)}

    def round(self, grid, server_round) -> None:
        """Round k -> k+1: sample, one secure sum of the active nodes' shares at θ_k, the step."""
        algo, state, n = self.algorithm, self.state, len(self.partitions)
        dp, k = state.extra["dp"], state.round
        active, pi = algo.sample_round(k, n, self.rng)
        theta = self.model.t_map(state.s_hat)
        release = noise_geometry(self.model, self.privacy, theta)
        inclusion = algo.participation.expected_fraction(n)
        if active.size >= 2:
            total, arrived = self._release(grid, KIND_STATS, active, server_round, dp["grid"], theta,
                                           **self._scalars(dp, active.size, k + 1))
        else:
            # SecAgg+ needs two nodes; with fewer the round releases nothing (H = 0), where the
            # in-process engine would release the lone client's noisy share
            logger.warning("round %d: %d client(s) sampled; secure aggregation needs 2, no release", k + 1,
                           active.size)
            total, arrived = np.zeros(self.model.q), np.empty(0, dtype=np.int64)
        pi = pi[np.searchsorted(active, arrived)] if arrived.size < active.size else pi
        sums = sums_from_total(total, release, state.s_hat, arrived.size, n, inclusion)
        row = algo.step_on_release(state, n, arrived, pi, sums, release, dp, inclusion, theta)
        self._log(round=state.round, n_active=int(arrived.size), uplink_bits=arrived.size * share_bits(self.model.q),
                  downlink_bits=active.size * self.model.n_parameters(theta) * FLOAT64_BITS,
                  epsilon=epsilon_spent(dp["sigma"], dp["plan"], state.round + 1), **row)

    def start(self, grid, context) -> dict:
        """Round 0, then ``settings.n_rounds`` rounds; the result (see :meth:`result`)."""
        self._context = context
        self.setup(grid)
        for server_round in range(1, self.settings.n_rounds + 1):
            self.round(grid, server_round)
        return self.result()

    # ------------------------------------------------------------------ results
    def _log(self, **row):
        row = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
        self.history.append(row)
        logger.info("private round %d: %d active, epsilon spent %.4g", row["round"], row["n_active"], row["epsilon"])
        if self.settings.output:
            write_atomic(self.settings.output, json.dumps(self.result()))

    def result(self) -> dict:
        """JSON-ready: Ŝ, θ = T(Ŝ), the partitions, the privacy spent and the history."""
        dp = self.state.extra["dp"] if self.state is not None else {}
        theta = self.model.params_to_dict(self.model.t_map(self.state.s_hat)) if self.state is not None else {}
        return {"problem": self.problem.spec(), "partitions": list(self.partitions),
                "round": int(self.state.round) if self.state is not None else 0,
                "s_hat": [] if self.state is None else self.state.s_hat.tolist(),
                "theta": {name: np.asarray(value).tolist() for name, value in theta.items()},
                "privacy": {"sigma": dp.get("sigma"), "sensitivity": dp.get("sensitivity"),
                            "count": dp.get("count"), "delta": self.privacy.delta,
                            "epsilon": self.history[-1]["epsilon"] if self.history else 0.0},
                "history": self.history}
