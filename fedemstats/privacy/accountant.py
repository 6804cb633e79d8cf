"""The privacy accountant: Google's ``dp_accounting`` (RDP or PLD), never a hand-written bound.

A private fit is a composition of Gaussian mechanisms with one noise multiplier σ
(noise std / L2 sensitivity): the noisy count at round 0 (unless the count is public),
round 0's statistics at the public θ_0, and one release per later round. Later rounds
are amplified by Poisson subsampling only where the sampling really is Poisson and
secret (:func:`sampling_rate`).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..participation import BernoulliParticipation

__all__ = ["ACCOUNTANTS", "PrivacyPlan", "dp_event", "epsilon_spent", "calibrate_noise_multiplier",
           "sampling_rate"]

#: Rényi orders of the RDP accountant (dp_accounting's default grid, extended for large σ)
RDP_ORDERS = tuple([1.0 + x / 10.0 for x in range(1, 10)] + list(range(2, 13)) + [14, 16, 20, 24, 28, 32, 48, 64, 128, 256, 512, 1024])
#: PLD discretisation (dp_accounting's default is 1e-4; 1e-3 keeps a calibration under a second)
PLD_DISCRETISATION = 1e-3
#: calibration search bracket for σ and its absolute tolerance
SIGMA_BRACKET = (0.3, 1e3)
SIGMA_TOL = 1e-4


def _make_accountant(name):
    from dp_accounting import NeighboringRelation, pld, rdp  # optional dependency, imported on use
    relation = NeighboringRelation.ADD_OR_REMOVE_ONE
    if name == "rdp":
        return rdp.RdpAccountant(list(RDP_ORDERS), relation)
    return pld.PLDAccountant(relation, value_discretization_interval=PLD_DISCRETISATION)


ACCOUNTANTS = {"rdp": lambda: _make_accountant("rdp"), "pld": lambda: _make_accountant("pld")}


def sampling_rate(participation, n_clients, mode) -> float:
    """The Poisson rate that amplifies a round, or 1 (no amplification).

    Only Bernoulli participation is Poisson sampling; it is secret from whoever sees only
    the outputs, but not from the server, which picks the clients: so it amplifies only
    in ``mode="central"`` (trusted server). Per-client rates use the largest. Fixed-size
    samples (without replacement, not Poisson) are accounted as full participation, which
    is conservative.
    """
    inclusion = np.asarray(participation.inclusion(n_clients), dtype=np.float64)
    if mode != "central" or not isinstance(participation, BernoulliParticipation):
        return 1.0
    return float(min(1.0, inclusion.max()))


@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
    """The releases of one private fit.

    Attributes
    ----------
    rounds : int
        Statistic releases: round 0 and each later round (``max_iter`` in the estimators).
    sampling_rate : float
        Poisson rate of rounds ≥ 1 (1: no amplification).
    count_release : bool
        Whether a noisy count is released at round 0 (the count is not public).
    delta : float
    accountant : {"rdp", "pld"}
    """

    rounds: int
    sampling_rate: float = 1.0
    count_release: bool = True
    delta: float = 1e-5
    accountant: str = "rdp"


def dp_event(sigma, plan, rounds=None):
    """The ``dp_accounting`` event of the first ``rounds`` releases (default all) at σ."""
    from dp_accounting import ComposedDpEvent, GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
    rounds = plan.rounds if rounds is None else rounds
    gaussian = GaussianDpEvent(sigma)
    events = [gaussian] * (int(plan.count_release) + min(rounds, 1))
    later = max(rounds - 1, 0)
    if later:
        step = gaussian if plan.sampling_rate >= 1.0 else PoissonSampledDpEvent(plan.sampling_rate, gaussian)
        events.append(SelfComposedDpEvent(step, later))
    return ComposedDpEvent(events)


def epsilon_spent(sigma, plan, rounds=None) -> float:
    """ε at ``plan.delta`` after the first ``rounds`` releases (default all) with multiplier σ."""
    accountant = ACCOUNTANTS[plan.accountant]()
    accountant.compose(dp_event(sigma, plan, rounds))
    return float(accountant.get_epsilon(plan.delta))


def calibrate_noise_multiplier(epsilon, plan) -> float:
    """The smallest σ whose whole plan spends at most ``epsilon`` (``dp_accounting``'s search).

    Raises
    ------
    ValueError
        If even σ at the top of :data:`SIGMA_BRACKET` spends more than ``epsilon`` (a budget
        too small for the rounds asked), or σ at its bottom spends less (a budget so large it
        protects next to nothing), naming ``epsilon``.
    """
    from dp_accounting import ExplicitBracketInterval, calibrate_dp_mechanism
    if epsilon_spent(SIGMA_BRACKET[1], plan) > epsilon:
        raise ValueError(f"privacy: epsilon={epsilon:g} is too small for {plan.rounds} round(s) at "
                         f"delta={plan.delta:g}: even noise multiplier {SIGMA_BRACKET[1]:g} spends more. "
                         "Raise epsilon or lower max_iter.")
    if epsilon_spent(SIGMA_BRACKET[0], plan) <= epsilon:
        # below the bracket the accountants lose precision; such a budget protects next to nothing
        raise ValueError(f"privacy: epsilon={epsilon:g} is so large for {plan.rounds} round(s) at delta="
                         f"{plan.delta:g} that even noise multiplier {SIGMA_BRACKET[0]:g} spends less: it "
                         "protects next to nothing. Lower epsilon, or give the noise directly "
                         f"(noise_multiplier < {SIGMA_BRACKET[0]:g}) to study a nearly non-private fit.")
    return float(calibrate_dp_mechanism(ACCOUNTANTS[plan.accountant], lambda s: dp_event(s, plan), epsilon,
                                        plan.delta, ExplicitBracketInterval(*SIGMA_BRACKET),
                                        tol=SIGMA_TOL))
