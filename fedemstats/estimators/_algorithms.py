"""The ``algorithm=`` choices of the federated EM estimators: one table of factories.

Each factory builds the algorithm object from the estimator's hyper-parameters
(every one of them declared in the estimator's ``__init__``) and the model.
"""
from __future__ import annotations

from ..algorithms import FedEM, VRFedEM, online_em
from ..compression import make_compressor
from ..participation import FullParticipation, make_participation

__all__ = ["ALGORITHMS"]


def _fedem(est, model) -> FedEM:
    """``"fedem"``: paper 003 Algorithm 1 with the estimator's settings."""
    return FedEM(model, compressor=est.compressor, participation=est.participation,
                 step_size=est.step_size, alpha=est.alpha, v_init=est.v_init,
                 batch_size=est.batch_size, track_h=est.track_h, precondition=est.precondition,
                 safeguard=est.safeguard, downlink_compressor=est.downlink_compressor)


def _lossy(spec, q) -> bool:
    return make_compressor(spec).omega(q) != 0.0


def _exact_em(est, model) -> FedEM:
    """``"em"``: classical EM spread over clients: identity, everyone, γ = 1 (SPEC §3 identity)."""
    if _lossy(est.compressor, model.q) or not isinstance(make_participation(est.participation), FullParticipation):
        raise ValueError("algorithm='em' is exact EM: use compressor='identity' and participation=1.0, "
                         "or algorithm='fedem' for compressed / partial runs.")
    downlink = est.downlink_compressor
    if downlink not in ("auto", None) and _lossy(downlink, model.q):
        raise ValueError("algorithm='em' is exact EM: a lossy downlink_compressor would make it inexact; use "
                         "algorithm='fedem' to quantise the broadcast.")
    return FedEM(model, compressor=est.compressor, participation=1.0, step_size=1.0, alpha=1.0,
                 v_init="zero", batch_size=None, track_h=est.track_h, downlink_compressor=downlink)


def _vr_fedem(est, model) -> VRFedEM:
    """``"vr-fedem"``: paper 003 Algorithm 2 (``k_in``; ``batch_size=None`` is Theorem 3's b)."""
    return VRFedEM(model, compressor=est.compressor, participation=est.participation,
                   step_size=est.step_size, alpha=est.alpha, batch_size=est.batch_size,
                   k_in=est.k_in, track_h=est.track_h, precondition=est.precondition, safeguard=est.safeguard,
                   downlink_compressor=est.downlink_compressor)


def _online(est, model) -> FedEM:
    """``"online"``: Cappé-Moulines mini-batch online EM, γ_k = online_gamma0 · k^(-online_power)."""
    if est.batch_size is None:
        raise ValueError("algorithm='online' needs batch_size (rows per client per round); "
                         "with all rows use algorithm='em'.")
    return online_em(model, est.batch_size, gamma0=est.online_gamma0, power=est.online_power,
                     participation=est.participation, compressor=est.compressor, track_h=est.track_h,
                     downlink_compressor=est.downlink_compressor)


#: ``algorithm`` name -> factory ``(estimator, model) -> algorithm``
ALGORITHMS = {"fedem": _fedem, "em": _exact_em, "vr-fedem": _vr_fedem, "online": _online}
