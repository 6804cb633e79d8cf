"""The factor-analysis problem for the Flower adapter: model spec, model, initial θ_0.

The same contract as :class:`~fedemstats.flower.gmm.GMMProblem` (see there): the server
sends :meth:`FactorAnalysisProblem.spec` with every instruction, the node rebuilds the
problem from the allow-list :data:`~fedemstats.flower.problems.PROBLEM_TYPES` and checks it.
θ_0 is scikit-learn's first iteration on the global moments (the nodes' means and scatters,
never a row), as ``FederatedFactorAnalysis`` starts.
"""
from __future__ import annotations

from .._validation import check_int
from ..models.factor import FactorAnalysisModel, init_factor_from_moments
from .problem_base import Problem

__all__ = ["FactorAnalysisProblem"]


class FactorAnalysisProblem(Problem):
    """Factor analysis as a Flower FedEM problem.

    Parameters
    ----------
    n_factors : int
        Latent dimension k (``FederatedFactorAnalysis(n_components=k)``).
    """

    name = "fa"

    def __init__(self, n_factors):
        self.n_factors = check_int(n_factors, "n_factors")

    # ------------------------------------------------------------------ spec
    def spec(self) -> dict:
        """Public model description (ConfigRecord-safe scalars)."""
        return {"problem": self.name, "n-factors": self.n_factors}

    @classmethod
    def from_spec(cls, spec) -> "FactorAnalysisProblem":
        """Inverse of :meth:`spec`; also reads Flower run-config keys of the same names."""
        if spec.get("problem", cls.name) != cls.name:
            raise ValueError(f"spec describes problem {spec.get('problem')!r}, not {cls.name!r}.")
        if "n-factors" not in spec:
            raise ValueError("a factor-analysis run needs the run-config key 'n-factors' (the latent dimension).")
        return cls(int(spec["n-factors"]))

    def __repr__(self):
        return f"FactorAnalysisProblem(n_factors={self.n_factors})"

    # ------------------------------------------------------------------ model
    def init_kwargs(self) -> dict:
        """Options of ``model.init_theta`` for the in-process run of the same start (none)."""
        return {}

    def build_model(self, n_features, shift, column_scale=None) -> FactorAnalysisModel:
        """The model with the public centring point ``shift`` (the global mean) and scale
        ``column_scale`` (the pooled standard deviations: statistics are computed on
        ``(x − shift) / scale``, and Ψ is floored relative to it)."""
        return FactorAnalysisModel(int(n_features), self.n_factors, shift=shift, scale=column_scale)

    def model_from_federation(self, federation) -> FactorAnalysisModel:
        """The model of an in-process federation of the same partitions."""
        return FactorAnalysisModel.from_federation(federation, n_factors=self.n_factors)

    def init_theta(self, model, mean, cov, rng):
        """θ_0 from the global moments, as ``model.init_theta`` computes it from a federation
        (``rng`` is not used: the start is deterministic)."""
        return init_factor_from_moments(mean, cov, self.n_factors, scale=model.scale)
