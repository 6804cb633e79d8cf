"""The problems a Flower run may name: an allow-list, so a message never names an arbitrary class.

A problem class has ``name``, ``spec``, ``from_spec``, ``init_kwargs``, ``build_model``,
``model_from_federation`` and ``init_theta`` (see :class:`~fedemstats.flower.gmm.GMMProblem`);
its parameter dataclass is registered in :data:`fedemstats.flower.records.PARAMS_TYPES`.
"""
from __future__ import annotations

from .factor import FactorAnalysisProblem
from .gmm import GMMProblem

__all__ = ["PROBLEM_TYPES"]

#: problem name -> class; nodes and servers rebuild problems only from this allow-list
PROBLEM_TYPES = {cls.name: cls for cls in (GMMProblem, FactorAnalysisProblem)}
