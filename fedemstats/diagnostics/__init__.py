"""Diagnostics for the theory of FedEM / VR-FedEM (paper 003): mean field, one EM step's gain, empirical ω,
the theorems' step-size bounds, and convergence tables against rounds, epochs and bits.

Equation numbers refer to paper 003 (Dieuleveut, Fort, Moulines, Robin, "Federated
Expectation Maximization with heterogeneity mitigation and variance reduction").
The mean field is the model's (:func:`fedemstats.models.base.mean_field`) and the
theorem bounds live beside the step-size schedules
(:mod:`fedemstats.algorithms.step_size`); they are re-exported here.
"""
from ..algorithms.step_size import (compression_regime_ratio, em_gamma_max, fedem_gamma_max, vr_fedem_batch_size,
                                    vr_fedem_gamma)
from ..models.base import em_step_gain, mean_field, mean_field_norm2
from .convergence import X_AXES, convergence_table, first_reach, rounds_to_reach
from .omega import OmegaEstimate, empirical_omega, omega_test_vectors, worst_case_omega
from .plots import plot_convergence

__all__ = [
    "mean_field", "mean_field_norm2", "em_step_gain", "OmegaEstimate", "empirical_omega",
    "omega_test_vectors",
    "worst_case_omega", "fedem_gamma_max", "em_gamma_max", "vr_fedem_gamma", "vr_fedem_batch_size",
    "compression_regime_ratio", "convergence_table", "first_reach", "rounds_to_reach", "plot_convergence",
    "X_AXES",
]
