"""DPConfig: what the user asks of a private fit, validated in one place."""
from __future__ import annotations

import dataclasses
from numbers import Integral, Real

import numpy as np

__all__ = ["DPConfig", "LEVELS", "MODES", "GEOMETRIES", "check_privacy"]

#: neighbouring relation: add/remove one row, or one whole client
LEVELS = ("row", "client")
#: who adds the noise: the server to the aggregate, or each client its share (needs secure aggregation)
MODES = ("central", "distributed")
#: accountants of ``dp_accounting``: Rényi DP or privacy loss distributions
ACCOUNTANT_NAMES = ("rdp", "pld")
#: where rows' statistics are clipped and noised: the current model's whitened geometry, or
#: the public one (rows clipped to norm ``clip`` after the public shift / scale)
GEOMETRIES = ("model", "public")


@dataclasses.dataclass(frozen=True)
class DPConfig:
    """(ε, δ)-differential privacy of a federated EM fit (``docs/privacy.md``).

    Parameters
    ----------
    epsilon : float, optional
        Target ε of the whole fit; the noise multiplier is calibrated from it, ``delta``
        and ``max_iter``. Give either ``epsilon`` or ``noise_multiplier``.
    delta : float, default=1e-5
        Target δ, in (0, 1).
    clip : float, default=3.0
        R, the radius that bounds one row's statistic vector at B (``model.dp_row_bound``).
        ``geometry="public"``: each row is clipped to norm R in the public geometry,
        u = (x − center) / scale, before its statistics are computed. ``geometry="model"``:
        R is a radius in the current model's whitened coordinates (a Mahalanobis radius:
        a row within R of its component passes unclipped) and each row's whitened
        statistic vector is clipped to B.
    level : {"row", "client"}, default="row"
        Neighbouring datasets differ by one row, or by one whole client.
    mode : {"central", "distributed"}, default="central"
        ``"central"``: the (trusted) server adds the noise to the aggregate.
        ``"distributed"``: each active client adds N(0, σ²Δ'²/n_active) and puts its share on
        secure aggregation's integer grid; the stated guarantee needs the server to see only
        the sum, which Flower's SecAgg+ provides (``fedemstats.flower.make_private_server_app``;
        ``docs/privacy.md``, "Secure aggregation on Flower").
    noise_multiplier : float, optional
        σ (noise std over sensitivity); when given, the ε spent is reported instead.
    client_clip : float, optional
        C (``level="client"``): each client's contribution is clipped to norm C; default the
        row-statistic bound B (then the clip never binds).
    center, scale : float or array-like of shape (n_features,), optional
        The public geometry (not computed from the data): default 0 and 1.
    public_count : int, optional
        The number of rows (``level="row"``) or clients (``"client"``) if it is public;
        otherwise a noisy count is released once at round 0 and accounted.
    accountant : {"rdp", "pld"}, default="rdp"
        ``dp_accounting``'s Rényi-DP or privacy-loss-distribution accountant.
    geometry : {"model", "public"}, default="model"
        Where statistics are clipped and noised (``docs/privacy.md``). ``"model"``: in the
        whitened geometry of the current (public) iterate, so that the noise is relative
        to each component's own scale, as pfl's sufficient-statistic perturbation does
        for diagonal covariances; models without such a path (``Model.dp_model_geometry``
        False) use ``"public"``.
    """

    epsilon: float | None = None
    delta: float = 1e-5
    clip: float = 3.0
    level: str = "row"
    mode: str = "central"
    noise_multiplier: float | None = None
    client_clip: float | None = None
    center: object = None
    scale: object = None
    public_count: int | None = None
    accountant: str = "rdp"
    geometry: str = "model"

    def public_geometry(self, n_features):
        """(center, scale) as arrays of shape (n_features,)."""
        def per_feature(value, name, default):
            if value is None:
                return np.full(n_features, default)
            value = np.asarray(value, dtype=np.float64)
            if value.ndim > 1 or value.size not in (1, n_features):
                raise ValueError(f"privacy: {name} must be a number or have shape ({n_features},), one value "
                                 f"per feature; got shape {value.shape}.")
            return np.broadcast_to(value, (n_features,)).copy()
        center, scale = per_feature(self.center, "center", 0.0), per_feature(self.scale, "scale", 1.0)
        if not (np.all(np.isfinite(center)) and np.all(np.isfinite(scale)) and np.all(scale > 0)):
            raise ValueError("privacy: center must be finite and scale finite and > 0.")
        return center, scale


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"privacy: {name} must be a finite number > 0; got {value!r}.")
    return float(value)


def check_privacy(config) -> DPConfig:
    """Validate a :class:`DPConfig`; the ValueError names the argument at fault.

    Returns
    -------
    DPConfig
        The same object (it is frozen).
    """
    if not isinstance(config, DPConfig):
        raise ValueError(f"privacy must be None or a DPConfig; got {type(config).__name__}.")
    if (config.epsilon is None) == (config.noise_multiplier is None):
        raise ValueError("privacy: give exactly one of epsilon (to calibrate the noise) or noise_multiplier "
                         "(to report the epsilon spent).")
    if config.epsilon is not None:
        _positive(config.epsilon, "epsilon")
    if config.noise_multiplier is not None:
        _positive(config.noise_multiplier, "noise_multiplier")
    if isinstance(config.delta, bool) or not isinstance(config.delta, Real) or not 0.0 < config.delta < 1.0:
        raise ValueError(f"privacy: delta must lie in (0, 1); got {config.delta!r}.")
    _positive(config.clip, "clip")
    if config.client_clip is not None:
        _positive(config.client_clip, "client_clip")
    if config.level not in LEVELS:
        raise ValueError(f"privacy: level must be one of {LEVELS}; got {config.level!r}.")
    if config.mode not in MODES:
        raise ValueError(f"privacy: mode must be one of {MODES}; got {config.mode!r}.")
    if config.geometry not in GEOMETRIES:
        raise ValueError(f"privacy: geometry must be one of {GEOMETRIES}; got {config.geometry!r}.")
    if config.accountant not in ACCOUNTANT_NAMES:
        raise ValueError(f"privacy: accountant must be one of {ACCOUNTANT_NAMES}; got {config.accountant!r}.")
    if config.public_count is not None and (not isinstance(config.public_count, Integral)
                                            or config.public_count < 1):
        raise ValueError(f"privacy: public_count must be a positive int; got {config.public_count!r}.")
    return config
