"""scikit-learn estimators on top of the federated algorithms (SPEC §7)."""
from .decomposition import FederatedFactorAnalysis
from .impute import FederatedImputer

__all__ = ["FederatedFactorAnalysis", "FederatedImputer"]
