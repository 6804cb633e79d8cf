"""Loaders of data shipped with the package (SPEC §10)."""
from .portal import hide_cells, lagged_years, load_portal_rodents

__all__ = ["load_portal_rodents", "lagged_years", "hide_cells"]
