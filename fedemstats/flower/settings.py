"""Run settings of a Flower FedEM run, from Python or from Flower's run config."""
from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, replace

from .._validation import check_int, check_positive
from ..algorithms.fedem import V_INIT_CHOICES, FedEM
from ..algorithms.step_size import STEP_RULES
from ..compression import make_compressor
from ..participation import make_participation

__all__ = ["FedEMSettings", "RUN_CONFIG_KEYS"]

#: Flower run-config key (``[tool.flwr.app.config]``) -> FedEMSettings field
RUN_CONFIG_KEYS = {
    "num-rounds": "n_rounds", "compressor": "compressor", "participation": "participation",
    "step-size": "step_size", "alpha": "alpha", "v-init": "v_init", "seed": "seed",
    "round-timeout": "round_timeout", "min-nodes": "min_nodes", "node-wait": "node_wait",
    "output": "output", "precondition": "precondition", "safeguard": "safeguard",
    "downlink-compressor": "downlink_compressor", "contribution-bound": "contribution_bound",
}
#: TOML has no null: this run-config value of ``alpha`` means "default 1 / (1 + omega)"
ALPHA_DEFAULT = "default"


@dataclass(frozen=True)
class FedEMSettings:
    """What the server needs to run FedEM on Flower (the FedEM hyper-parameters and I/O).

    Parameters
    ----------
    n_rounds : int
        FedEM rounds after the initialisation (round 0).
    compressor : str
        Compressor spec, e.g. ``"identity"`` or ``"dither:s=4"`` (sent to the nodes as text).
    participation : float or int
        As :func:`fedemstats.participation.make_participation`: 1.0 everyone, p in (0, 1)
        Bernoulli(p), int k FixedSize(k). Sampled over *clients* (partitions), seeded; round 0
        and rounds 1-10 of a run with a fine start instruct every client (``Algorithm.sample_round``).
    step_size : float, "auto" or "theory"
    alpha : float, optional
        Memory step; ``None`` is ``1 / (1 + omega)``.
    v_init : {"mean-field", "zero"}
    seed : int
        Seed of the server's generator (initial means, per-client stream entropy, sampling).
    round_timeout : float
        Seconds to wait for the replies of one round; a node that has not answered by
        then does not participate in that round.
    min_nodes : int
        Nodes that must be connected before the initialisation starts.
    node_wait : float
        Seconds to wait for ``min_nodes`` nodes to connect, and for each exchange of
        round 0 (which needs every client, unlike the rounds).
    precondition : bool
        Compress in the model's geometry (as ``FedEM(precondition=...)``; sent to the nodes).
    safeguard : bool
        Trust region and log-likelihood watchdog of the server step (as ``FedEM(safeguard=...)``).
    downlink_compressor : str
        How the server sends its steps (as ``FedEM(downlink_compressor=...)``): ``"auto"``
        (the uplink's compressor), ``"identity"`` (float64) or a spec.
    output : str
        If not empty, path of a JSON file with the result, rewritten after every round.
    contribution_bound : float
        0 (default): off. c > 0: a round reply whose decoded message norm (in the
        compression coordinates) exceeds c times the median norm of the round's valid
        replies is dropped, as a failed node's (a defence against a poisoning node; it
        biases the round if it drops an honest reply, see ``docs/flower.md``). Judges
        only rounds with at least 3 valid replies; must be >= 1 when on.
    """

    n_rounds: int = 5
    compressor: str = "identity"
    participation: float = 1.0
    step_size: object = "auto"
    alpha: float | None = None
    v_init: str = "mean-field"
    seed: int = 0
    round_timeout: float = 60.0
    min_nodes: int = 1
    node_wait: float = 60.0
    output: str = ""
    precondition: bool = True
    safeguard: bool = True
    downlink_compressor: str = "auto"
    contribution_bound: float = 0.0

    def __post_init__(self):
        check_int(self.n_rounds, "n_rounds", minimum=0)
        if not isinstance(self.compressor, str):
            raise ValueError("compressor must be a spec string (it is sent to the nodes as text).")
        make_compressor(self.compressor)
        make_participation(self.participation)
        if not (self.step_size in STEP_RULES or isinstance(self.step_size, numbers.Real)):
            raise ValueError(f"step_size must be a positive float, 'auto' or 'theory'; got {self.step_size!r}.")
        if isinstance(self.step_size, numbers.Real):
            check_positive(self.step_size, "step_size")
        if self.alpha is not None:
            check_positive(self.alpha, "alpha", strict=False)
        if self.v_init not in V_INIT_CHOICES:
            raise ValueError(f"v_init must be one of {V_INIT_CHOICES}; got {self.v_init!r}.")
        check_int(self.seed, "seed", minimum=0)
        check_positive(self.round_timeout, "round_timeout")
        check_int(self.min_nodes, "min_nodes")
        check_positive(self.node_wait, "node_wait")
        if self.downlink_compressor != "auto":
            make_compressor(self.downlink_compressor)
        if isinstance(self.contribution_bound, bool) or not isinstance(self.contribution_bound, numbers.Real) \
                or not (self.contribution_bound == 0.0 or 1.0 <= self.contribution_bound < float("inf")):
            # below 1, the median reply itself would be dropped
            raise ValueError(f"contribution_bound must be 0 (off) or a finite number >= 1; "
                             f"got {self.contribution_bound!r}.")
        for name in ("precondition", "safeguard"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false; got {getattr(self, name)!r}.")

    @classmethod
    def from_run_config(cls, run_config, base=None) -> "FedEMSettings":
        """Settings from Flower's ``context.run_config`` (keys of :data:`RUN_CONFIG_KEYS`),
        overriding ``base`` (default: the class defaults)."""
        base = cls() if base is None else base
        updates = {}
        for key, field_name in RUN_CONFIG_KEYS.items():
            if key in run_config:
                updates[field_name] = run_config[key]
        if updates.get("alpha") == ALPHA_DEFAULT:
            updates["alpha"] = None
        for name in ("round_timeout", "node_wait", "contribution_bound"):
            if name in updates:
                updates[name] = float(updates[name])
        return replace(base, **updates)

    def algorithm(self, model, participation=None) -> FedEM:
        """The in-process FedEM these settings describe (its round 0, α and step sizes
        are the ones the Flower strategy applies).

        ``participation`` replaces the settings' sampler (a reference run with clients
        absent in given rounds: :class:`fedemstats.participation.WithAbsences`)."""
        participation = self.participation if participation is None else participation
        return FedEM(model, compressor=self.compressor, participation=participation,
                     step_size=self.step_size, alpha=self.alpha, v_init=self.v_init,
                     precondition=self.precondition, safeguard=self.safeguard,
                     downlink_compressor=self.downlink_compressor)

    def as_dict(self) -> dict:
        """Plain dict of the settings (JSON-ready)."""
        return asdict(self)
