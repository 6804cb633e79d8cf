"""Plots of ||h||² against rounds, epochs or bits (matplotlib, optional extra "plot")."""
from __future__ import annotations

from .convergence import X_AXES

__all__ = ["plot_convergence"]


def plot_convergence(tables, x="round", ax=None, eps=None, title=None):
    """Plot ||h||² (log scale) against ``x`` for several runs.

    Parameters
    ----------
    tables : dict of str -> DataFrame
        Outputs of :func:`convergence_table`, one per method.
    x : {"round", "epochs", "cumulative_bits", "cumulative_uplink_bits"}
    ax : matplotlib Axes, optional
    eps : float, optional
        Draw the target level ε.
    title : str, optional

    Returns
    -------
    matplotlib.axes.Axes
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {X_AXES}; got {x!r}.")
    import matplotlib.pyplot as plt  # optional dependency (extra "plot")
    ax = plt.subplots(figsize=(5, 3.5))[1] if ax is None else ax
    for name, tab in tables.items():
        ax.semilogy(tab[x], tab["h_norm2"], label=name)
    if eps is not None:
        ax.axhline(eps, color="grey", linestyle=":", label=f"ε = {eps:g}")
    ax.set_xlabel({"round": "rounds", "epochs": "epochs (conditional expectations / N)",
                   "cumulative_bits": "cumulative bits (up + down)",
                   "cumulative_uplink_bits": "cumulative uplink bits"}[x])
    ax.set_ylabel("||h(Ŝ)||²")
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small")
    return ax
