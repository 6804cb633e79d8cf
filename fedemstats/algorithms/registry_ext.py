"""Register ``algorithm="vr-fedem"`` and ``algorithm="online"`` with the estimators.

Importing this module adds the two factories to
:data:`fedemstats.estimators._base.ALGORITHMS`. The estimators must import it once
(it cannot be imported from ``fedemstats.algorithms`` itself: ``estimators._base``
imports the algorithms package before it defines the registry).

The factories read their extra hyper-parameters with ``getattr`` so that an
estimator works before it declares them in ``__init__`` (then it gets the defaults):

* ``"vr-fedem"``: ``k_in`` (default ⌈√m⌉) and ``batch_size`` (``None``: Theorem 3's
  ⌈k_in / (1 + ω)²⌉);
* ``"online"``: ``batch_size`` (required), ``online_power`` (a, default 0.6) and
  ``online_gamma0`` (γ_0, default 1).
"""
from __future__ import annotations

from ..estimators._base import register_algorithm
from .online import DEFAULT_ONLINE_POWER, online_em
from .vr_fedem import VRFedEM

__all__ = ["vr_fedem_factory", "online_factory"]


def vr_fedem_factory(est, model) -> VRFedEM:
    """``algorithm="vr-fedem"``: paper 003 Algorithm 2 with the estimator's settings."""
    return VRFedEM(model, compressor=est.compressor, participation=est.participation,
                   step_size=est.step_size, alpha=est.alpha, batch_size=est.batch_size,
                   k_in=getattr(est, "k_in", None), track_h=est.track_h)


def online_factory(est, model):
    """``algorithm="online"``: Cappé-Moulines mini-batch online EM (a FedEM setting)."""
    if est.batch_size is None:
        raise ValueError("algorithm='online' needs batch_size (rows per client per round); "
                         "with all rows use algorithm='em'.")
    return online_em(model, est.batch_size, gamma0=getattr(est, "online_gamma0", 1.0),
                     power=getattr(est, "online_power", DEFAULT_ONLINE_POWER),
                     participation=est.participation, compressor=est.compressor, track_h=est.track_h)


register_algorithm("vr-fedem", vr_fedem_factory)
register_algorithm("online", online_factory)
