"""Curved-exponential-family models: statistics and T-maps (SPEC §5)."""
from .base import Model

__all__ = ["Model"]
