"""Stochastic baselines in expectation space, each a *setting* of the FedEM engine.

* :func:`online_em` — mini-batch online EM (Cappé & Moulines 2009; SPEC §4):
  Ŝ_{k+1} = Ŝ_k + γ_{k+1} (S̄_batch(T(Ŝ_k)) − Ŝ_k), γ_k = γ_0 k^{−a}, a in (1/2, 1].
  With identity compression, full participation, V = 0 and α = 0, a FedEM round
  gives H = Σ_i w_i S_{k+1,i} − Ŝ_k, i.e. exactly this recursion on the stratified
  mini-batch (b rows per client, client weights w_i).
* :func:`stochastic_fedem` — FedEM with mini-batch oracles (σ² > 0 in A7 /
  Theorem 1 of paper 003).
* :func:`naive_compressed_em` — compressed EM without control variates (α = 0,
  V = 0), the baseline paper 003 (§2) shows stalls under heterogeneity.

All three return a configured :class:`~fedemstats.algorithms.fedem.FedEM`; no math
is repeated here.
"""
from __future__ import annotations

from .._validation import check_int, check_positive
from .fedem import FedEM
from .step_size import StepSize

__all__ = ["online_em", "stochastic_fedem", "naive_compressed_em", "ONLINE_POWER_RANGE",
           "DEFAULT_ONLINE_POWER"]

#: Robbins-Monro exponents allowed for γ_k = γ_0 k^{-a}: Σγ = ∞ needs a ≤ 1, Σγ² < ∞ needs a > 1/2
ONLINE_POWER_RANGE = (0.5, 1.0)
#: a common choice in Cappé & Moulines (2009)' experiments
DEFAULT_ONLINE_POWER = 0.6


def online_em(model, batch_size, *, gamma0=1.0, power=DEFAULT_ONLINE_POWER, participation=1.0,
              compressor="identity", track_h=False, downlink_compressor="auto") -> FedEM:
    """Mini-batch online EM (Cappé & Moulines 2009) as a FedEM setting.

    Parameters
    ----------
    model : Model
    batch_size : int
        Rows per client per round (capped at the client's size).
    gamma0 : float, default=1.0
        Scale of γ_k = γ_0 k^{-a}; must be in (0, 1] so that Ŝ stays a convex
        combination of mini-batch statistics.
    power : float, default=0.6
        Exponent a in (1/2, 1].
    participation : float, int or Participation, default=1.0
        Partial participation gives a Horvitz-Thompson mini-batch estimate.
    compressor : str or Compressor, default="identity"
        Compression without memories (naive); keep "identity" for the textbook method.
    track_h : bool, default=False
    downlink_compressor : "auto", None, str or Compressor, default="auto"
        The broadcast (:class:`~.base.Algorithm`).

    Returns
    -------
    FedEM

    Raises
    ------
    ValueError
        If ``power`` is outside (1/2, 1] or ``gamma0`` outside (0, 1].
    """
    low, high = ONLINE_POWER_RANGE
    power = check_positive(power, "online power a")
    if not low < power <= high:
        raise ValueError(f"online EM needs a step-size power a in (1/2, 1] (Robbins-Monro); got {power!r}.")
    gamma0 = check_positive(gamma0, "gamma0")
    if gamma0 > 1.0:
        raise ValueError(f"online EM needs gamma0 in (0, 1]; got {gamma0!r}.")
    return FedEM(model, compressor=compressor, participation=participation,
                 step_size=StepSize(gamma0, power), alpha=0.0, v_init="zero",
                 batch_size=check_int(batch_size, "batch_size"), track_h=track_h, safeguard=False,
                 downlink_compressor=downlink_compressor)


def stochastic_fedem(model, batch_size, *, compressor="identity", participation=1.0, step_size="auto",
                     alpha=None, track_h=False, precondition=True, safeguard=True,
                     downlink_compressor="auto", fine_start=True) -> FedEM:
    """FedEM whose clients use mini-batches of ``batch_size`` rows (σ² > 0, Theorem 1).

    Returns
    -------
    FedEM
    """
    return FedEM(model, compressor=compressor, participation=participation, step_size=step_size,
                 alpha=alpha, v_init="mean-field", batch_size=check_int(batch_size, "batch_size"),
                 track_h=track_h, precondition=precondition, safeguard=safeguard,
                 downlink_compressor=downlink_compressor, fine_start=fine_start)


def naive_compressed_em(model, compressor, *, participation=1.0, step_size="auto", batch_size=None,
                        track_h=False, precondition=True) -> FedEM:
    """Compressed federated EM without control variates: α = 0, V_{0,i} = 0 (SPEC §3).

    Clients send Quant(S_{k+1,i} − Ŝ_k); under heterogeneity these differences do not
    vanish at the fixed point, so the compression noise never does (paper 003 §2). It
    compresses in the same geometry as FedEM, without the safeguard: a baseline whose
    only difference from FedEM is the memories.

    Returns
    -------
    FedEM
    """
    return FedEM(model, compressor=compressor, participation=participation, step_size=step_size,
                 alpha=0.0, v_init="zero", batch_size=batch_size, track_h=track_h, safeguard=False,
                 precondition=precondition)
