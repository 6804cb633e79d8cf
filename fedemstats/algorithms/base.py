"""What every expectation-space algorithm shares: state, results, round 0 and the driver.

Algorithms never see raw rows: they ask a model for client statistics on a
federation and move in statistic space (SPEC §1, §3). :class:`Algorithm` owns the
settings common to FedEM and VR-FedEM (compressor, participation, step size, memory
step α), round 0 (Ŝ_0 and the memories V_{0,i}), and the driver: :meth:`Algorithm.start`
returns an :class:`AlgorithmRun` that steps one round at a time, and
:meth:`Algorithm.run` steps it until ``n_rounds`` or the stopping rule. Subclasses
implement one round (:meth:`Algorithm.round`) and say whether their log-likelihood
is exact (:meth:`Algorithm.exact_loglik`).
"""
from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._validation import check_int, check_positive, check_rng
from ..compression import make_compressor
from ..ledger import FLOAT64_BITS, BitLedger
from ..participation import make_participation
from .history import History
from .step_size import StepSize, auto_step_size, effective_omega, make_step_size

__all__ = ["Algorithm", "AlgorithmRun", "AlgorithmState", "FitResult", "draw_entropy", "V_INIT_CHOICES",
           "ENTROPY_BOUND", "StepSize", "make_step_size", "auto_step_size", "effective_omega"]

logger = logging.getLogger(__name__)

V_INIT_CHOICES = ("mean-field", "zero")
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
    """

    s_hat: np.ndarray
    v: np.ndarray
    v_clients: np.ndarray
    round: int = 0
    entropy: int = 0
    extra: dict = field(default_factory=dict)


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
        ``step_size``, ``n_cond_exp``, ``cumulative_bits`` (see :class:`.history.History`).
    ledger : BitLedger
    converged : bool
    """

    theta: object
    state: AlgorithmState
    history: pd.DataFrame
    ledger: BitLedger
    converged: bool = False


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

    def __init__(self, algorithm, federation, state, rng, ledger, records):
        self.algorithm, self.federation, self.state = algorithm, federation, state
        self.rng, self.ledger, self.records = rng, ledger, records
        self.schedule = algorithm.schedule(federation.n_clients)
        self.alpha = algorithm.resolved_alpha()

    def step(self) -> dict:
        """Run round k -> k+1 with γ_{k+1} from the schedule; returns the round's history row."""
        gamma = self.schedule(self.state.round + 1)
        self.algorithm.round(self.state, self.federation, self.rng, gamma, self.alpha, self.ledger, self.records)
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
        return FitResult(self.theta, self.state, self.history, self.ledger, bool(converged))


class Algorithm:
    """Base of the expectation-space algorithms (FedEM, VR-FedEM).

    Parameters
    ----------
    model : Model
    compressor : str or Compressor, default="identity"
        See :func:`fedemstats.compression.make_compressor`.
    participation : float, int or Participation, default=1.0
        See :func:`fedemstats.participation.make_participation`.
    step_size : float, "auto" or callable, default=1.0
        γ_k (see :func:`.step_size.make_step_size`).
    alpha : float, optional
        Memory step; default ``1 / (1 + ω)`` (paper 003, Theorems 1 and 3).
    track_h : bool, default=False
        Record the exact mean-field norm ||h(Ŝ_k)||² each round (a full pass; a
        diagnostic, not counted in the ledger).

    Notes
    -----
    Every constructor argument is stored under its own name, so
    ``type(algo)(**algo.get_params())`` builds the same algorithm.
    """

    #: V_{0,i} = s̄_i(T(Ŝ_0)) − Ŝ_0 ("mean-field", Theorem 1's choice) or 0 ("zero")
    v_init = "mean-field"

    def __init__(self, model, compressor="identity", participation=1.0, step_size=1.0, alpha=None,
                 track_h=False):
        self.model = model
        self.compressor = make_compressor(compressor)
        self.participation = make_participation(participation)
        self.step_size = step_size
        self.alpha = None if alpha is None else check_positive(alpha, "alpha", strict=False)
        self.track_h = bool(track_h)

    def get_params(self) -> dict:
        """The constructor arguments as stored (compressor and participation as objects)."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    # ------------------------------------------------------------------ derived settings
    def omega(self) -> float:
        """The compressor's ω on this model's statistic layout."""
        return float(self.compressor.omega(self.model.q, self.model.layout.offsets))

    def resolved_alpha(self) -> float:
        """α: the given one, else ``1 / (1 + ω)``."""
        return 1.0 / (1.0 + self.omega()) if self.alpha is None else self.alpha

    def schedule(self, n_clients):
        """The step sizes γ_k for ``n_clients`` clients (``"auto"`` depends on n, ω and π)."""
        return make_step_size(self.step_size, omega=self.omega(), n_clients=n_clients,
                              inclusion=self.participation.inclusion(n_clients))

    def h_norm2(self, federation, s_hat) -> float:
        """||h(Ŝ)||² if ``track_h`` (a full diagnostic pass), else NaN."""
        return self.model.mean_field_norm2(federation, s_hat) if self.track_h else np.nan

    # ------------------------------------------------------------------ round 0
    def mean_field_point(self, stats0, weights):
        """T(Ŝ_0), where clients upload exact statistics again for mean-field memories;
        ``None`` when ``v_init="zero"``."""
        return self.model.t_map(weights @ stats0) if self.v_init == "mean-field" else None

    def initial_state(self, upload0, upload1, weights, entropy):
        """Round 0 (SPEC §3) from the clients' exact uploads; pure.

        Parameters
        ----------
        upload0 : tuple (stats (n, q), loglik (n,))
            Every client's exact local mean statistic s̄_i(θ_0) and log-likelihood.
        upload1 : tuple (stats (n, q), loglik (n,)) or None
            The same at :meth:`mean_field_point` (``v_init="mean-field"``), else None.
        weights : ndarray of shape (n,)
            Client weights w_i.
        entropy : int
            Public seed of the client streams (:func:`draw_entropy`).

        Returns
        -------
        state : AlgorithmState
            Ŝ_0 = Σ w_i s̄_i(θ_0), V_{0,i} = s̄_i(T(Ŝ_0)) − Ŝ_0 (or 0), V_0 = Σ w_i V_{0,i};
            ``extra`` keeps the mean-field upload (VR-FedEM's workers start from it).
        loglik : float
            Σ w_i loglik_i(θ_0).
        """
        stats0, loglik0 = upload0
        s_hat = weights @ stats0
        if upload1 is None:
            v_clients, extra = np.zeros_like(stats0), {}
        else:
            stats1, loglik1 = upload1
            v_clients = stats1 - s_hat[None, :]
            extra = {"mean_field_stats": stats1, "mean_field_loglik": float(weights @ loglik1)}
        state = AlgorithmState(s_hat=s_hat, v=weights @ v_clients, v_clients=v_clients, entropy=int(entropy),
                               extra=extra)
        return state, float(weights @ loglik0)

    def round_zero(self, client_stats, theta0, weights, entropy):
        """Round 0 through ``client_stats(theta) -> (stats (n, q), loglik (n,))``, every
        client's exact upload (an in-process pass or the nodes of a framework).

        Returns
        -------
        state, loglik
            As :meth:`initial_state`.
        """
        upload0 = client_stats(theta0)
        point = self.mean_field_point(upload0[0], weights)
        return self.initial_state(upload0, None if point is None else client_stats(point), weights, entropy)

    def init_state(self, federation, theta0, rng, ledger, history):
        """Round 0 in process, with its bits in ``ledger`` and its row in ``history``."""
        model, n, q = self.model, federation.n_clients, self.model.q
        state, loglik = self.round_zero(lambda theta: model.client_stats(federation, theta), theta0,
                                        federation.weights, draw_entropy(rng))
        # the mean-field pass costs one more uncompressed upload and a broadcast of Ŝ_0
        extra_pass = int(self.v_init == "mean-field")
        uplink = n * (q + 1) * FLOAT64_BITS + extra_pass * n * q * FLOAT64_BITS
        downlink = n * model.n_parameters(theta0) * FLOAT64_BITS + extra_pass * n * q * FLOAT64_BITS
        ledger.record(0, uplink, downlink, n)
        history.append(round=0, loglik=loglik, uplink_bits=uplink, downlink_bits=downlink, n_active=n,
                       step_size=np.nan, h_norm2=self.h_norm2(federation, state.s_hat),
                       n_cond_exp=(1 + extra_pass) * federation.n_rows)
        return state

    # ------------------------------------------------------------------ hooks
    def round(self, state, federation, rng, gamma, alpha, ledger, history):
        """Run round k -> k+1 in place on ``state``, recording it in ``ledger`` and ``history``."""
        raise NotImplementedError

    def exact_loglik(self, state, federation) -> bool:
        """Whether the rounds' log-likelihood is exact (then ``tol`` may stop a run)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ driver
    def start(self, federation, theta0, random_state=None) -> AlgorithmRun:
        """Round 0 from θ_0; returns the run to :meth:`AlgorithmRun.step`.

        Parameters
        ----------
        federation : Federation
        theta0 : parameters
            Initial θ_0 (e.g. from the model's federated initialisation).
        random_state : None, int or Generator
        """
        rng = check_rng(random_state)
        ledger, records = BitLedger(), History()
        state = self.init_state(federation, theta0, rng, ledger, records)
        return AlgorithmRun(self, federation, state, rng, ledger, records)

    def run(self, federation, theta0, n_rounds, random_state=None, tol=None, progress=None) -> FitResult:
        """Round 0, then up to ``n_rounds`` rounds.

        Parameters
        ----------
        federation : Federation
        theta0 : parameters
        n_rounds : int
            Rounds after the initialisation (round 0).
        random_state : None, int or Generator
        tol : float, optional
            Stop when the mean log-likelihood changes by less than ``tol`` between
            rounds; only used when it is exact (:meth:`exact_loglik`).
        progress : callable, optional
            Called as ``progress(round, history_row)`` after each round.

        Returns
        -------
        FitResult
        """
        n_rounds = check_int(n_rounds, "n_rounds", minimum=0)
        run = self.start(federation, theta0, random_state)
        use_tol = tol is not None and self.exact_loglik(run.state, federation)
        converged = False
        for _ in range(n_rounds):
            row = run.step()
            if progress is not None:
                progress(row["round"], row)
            if use_tol and abs(run.records.delta("loglik")) < tol:
                converged = True
                break
        logger.debug("%s finished after %d rounds (converged=%s)", type(self).__name__, run.state.round, converged)
        return run.result(converged)
