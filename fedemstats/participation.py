"""Who takes part in a round, with inclusion probabilities (SPEC §2).

Every sampler returns the active client ids *and* their inclusion probabilities
``pi_i = P(i in A)``, so the server can reweight by ``w_i / pi_i``
(Horvitz-Thompson) and keep its update unbiased.
"""
from __future__ import annotations

import numbers

import numpy as np

from ._validation import check_int, check_probability

__all__ = [
    "Participation",
    "FullParticipation",
    "BernoulliParticipation",
    "FixedSizeParticipation",
    "WithAbsences",
    "make_participation",
]


class Participation:
    """Base class. Subclasses implement :meth:`sample` and :meth:`inclusion`."""

    #: Whether every round draws the same number of clients without replacement (then the
    #: sampling variance of a Horvitz-Thompson sum is that of its centred contributions:
    #: :meth:`fedemstats.algorithms.controller.StepController.direction_noise`).
    fixed_size = False

    def sample(self, round_, n_clients, rng):
        """Draw the active set of a round.

        Parameters
        ----------
        round_ : int
            Round index (available to schedules; the base samplers ignore it).
        n_clients : int
        rng : numpy.random.Generator

        Returns
        -------
        active : ndarray of int64 of shape (n_active,)
            Sorted client ids; may be empty for Bernoulli sampling.
        pi : ndarray of float64 of shape (n_active,)
            Inclusion probability of each active client.
        """
        raise NotImplementedError

    def inclusion(self, n_clients) -> np.ndarray:
        """Inclusion probabilities of all clients, shape (n_clients,)."""
        raise NotImplementedError

    def everyone(self, round_, n_clients):
        """The active set of a round that asks every client (FedEM's fine start), π = 1:
        ``(arange(n_clients), ones(n_clients))``; draws nothing."""
        return np.arange(n_clients, dtype=np.int64), np.ones(n_clients)

    def expected_fraction(self, n_clients) -> float:
        return float(self.inclusion(n_clients).mean())

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


class FullParticipation(Participation):
    """Every client, every round (pi_i = 1)."""

    def sample(self, round_, n_clients, rng):
        return self.everyone(round_, n_clients)

    def inclusion(self, n_clients):
        return np.ones(n_clients)


class BernoulliParticipation(Participation):
    """Client ``i`` joins independently with probability ``p`` (or ``p[i]``).

    The active set may be empty; FedEM then applies ``H = V`` (SPEC §2).

    Parameters
    ----------
    p : float in (0, 1] or array-like of shape (n_clients,)
    """

    def __init__(self, p):
        if np.ndim(p) == 0:
            self.p = check_probability(p, "participation probability p")
        else:
            arr = np.asarray(p, dtype=np.float64)
            if arr.ndim != 1 or not np.all((arr > 0) & (arr <= 1)):
                raise ValueError("per-client participation probabilities must all lie in (0, 1].")
            self.p = arr

    def inclusion(self, n_clients):
        if np.ndim(self.p) == 0:
            return np.full(n_clients, self.p)
        if self.p.shape[0] != n_clients:
            raise ValueError(f"got {self.p.shape[0]} participation probabilities for {n_clients} clients.")
        return self.p.copy()

    def sample(self, round_, n_clients, rng):
        pi = self.inclusion(n_clients)
        active = np.flatnonzero(rng.random(n_clients) < pi).astype(np.int64)
        return active, pi[active]


class FixedSizeParticipation(Participation):
    """A uniform random subset of exactly ``k`` clients (pi_i = k / n)."""

    fixed_size = True

    def __init__(self, k):
        self.k = check_int(k, "participation size k")

    def inclusion(self, n_clients):
        if self.k > n_clients:
            raise ValueError(f"participation asks for k={self.k} clients per round but the federation has "
                             f"only {n_clients}; pass a count <= {n_clients} or a fraction in (0, 1].")
        return np.full(n_clients, self.k / n_clients)

    def sample(self, round_, n_clients, rng):
        pi = self.inclusion(n_clients)
        active = np.sort(rng.choice(n_clients, size=self.k, replace=False)).astype(np.int64)
        return active, pi[active]


class WithAbsences(Participation):
    """A sampler whose sampled clients may fail to answer in given rounds.

    The active set is the base sampler's draw (the same generator calls) minus the
    clients absent in that round, each survivor keeping its design inclusion probability:
    what a server does with a client that was sampled but did not answer (or whose reply
    it refused). Used to build the in-process run a faulty federated run must match.

    Parameters
    ----------
    base : Participation
    absent : dict of int -> iterable of int
        Round index k (the round from Ŝ_k to Ŝ_{k+1}; the first round is 0) -> clients
        that do not answer in it.
    """

    def __init__(self, base, absent):
        self.base = make_participation(base)
        self.absent = {int(k): frozenset(int(c) for c in clients) for k, clients in dict(absent).items()}

    def inclusion(self, n_clients):
        # the design's probabilities: failures are not part of the design
        return self.base.inclusion(n_clients)

    @property
    def fixed_size(self):
        return self.base.fixed_size

    def sample(self, round_, n_clients, rng):
        return self._answered(round_, *self.base.sample(round_, n_clients, rng))

    def everyone(self, round_, n_clients):
        return self._answered(round_, *self.base.everyone(round_, n_clients))

    def _answered(self, round_, active, pi):
        keep = ~np.isin(active, list(self.absent.get(int(round_), ())))
        return active[keep], pi[keep]


def make_participation(spec) -> Participation:
    """Build a sampler from the estimator spec (SPEC §7).

    ``1.0`` or ``"full"`` -> everyone; a float p in (0, 1) -> Bernoulli(p); an int
    k >= 1 -> FixedSize(k); a :class:`Participation` is returned as is.
    """
    if isinstance(spec, Participation):
        return spec
    if spec is None or (isinstance(spec, str) and spec == "full"):
        return FullParticipation()
    if isinstance(spec, bool):
        raise ValueError(f"participation must be a float in (0, 1], an int k or a sampler; got {spec!r}.")
    if isinstance(spec, (numbers.Integral, np.integer)):
        return FixedSizeParticipation(spec)
    if isinstance(spec, (numbers.Real, np.floating)):
        p = check_probability(spec, "participation")
        return FullParticipation() if p == 1.0 else BernoulliParticipation(p)
    raise ValueError(
        f"participation must be 1.0, a float p in (0, 1), an int k or a Participation; got {spec!r}."
    )
