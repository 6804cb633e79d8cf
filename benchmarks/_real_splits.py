"""Client splits of the real-data benchmarks (``bench_real_data.py``, ``bench_bits.py``):
a heterogeneous and an iid split per table (:func:`make_splits`, :class:`Split`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans

from _real_tables import SEED
from fedemstats.federation import partition_dirichlet, partition_iid

__all__ = ["N_CLIENTS", "MIN_ROWS_PER_CLIENT", "TARGET_ROWS_PER_CLIENT", "DIRICHLET_ALPHA", "N_KMEANS_LABELS",
           "Split", "n_clients_for", "make_splits"]

logger = logging.getLogger("benchmarks.real_data")

#: Clients per split for tables with at least ``N_CLIENTS * TARGET_ROWS_PER_CLIENT`` rows.
N_CLIENTS = 20
#: Smaller tables get ``n_rows // TARGET_ROWS_PER_CLIENT`` clients (iris: 10, wine: 11).
TARGET_ROWS_PER_CLIENT = 15
#: Every client of every split holds at least this many rows.
MIN_ROWS_PER_CLIENT = 10
#: Dirichlet concentration of the heterogeneous (label-skewed) split.
DIRICHLET_ALPHA = 0.3
#: Tables without a natural label are skewed on this many k-means clusters.
N_KMEANS_LABELS = 5


@dataclass(frozen=True, eq=False)
class Split:
    """Client label of every row of a table (``groups=`` of ``fit``)."""

    name: str  # "het" or "iid"
    groups: np.ndarray
    description: str

    @property
    def n_clients(self):
        return int(np.unique(self.groups).size)

    @property
    def min_rows(self):
        return int(np.bincount(np.unique(self.groups, return_inverse=True)[1]).min())


def n_clients_for(table):
    """Clients of both splits: the natural group count if any, else
    ``min(N_CLIENTS, n // TARGET_ROWS_PER_CLIENT)``."""
    if table.groups is not None:
        return int(np.unique(table.groups).size)
    return int(min(N_CLIENTS, table.n // TARGET_ROWS_PER_CLIENT))


def make_splits(table, seed=SEED):
    """``{"het": Split, "iid": Split}`` with the same number of clients.

    het: the table's natural clients if it has them (Portal: plots), else
    Dirichlet(DIRICHLET_ALPHA) label skew on the natural label, or on
    N_KMEANS_LABELS k-means clusters of the standardised data when there is none.
    iid: :func:`fedemstats.federation.partition_iid`.
    """
    m = n_clients_for(table)
    rng = np.random.default_rng(seed)
    if table.groups is not None:
        het = Split("het", table.groups, f"natural groups ({m} clients)")
    else:
        if table.labels is not None:
            labels, what = table.labels, f"label ({np.unique(table.labels).size} classes)"
        else:
            labels = KMeans(N_KMEANS_LABELS, n_init=10, random_state=seed).fit_predict(table.X)
            what = f"{N_KMEANS_LABELS} k-means clusters"
        groups = partition_dirichlet(labels, m, DIRICHLET_ALPHA, rng, min_rows=MIN_ROWS_PER_CLIENT)
        het = Split("het", groups, f"Dirichlet({DIRICHLET_ALPHA}) on {what}, {m} clients")
    iid = Split("iid", partition_iid(table.n, m, rng), f"iid, {m} clients")
    for split in (het, iid):
        if split.min_rows < MIN_ROWS_PER_CLIENT:
            logger.warning("%s/%s: smallest client holds %d rows", table.name, split.name, split.min_rows)
    return {"het": het, "iid": iid}
