"""scikit-learn estimators on top of the federated algorithms (SPEC §7)."""
from .decomposition import FederatedFactorAnalysis
from .impute import FederatedImputer
from .mixture import FederatedGaussianMixture
from .neural import FederatedMLPClassifier

__all__ = ["FederatedGaussianMixture", "FederatedFactorAnalysis", "FederatedImputer", "FederatedMLPClassifier"]
