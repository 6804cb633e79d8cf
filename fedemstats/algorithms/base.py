"""Shared pieces of the expectation-space algorithms: step sizes, state, results.

Algorithms never see raw rows: they ask a model for client statistics on a
federation and move in statistic space (SPEC §1, §3).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._validation import check_positive
from ..ledger import BitLedger

__all__ = [
    "StepSize",
    "make_step_size",
    "auto_step_size",
    "effective_omega",
    "AlgorithmState",
    "FitResult",
    "drive_rounds",
]

#: Scale of the "auto" step size gamma = AUTO_STEP_SCALE * sqrt(n) / (1 + omega)^(3/2).
#: Theorem 1 of paper 003 gives gamma_max ∝ min(1, sqrt(n) / (1 + omega)^(3/2)) up to
#: problem constants (L, v_min). The scale was set on the SPEC §3 prototype (GMM d=2,
#: K=3, 20 Dirichlet(0.1) clients, omega≈1.3), where gamma=0.1 converged linearly and
#: gamma≥0.25 oscillated: 0.08 * sqrt(20) / 2.3^1.5 ≈ 0.10.
AUTO_STEP_SCALE = 0.08


def effective_omega(omega: float, inclusion) -> float:
    """Variance factor of compression combined with Horvitz-Thompson sampling.

    A client included with probability pi and reweighted by 1/pi contributes
    ``E||q/pi 1_A||^2 = (1 + omega) ||x||^2 / pi``, i.e. an unbiased compressor with
    ``omega_eff = (1 + omega) / pi_min - 1``.
    """
    pi_min = float(np.min(inclusion))
    return (1.0 + float(omega)) / pi_min - 1.0


def auto_step_size(omega: float, n_clients: int, inclusion) -> float:
    """The "auto" constant step size (SPEC §3; paper 003 Theorem 1 scaling).

    Exact EM (``omega_eff = 0``) gets gamma = 1; otherwise
    ``min(1, AUTO_STEP_SCALE * sqrt(n) / (1 + omega_eff)^(3/2))``.
    """
    om = effective_omega(omega, inclusion)
    if om <= 0.0:
        return 1.0
    return float(min(1.0, AUTO_STEP_SCALE * np.sqrt(n_clients) / (1.0 + om) ** 1.5))


class StepSize:
    """Step-size schedule gamma_k, k = 1, 2, ... (a callable).

    Parameters
    ----------
    gamma0 : float
        Constant step, or the scale of the decreasing schedule.
    power : float, default=0
        ``gamma_k = gamma0 * k^(-power)``; 0 is constant (paper 003 Theorem 1),
        ``power`` in (1/2, 1] is the Robbins-Monro regime of online EM.
    """

    def __init__(self, gamma0: float, power: float = 0.0):
        self.gamma0 = check_positive(gamma0, "step_size")
        self.power = check_positive(power, "step-size power", strict=False)

    def __call__(self, k: int) -> float:
        return self.gamma0 * float(max(k, 1)) ** (-self.power)

    def __repr__(self):
        return f"StepSize(gamma0={self.gamma0:g}, power={self.power:g})"


def make_step_size(spec, *, omega=0.0, n_clients=1, inclusion=1.0):
    """Build a schedule from a float (constant), ``"auto"`` or a callable ``k -> gamma_k``."""
    if isinstance(spec, StepSize):
        return spec
    if isinstance(spec, str):
        if spec != "auto":
            raise ValueError(f"step_size must be a positive float, 'auto' or a callable; got {spec!r}.")
        return StepSize(auto_step_size(omega, n_clients, np.atleast_1d(inclusion)))
    if callable(spec):
        return _CheckedCallable(spec)
    if isinstance(spec, (numbers.Real, np.floating)) and not isinstance(spec, bool):
        return StepSize(spec)
    raise ValueError(f"step_size must be a positive float, 'auto' or a callable; got {spec!r}.")


class _CheckedCallable:
    """Wrap a user schedule so a bad value fails loudly instead of producing NaN."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, k):
        return check_positive(self.fn(k), f"step_size({k})")


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
        (NaN unless tracked), ``uplink_bits``, ``downlink_bits``, ``n_active``, ``step_size``.
    ledger : BitLedger
    converged : bool
    """

    theta: object
    state: AlgorithmState
    history: pd.DataFrame
    ledger: BitLedger
    converged: bool = False


def drive_rounds(algo, state, federation, rng, n_rounds, *, schedule, alpha, ledger, history,
                 tol=None, exact_ll=False, progress=None) -> bool:
    """Call ``algo.round`` for rounds 1..n_rounds; return whether ``tol`` stopped it.

    Shared by FedEM and VR-FedEM so that progress reporting and the stopping rule
    (change of the exact mean log-likelihood below ``tol``) are the same everywhere.
    """
    for k in range(1, n_rounds + 1):
        algo.round(state, federation, rng, schedule(k), alpha, ledger, history)
        if progress is not None:
            progress(k, history.last())
        if tol is not None and exact_ll and abs(history.delta("loglik")) < tol:
            return True
    return False
