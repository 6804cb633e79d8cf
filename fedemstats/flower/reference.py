"""The in-process run a Flower run must reproduce (for checks, tests and the example).

Same data, same seed, same client sampling: :class:`~fedemstats.algorithms.FedEM`
on a :class:`~fedemstats.Federation` of the partitions, with θ_0 from the model's
federated initialisation (``"random"``) drawn from the same generator first — the
sequence ``FederatedGaussianMixture(init_params="random")`` uses. Partition
``partitions[i]`` is client ``i``, as in the Flower strategy.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.private import PrivateFedEM
from ..algorithms.private_stats import public_federation, public_model, public_theta
from ..federation import Federation
from ..participation import WithAbsences, make_participation

__all__ = ["reference_run", "private_reference_run", "max_abs_difference"]


def reference_run(partitions, problem, settings, absent=None):
    """In-process FedEM equivalent of a Flower run.

    Parameters
    ----------
    partitions : list of ndarray of shape (m_i, n_features)
        Client data in partition-id order.
    problem : GMMProblem, FactorAnalysisProblem or ImputerProblem
    settings : FedEMSettings
    absent : dict of int -> iterable of int, optional
        Flower round r (1, 2, ...) -> clients (indices into ``partitions``) that were
        sampled but did not count in it (failed, timed out or refused replies): the
        engine's round r − 1 then runs without them (:class:`~fedemstats.participation.WithAbsences`).

    Returns
    -------
    FitResult
    """
    fed = Federation.from_clients(partitions, allow_nan=problem.allow_nan)
    model = problem.model_from_federation(fed)
    rng = np.random.default_rng(settings.seed)
    theta0 = model.init_theta(fed, rng=rng, **problem.init_kwargs())
    participation = None
    if absent:
        # Flower's round r is the engine's round r - 1 (Ŝ_{r-1} -> Ŝ_r)
        participation = WithAbsences(make_participation(settings.participation),
                                     {int(r) - 1: clients for r, clients in absent.items()})
    return settings.algorithm(model, participation).run(fed, theta0, settings.n_rounds, random_state=rng)


def private_reference_run(partitions, problem, settings, privacy):
    """In-process private FedEM equivalent of a :class:`~.private_strategy.PrivateFedEMStrategy` run
    (``privacy.mode="distributed"``): θ_0 from the public geometry, then the engine, from one
    generator seeded with ``settings.seed``. Its noise comes from the run's entropy
    (``result.state.extra["dp"]["entropy"]``): give that to the nodes as ``dp-noise-key`` to
    reproduce it on Flower.

    Returns
    -------
    FitResult
    """
    fed = Federation.from_clients(partitions)
    d = fed.n_features
    model = public_model(problem.build_model(d, np.zeros(d)), privacy)
    rng = np.random.default_rng(settings.seed)
    theta0 = public_theta(model, privacy, rng, **problem.init_kwargs())
    algo = PrivateFedEM(model, privacy, participation=settings.participation, step_size=settings.step_size,
                        safeguard=settings.safeguard)
    return algo.run(public_federation(fed, model, privacy), theta0, settings.n_rounds, random_state=rng)


def max_abs_difference(result: dict, reference) -> dict:
    """Largest absolute differences between a Flower result dict and a reference FitResult."""
    theta = reference.theta
    pairs = {"s_hat": (result["s_hat"], reference.state.s_hat), "v": (result["v"], reference.state.v),
             "v_clients": (result["v_clients"], reference.state.v_clients)}
    pairs.update({name: (result["theta"][name], getattr(theta, name)) for name in result["theta"]})
    return {k: float(np.max(np.abs(np.asarray(a, dtype=np.float64) - b))) for k, (a, b) in pairs.items()}
