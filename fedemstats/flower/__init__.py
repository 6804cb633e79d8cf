"""Optional Flower adapter: FedEM on the Flower framework (SPEC §9).

The same client and server halves of a FedEM round as the in-process engine
(:func:`fedemstats.algorithms.fedem.client_update` / ``server_update``), carried
by Flower's Message API (``flwr >= 1.41``): a :class:`~flwr.clientapp.ClientApp`
per node and a message-based :class:`~flwr.serverapp.strategy.Strategy`.
See ``docs/flower.md``.

Importing this sub-package needs the optional extra ``flower``; ``import
fedemstats`` never does.
"""
from __future__ import annotations

#: smallest Flower release whose Message API (``@app.train()``, ``Grid``) this adapter uses
MIN_FLWR_VERSION = (1, 41)
_INSTALL_HINT = "pip install 'fedemstats[flower]'  (installs flwr>=1.41 and ray)"

try:
    import flwr as _flwr
except ImportError as _exc:  # pragma: no cover - exercised with a monkeypatched import
    raise ImportError(
        "fedemstats.flower needs the optional extra 'flower' (Flower >= 1.41 and Ray): "
        f"{_INSTALL_HINT}."
    ) from _exc


def _version_tuple(text):
    parts = []
    for piece in str(text).split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


if _version_tuple(getattr(_flwr, "__version__", "0")) < MIN_FLWR_VERSION:  # pragma: no cover
    raise ImportError(
        f"fedemstats.flower needs flwr >= {'.'.join(map(str, MIN_FLWR_VERSION))}; found "
        f"{_flwr.__version__}. Upgrade with: {_INSTALL_HINT}."
    )

from .client import load_csv_partition, make_client_app  # noqa: E402
from .factor import FactorAnalysisProblem  # noqa: E402
from .gmm import GMMProblem  # noqa: E402
from .imputer import ImputerProblem  # noqa: E402
from .private_client import make_private_client_app  # noqa: E402
from .private_strategy import PrivateFedEMStrategy  # noqa: E402
from .records import wire_bytes  # noqa: E402
from .server import make_private_server_app, make_server_app  # noqa: E402
from .settings import FedEMSettings  # noqa: E402
from .strategy import FedEMStrategy  # noqa: E402

__all__ = [
    "FedEMSettings",
    "FedEMStrategy",
    "GMMProblem",
    "FactorAnalysisProblem",
    "ImputerProblem",
    "load_csv_partition",
    "make_client_app",
    "make_private_client_app",
    "make_private_server_app",
    "make_server_app",
    "PrivateFedEMStrategy",
    "wire_bytes",
]
