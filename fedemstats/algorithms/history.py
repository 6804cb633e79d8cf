"""Per-round records of an algorithm run, turned into a pandas DataFrame."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["History", "HISTORY_COLUMNS"]

#: column order of ``history_`` (SPEC §7)
HISTORY_COLUMNS = ("round", "loglik", "h_norm2", "uplink_bits", "downlink_bits", "n_active", "step_size",
                   "n_cond_exp")


class History:
    """Append-only list of round records.

    ``loglik`` of round k is the mean log-likelihood at the parameters the round
    started from, θ_{k-1} = T(Ŝ_{k-1}) (as scikit-learn's lower bound is computed
    in the E-step); under partial participation it is the Horvitz-Thompson estimate
    over the active clients. ``h_norm2`` is ||h(Ŝ_k)||² after the round.
    ``n_cond_exp`` is the number of per-row conditional expectations s̄_ij(θ) the
    round computed (the cost unit K_CE of paper 003, Theorems 1 and 3); its running
    sum divided by the number of rows counts epochs. Diagnostic passes (``h_norm2``)
    are not counted.
    """

    def __init__(self):
        self._rows: list[dict] = []

    def append(self, **row) -> None:
        self._rows.append(row)

    def last(self) -> dict:
        return self._rows[-1]

    def delta(self, column: str) -> float:
        """Change of ``column`` over the last round (inf if unavailable)."""
        if len(self._rows) < 2:
            return np.inf
        return float(self._rows[-1][column] - self._rows[-2][column])

    def __len__(self):
        return len(self._rows)

    def to_frame(self) -> pd.DataFrame:
        # imported here: a Flower ClientApp process imports this module and never builds a frame
        import pandas as pd

        frame = pd.DataFrame(self._rows)
        extra = [c for c in frame.columns if c not in HISTORY_COLUMNS]
        cols = [c for c in HISTORY_COLUMNS if c in frame.columns] + extra
        frame = frame[cols]
        frame["cumulative_bits"] = (frame["uplink_bits"] + frame["downlink_bits"]).cumsum()
        return frame
