"""The Gaussian-mixture problem for the Flower adapter: model spec, model, initial θ_0.

A *problem* is what both sides must agree on besides the FedEM settings: how to
build the model (public spec + public shift) and, on the server, how to draw θ_0
from federated global moments. The server sends :meth:`GMMProblem.spec` with every
instruction and the node checks it against its own, so a node configured for a
different model fails loudly instead of sending statistics of another layout.
"""
from __future__ import annotations


from .._validation import check_int, check_positive
from ..models.gmm import GaussianMixtureModel
from ..models.gmm_init import init_random_from_moments
from ..models.gmm_params import check_covariance_type
from .problem_base import Problem

__all__ = ["GMMProblem"]

#: initialisations available without moving raw rows beyond global moments
INIT_METHODS = ("random",)


class GMMProblem(Problem):
    """Gaussian mixture as a Flower FedEM problem.

    Parameters
    ----------
    n_components : int
    covariance_type : {"full", "tied", "diag", "spherical"}, default="full"
    reg_covar : float, default=1e-6
    init : {"random"}, default="random"
        θ_0 as ``FederatedGaussianMixture(init_params="random")``: means drawn from
        N(global mean, global covariance + reg_covar I), shared covariance, uniform
        weights. (The ``"kmeans"`` initialisation draws every client's local k-means
        from one shared generator in sequence, which a set of independent nodes
        cannot reproduce; it is not offered here.)
    """

    name = "gmm"

    def __init__(self, n_components, covariance_type="full", reg_covar=1e-6, init="random"):
        self.n_components = check_int(n_components, "n_components")
        self.covariance_type = check_covariance_type(covariance_type)
        self.reg_covar = check_positive(reg_covar, "reg_covar", strict=False)
        if init not in INIT_METHODS:
            raise ValueError(f"init must be one of {INIT_METHODS} on Flower; got {init!r}.")
        self.init = init

    # ------------------------------------------------------------------ spec
    def spec(self) -> dict:
        """Public model description (ConfigRecord-safe scalars)."""
        return {"problem": self.name, "n-components": self.n_components,
                "covariance-type": self.covariance_type, "reg-covar": self.reg_covar, "init": self.init}

    @classmethod
    def from_spec(cls, spec) -> "GMMProblem":
        """Inverse of :meth:`spec`; also reads Flower run-config keys of the same names."""
        if spec.get("problem", cls.name) != cls.name:
            raise ValueError(f"spec describes problem {spec.get('problem')!r}, not {cls.name!r}.")
        return cls(int(spec["n-components"]), str(spec.get("covariance-type", "full")),
                   float(spec.get("reg-covar", 1e-6)), str(spec.get("init", "random")))

    def __repr__(self):
        return (f"GMMProblem(n_components={self.n_components}, covariance_type={self.covariance_type!r}, "
                f"reg_covar={self.reg_covar!r}, init={self.init!r})")

    # ------------------------------------------------------------------ model
    def init_kwargs(self) -> dict:
        """Options of ``model.init_theta`` for the in-process run of the same start."""
        return {"method": self.init}

    def build_model(self, n_features, shift, column_scale=None) -> GaussianMixtureModel:
        """The model with the public centring point ``shift`` (the global mean) and ``column_scale``
        (the pooled standard deviations, in whose units the T-map floors eigenvalues)."""
        return GaussianMixtureModel(self.n_components, int(n_features), self.covariance_type,
                                    self.reg_covar, shift=shift, column_scale=column_scale)

    def model_from_federation(self, federation) -> GaussianMixtureModel:
        """The model of an in-process federation of the same partitions (its shift the global mean,
        its scale the pooled standard deviations)."""
        return GaussianMixtureModel.from_federation(federation, n_components=self.n_components,
                                                    covariance_type=self.covariance_type, reg_covar=self.reg_covar)

    def init_theta(self, model, mean, cov, rng):
        """θ_0 from the global moments, drawing from ``rng`` exactly as the model's
        ``init_theta(method="random")`` does."""
        return init_random_from_moments(mean, cov, model, rng)
