"""Compression geometry of the Poisson mixture: rate scaling by the standard deviation.

Statistics ``(S0_k, S1_kj) = (r_k, r_k E[y_j])``. P leaves ``S0`` unchanged and scales
``S1_kj`` by ``1 / sqrt(λ_kj)``: ``y1_kj = S1_kj / sqrt(λ_kj)``. A count's variance is its
rate, so a client's deviation of ``S1_kj`` is of order ``sqrt(λ_kj / n_i)`` and every
coordinate of a message is of the same order whatever its rate; the log-likelihood cost of
an error ``δ`` in ``S1_kj`` is about ``δ² / (2 λ_kj)`` (the Fisher information), the same
for a quantisation noise of the same size in every ``y1_kj``. Scaling by ``1 / λ_kj``
instead gave a rate of 1e6 next to rates of 1-20 a noise 250 times its signal (its
deviations ``sqrt(λ / n) / λ`` were drowned by the small rates' in the block norm), and a
compressed fit stalled 1.6e-3 nats/row below exact EM. The trust region's rate ratio is
``λ'_kj / λ_kj = S1'_kj / (S0'_k λ_kj)``.

**The scale's floor.** The scale is ``sqrt(max(λ_kj, SCALE_FLOOR_FRACTION · λ̄_j))`` with
``λ̄_j = Σ_k π_k λ_kj`` the model's mean of column j (public, like θ). The Fisher scaling is a
local one: a k-means start puts rates of species a cluster never saw at the T-map's floor
(1e-8), where ``1 / sqrt(λ)`` is 1e4, and the first EM steps move those rates by orders of
magnitude. Their coordinates then made up nearly all of their block's norm, so dithering at
that norm drowned the component's other rates: on the Portal notebook's lagged counts (K = 8,
18 of 288 rates at the floor at θ_0) the first compressed round reached a log-likelihood of
-89.7 where exact EM's reached -79.5, and the fits took another basin (seed 0: -78.96 after
500 rounds at p = 1, unconverged). The floor only changes the scale of rates below a tenth
of their column's mean; the trust region still checks every rate against its own value.
"""
from __future__ import annotations

import numpy as np

from ._geometry import MIN_WEIGHT, TRUST_RATIO, Geometry, build_geometry, log_fallback
from ._geometry_blocks import split_blocks
from ._mixture import RESP_FLOOR, mass_gain_weights

__all__ = ["PoissonGeometry", "poisson_geometry", "PROJECTION_SLACK", "SCALE_FLOOR_FRACTION"]

#: :meth:`PoissonGeometry.project_step` stops a falling rate at this many times the region's
#: bound (ratio x its rate): the halvings' factor, room for the broadcast's noise.
PROJECTION_SLACK = 2.0
#: A rate is scaled as if it were at least this fraction of its column's mean rate under θ
#: (module docstring, *The scale's floor*); 0.01 measured the same on the Portal counts.
SCALE_FLOOR_FRACTION = 0.1


class PoissonGeometry(Geometry):
    """Per-rate scaling of a Poisson mixture's statistics (see module docstring).

    Parameters
    ----------
    model, theta, s_hat : PoissonMixtureModel, PoissonMixtureParams, ndarray of shape (q,)
        The model, ``T(s_hat)`` and the iterate (its ``resp`` gives the current masses).
    rate_floor : float
        The T-map's rate floor (``poisson_mixture.RATE_FLOOR``).

    Attributes
    ----------
    blocks : ndarray of int64
        ``resp``; then ``sum_y`` per component.
    unchecked : ndarray of bool of shape (K,)
        Components with weight < :data:`MIN_WEIGHT`: identity map, not checked.
    fallback : ndarray of bool of shape (K, d)
        Rates on the identity map (their component is unchecked, or ``λ_kj`` is not finite
        and > 0).
    rate_checked : ndarray of bool of shape (K, d)
        Rates whose ratio the trust region checks: not on the identity map and not at the
        T-map's floor at Ŝ (``S1_kj / S0_k > rate_floor``).
    """

    def __init__(self, model, theta, s_hat, rate_floor):
        parts = model.layout.unpack(np.asarray(s_hat, dtype=np.float64))
        self.s0 = np.maximum(parts["resp"], RESP_FLOOR)
        rates = np.asarray(theta.rates, dtype=np.float64)
        self.unchecked = ~(np.asarray(theta.weights) >= MIN_WEIGHT)
        self.fallback = self.unchecked[:, None] | ~(np.isfinite(rates) & (rates > 0))
        log_fallback("Poisson geometry", "rates (k, j)", self.fallback)
        self.rates = np.where(self.fallback, 1.0, rates)
        self.weights = np.asarray(theta.weights, dtype=np.float64)
        column_means = np.where(self.unchecked, 0.0, theta.weights) @ np.where(self.fallback, 0.0, rates)
        floor = np.where(self.fallback, 0.0, SCALE_FLOOR_FRACTION * column_means)  # a fallback rate keeps 1
        self._sd = np.sqrt(np.maximum(self.rates, floor))
        self.rate_checked = ~self.fallback & (parts["sum_y"] / self.s0[:, None] > rate_floor)
        self.layout = model.layout
        # every block keeps its own norm (no MIN_BLOCK_SIZE): scaled, not whitened, a rate's
        # coordinate grows with sqrt(λ) and a weight's does not, so they do not share a scale.
        # Measured: the 2 weights sharing the first rates' norm, a column of counts near 1e6
        # left the compressed imputer unconverged after 300 rounds (tests/test_imputer.py).
        self.blocks = split_blocks(model.layout, {"sum_y": model.n_components}, min_size=1)

    names = ("resp", "sum_y")

    def gain_weights(self):
        """1 / π_k on component k's coordinates (1 on a component on the identity map);
        :func:`._mixture.mass_gain_weights`."""
        return mass_gain_weights(self.layout, self.weights, self.unchecked)

    def _scaled(self, x, factor):
        s0, s1 = self._split(x)
        return self._join(s0, s1 * factor)

    def forward(self, x):
        """``P x`` for rows x (m, q) -> (m, q)."""
        return self._scaled(x, 1.0 / self._sd)

    def inverse(self, y):
        """``P⁻¹ y`` for rows y (m, q) -> (m, q)."""
        return self._scaled(y, self._sd)

    def project_step(self, s_hat, step, ratio=TRUST_RATIO):
        """Each checked rate that the step alone would take below the region stops at
        PROJECTION_SLACK x ``ratio`` x its rate (its statistic S1_kj is raised to that, given
        the step's new S0_k); the other coordinates keep their step.

        A rate's margin involves one statistic besides its component's weight, so it has a
        projection, and one falling rate need not cut the whole step. Exact EM divides a rate
        that its component does not explain by 4.5-8 a round, down to the T-map's floor; the
        region scaled every step of the whole iterate by 1/2 for such rates, which carry no
        log-likelihood (Portal counts, K = 6: 263 rounds against exact EM's 26). At a fixed
        point the step is 0 and nothing is projected."""
        step = np.asarray(step, dtype=np.float64)
        s0, s1 = self._split(np.asarray(s_hat, dtype=np.float64) + step)
        d0, d1 = self._split(step)
        s0, s1, d0, d1 = s0[0], s1[0], d0[0], d1[0]
        bound = PROJECTION_SLACK * min(ratio, 1.0) * np.maximum(s0, RESP_FLOOR)[:, None] * self.rates
        low = self.rate_checked & np.isfinite(s1) & (s1 < bound)
        if not low.any():
            return step
        return self._join(d0[None], np.where(low, d1 + (bound - s1), d1)[None])[0]

    def _margins(self, points):
        s0, s1 = self._split(points)
        weights = np.where(self.unchecked, np.inf, s0 / self.s0)
        ratio = np.where(self.rate_checked, s1 / (np.maximum(s0, RESP_FLOOR)[..., None] * self.rates), np.inf)
        return np.concatenate([weights, ratio.reshape(ratio.shape[0], -1)], axis=1)


def poisson_geometry(model, theta, s_hat, rate_floor) -> Geometry:
    """:class:`PoissonGeometry`, or the identity if ``s_hat`` is not finite
    (:func:`._geometry.build_geometry`)."""
    return build_geometry(PoissonGeometry, model, theta, s_hat, rate_floor)
