"""The problems a Flower run may name: an allow-list, so a message never names an arbitrary class.

A problem class has ``name``, ``spec``, ``from_spec``, ``init_kwargs``, ``build_model``,
``model_from_federation``, ``init_theta``, ``allow_nan`` and ``check_partition`` (see :class:`~fedemstats.flower.gmm.GMMProblem`);
its parameter dataclass is registered in :data:`fedemstats.flower.records.PARAMS_TYPES`.
"""
from __future__ import annotations

from .factor import FactorAnalysisProblem
from .gmm import GMMProblem
from .imputer import ImputerProblem

__all__ = ["PROBLEM_TYPES", "problem_from_spec"]

#: problem name -> class; nodes and servers rebuild problems only from this allow-list
PROBLEM_TYPES = {cls.name: cls for cls in (GMMProblem, FactorAnalysisProblem, ImputerProblem)}


def problem_from_spec(spec, problem_type=None):
    """The problem a server's spec describes, rebuilt from the allow-list.

    Parameters
    ----------
    spec : mapping
        ``problem.spec()`` as it arrived (key ``"problem"`` names the class).
    problem_type : class, optional
        The one problem class this node serves; ``None`` accepts any registered problem.
    """
    name = spec.get("problem")
    cls = PROBLEM_TYPES.get(name)
    if cls is None:
        raise ValueError(f"the server asked for unknown problem {name!r}; registered: {sorted(PROBLEM_TYPES)}.")
    if problem_type is not None and cls is not problem_type:
        raise ValueError(f"this node serves {problem_type.name!r} problems; the server asked for {name!r}.")
    return cls.from_spec(spec)
