"""fedemstats: federated Expectation-Maximization for latent-variable models."""
from .federation import Federation
from .layout import StatLayout
from .ledger import BitLedger

__version__ = "0.1.0"

__all__ = ["Federation", "StatLayout", "BitLedger", "__version__"]
