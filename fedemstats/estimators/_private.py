"""The estimators' private fit (``privacy=DPConfig(...)``, issue 14; ``docs/privacy.md``).

What is refused, and why (each ValueError names the argument):

* ``algorithm`` other than ``"fedem"``: ``"em"`` claims exact EM (scikit-learn parity), which
  noise breaks; VR-FedEM and online EM re-use or subsample rows in ways this accountant
  does not cover.
* ``batch_size``: mini-batches inside a client (row subsampling) are not accounted.
* ``n_init > 1``: each start would spend the budget again.
* a lossy ``compressor`` (the uplink) and per-client participation rates
  (:class:`~fedemstats.algorithms.private.PrivateFedEM`).
"""
from __future__ import annotations

from ..algorithms.private import PrivateFedEM
from ..algorithms.private_stats import public_federation, public_model, public_theta
from ..privacy import check_privacy

__all__ = ["run_private"]


def check_private_settings(est):
    """ValueError naming the estimator argument that a private fit cannot honour."""
    check_privacy(est.privacy)
    if est.algorithm != "fedem":
        raise ValueError(f"algorithm={est.algorithm!r} cannot run with privacy: 'em' claims exact EM, which "
                         "noise breaks, and 'vr-fedem' / 'online' are not accounted. Use algorithm='fedem'.")
    if getattr(est, "batch_size", None) is not None:
        raise ValueError("batch_size must be None with privacy (row subsampling is not accounted).")
    if getattr(est, "n_init", 1) != 1:
        raise ValueError("n_init must be 1 with privacy (each start spends the budget again).")


def run_private(est, model, federation, rng, max_iter):
    """Run :class:`PrivateFedEM` for ``max_iter - 1`` rounds after round 0.

    The model's data-derived centring and the estimator's data-derived θ_0 are replaced by
    the public geometry and :func:`public_theta`; every row is clipped on its client.

    Returns
    -------
    FitResult
        With ``result.model``, the public model whose ``t_map`` made ``result.theta``.
    """
    check_private_settings(est)
    cfg = est.privacy
    private_model = public_model(model, cfg)
    clipped = public_federation(federation, private_model, cfg)
    init = {"method": est.init_params} if hasattr(est, "init_params") and private_model.init_methods else {}
    theta0 = public_theta(private_model, cfg, rng, **init)
    algo = PrivateFedEM(private_model, cfg, participation=est.participation, step_size=est.step_size,
                        safeguard=est.safeguard, compressor=est.compressor,
                        downlink_compressor=est.downlink_compressor)
    result = algo.run(clipped, theta0, max_iter - 1, rng)
    result.model = private_model
    return result
