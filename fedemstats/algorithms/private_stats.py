"""What a client contributes to a private round: bounded statistics (issue 14).

Rows are clipped in the public geometry (:func:`public_federation`), then each row's
statistic vector is computed and clipped to the model's bound B
(:meth:`~fedemstats.models.base.Model.dp_row_bound`), so that adding or removing one row
moves a client's *sum* of statistics by at most B. At ``level="client"`` a client
contributes its mean row statistic, clipped to C, and the clients are weighted alike.
"""
from __future__ import annotations

import copy

import numpy as np

from ..federation import Federation
from ..privacy import clip_rows, clip_vectors

__all__ = ["public_model", "public_federation", "public_theta", "row_bound", "sensitivity", "clipped_contributions",
           "ROWS_PER_CHUNK"]

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
    return out


def public_federation(federation, model, config):
    """``federation`` with every row clipped to norm ``config.clip`` in the public geometry
    (each client clips its own rows; nothing leaves it). Weights are uniform: a private
    fit never uses the clients' row counts (see :class:`.private.PrivateFedEM`)."""
    if not model.dp_clips_rows:
        return federation
    center, scale = config.public_geometry(federation.n_features)
    X = clip_rows(federation.X, center, scale, config.clip)
    return Federation(X, federation.offsets, "uniform", allow_nan=model.allow_nan)


def row_bound(model, config) -> float:
    """B, the norm bound of one row's statistic vector (the clip applied to it)."""
    _, scale = config.public_geometry(model.n_features)
    return model.dp_row_bound(model.dp_radius(config.clip, scale))


def sensitivity(model, config) -> float:
    """Δ, the L2 sensitivity of Σ_clients contribution: B (row level) or C (client level)."""
    bound = row_bound(model, config)
    if config.level == "row":
        return bound
    return bound if config.client_clip is None else min(bound, float(config.client_clip))


def clipped_contributions(model, federation, theta, clients, config):
    """Each listed client's bounded contribution and its count.

    Parameters
    ----------
    model : Model
    federation : Federation
        Rows already clipped (:func:`public_federation`).
    theta : parameters
    clients : ndarray of int of shape (m,)
    config : DPConfig

    Returns
    -------
    contributions : ndarray of shape (m, q)
        Row level: Σ_rows clip_B(s(x; θ)); client level: clip_C(mean_rows clip_B(s(x; θ))).
    counts : ndarray of shape (m,)
        Rows (row level) or 1 (client level): what the private count adds up.
    """
    bound = row_bound(model, config)
    clients = np.asarray(clients, dtype=np.int64)
    X, seg = federation.select(clients)
    sums = np.zeros((clients.size, model.q))
    owner = np.repeat(np.arange(clients.size), np.diff(seg))
    for start in range(0, X.shape[0], ROWS_PER_CHUNK):
        rows = X[start:start + ROWS_PER_CHUNK]
        per_row, _ = model.segment_stats(rows, np.arange(rows.shape[0] + 1), theta)
        np.add.at(sums, owner[start:start + rows.shape[0]], clip_vectors(per_row, bound))
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
