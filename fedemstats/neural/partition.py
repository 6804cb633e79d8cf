"""Client splits for the neural bridge: thin wrappers of :mod:`fedemstats.federation`.

The partitioners themselves live in ``federation.py`` (shared with the
statistics part); this module only turns their per-row client labels into the
``[(X_k, y_k), ...]`` lists that :func:`~fedemstats.neural.hard_em.run_hard_em` takes.
"""
from __future__ import annotations

import numpy as np

from ..federation import partition_dirichlet, partition_iid, partition_shards

__all__ = ["split_clients", "iid_clients", "pathological_clients", "dirichlet_clients",
           "partition_iid", "partition_shards", "partition_dirichlet", "unique_labels"]


def unique_labels(values, name):
    """Sorted unique labels and the index of each value, as ``numpy.unique(..., return_inverse=True)``.

    Parameters
    ----------
    values : array-like of shape (n,)
    name : str
        The argument's name, for the message.

    Returns
    -------
    labels : ndarray of shape (n_labels,)
    inverse : ndarray of int of shape (n,)

    Raises
    ------
    ValueError
        If the labels cannot be sorted: mixed types (e.g. int and str) or None.
    """
    values = np.asarray(values)
    try:
        return np.unique(values, return_inverse=True)
    except TypeError as exc:  # numpy's message names neither the argument nor the cause
        kinds = sorted({type(v).__name__ for v in values.ravel()})
        raise ValueError(f"{name} mixes labels of types {kinds} that cannot be sorted; use labels of one "
                         f"type (all int or all str, no None).") from exc


def split_clients(X, y, groups):
    """Per-client ``(X_k, y_k)`` pairs from a per-row client label.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features)
    y : ndarray of shape (n_rows,)
    groups : ndarray of shape (n_rows,)
        Any hashable labels; clients are ordered by sorted unique label.

    Returns
    -------
    clients : list of (ndarray (n_k, n_features), ndarray (n_k,))
    """
    X, y, groups = np.asarray(X), np.asarray(y), np.asarray(groups)
    if not (X.shape[0] == y.shape[0] == groups.shape[0]):
        raise ValueError(f"X, y and groups must have the same number of rows; "
                         f"got {X.shape[0]}, {y.shape[0]}, {groups.shape[0]}.")
    _, inverse = unique_labels(groups, "groups")
    order = np.argsort(inverse, kind="stable")
    cuts = np.flatnonzero(np.diff(inverse[order])) + 1
    return [(X[rows], y[rows]) for rows in np.split(order, cuts)]


def iid_clients(X, y, n_clients, random_state=None):
    """``n_clients`` near-equal iid clients (:func:`~fedemstats.federation.partition_iid`)."""
    return split_clients(X, y, partition_iid(len(y), n_clients, random_state))


def pathological_clients(X, y, n_clients, shards_per_client=2, random_state=None):
    """McMahan et al.'s non-iid split: sort by label, ``shards_per_client`` shards each
    (:func:`~fedemstats.federation.partition_shards`)."""
    return split_clients(X, y, partition_shards(y, n_clients, shards_per_client, random_state))


def dirichlet_clients(X, y, n_clients, alpha, random_state=None):
    """Dirichlet(alpha) label skew (:func:`~fedemstats.federation.partition_dirichlet`)."""
    return split_clients(X, y, partition_dirichlet(y, n_clients, alpha, random_state))
