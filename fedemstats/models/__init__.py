"""Curved-exponential-family models: statistics and T-maps (SPEC §5)."""
from .base import Model
from .gmm import GaussianMixtureModel, GMMParams, make_params

__all__ = ["Model", "GaussianMixtureModel", "GMMParams", "make_params"]
from .factor import FactorAnalysisModel, FactorParams  # noqa: E402
from .gaussian_missing import GaussianMissingModel, GaussianParams  # noqa: E402
from .gmm_missing import GaussianMixtureMissingModel  # noqa: E402
from .poisson_mixture import PoissonMixtureModel, PoissonMixtureParams  # noqa: E402

__all__ += ["FactorAnalysisModel", "FactorParams", "GaussianMissingModel", "GaussianParams",
            "GaussianMixtureMissingModel", "PoissonMixtureModel", "PoissonMixtureParams"]
