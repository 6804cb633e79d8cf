"""What a client contributes to a private round: bounded statistics (issue 14).

Each row's statistic vector is computed at the public iterate θ_k, mapped into the
coordinates where the noise will be added (:func:`noise_geometry`) and clipped there to the
model's bound B (:meth:`~fedemstats.models.base.Model.dp_row_bound`), so that adding or
removing one row moves a client's *sum* of statistics, in those coordinates, by at most B.
At ``level="client"`` a client contributes its mean row statistic, clipped to C, and the
clients are weighted alike.

Two geometries (``DPConfig.geometry``):

* ``"public"``: rows are first clipped to norm R in the public geometry
  (:func:`public_federation`); raw statistic coordinates; B = B(ρ) with ρ the clip radius
  in the model's coordinates.
* ``"model"`` (models with ``dp_model_geometry``, the Gaussian mixtures): the current
  model's whitening (:meth:`~fedemstats.models.base.Model.geometry` at θ_k), an invertible
  *linear* map P fixed by the public θ_k. Rows are not clipped; each row's whitened statistic
  is clipped to B(R), so that a row within whitened radius R of the components passes
  unchanged and an outlier is down-weighted as a whole (its r, r u, r u uᵀ scaled alike,
  which leaves its moments undistorted). The noise is then relative to each component's
  own scale (sufficient-statistic perturbation in the model's geometry, as pfl does for
  diagonal covariances); the server maps the noisy sum back with P⁻¹, post-processing.
"""
from __future__ import annotations

import copy

import numpy as np

from ..federation import Federation
from ..models._geometry import IdentityGeometry
from ..privacy import clip_rows, clip_vectors

__all__ = ["public_model", "public_federation", "public_theta", "row_bound", "sensitivity", "clipped_contributions",
           "uses_model_geometry", "noise_geometry", "ROWS_PER_CHUNK"]

#: rows whose per-row statistics are held at once (memory ROWS_PER_CHUNK × q floats)
ROWS_PER_CHUNK = 2048


def public_model(model, config):
    """A copy of ``model`` whose shift / scale are the public geometry of ``config`` (the
    data-derived centring of a non-private fit would leak)."""
    out = copy.copy(model)
    center, scale = config.public_geometry(model.n_features)
    if hasattr(out, "shift"):
        out.shift = center
    if hasattr(out, "scale"):
        out.scale = scale
    if hasattr(out, "column_scale"):
        out.column_scale = scale  # a mixture's T-map floor, in the public geometry's units
    return out


def uses_model_geometry(model, config) -> bool:
    """Whether the statistics are clipped and noised in the model's whitened geometry."""
    return config.geometry == "model" and model.dp_model_geometry


def noise_geometry(model, config, theta):
    """The coordinates in which a release at θ is clipped and noised: the model's geometry
    at (θ, E_θ[s]) (a function of the public θ alone) or the raw coordinates."""
    if uses_model_geometry(model, config):
        return model.geometry(theta, model.expected_stats(theta))
    return IdentityGeometry(model.layout)


def public_federation(federation, model, config):
    """``federation`` with every row clipped to norm ``config.clip`` in the public geometry
    (each client clips its own rows; nothing leaves it), unless the statistics are clipped
    in the model's geometry instead. Weights are uniform: a private fit never uses the
    clients' row counts (see :class:`.private.PrivateFedEM`)."""
    if not model.dp_clips_rows:
        return federation
    if uses_model_geometry(model, config):
        return Federation(federation.X, federation.offsets, "uniform", allow_nan=model.allow_nan)
    center, scale = config.public_geometry(federation.n_features)
    X = clip_rows(federation.X, center, scale, config.clip)
    return Federation(X, federation.offsets, "uniform", allow_nan=model.allow_nan)


def row_bound(model, config) -> float:
    """B, the norm bound of one row's statistic vector (the clip applied to it): B(R) in
    the model's whitened geometry, B(ρ) with ρ the public clip radius in model units otherwise."""
    if uses_model_geometry(model, config):
        return model.dp_row_bound(float(config.clip))
    _, scale = config.public_geometry(model.n_features)
    return model.dp_row_bound(model.dp_radius(config.clip, scale))


def sensitivity(model, config) -> float:
    """Δ, the L2 sensitivity of Σ_clients contribution: B (row level) or C (client level)."""
    bound = row_bound(model, config)
    if config.level == "row":
        return bound
    return bound if config.client_clip is None else min(bound, float(config.client_clip))


def clipped_contributions(model, federation, theta, clients, config, geometry=None):
    """Each listed client's bounded contribution and its count, in the noise's coordinates.

    Parameters
    ----------
    model : Model
    federation : Federation
        Prepared by :func:`public_federation`.
    theta : parameters
    clients : ndarray of int of shape (m,)
    config : DPConfig
    geometry : Geometry, optional
        P, the coordinates of the release; default :func:`noise_geometry` at θ.

    Returns
    -------
    contributions : ndarray of shape (m, q)
        In P's coordinates. Row level: Σ_rows clip_B(P s(x; θ)); client level:
        clip_C(mean_rows clip_B(P s(x; θ))). ``geometry.inverse`` maps them (and any noise
        added to them) back to raw statistics.
    counts : ndarray of shape (m,)
        Rows (row level) or 1 (client level): what the private count adds up.
    """
    geometry = noise_geometry(model, config, theta) if geometry is None else geometry
    bound = row_bound(model, config)
    clients = np.asarray(clients, dtype=np.int64)
    X, seg = federation.select(clients)
    sums = np.zeros((clients.size, model.q))
    owner = np.repeat(np.arange(clients.size), np.diff(seg))
    for start in range(0, X.shape[0], ROWS_PER_CHUNK):
        rows = X[start:start + ROWS_PER_CHUNK]
        per_row, _ = model.segment_stats(rows, np.arange(rows.shape[0] + 1), theta)
        # np.add.at adds row by row in row order, so a client's sum does not depend on how the
        # rows are chunked or which other clients share a chunk: a Flower node's sum equals the
        # in-process one bit for bit, which the distributed mode's round-to-grid relies on
        # (a reduceat over chunk pieces would not: _patterns.segment_sums)
        np.add.at(sums, owner[start:start + rows.shape[0]], clip_vectors(geometry.forward(per_row), bound))
    sizes = np.diff(seg).astype(np.float64)
    if config.level == "row":
        return sums, sizes
    return clip_vectors(sums / sizes[:, None], sensitivity(model, config)), np.ones(clients.size)


#: the data-independent stand-in federation of :func:`public_theta`: clients × rows each
PUBLIC_INIT_CLIENTS, PUBLIC_INIT_ROWS = 20, 50


def public_theta(model, config, rng, **init_kwargs):
    """θ_0 that costs no privacy: the model's own initialisation run on rows drawn from the
    public geometry alone (N(center, (scale · clip / (2 √d))²), clipped; Poisson(1) counts
    for a count model), never on the clients' data.

    Parameters
    ----------
    model : Model
        With its public geometry (:func:`public_model`).
    config : DPConfig
    rng : numpy.random.Generator
    **init_kwargs
        Passed to ``model.init_theta`` (e.g. ``method="kmeans"``).
    """
    d = model.n_features
    shape = (PUBLIC_INIT_CLIENTS * PUBLIC_INIT_ROWS, d)
    if model.dp_clips_rows:
        center, scale = config.public_geometry(d)
        u = rng.standard_normal(shape) * config.clip / (2.0 * np.sqrt(d))
        X = clip_rows(center + scale * u, center, scale, config.clip)
    else:
        X = rng.poisson(1.0, shape).astype(np.float64)
    offsets = np.arange(0, shape[0] + 1, PUBLIC_INIT_ROWS)
    return model.init_theta(Federation(X, offsets, allow_nan=model.allow_nan), rng=rng, **init_kwargs)
