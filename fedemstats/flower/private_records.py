"""The instruction of one private release, as the legacy ``FitIns`` SecAgg+ carries.

Flower's SecAgg+ workflow sends each node a ``FitIns``: a list of arrays and a flat dict of
scalars. A release's instruction puts there the public description of the release (kind,
σ, Δ', Ñ, the grid, the node's client index, the release's stream), the problem's spec, the
public privacy settings, and as arrays the public geometry (center, scale) and θ_k. Nothing is
pickled: arrays travel with ``numpy.save`` semantics, parameters are rebuilt from the
allow-listed dataclasses of :mod:`.records` and problems from :data:`.problems.PROBLEM_TYPES`.
"""
from __future__ import annotations

import numpy as np
from flwr.app import ConfigRecord
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays

from ..privacy import DPConfig
from .problems import problem_from_spec
from .records import params_from_records, params_to_records, to_array_record

__all__ = ["KIND_COUNT", "KIND_STATS", "release_fitins", "privacy_from_config", "problem_and_theta"]

#: the two kinds of release: the count at round 0, and statistics at θ
KIND_COUNT, KIND_STATS = "count", "stats"
_ARRAY_NAMES = "arrays"
_SPEC, _THETA = "spec:", "theta:"
#: the public privacy settings a node needs (DPConfig field -> config key)
_PRIVACY_KEYS = {"delta": "dp-delta", "clip": "dp-clip", "level": "dp-level", "geometry": "dp-geometry"}


def release_fitins(kind, problem, privacy, n_features, theta=None, **scalars) -> FitIns:
    """One node's instruction.

    Parameters
    ----------
    kind : {"count", "stats"}
    problem : GMMProblem
    privacy : DPConfig
    n_features : int
    theta : parameters, optional
        θ_k (statistics releases).
    **scalars
        The release's public numbers (``sigma``, ``sensitivity``, ``count``, ``clip-range``,
        ``target-range``, ``n-active``, ``n-clients``, ``stream``, ``client``, ``partition-id``).
    """
    center, scale = privacy.public_geometry(n_features)
    arrays = {"center": center, "scale": scale}
    config = {"kind": kind, **{k.replace("_", "-"): v for k, v in scalars.items()}}
    config.update({_SPEC + k: v for k, v in problem.spec().items()})
    config.update({key: getattr(privacy, field) for field, key in _PRIVACY_KEYS.items()})
    if privacy.client_clip is not None:
        config["dp-client-clip"] = float(privacy.client_clip)
    if theta is not None:
        theta_arrays, theta_scalars = params_to_records(theta)
        arrays.update({_THETA + k: v.numpy() for k, v in theta_arrays.items()})
        config.update({_THETA + k: v for k, v in theta_scalars.items()})
    config[_ARRAY_NAMES] = ",".join(arrays)
    return FitIns(ndarrays_to_parameters(list(arrays.values())), config)


def _arrays(config, parameters) -> dict:
    names = str(config[_ARRAY_NAMES]).split(",")
    values = parameters_to_ndarrays(parameters)
    if len(names) != len(values):
        raise ValueError(f"instruction names {len(names)} arrays but carries {len(values)}.")
    return dict(zip(names, values))


def privacy_from_config(config, parameters) -> DPConfig:
    """The node's view of the privacy settings (σ given, so nothing is calibrated on the node)."""
    arrays = _arrays(config, parameters)
    client_clip = config.get("dp-client-clip")
    return DPConfig(noise_multiplier=float(config["sigma"]), delta=float(config["dp-delta"]),
                    clip=float(config["dp-clip"]), level=str(config["dp-level"]), mode="distributed",
                    geometry=str(config["dp-geometry"]), center=arrays["center"], scale=arrays["scale"],
                    client_clip=None if client_clip is None else float(client_clip))


def problem_and_theta(config, parameters, problem_type=None):
    """The problem (from the allow-list) and θ_k of a statistics release."""
    spec = {k[len(_SPEC):]: v for k, v in config.items() if k.startswith(_SPEC)}
    problem = problem_from_spec(spec, problem_type)
    arrays = {k[len(_THETA):]: np.asarray(v) for k, v in _arrays(config, parameters).items() if k.startswith(_THETA)}
    scalars = {k[len(_THETA):]: v for k, v in config.items() if k.startswith(_THETA)}
    return problem, params_from_records(to_array_record(**arrays), ConfigRecord(scalars))
