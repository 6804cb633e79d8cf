"""The missing-value problem for the Flower adapter: the models of ``FederatedImputer``.

The same contract as :class:`~fedemstats.flower.gmm.GMMProblem` (see there). Nodes hold rows
with NaN where a value is missing; they describe their partition with pairwise-complete
moments (:func:`fedemstats.models._pair_moments.client_pair_moments`), from which the server
forms the public shift and scale and θ_0 exactly as ``FederatedImputer`` does from
:func:`fedemstats.models._summaries.nan_moments` (equal up to rounding).
"""
from __future__ import annotations

from .._validation import check_int, check_missing_input, check_positive
from ..models._summaries import regularise_moments
from ..models.gaussian_missing import GaussianMissingModel, gaussian_start
from ..models.gmm_missing import MISSING_COVARIANCE_TYPES, GaussianMixtureMissingModel, gmm_missing_start
from ..models.poisson_mixture import PoissonMixtureModel, check_counts, poisson_start
from .problem_base import Problem

__all__ = ["ImputerProblem"]

#: models of ``FederatedImputer`` a Flower run offers
IMPUTER_MODELS = ("gaussian", "gmm", "poisson")


class ImputerProblem(Problem):
    """A missing-value model as a Flower FedEM problem (``FederatedImputer``'s fit).

    Parameters
    ----------
    model : {"gaussian", "gmm", "poisson"}, default="gaussian"
        One multivariate normal, a Gaussian mixture, or a mixture of independent Poissons for
        counts (``FederatedImputer(model=...)``).
    n_components : int, default=1
        Mixture components (``"gaussian"`` needs 1).
    covariance_type : {"full", "diag"}, default="full"
        ``"gmm"`` only.
    reg_covar : float, default=1e-6
        ``"gaussian"`` and ``"gmm"``.

    Notes
    -----
    The mixtures start as ``FederatedImputer(init_params="random")``: Gaussian means drawn from
    N(global mean, global covariance), Poisson rates from the global column means times
    log-normal factors, with the server's generator (the k-means start draws every client's local
    k-means from one shared generator, which independent nodes cannot reproduce). A Poisson node
    refuses counts that are negative or not whole numbers.
    """

    name = "imputer"
    #: nodes accept NaN (a missing value) and describe their rows with pairwise-complete moments
    allow_nan = True

    def __init__(self, model="gaussian", n_components=1, covariance_type="full", reg_covar=1e-6):
        if model not in IMPUTER_MODELS:
            raise ValueError(f"model must be one of {IMPUTER_MODELS} on Flower; got {model!r}.")
        self.model = model
        self.n_components = check_int(n_components, "n_components")
        if model == "gaussian" and self.n_components != 1:
            raise ValueError(f"model='gaussian' has one component; got n_components={n_components}. "
                             "Use model='gmm' for a mixture.")
        if covariance_type not in MISSING_COVARIANCE_TYPES:
            raise ValueError(f"covariance_type must be one of {MISSING_COVARIANCE_TYPES} with missing values; "
                             f"got {covariance_type!r}.")
        self.covariance_type = covariance_type
        self.reg_covar = check_positive(reg_covar, "reg_covar", strict=False)

    # ------------------------------------------------------------------ spec
    def spec(self) -> dict:
        """Public model description (ConfigRecord-safe scalars)."""
        return {"problem": self.name, "model": self.model, "n-components": self.n_components,
                "covariance-type": self.covariance_type, "reg-covar": self.reg_covar}

    @classmethod
    def from_spec(cls, spec) -> "ImputerProblem":
        """Inverse of :meth:`spec`; also reads Flower run-config keys of the same names."""
        if spec.get("problem", cls.name) != cls.name:
            raise ValueError(f"spec describes problem {spec.get('problem')!r}, not {cls.name!r}.")
        model = str(spec.get("model", "gaussian"))
        # a run config shares n-components with the mixture problems: the Gaussian has one
        n_components = 1 if model == "gaussian" else int(spec.get("n-components", 1))
        return cls(model, n_components, str(spec.get("covariance-type", "full")), float(spec.get("reg-covar", 1e-6)))

    def __repr__(self):
        return (f"ImputerProblem(model={self.model!r}, n_components={self.n_components}, "
                f"covariance_type={self.covariance_type!r}, reg_covar={self.reg_covar!r})")

    # ------------------------------------------------------------------ model
    def _hyper(self) -> dict:
        return {"gaussian": {"reg_covar": self.reg_covar},
                "gmm": {"n_components": self.n_components, "covariance_type": self.covariance_type,
                        "reg_covar": self.reg_covar},
                "poisson": {"n_components": self.n_components}}[self.model]

    def check_partition(self, X) -> None:
        """Refuse a node's rows this model cannot learn from (``X`` has NaN where missing): a row
        with no observed value; for the Poisson model, counts that are negative or fractional."""
        check_missing_input(X, all_columns=False)  # another node may observe a column this one never does
        if self.model == "poisson":
            check_counts(X, name="the node's partition")

    def init_kwargs(self) -> dict:
        """Options of ``model.init_theta`` for the in-process run of the same start."""
        return {} if self.model == "gaussian" else {"method": "random"}

    def build_model(self, n_features, shift, column_scale=None):
        """The model with the public centring point ``shift`` (the observed values' mean) and
        ``column_scale`` (their standard deviations), as ``FederatedImputer`` builds it (the
        Poisson model, of first moments only, has neither)."""
        if self.model == "gaussian":
            return GaussianMissingModel(int(n_features), shift=shift, scale=column_scale, **self._hyper())
        if self.model == "poisson":
            return PoissonMixtureModel(n_features=int(n_features), **self._hyper())
        return GaussianMixtureMissingModel(n_features=int(n_features), shift=shift, column_scale=column_scale,
                                           **self._hyper())

    def model_from_federation(self, federation):
        """The model of an in-process federation of the same partitions."""
        cls = {"gaussian": GaussianMissingModel, "gmm": GaussianMixtureMissingModel,
               "poisson": PoissonMixtureModel}[self.model]
        return cls.from_federation(federation, **self._hyper())

    def init_theta(self, model, mean, cov, rng):
        """θ_0 from the pairwise-complete global moments, as ``model.init_theta`` computes it from a
        federation (the mixtures draw from ``rng``; the Gaussian start is deterministic)."""
        if self.model == "gaussian":
            return gaussian_start(mean, cov, self.reg_covar, model.scale)
        if self.model == "poisson":
            return poisson_start(mean, model, rng)
        return gmm_missing_start(*regularise_moments(mean, cov, self.reg_covar), model, rng)
