"""Exact per-round accounting of bits sent up (clients -> server) and down.

Shared by the statistics algorithms and the neural bridge so that every method
reports communication the same way.
"""
from __future__ import annotations

import numpy as np

__all__ = ["BitLedger", "FLOAT64_BITS", "FLOAT32_BITS", "INDEX_BITS"]

FLOAT64_BITS = 64
FLOAT32_BITS = 32
INDEX_BITS = 32  # one client id or coordinate index on the wire


class BitLedger:
    """Per-round uplink and downlink bit counts.

    Call :meth:`record` once per round. Rounds may also record a setup phase as
    round 0 (e.g. the mean-field initialisation upload).

    Attributes
    ----------
    rounds, uplink, downlink, n_active : list of int
        One entry per recorded round.
    """

    def __init__(self):
        self.rounds: list[int] = []
        self.uplink: list[int] = []
        self.downlink: list[int] = []
        self.n_active: list[int] = []

    def record(self, round_: int, uplink_bits: int, downlink_bits: int, n_active: int) -> None:
        if uplink_bits < 0 or downlink_bits < 0:
            raise ValueError("bit counts cannot be negative.")
        self.rounds.append(int(round_))
        self.uplink.append(int(uplink_bits))
        self.downlink.append(int(downlink_bits))
        self.n_active.append(int(n_active))

    @property
    def total_uplink(self) -> int:
        return int(sum(self.uplink))

    @property
    def total_downlink(self) -> int:
        return int(sum(self.downlink))

    @property
    def total(self) -> int:
        return self.total_uplink + self.total_downlink

    def cumulative(self) -> np.ndarray:
        """Cumulative up + down bits after each recorded round, shape (n_rounds,)."""
        return np.cumsum(np.asarray(self.uplink, dtype=np.int64) + np.asarray(self.downlink, dtype=np.int64))

    def as_dict(self) -> dict:
        return {
            "round": list(self.rounds),
            "uplink_bits": list(self.uplink),
            "downlink_bits": list(self.downlink),
            "n_active": list(self.n_active),
        }

    def __len__(self):
        return len(self.rounds)

    def __repr__(self):
        return (f"BitLedger(rounds={len(self)}, uplink={self.total_uplink}, "
                f"downlink={self.total_downlink})")
