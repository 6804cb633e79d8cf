"""Loaders of data shipped with the package (SPEC §10)."""
from .portal import load_portal_rodents

__all__ = ["load_portal_rodents"]
