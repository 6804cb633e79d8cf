"""Ragged client data: one contiguous array plus offsets (SPEC §2), and partitioners.

A :class:`Federation` simulates the clients' side of a federated system. The
server-side code (``fedemstats.algorithms``) never reads ``X``; it only asks a
model for per-client *statistics* computed on it.
"""
from __future__ import annotations

import numbers

import numpy as np

from ._grouping import group_rows, label_codes
from ._validation import check_array_2d, check_positive, check_rng

__all__ = [
    "MIN_CLIENT_ROWS",
    "Federation",
    "concat_ranges",
    "partition_iid",
    "partition_dirichlet",
    "partition_shards",
]


#: Fewest rows a client may hold when it sends statistics: the "mean" statistic of a
#: single row is that row itself (for a Gaussian mixture, S1/S0 = x), so a one-row
#: client would send its raw data. Estimators and the Flower client enforce it.
MIN_CLIENT_ROWS = 2


class Federation:
    """Client data held as one array with client offsets.

    Parameters
    ----------
    X : array-like of shape (n_rows, n_features)
        Rows of all clients, client by client.
    offsets : array-like of int of shape (n_clients + 1,)
        Client ``i`` owns rows ``offsets[i]:offsets[i + 1]``. Must start at 0, end
        at ``n_rows`` and be strictly increasing (no empty client).
    weights : {"samples", "uniform"} or array-like of shape (n_clients,)
        Client weights ``w_i``. ``"samples"`` (default) gives ``m_i / N`` so that
        full-participation uncompressed FedEM is EM on the pooled data;
        ``"uniform"`` gives the paper's ``1 / n``. Arrays are normalised to sum 1.
    allow_nan : bool, default=False
        Whether NaN marks missing values (missing-value models set this).
    check_input : bool, default=True
        False skips the check of ``X`` (a C-contiguous float64 array the caller has
        validated: scikit-learn's convention; a pass over the data saved per fit).

    Attributes
    ----------
    n_clients : int
    n_features : int
    sizes : ndarray of shape (n_clients,)
        Rows per client, ``m_i``.
    weights : ndarray of shape (n_clients,)
        Client weights, summing to one.
    """

    def __init__(self, X, offsets, weights="samples", *, allow_nan: bool = False, check_input: bool = True):
        self.X = check_array_2d(X, allow_nan=allow_nan) if check_input else X
        off = np.asarray(offsets, dtype=np.int64).ravel()
        if off.size < 2 or off[0] != 0 or off[-1] != self.X.shape[0]:
            raise ValueError(
                f"offsets must start at 0 and end at n_rows={self.X.shape[0]}; got {off[:3]}...{off[-2:]}."
            )
        sizes = np.diff(off)
        if (sizes <= 0).any():
            empty = np.flatnonzero(sizes <= 0).tolist()
            raise ValueError(f"client(s) {empty[:10]} have no rows; every client needs at least one row.")
        self.offsets = off
        self.sizes = sizes
        self.weights = self._make_weights(weights, sizes)

    @staticmethod
    def _make_weights(weights, sizes) -> np.ndarray:
        if isinstance(weights, str):
            if weights == "samples":
                return sizes / sizes.sum()
            if weights == "uniform":
                return np.full(sizes.size, 1.0 / sizes.size)
            raise ValueError(f"weights must be 'samples', 'uniform' or an array; got {weights!r}.")
        w = np.asarray(weights, dtype=np.float64).ravel()
        if w.shape != sizes.shape or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError(
                f"weights must be {sizes.size} finite non-negative numbers with a positive sum."
            )
        return w / w.sum()

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_groups(cls, X, groups, weights="samples", *, allow_nan: bool = False, check_input: bool = True):
        """Build from per-row client labels (like scikit-learn's ``groups``); ``check_input``
        as for the constructor.

        Returns
        -------
        federation : Federation
        order : ndarray of shape (n_rows,)
            ``X[order]`` is the federation's row order (clients in sorted label order).
        labels : ndarray of shape (n_clients,)
            The label of each client.
        """
        X = check_array_2d(X, allow_nan=allow_nan) if check_input else X
        groups = _check_group_labels(groups)
        if groups.ndim != 1 or groups.shape[0] != X.shape[0]:
            raise ValueError(
                f"groups must be 1-D with one label per row of X ({X.shape[0]}); got shape {groups.shape}."
            )
        labels, inverse, counts = label_codes(groups)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        if inverse.size < 2 or bool(np.all(inverse[1:] >= inverse[:-1])):
            # rows already client by client: no permutation, no copy
            return cls(X, offsets, weights, allow_nan=allow_nan, check_input=check_input), np.arange(X.shape[0]), labels
        rows, order = group_rows(X, inverse, offsets)
        return cls(rows, offsets, weights, allow_nan=allow_nan, check_input=False), order, labels

    @classmethod
    def from_clients(cls, arrays, weights="samples", *, allow_nan: bool = False):
        """Build from a list of per-client arrays of shape (m_i, n_features)."""
        arrays = [check_array_2d(a, name=f"client {i}", allow_nan=allow_nan, min_rows=0)
                  for i, a in enumerate(arrays)]
        if not arrays:
            raise ValueError("at least one client is required.")
        widths = {a.shape[1] for a in arrays}
        if len(widths) != 1:
            raise ValueError(f"all clients must have the same number of features; got {sorted(widths)}.")
        offsets = np.concatenate([[0], np.cumsum([a.shape[0] for a in arrays])])
        return cls(np.vstack(arrays), offsets, weights, allow_nan=allow_nan)

    # ------------------------------------------------------------------ access
    @property
    def n_clients(self) -> int:
        return int(self.sizes.size)

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    def client(self, i: int) -> np.ndarray:
        """Rows of client ``i``, shape (m_i, n_features) (a view)."""
        return self.X[self.offsets[i]:self.offsets[i + 1]]

    def client_ids(self, clients=None) -> np.ndarray:
        """``clients`` as int64 ids (all clients when ``None``); ValueError if one is out of range."""
        clients = np.arange(self.n_clients) if clients is None else np.asarray(clients, dtype=np.int64)
        if clients.size and (clients.min() < 0 or clients.max() >= self.n_clients):
            raise ValueError(f"client ids must be in [0, {self.n_clients}).")
        return clients

    def select(self, clients=None, batch=None, rng=None):
        """Rows of the listed clients as one array with segment offsets.

        Parameters
        ----------
        clients : array-like of int of shape (n_active,), optional
            Client indices; all clients when ``None``.
        batch : int, optional
            If given, each client contributes ``min(batch, m_i)`` rows drawn
            without replacement (``rng`` required); otherwise all its rows.
        rng : numpy.random.Generator, optional

        Returns
        -------
        X_sel : ndarray of shape (n_selected_rows, n_features)
            A view when all rows of a contiguous run of clients are selected.
        seg : ndarray of int64 of shape (n_active + 1,)
            Segment ``j`` (client ``clients[j]``) is ``X_sel[seg[j]:seg[j + 1]]``.
        """
        clients = self.client_ids(clients)
        if batch is None:
            counts = self.sizes[clients]
            seg = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            if clients.size and np.array_equal(clients, np.arange(clients[0], clients[-1] + 1)):
                return self.X[self.offsets[clients[0]]:self.offsets[clients[-1] + 1]], seg
            idx = concat_ranges(self.offsets[clients], counts)
            return self.X[idx], seg
        if rng is None:
            raise ValueError("select(batch=...) needs an rng to draw the mini-batches.")
        counts = np.minimum(self.sizes[clients], int(batch))
        seg = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        idx = _minibatch_rows(self.offsets[clients], self.sizes[clients], counts, rng)
        return self.X[idx], seg


def concat_ranges(starts, counts) -> np.ndarray:
    """Concatenate ``arange(s, s + c)`` for each (s, c) without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    seg_start = np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + (np.arange(total) - seg_start)


def _minibatch_rows(starts, sizes, counts, rng) -> np.ndarray:
    """Per segment, ``counts[j]`` distinct row indices drawn uniformly from its ``sizes[j]`` rows.

    One vectorised draw: a random key per row, then the smallest keys of each client.
    """
    all_rows = concat_ranges(starts, sizes)
    owner = np.repeat(np.arange(sizes.size), sizes)
    keys = rng.random(all_rows.size)
    order = np.lexsort((keys, owner))
    rank = np.arange(all_rows.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    keep = rank < np.repeat(counts, sizes)
    return all_rows[order][keep]


# ---------------------------------------------------------------------- partitioners
def partition_iid(n_rows: int, n_clients: int, random_state=None) -> np.ndarray:
    """Client label per row for an iid split into ``n_clients`` near-equal clients.

    Returns
    -------
    groups : ndarray of int of shape (n_rows,)
    """
    if n_clients < 1 or n_clients > n_rows:
        raise ValueError(f"n_clients must be in [1, n_rows={n_rows}]; got {n_clients}.")
    rng = check_rng(random_state)
    groups = np.arange(n_rows) % n_clients
    return rng.permutation(groups)


def partition_dirichlet(labels, n_clients: int, alpha: float, random_state=None,
                        min_rows: int = MIN_CLIENT_ROWS) -> np.ndarray:
    """Label-skewed split: each class is spread over clients with Dirichlet(alpha) shares.

    Small ``alpha`` (e.g. 0.1) gives strongly heterogeneous clients. ``labels`` may be
    class labels or true mixture components. Every client receives at least
    ``min_rows`` rows (taken from the largest clients; default ``MIN_CLIENT_ROWS``) so
    that no client is empty or holds a single, identifiable row.

    Returns
    -------
    groups : ndarray of int of shape (n_rows,)
    """
    alpha = check_positive(alpha, "alpha")
    labels = np.asarray(labels)
    n_rows = labels.shape[0]
    if n_clients < 1 or n_clients * min_rows > n_rows:
        raise ValueError(f"cannot give {n_clients} clients {min_rows} row(s) each from {n_rows} rows.")
    rng = check_rng(random_state)
    groups = np.empty(n_rows, dtype=np.int64)
    for c in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == c))
        shares = rng.dirichlet(np.full(n_clients, alpha))
        cuts = (np.cumsum(shares)[:-1] * rows.size).astype(np.int64)
        for client, part in enumerate(np.split(rows, cuts)):
            groups[part] = client
    return _fill_small_clients(groups, n_clients, min_rows, rng)


def partition_shards(labels, n_clients: int, shards_per_client: int = 2, random_state=None) -> np.ndarray:
    """McMahan et al.'s pathological non-iid split: sort by label, cut into
    ``n_clients * shards_per_client`` shards, give each client ``shards_per_client`` shards.

    Returns
    -------
    groups : ndarray of int of shape (n_rows,)
    """
    labels = np.asarray(labels)
    n_shards = n_clients * shards_per_client
    if n_shards > labels.shape[0]:
        raise ValueError(f"{n_shards} shards need at least as many rows; got {labels.shape[0]}.")
    rng = check_rng(random_state)
    order = np.argsort(labels, kind="stable")
    shard_of_row = np.empty(labels.shape[0], dtype=np.int64)
    for s, part in enumerate(np.array_split(order, n_shards)):
        shard_of_row[part] = s
    owner = rng.permutation(np.repeat(np.arange(n_clients), shards_per_client))
    return owner[shard_of_row]


def _fill_small_clients(groups, n_clients, min_rows, rng):
    counts = np.bincount(groups, minlength=n_clients)
    for client in np.flatnonzero(counts < min_rows):
        while counts[client] < min_rows:
            donor = int(np.argmax(counts))
            row = rng.choice(np.flatnonzero(groups == donor))
            groups[row] = client
            counts[donor] -= 1
            counts[client] += 1
    return groups


def _label_kind(value) -> str:
    """``"missing"`` (None, NaN), ``"text"`` (str, bytes), ``"number"`` or the type's name."""
    if value is None or (isinstance(value, (float, np.floating)) and value != value):
        return "missing"
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return "text"
    if isinstance(value, (numbers.Real, np.number)):
        return "number"
    return type(value).__name__


def _check_group_labels(groups) -> np.ndarray:
    """``groups`` as an array of labels of one kind (all text or all numbers), none missing.

    Labels are sorted to order the clients; a missing label or a mix of kinds would
    otherwise surface as numpy's sorting error (or, for a list, silently turn 1 and "1"
    into one client).

    Raises
    ------
    ValueError
        A label is None or NaN.
    TypeError
        Labels of different kinds, e.g. strings and integers.
    """
    arr = groups if isinstance(groups, np.ndarray) and groups.dtype != object else None
    if arr is None:
        obj = np.empty(len(groups), dtype=object) if np.ndim(groups) == 1 else np.asarray(groups, dtype=object)
        if obj.ndim == 1:
            obj[:] = list(groups)
            kinds = {}
            for i, value in enumerate(obj):
                kinds.setdefault(_label_kind(value), i)
            if "missing" in kinds:
                raise ValueError(f"groups holds a missing client label (None or NaN) at row {kinds['missing']}; "
                                 "give every row a client label.")
            if len(kinds) > 1:
                raise TypeError(f"groups mixes client labels of different kinds ({', '.join(sorted(kinds))}); "
                                "use labels of one kind, e.g. all strings or all integers.")
            arr = np.array(obj.tolist()) if obj.size else np.zeros(0)
        else:
            arr = obj
    elif arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(f"groups holds a missing client label (NaN) at row {int(np.flatnonzero(np.isnan(arr))[0])}; "
                         "give every row a client label.")
    return arr
