"""The Hypothesis profiles of the property-based test modules, registered in one place.

Each module names its own pair, ``<prefix>-default`` and ``<prefix>-long`` (so modules do
not overwrite each other's example counts); ``HYPOTHESIS_PROFILE=long`` selects the long
one. The default profile is derandomised: ``make test`` and CI draw the same examples on
every run, so a failure reproduces and a pass does not depend on luck. The long profile
stays random (a benchmark-style search for new counter-examples).
"""
import os

from hypothesis import HealthCheck, settings

__all__ = ["profile"]

#: what every profile shares: no per-example deadline, no example database, and the
#: health checks that slow fits on generated data would trip
_COMMON = dict(deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def profile(prefix, default_examples, long_examples):
    """Register ``<prefix>-default`` / ``<prefix>-long`` and return the one selected by
    ``HYPOTHESIS_PROFILE`` (``"long"``; anything else is the default)."""
    settings.register_profile(f"{prefix}-default", max_examples=default_examples, derandomize=True, **_COMMON)
    settings.register_profile(f"{prefix}-long", max_examples=long_examples, **_COMMON)
    chosen = "long" if os.environ.get("HYPOTHESIS_PROFILE", "default") == "long" else "default"
    return settings.get_profile(f"{prefix}-{chosen}")
