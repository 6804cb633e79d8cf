"""Step sizes γ_k of the expectation-space algorithms and the theorems' bounds on them.

The schedules (:class:`StepSize`, :func:`make_step_size`, the ``"theory"`` rule) are
what the algorithms run (the adaptive ``"auto"`` rule is the server's, :mod:`.controller`);
the bounds (:func:`fedem_gamma_max`, :func:`em_gamma_max`,
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
    "STEP_RULES", "THEORY_STEP_SCALE", "THEORY_ROW_VARIANCE", "StepSize", "make_step_size", "theory_step_size",
    "corollary2_step", "effective_omega",
    "fedem_gamma_max", "em_gamma_max", "vr_fedem_gamma", "vr_fedem_batch_size",
    "compression_regime_ratio",
]

#: Scale of the "theory" step γ = THEORY_STEP_SCALE √n / (√ω (1 + ω)) (:func:`theory_step_size`),
#: set on the SPEC §3 prototype (GMM d=2, K=3, 20 Dirichlet(0.1) clients, ω ≈ 1.3), where
#: γ = 0.1 converged linearly and γ ≥ 0.25 oscillated: 0.0586 √20 / (√1.3 · 2.3) ≈ 0.10.
THEORY_STEP_SCALE = 0.0586
#: Variance of one row's statistic in the model's whitened geometry (a unit by construction of
#: the geometry): the σ² of Corollary 2 for a mini-batch of b rows is taken as this / b.
THEORY_ROW_VARIANCE = 1.0

#: the named step-size rules: "auto" adapts to the noise the server measures
#: (:mod:`.controller`), "theory" is Theorem 1's step (:func:`theory_step_size`)
STEP_RULES = ("auto", "theory")


# ---------------------------------------------------------------------- schedules

def effective_omega(omega: float, inclusion) -> float:
    """Variance factor of compression combined with Horvitz-Thompson sampling.

    A client included with probability pi and reweighted by 1/pi contributes
    ``E||q/pi 1_A||^2 = (1 + omega) ||x||^2 / pi``, i.e. an unbiased compressor with
    ``omega_eff = (1 + omega) / pi_min - 1``.
    """
    pi_min = float(np.min(inclusion))
    return (1.0 + float(omega)) / pi_min - 1.0


def theory_step_size(omega: float, n_clients: int, inclusion, sigma2: float = 0.0, k_max=None) -> float:
    """The ``"theory"`` constant step (paper 003, Theorem 1 and Corollary 2).

    ``γ = min(1, THEORY_STEP_SCALE √n / (√ω_eff (1 + ω_eff)))`` with
    ``ω_eff = (1 + ω) / π_min − 1``, then, with mini-batch noise ``sigma2 > 0`` over
    ``k_max`` rounds, ``min(γ, corollary2_step(...))``.

    Theorem 1's bound √n / (2√2 L (1 + ω)^{3/2}) has a finite value at ω = 0, where the
    theorem does not apply (without compression eq. (9) gives γ < 2 v_min / L_W): taken
    literally it made the step jump from 1 at ω = 0 to 0.36 at ω = 1e-9 (n = 20). The
    compression term here, √n / (√ω (1 + ω)), has the theorem's √n / ω^{3/2} decay for
    large ω and grows without bound as ω → 0, so the step is continuous and equals the
    exact-EM step 1 in the limit.
    """
    om = effective_omega(omega, inclusion)
    gamma = 1.0 if om <= 0.0 else float(min(1.0, THEORY_STEP_SCALE * np.sqrt(n_clients) / (np.sqrt(om) * (1.0 + om))))
    if sigma2 > 0.0:
        gamma = corollary2_step(n_clients, max(om, 0.0), sigma2, k_max, gamma)
    return gamma


def corollary2_step(n, omega, sigma2, k_max, gamma_max, gap=1.0, L_W=1.0) -> float:
    """Corollary 2's step (paper 003): γ = (gap · n / (k_max L_W (1 + 5ω) σ²))^{1/2} ∧ γ_max.

    ``gap`` is W(Ŝ_0) − min W and ``L_W`` the Lipschitz constant of ∇W (A4); the package's
    ``"theory"`` rule takes both as 1 (units of the whitened geometry). ``k_max`` None or
    0 gives γ_max.
    """
    if not k_max:
        return float(gamma_max)
    sigma2 = check_positive(sigma2, "sigma2")
    step = math.sqrt(check_positive(gap, "gap") * check_int(n, "n")
                     / (check_int(k_max, "k_max") * check_positive(L_W, "L_W") * (1.0 + 5.0 * float(omega)) * sigma2))
    return float(min(step, gamma_max))


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


def make_step_size(spec, *, omega=0.0, n_clients=1, inclusion=1.0, sigma2=0.0, k_max=None):
    """Build a schedule from a float (constant), ``"theory"`` (:func:`theory_step_size`) or a
    callable ``k -> gamma_k``. (``"auto"`` is decided round by round by the server,
    :mod:`.controller`; as a fixed schedule it is the exact-EM step 1.)"""
    if isinstance(spec, StepSize):
        return spec
    if isinstance(spec, str):
        if spec not in STEP_RULES:
            raise ValueError(f"step_size must be a positive float, 'auto', 'theory' or a callable; got {spec!r}.")
        if spec == "auto":
            return StepSize(1.0)
        return StepSize(theory_step_size(omega, n_clients, np.atleast_1d(inclusion), sigma2, k_max))
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


def vr_fedem_gamma(v_min, v_max, L_W, L, omega, n) -> float:
    """Theorem 3's constant step (paper 003, eq. (10)), with α = 1/(1+ω), b = ⌈k_in/(1+ω)²⌉:

    γ = (v_min / L_W) · [1 + 4√2 (v_max L / (L_W √n)) (1 + ω) (ω + (1 + 10ω)/8)^{1/2}]^{-1},

    where L is the quadratic mean of the per-row Lipschitz constants L_ij of A8. At n = 1
    and ω = 0 it is SPIDER-EM's v_min / (L_W + 2 v_max L) (Fort, Moulines, Wai 2020); for
    ω³ ≫ n it decays as √n / ω^{3/2}. Read from the paper's (partly garbled) extracted
    text; the L factor is the one SPIDER-EM's limit requires.
    """
    v_min, v_max, L_W, L = (check_positive(v, k) for v, k in ((v_min, "v_min"), (v_max, "v_max"),
                                                                 (L_W, "L_W"), (L, "L")))
    omega, n = check_positive(omega, "omega", strict=False), check_int(n, "n")
    factor = 4.0 * math.sqrt(2.0) * v_max * L / (L_W * math.sqrt(n)) * (1.0 + omega) \
        * math.sqrt(omega + (1.0 + 10.0 * omega) / 8.0)
    return v_min / L_W / (1.0 + factor)


def vr_fedem_batch_size(k_in, omega) -> int:
    """Theorem 3's mini-batch size b = ⌈k_in / (1 + ω)²⌉ (paper 003, Theorem 3)."""
    return max(1, math.ceil(check_int(k_in, "k_in") / (1.0 + float(omega)) ** 2))


def compression_regime_ratio(n, omega) -> float:
    """√n / (1 + ω)^{3/2}: ≳ 1 means compression leaves γ_max unchanged (n ≳ ω³),
    ≪ 1 means γ_max shrinks by this factor (paper 003, §2 and §3)."""
    return math.sqrt(check_int(n, "n")) / (1.0 + check_positive(omega, "omega", strict=False)) ** 1.5
