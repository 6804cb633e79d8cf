"""fedemstats: federated Expectation-Maximization for latent-variable models."""
from importlib import import_module

from .federation import Federation
from .layout import StatLayout
from .ledger import BitLedger

__version__ = "0.1.0"

#: public name -> module; loaded on first access (PEP 562) so that light users such as
#: Flower node processes do not import scikit-learn and pandas at start-up
_LAZY = {
    "FederatedGaussianMixture": "fedemstats.estimators.mixture",
    "FederatedFactorAnalysis": "fedemstats.estimators.decomposition",
    "FederatedImputer": "fedemstats.estimators.impute",
    "FederatedMLPClassifier": "fedemstats.estimators.neural",
    "FedEM": "fedemstats.algorithms.fedem",
    "make_compressor": "fedemstats.compression.spec",
    "make_participation": "fedemstats.participation",
    "load_portal_rodents": "fedemstats.datasets.portal",
    "DPConfig": "fedemstats.privacy.config",
}

__all__ = ["Federation", "StatLayout", "BitLedger", "__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedemstats' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
