"""What all mixtures share: responsibilities from joint log-densities, the floored
responsibility statistic of their T-maps and the draw of a component from the
responsibilities (posterior sampling)."""
from __future__ import annotations

import numpy as np

from .._linalg import logsumexp

__all__ = ["RESP_FLOOR", "component_mass", "draw_components", "log_norm_resp"]

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
