"""Convergence tables of FedEM / VR-FedEM runs against rounds, epochs and bits."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .._validation import check_int, check_positive

__all__ = ["X_AXES", "convergence_table", "first_reach", "rounds_to_reach"]

#: x-axes understood by :func:`first_reach` and :func:`.plots.plot_convergence`
X_AXES = ("round", "epochs", "cumulative_bits", "cumulative_uplink_bits")


def convergence_table(history, n_rows) -> pd.DataFrame:
    """Rounds, epochs and cumulative bits beside ||h||² and the log-likelihood.

    Parameters
    ----------
    history : pandas.DataFrame
        ``FitResult.history`` or an estimator's ``history_`` (needs ``n_cond_exp``).
    n_rows : int
        Rows of the federation: one epoch is ``n_rows`` conditional expectations.

    Returns
    -------
    pandas.DataFrame
        Columns ``round, epochs, cumulative_bits, cumulative_uplink_bits, h_norm2, loglik``.
    """
    n_rows = check_int(n_rows, "n_rows")
    return pd.DataFrame({"round": history["round"].to_numpy(),
                         "epochs": history["n_cond_exp"].cumsum().to_numpy() / n_rows,
                         "cumulative_bits": history["cumulative_bits"].to_numpy(),
                         "cumulative_uplink_bits": history["uplink_bits"].cumsum().to_numpy(),
                         "h_norm2": history["h_norm2"].to_numpy(),
                         "loglik": history["loglik"].to_numpy()})


def first_reach(table, eps, by="round") -> float:
    """Smallest value of ``by`` at which ``h_norm2 <= eps`` (NaN if never)."""
    if by not in X_AXES:
        raise ValueError(f"by must be one of {X_AXES}; got {by!r}.")
    hit = np.flatnonzero(table["h_norm2"].to_numpy() <= eps)
    return float(table[by].iloc[hit[0]]) if hit.size else float("nan")


def rounds_to_reach(algorithm, federation, theta0, eps, max_rounds, random_state=None) -> float:
    """Rounds until ||h(Ŝ_k)||² <= ``eps``, stepping the run only as far as needed.

    Parameters
    ----------
    algorithm : FedEM or VRFedEM
        Built with ``track_h=True``.
    federation, theta0 :
        As for ``algorithm.run``.
    eps : float
    max_rounds : int
    random_state : None, int or Generator

    Returns
    -------
    float
        The first round k >= 1 with ||h||² <= eps, or NaN if none within ``max_rounds``.
    """
    if not getattr(algorithm, "track_h", False):
        raise ValueError("rounds_to_reach needs an algorithm built with track_h=True.")
    eps = check_positive(eps, "eps")
    max_rounds = check_int(max_rounds, "max_rounds", minimum=0)
    run = algorithm.start(federation, theta0, random_state)
    for _ in range(max_rounds):
        row = run.step()
        if row["h_norm2"] <= eps:
            return float(row["round"])
    return float("nan")
