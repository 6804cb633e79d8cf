"""What every Flower problem shares: equality by public spec and the complete-row defaults.

A problem (:class:`~fedemstats.flower.gmm.GMMProblem`, ...) is what server and nodes must agree
on besides the FedEM settings; two problems are equal when their public specs are, which is
what a node compares. Problems whose models need complete rows inherit the defaults here.
"""
from __future__ import annotations

__all__ = ["Problem"]


class Problem:
    """Base of the Flower problems: ``spec()``-equality, not hashable (problems are mutable
    parameter holders), and complete rows by default."""

    #: nodes refuse NaN and describe their rows with counts, means and centred scatters
    allow_nan = False

    def __eq__(self, other):
        return type(other) is type(self) and self.spec() == other.spec()

    __hash__ = None

    @staticmethod
    def check_partition(X) -> None:
        """Refuse a node's rows the model cannot learn from: nothing beyond the node's own checks
        (finite complete rows, at least two) for a complete-row model."""
