"""Priors p(phi_s | server state) of the hierarchical model, written as M-steps.

Paper 001 (sections 2.1 and appendix G) reads FedAvg as hard-EM on

    sum_s  log p(D_s | phi_s) + log p(phi_s | w)                      (eq. 3)

The E-step is a local MAP estimate of phi_s (SGD on the client, see
:mod:`.hard_em`); the prior enters it only through a *pull term* added to the
data gradient. The M-step maximises sum_s a_s log p(phi_s | w) over the server
state. Each prior below provides both halves plus the server-side prediction.

Scale convention (as FedProx, Li et al. 2018): the client minimises the *mean*
loss over its rows plus ``lam * R(phi)``; ``lam`` is FedProx's ``mu``. In the
paper's sum-of-losses scale this is a prior precision ``lam * n_s``.
"""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from .._validation import check_int, check_positive, check_rng
from .optim import make_optimizer

__all__ = ["Prior", "GaussianPrior", "LaplacePrior", "MixturePrior", "weighted_median"]

# Cumulative weights within this relative distance of one half count as "exactly
# half", so equal weights reproduce numpy.median (mean of the two middle values).
_MEDIAN_HALF_RTOL = 1e-12
# A mixture component whose total responsibility in a round is below this keeps
# its previous value: the clients that would inform it did not take part.
_MIN_COMPONENT_MASS = 1e-12


class Prior:
    """Common interface of the priors (the hard-EM loop only calls these).

    Server state is an ndarray: shape (n_params,) for single-model priors,
    (n_components, n_params) for the mixture.
    """

    n_components = 1

    def __init__(self, lam=0.0):
        self.lam = check_positive(lam, "prior strength lam", strict=False)

    def __repr__(self):
        keys = [k for k in vars(self) if not k.startswith("_")]
        return f"{type(self).__name__}(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in keys) + ")"

    def reset(self) -> None:
        """Clear server-optimizer state before a new training run."""

    def init_state(self, w0, rng=None) -> np.ndarray:
        """Server state from initial parameters ``w0`` of shape (n_params,)."""
        return np.array(w0, dtype=np.float64)

    def assign(self, model, state, X, y) -> int:
        """Component a client starts from (always 0 for single-model priors)."""
        return 0

    def client_start(self, model, state, X, y):
        """Starting point of the local E-step and the anchor of its pull term.

        Returns
        -------
        phi0 : ndarray of shape (n_params,)
            A fresh copy the client may update in place.
        anchor : object
            Passed back to :meth:`pull_grad`.
        component : int
        """
        return state.copy(), state, 0

    def pull_grad(self, phi, anchor):
        """Gradient of ``lam * R(phi)``, shape (n_params,), or None when it is zero."""
        raise NotImplementedError

    def m_step(self, state, phis, weights, sizes, components, rng=None) -> np.ndarray:
        """New server state from the returned local estimates.

        Parameters
        ----------
        state : ndarray
            Current server state.
        phis : ndarray of shape (n_active, n_params)
        weights : ndarray of shape (n_active,)
            Client weights (n_s, divided by inclusion probabilities); any positive scale.
        sizes : ndarray of shape (n_active,)
            Rows per client (sets the mixture's precision ``lam * n_s``).
        components : ndarray of int of shape (n_active,)
            Component each client started from (:meth:`client_start`).
        rng : numpy.random.Generator
        """
        raise NotImplementedError

    def server_params(self, state) -> np.ndarray:
        """The single server model; the mixture raises (use :meth:`predict_proba`)."""
        return state

    def predict_proba(self, model, state, X) -> np.ndarray:
        """Server prediction, shape (n_samples, n_outputs)."""
        return model.predict_proba(self.server_params(state), X)

    def floats_down(self, state) -> int:
        """Floats the server sends to each active client per round."""
        return int(state.size)

    def divergence_hint(self) -> str:
        """Advice appended to the fix when the server state diverges ("" or "; or ...")."""
        return ""


class GaussianPrior(Prior):
    """N(w, 1/lam): FedAvg (lam = 0), FedProx (lam > 0), FedOpt (server optimizer).

    Local term ``lam/2 ||phi - w||^2``. M-step (paper 001 eq. 4): the weighted
    mean of the phi_s, or, with ``server_optimizer``, one optimizer step on the
    pseudo-gradient ``w - mean(phi)`` (Reddi et al. 2020: the M-step taken as a
    single gradient step with ``lam`` absorbed in the rate, section 2.1).

    Parameters
    ----------
    lam : float >= 0
    server_optimizer : None, "sgd", "adam", "adamax" or Optimizer
        None = closed-form mean (equivalent to SGD with rate 1).
    server_lr : float > 0
        Server rate when ``server_optimizer`` is given by name.
    """

    def __init__(self, lam=0.0, server_optimizer=None, server_lr=1.0):
        super().__init__(lam)
        self.server_lr = check_positive(server_lr, "server_lr")
        self.server_optimizer = server_optimizer
        # An Optimizer instance is used as is (its own rate); a name gets server_lr.
        self._opt = None if server_optimizer is None else make_optimizer(server_optimizer, lr=server_lr)

    def reset(self):
        if self._opt is not None:
            self._opt.reset()

    def pull_grad(self, phi, anchor):
        if self.lam == 0.0:
            return None
        return self.lam * (phi - anchor)

    def divergence_hint(self):
        return "" if self._opt is None else "; or lower server_lr"

    def m_step(self, state, phis, weights, sizes, components, rng=None):
        avg = np.asarray(weights, dtype=np.float64) @ phis / np.sum(weights)
        if self._opt is None:
            return avg
        return self._opt.step(state, state - avg)


class LaplacePrior(Prior):
    """Laplace(w, 1/lam): server takes the coordinate-wise weighted median.

    Local term ``lam ||phi - w||_1`` (paper 001 eq. 33, subgradient
    ``lam sign(phi - w)``); the M-step sets the sum of signs to zero (eq. 35-36),
    i.e. the median, which ignores a minority of arbitrarily bad clients.
    """

    def pull_grad(self, phi, anchor):
        if self.lam == 0.0:
            return None
        return self.lam * np.sign(phi - anchor)

    def m_step(self, state, phis, weights, sizes, components, rng=None):
        return weighted_median(phis, weights)


class MixturePrior(Prior):
    """Equiprobable mixture of K Gaussians N(w_k, 1/(lam n_s)): an ensemble of servers.

    * Client start (hard E-step for the component z_s): the w_k with the lowest
      mean loss on the client's data, i.e. the largest log p(D_s | w_k).
    * Pull term: gradient of ``-(1/n_s) log sum_k exp(-(lam n_s/2)||phi - w_k||^2)``,
      ``lam sum_k r_k(phi) (phi - w_k)`` (paper 001 eq. 38 in the mean scale).
    * M-step (eq. 41-42): responsibilities of each phi_s, then responsibility-
      weighted means. ``assignment="soft"`` uses eq. 41 with precision
      ``lam n_s``; ``"hard"`` is hard-EM for z_s as well: each phi_s counts
      only for the component its client started from (its MAP z_s), so a
      small ``lam`` cannot merge the components. While the components coincide (first round) the
      responsibilities carry no information, so the components are seeded by
      k-means++ (D^2 sampling) over the returned phi_s.
    * Prediction: the average of the K models' probabilities (ensemble), or
      :meth:`personal_proba` with a client's best component.

    Parameters
    ----------
    n_components : int >= 1
    lam : float > 0
    assignment : {"hard", "soft"}
    """

    def __init__(self, n_components=2, lam=0.01, assignment="hard"):
        super().__init__(check_positive(lam, "mixture prior strength lam"))
        self.n_components = check_int(n_components, "n_components")
        if assignment not in ("hard", "soft"):
            raise ValueError(f"assignment must be 'hard' or 'soft'; got {assignment!r}.")
        self.assignment = assignment

    def init_state(self, w0, rng=None):
        return np.tile(np.asarray(w0, dtype=np.float64), (self.n_components, 1))

    def assign(self, model, state, X, y):
        losses = [model.loss(w, X, y) for w in state]
        return int(np.argmin(losses))

    def client_start(self, model, state, X, y):
        k = self.assign(model, state, X, y)
        return state[k].copy(), (state, self.lam * X.shape[0]), k

    def soft_responsibilities(self, phis, state, precisions):
        """r_sk of shape (n_active, K) for phis (n_active, n_params) (eq. 41)."""
        d2 = _sq_dists(phis, state)
        logits = -0.5 * precisions[:, None] * d2
        return np.exp(logits - logsumexp(logits, axis=1, keepdims=True))

    def pull_grad(self, phi, anchor):
        state, precision = anchor
        r = self.soft_responsibilities(phi[None, :], state, np.array([precision]))[0]
        return self.lam * (phi - r @ state)

    def m_step(self, state, phis, weights, sizes, components, rng=None):
        if self.n_components > 1 and np.all(state == state[0]):
            return _kmeanspp(phis, self.n_components, check_rng(rng))
        if self.assignment == "hard":
            r = np.eye(self.n_components)[np.asarray(components, dtype=np.intp)]
        else:
            r = self.soft_responsibilities(phis, state, self.lam * np.asarray(sizes, dtype=np.float64))
        mass = np.asarray(weights, dtype=np.float64)[:, None] * r      # (m, K)
        totals = mass.sum(axis=0)
        new = state.copy()
        ok = totals > _MIN_COMPONENT_MASS * totals.sum()
        new[ok] = (mass[:, ok].T @ phis) / totals[ok, None]
        return new

    def server_params(self, state):
        if self.n_components == 1:
            return state[0]
        raise ValueError("a mixture prior has several server models; use predict_proba or personal_proba.")

    def predict_proba(self, model, state, X):
        return np.mean([model.predict_proba(w, X) for w in state], axis=0)

    def personal_proba(self, model, state, X_client, y_client, X):
        """Predict ``X`` with the component that best fits one client's data."""
        return model.predict_proba(state[self.assign(model, state, X_client, y_client)], X)


def weighted_median(values, weights=None) -> np.ndarray:
    """Coordinate-wise weighted median, vectorised over columns.

    Parameters
    ----------
    values : ndarray of shape (m, p)
    weights : ndarray of shape (m,) of positive weights, or None (equal)

    Returns
    -------
    median : ndarray of shape (p,)
        Where the cumulative weight hits exactly one half, the mean of the two
        middle values, so equal weights give ``numpy.median(values, axis=0)``.
    """
    values = np.asarray(values, dtype=np.float64)
    m = values.shape[0]
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (m,) or np.any(w <= 0):
        raise ValueError("weights must be positive, one per row of values.")
    order = np.argsort(values, axis=0, kind="stable")
    sorted_vals = np.take_along_axis(values, order, axis=0)
    cum = np.cumsum(w[order], axis=0)
    half = 0.5 * w.sum()
    tol = _MEDIAN_HALF_RTOL * w.sum()
    lower = np.argmax(cum >= half - tol, axis=0)
    upper = np.argmax(cum > half + tol, axis=0)
    cols = np.arange(values.shape[1])
    return 0.5 * (sorted_vals[lower, cols] + sorted_vals[upper, cols])


def _sq_dists(A, B):
    """Squared Euclidean distances, shape (len(A), len(B)), without cancellation."""
    return np.stack([np.sum((A - b) ** 2, axis=1) for b in B], axis=1)


def _kmeanspp(points, k, rng):
    """k-means++ seeding (Arthur & Vassilvitskii 2007) of k centres among ``points`` (m, p)."""
    # D^2 sampling is scale-free: unit scale keeps squared distances of large (finite) points finite.
    scale = np.max(np.abs(points))
    unit = points / scale if scale > 0 else points
    chosen = [rng.integers(points.shape[0])]
    for _ in range(1, k):
        d2 = _sq_dists(unit, unit[chosen]).min(axis=1)
        total = d2.sum()
        p = d2 / total if total > 0 else None  # all points coincide: pick uniformly
        chosen.append(rng.choice(points.shape[0], p=p))
    return points[chosen]
