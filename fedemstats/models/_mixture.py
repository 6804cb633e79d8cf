"""What all mixtures share: responsibilities from joint log-densities, the floored
responsibility statistic of their T-maps and the draw of a component from the
responsibilities (posterior sampling), and the weights by which a mixture's geometry
converts a move of its statistics into the log-likelihood an EM step gains."""
from __future__ import annotations

import numpy as np

from .._linalg import logsumexp

__all__ = ["RESP_FLOOR", "component_mass", "draw_components", "log_norm_resp", "mass_gain_weights"]

#: Floor of the responsibility statistic S0_k in a T-map; scikit-learn adds 10*eps to
#: n_k for the same reason (an empty component must not divide by zero).
RESP_FLOOR = 10 * np.finfo(np.float64).eps


def log_norm_resp(wlp):
    """``(log p(x), r)`` from the joint log-densities ``log π_k + log p(x | k)`` (n, K):
    the per-row log-sum-exp (n,) and the responsibilities ``exp(wlp − log p(x))`` (n, K)."""
    ll = logsumexp(wlp, axis=1)
    return ll, np.exp(wlp - ll[:, None])


def component_mass(resp):
    """``(S0, weights)``: the responsibility statistic clipped below at :data:`RESP_FLOOR`
    (noisy iterates may push it to or below 0) and the mixture weights ``S0 / sum S0``."""
    s0 = np.maximum(resp, RESP_FLOOR)
    return s0, s0 / s0.sum()


def draw_components(r, rng) -> np.ndarray:
    """One component per row drawn from its responsibilities ``r`` (n, K), by inversion of
    one uniform per row (drawn first from ``rng``); shape (n,)."""
    u = rng.random(r.shape[0])
    # rounding may leave the last cumulative sum just below u: clip to the last component
    return np.minimum((np.cumsum(r, axis=1) < u[:, None]).sum(axis=1), r.shape[1] - 1)


def mass_gain_weights(layout, weights, identity, shared=()) -> np.ndarray:
    """Per-coordinate gain weights of a mixture's geometry (:meth:`._geometry.Geometry.gain_weights`):
    ``1 / π_k`` on every coordinate of component k, shape (q,).

    The statistics are averages over rows, of which component k holds the share π_k: its
    geometry maps it to (π_k, 0, π_k I) (Gaussian) or (π_k, π_k √λ_k) (Poisson). A move δy of
    its coordinates therefore moves its own parameters by δy / π_k in the geometry's units, and
    the complete-data log-likelihood (an EM step's gain, to second order) by
    π_k · ½ ‖δy / π_k‖² = ½ ‖δy‖² / π_k. Without the weight, ½ ‖δy‖² under-states the gain of
    a component of weight 0.2 five times.

    Parameters
    ----------
    layout : StatLayout
        Every block not in ``shared`` stores its components one after the other.
    weights : ndarray of shape (K,)
        The mixture weights π of θ.
    identity : ndarray of bool of shape (K,)
        Components on the identity map (raw coordinates): weight 1.
    shared : tuple of str
        Blocks common to all components (a tied second moment, whose total weight is 1): weight 1.
    """
    K = weights.shape[0]
    inverse = np.where(identity, 1.0, 1.0 / np.maximum(weights, RESP_FLOOR))
    sizes = np.diff(layout.offsets)
    return np.concatenate([np.ones(size) if name in shared else np.repeat(inverse, size // K)
                           for name, size in zip(layout.names, sizes)])
