"""ServerApp factory: round 0 and the FedEM rounds driven by :class:`FedEMStrategy`."""
from __future__ import annotations

import logging

from flwr.serverapp import ServerApp

from .problems import PROBLEM_TYPES
from .private_strategy import PrivateFedEMStrategy, privacy_from_run_config
from .settings import FedEMSettings
from .strategy import FedEMStrategy

__all__ = ["make_server_app", "make_private_server_app", "problem_from_run_config"]

logger = logging.getLogger(__name__)


def problem_from_run_config(run_config):
    """The problem named by run-config key ``problem`` (default ``"gmm"``), from the allow-list."""
    name = str(run_config.get("problem", "gmm"))
    if name not in PROBLEM_TYPES:
        raise ValueError(f"unknown problem {name!r}; available: {sorted(PROBLEM_TYPES)}.")
    return PROBLEM_TYPES[name].from_spec(run_config)


def _show_logs_in_flower_run_log() -> None:
    """Send fedemstats' INFO records to Flower's handlers (what ``flwr log`` shows),
    unless the user already configured the ``fedemstats`` logger."""
    ours = logging.getLogger("fedemstats")
    if not ours.handlers:
        for handler in logging.getLogger("flwr").handlers:
            ours.addHandler(handler)
        ours.setLevel(logging.INFO)


def make_server_app(problem=None, settings=None, on_result=None) -> ServerApp:
    """A Flower ``ServerApp`` running FedEM with :class:`FedEMStrategy`.

    Parameters
    ----------
    problem : GMMProblem, FactorAnalysisProblem or ImputerProblem, optional
        Default: built from the run config (``[tool.flwr.app.config]``:
        ``n-components``, ``covariance-type``, ``reg-covar``, ``init``).
    settings : FedEMSettings, optional
        Defaults for the run; keys present in the run config override them
        (see :data:`fedemstats.flower.settings.RUN_CONFIG_KEYS`).
    on_result : callable, optional
        Called with the result dict at the end (in-process simulations); the
        result is also written to ``settings.output`` when set.

    Returns
    -------
    flwr.serverapp.ServerApp
    """
    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        _show_logs_in_flower_run_log()
        run_settings = FedEMSettings.from_run_config(context.run_config, base=settings)
        run_problem = problem if problem is not None else problem_from_run_config(context.run_config)
        result = FedEMStrategy(run_problem, run_settings).start(grid)
        logger.info("FedEM finished after %d rounds", result["round"])
        if on_result is not None:
            on_result(result)

    return app


def make_private_server_app(problem=None, settings=None, privacy=None, on_result=None) -> ServerApp:
    """A Flower ``ServerApp`` running differentially private FedEM with SecAgg+
    (:class:`~.private_strategy.PrivateFedEMStrategy`; its nodes run
    :func:`~.private_client.make_private_client_app`).

    Parameters
    ----------
    problem, settings, on_result
        As :func:`make_server_app`.
    privacy : DPConfig, optional
        Defaults for the run; run-config keys ``dp-*``
        (:data:`~.private_strategy.PRIVACY_RUN_CONFIG_KEYS`) override them. The mode is
        always ``"distributed"``.
    """
    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        _show_logs_in_flower_run_log()
        run_settings = FedEMSettings.from_run_config(context.run_config, base=settings)
        run_problem = problem if problem is not None else problem_from_run_config(context.run_config)
        run_privacy = privacy_from_run_config(context.run_config, base=privacy)
        result = PrivateFedEMStrategy(run_problem, run_settings, run_privacy).start(grid, context)
        logger.info("private FedEM finished after %d rounds, epsilon spent %.4g", result["round"],
                    result["privacy"]["epsilon"])
        if on_result is not None:
            on_result(result)

    return app
