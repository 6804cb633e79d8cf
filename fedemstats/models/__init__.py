"""Curved-exponential-family models: statistics and T-maps (SPEC §5)."""
from .base import Model, mean_field, mean_field_norm2
from .factor import FactorAnalysisModel, FactorParams
from .gaussian_missing import GaussianMissingModel, GaussianParams
from .gmm import GaussianMixtureModel
from .gmm_missing import GaussianMixtureMissingModel
from .gmm_params import GMMParams, make_params
from .poisson_mixture import PoissonMixtureModel, PoissonMixtureParams

__all__ = ["Model", "mean_field", "mean_field_norm2", "GaussianMixtureModel", "GMMParams", "make_params",
           "FactorAnalysisModel", "FactorParams", "GaussianMissingModel", "GaussianParams",
           "GaussianMixtureMissingModel", "PoissonMixtureModel", "PoissonMixtureParams"]
