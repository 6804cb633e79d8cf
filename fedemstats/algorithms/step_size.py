"""Step sizes γ_k of the expectation-space algorithms and the theorems' bounds on them.

The schedules (:class:`StepSize`, :func:`make_step_size`, the ``"auto"`` rule) are
what the algorithms run; the bounds (:func:`fedem_gamma_max`, :func:`em_gamma_max`,
:func:`vr_fedem_gamma`, :func:`vr_fedem_batch_size`, :func:`compression_regime_ratio`)
are the constant steps and batch size of paper 003's theorems (Dieuleveut, Fort,
Moulines, Robin, "Federated Expectation Maximization with heterogeneity mitigation
and variance reduction"), evaluated for user-supplied problem constants.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .._validation import check_int, check_positive

__all__ = [
    "AUTO_STEP_SCALE", "StepSize", "make_step_size", "auto_step_size", "effective_omega",
    "fedem_gamma_max", "em_gamma_max", "vr_fedem_gamma", "vr_fedem_batch_size",
    "compression_regime_ratio",
]

#: Scale of the "auto" step size gamma = AUTO_STEP_SCALE * sqrt(n) / (1 + omega)^(3/2).
#: Theorem 1 of paper 003 gives gamma_max ∝ min(1, sqrt(n) / (1 + omega)^(3/2)) up to
#: problem constants (L, v_min). The scale was set on the SPEC §3 prototype (GMM d=2,
#: K=3, 20 Dirichlet(0.1) clients, omega≈1.3), where gamma=0.1 converged linearly and
#: gamma≥0.25 oscillated: 0.08 * sqrt(20) / 2.3^1.5 ≈ 0.10.
AUTO_STEP_SCALE = 0.08


# ---------------------------------------------------------------------- schedules

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


# ---------------------------------------------------------------------- theorem bounds
def fedem_gamma_max(v_min, L_W, L, omega, n) -> float:
    """Largest constant step of Theorem 1 (paper 003, eq. (7)).

    γ_max = v_min / (2 L_W)  ∧  √n / (2√2 L (1 + ω)^{3/2}), with α = 1/(1+ω).
    Read from the paper's text (the extracted PDF is partly garbled): the √n /
    (1+ω)^{3/2} scaling is stated in the text and is what the scripts check.

    Parameters
    ----------
    v_min : float
        Lower bound of the spectrum of B(s) in ∇W(s) = −B(s) h(s) (A4).
    L_W : float
        Lipschitz constant of ∇W, W = F ∘ T (A4).
    L : float
        Quadratic mean of the Lipschitz constants L_i of the h_i (A5).
    omega : float
        Compression constant ω of A6.
    n : int
        Number of workers.
    """
    v_min, L_W, L = (check_positive(v, k) for v, k in ((v_min, "v_min"), (L_W, "L_W"), (L, "L")))
    omega, n = check_positive(omega, "omega", strict=False), check_int(n, "n")
    return min(v_min / (2.0 * L_W), math.sqrt(n) / (2.0 * math.sqrt(2.0) * L * (1.0 + omega) ** 1.5))


def em_gamma_max(v_min, L_W) -> float:
    """Step bound without compression: γ < 2 v_min / L_W (paper 003, eq. (9))."""
    return 2.0 * check_positive(v_min, "v_min") / check_positive(L_W, "L_W")


def vr_fedem_gamma(v_min, v_max, L_W, omega, n) -> float:
    """Theorem 3's constant step (paper 003, eq. (10)), with α = 1/(1+ω), b = ⌈k_in/(1+ω)²⌉:

    γ = (v_min / L_W) · [1 + 4√2 (v_max / (L_W √n)) (1 + ω) (ω + (1 + 10ω)/8)^{1/2}]^{-1}.

    For ω³ ≪ n it is ≈ v_min / L_W (as SPIDER-EM); for ω³ ≫ n it decays as
    √n / ω^{3/2}. Read from the paper's (partly garbled) extracted text.
    """
    v_min, v_max, L_W = (check_positive(v, k) for v, k in ((v_min, "v_min"), (v_max, "v_max"), (L_W, "L_W")))
    omega, n = check_positive(omega, "omega", strict=False), check_int(n, "n")
    factor = 4.0 * math.sqrt(2.0) * v_max / (L_W * math.sqrt(n)) * (1.0 + omega) \
        * math.sqrt(omega + (1.0 + 10.0 * omega) / 8.0)
    return v_min / L_W / (1.0 + factor)


def vr_fedem_batch_size(k_in, omega) -> int:
    """Theorem 3's mini-batch size b = ⌈k_in / (1 + ω)²⌉ (paper 003, Theorem 3)."""
    return max(1, math.ceil(check_int(k_in, "k_in") / (1.0 + float(omega)) ** 2))


def compression_regime_ratio(n, omega) -> float:
    """√n / (1 + ω)^{3/2}: ≳ 1 means compression leaves γ_max unchanged (n ≳ ω³),
    ≪ 1 means γ_max shrinks by this factor (paper 003, §2 and §3)."""
    return math.sqrt(check_int(n, "n")) / (1.0 + check_positive(omega, "omega", strict=False)) ** 1.5
