"""State and results of an expectation-space run, and a run in progress (the stepping API)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; pandas is imported where a frame is built (History.to_frame)
    import pandas as pd

    from ..ledger import BitLedger

__all__ = ["AlgorithmState", "FitResult", "AlgorithmRun", "draw_entropy", "ENTROPY_BOUND"]

#: entropy of the per-client random streams is drawn below this bound (fits int64)
ENTROPY_BOUND = 2**62


def draw_entropy(rng) -> int:
    """The run's public entropy for ``client_round_rng``, drawn from the server's Generator."""
    return int(rng.integers(ENTROPY_BOUND))


@dataclass
class AlgorithmState:
    """Server and client memories of an expectation-space algorithm.

    Attributes
    ----------
    s_hat : ndarray of shape (q,)
        Current statistic iterate Ŝ_k.
    v : ndarray of shape (q,)
        Server memory V_k (= sum_i w_i V_{k,i}).
    v_clients : ndarray of shape (n_clients, q)
        Client memories V_{k,i} (each lives on its client).
    round : int
        Rounds completed.
    entropy : int
        Public seed of the per-client random streams (see ``client_round_rng``).
    extra : dict
        Algorithm-specific state (e.g. VR-FedEM's local statistics).
    control : ControllerState or None
        What the server's step rule, safeguard and convergence test remember
        (:mod:`.controller`).
    scale : float
        max |Ŝ_0|, the reference of the divergence test.
    budget : int or None
        Rounds the run plans (``run(n_rounds)``), for rules that depend on it (Corollary 2).
    downlink : BroadcastState or None
        Which iterate each client holds, and the sizes of the broadcast updates (:mod:`.broadcast`).
    """

    s_hat: np.ndarray
    v: np.ndarray
    v_clients: np.ndarray
    round: int = 0
    entropy: int = 0
    extra: dict = field(default_factory=dict)
    control: object = None
    scale: float = 1.0
    budget: int | None = None
    downlink: object = None


@dataclass
class FitResult:
    """What an algorithm run returns.

    Attributes
    ----------
    theta : parameters T(Ŝ) at the end
    state : AlgorithmState
    history : pandas.DataFrame
        One row per round (round 0 is the initialisation): ``loglik``, ``h_norm2``
        (NaN unless tracked), ``uplink_bits``, ``downlink_bits``, ``n_active``,
        ``step_size``, ``n_cond_exp``, ``cumulative_bits`` and the step controller's
        columns (``docs/fedem.md``, "History columns"; :class:`.history.History`).
    ledger : BitLedger
    converged : bool
    tests_convergence : bool
        Whether the run tested convergence at all: a ``tol > 0`` and full batches, or VR-FedEM
        (on its outer loops' full passes); mini-batch FedEM, private runs and ``tol = 0`` go to
        their round budget.
    """

    theta: object
    state: AlgorithmState
    history: pd.DataFrame
    ledger: BitLedger
    converged: bool = False
    tests_convergence: bool = True


class AlgorithmRun:
    """A run in progress, returned by :meth:`Algorithm.start` once round 0 is done.

    Attributes
    ----------
    algorithm : Algorithm
    federation : Federation
    state : AlgorithmState
        Updated in place by every :meth:`step`.
    ledger : BitLedger
    records : History
        The rows so far (:attr:`history` is their DataFrame).
    rng : numpy.random.Generator
        The server's generator (participation, mini-batches).
    """

    def __init__(self, algorithm, federation, state, rng, ledger, records, tol=None):
        self.algorithm, self.federation, self.state = algorithm, federation, state
        self.rng, self.ledger, self.records, self.tol = rng, ledger, records, tol
        self.alphas = algorithm.resolved_alphas(algorithm.client_geometry(self.theta, state.s_hat))

    def step(self) -> dict:
        """Run round k -> k+1; returns the round's history row (``converged`` says whether the
        convergence test held with the run's ``tol``)."""
        alpha = self.algorithm.round_alpha(self.alphas, self.state.round)
        self.algorithm.round(self.state, self.federation, self.rng, alpha, self.ledger, self.records,
                             tol=self.tol)
        return self.records.last()

    @property
    def history(self) -> pd.DataFrame:
        """One row per round so far (round 0 first)."""
        return self.records.to_frame()

    @property
    def theta(self):
        """Current parameters T(Ŝ_k)."""
        return self.algorithm.model.t_map(self.state.s_hat)

    def result(self, converged=False) -> FitResult:
        """The run so far as a :class:`FitResult`."""
        # tol = 0 asks for a fixed number of rounds (the command line, the demo): nothing to warn about
        return FitResult(self.theta, self.state, self.history, self.ledger, bool(converged),
                         self.tol is not None and self.tol > 0 and bool(self.algorithm.tests_convergence()))
