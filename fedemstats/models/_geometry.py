"""Placeholder (replaced by the geometry layer): the identity geometry."""
from __future__ import annotations

import numpy as np

__all__ = ["Geometry", "IdentityGeometry"]


class Geometry:
    blocks: np.ndarray

    def forward(self, x):
        raise NotImplementedError

    def inverse(self, y):
        raise NotImplementedError

    def step_fraction(self, s_hat, step) -> float:
        raise NotImplementedError


class IdentityGeometry(Geometry):
    def __init__(self, layout):
        self.blocks = layout.offsets

    def forward(self, x):
        return np.array(x, dtype=np.float64)

    def inverse(self, y):
        return np.array(y, dtype=np.float64)

    def step_fraction(self, s_hat, step) -> float:
        return 1.0
