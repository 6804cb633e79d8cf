"""The ``fedemstats demo`` job: why control variates matter under heterogeneity.

A seeded 2-D mixture of 4 Gaussians is split over 30 clients with Dirichlet(0.1)
shares per component, so most clients see one or two components only. Three
runs from the same start are compared: exact federated EM, FedEM with random
dithering, and naive compressed EM (the same compressor, no memories: α = 0,
V = 0), which the paper shows stalls at a bias floor (paper 003, Section 2).

To compare another method, add an entry to :func:`demo_methods`; the table, the
CSV and the figure follow. Outputs (in the ``--out`` folder, written atomically):

* ``demo_table.csv``: one row per method and tabulated round, columns
  ``method, round, loglik, h_norm2, cumulative_Mbit`` (tidy, so new methods or
  rounds add rows, never columns);
* ``demo_convergence.png``: ||h||² per round and per bit sent.
"""
from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

DEMO_SEED = 2021
DEMO_CLIENTS = 30
DEMO_DIRICHLET = 0.1
DEMO_ROWS = 6000
DEMO_ROUNDS = 150
DEMO_COMPRESSOR = "dither:s=2"
DEMO_STEP = 0.1
#: rounds shown in the table (the last round run is always added)
TABLE_ROUNDS = (0, 1, 2, 5, 10, 20, 50, 100, 150)
TABLE_COLUMNS = ("method", "round", "loglik", "h_norm2", "cumulative_Mbit")
TABLE_FILE = "demo_table.csv"
FIGURE_FILE = "demo_convergence.png"
FIGURE_DPI = 110


def demo_data(seed=DEMO_SEED):
    """The embedded demo data: ``(X (6000, 2), groups (6000,), components (6000,))``."""
    from .federation import partition_dirichlet

    rng = np.random.default_rng(seed)
    means = np.array([[-4.0, 0.0], [0.0, 4.0], [4.0, 0.0], [0.0, -4.0]])
    z = rng.integers(0, len(means), DEMO_ROWS)
    X = means[z] + rng.normal(size=(DEMO_ROWS, 2)) @ np.array([[1.0, 0.3], [0.0, 0.8]])
    groups = partition_dirichlet(z, DEMO_CLIENTS, DEMO_DIRICHLET, rng)
    return X, groups, z


def demo_methods(rounds):
    """The compared methods: display name -> unfitted estimator running ``rounds`` rounds."""
    # Imported here, not at module level: the estimators load numba and scikit-learn
    # (seconds), and the command line must answer a bad option without waiting for that.
    from .estimators import FederatedGaussianMixture

    common = dict(n_components=4, max_iter=rounds + 1, tol=0.0, track_h=True, random_state=0)
    return {
        "EM (uncompressed)": FederatedGaussianMixture(algorithm="em", **common),
        f"FedEM {DEMO_COMPRESSOR}": FederatedGaussianMixture(compressor=DEMO_COMPRESSOR,
                                                             step_size=DEMO_STEP, **common),
        f"naive {DEMO_COMPRESSOR}": FederatedGaussianMixture(compressor=DEMO_COMPRESSOR, step_size=DEMO_STEP,
                                                             alpha=0.0, v_init="zero", **common),
    }


def run_demo(out_dir="demo_output", rounds=DEMO_ROUNDS, *, write=None):
    """Fit the compared methods, write the table (CSV) and the PNG into ``out_dir``.

    ``write`` takes ``{path: bytes}`` and writes the files (default: atomically,
    :func:`fedemstats._io.write_files_atomic`). The folder is created only once the
    fits are done, so a failed or killed demo leaves no trace.

    Returns the table for display (index ``round``, columns ``(quantity, method)``)
    and the path of the PNG.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1 (the demo compares convergence); got {rounds!r}.")
    if write is None:
        from ._io import write_files_atomic as write
    X, groups, _ = demo_data()
    histories = {name: est.fit(X, groups=groups).history_ for name, est in demo_methods(rounds).items()}
    table = long_table(histories, rounds)
    figure = _render_png(histories)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write({out / TABLE_FILE: table.to_csv(index=False).encode("utf-8"), out / FIGURE_FILE: figure})
    return wide_table(table), out / FIGURE_FILE


def long_table(histories, rounds) -> pd.DataFrame:
    """One row per method and tabulated round (``TABLE_ROUNDS`` up to ``rounds``, plus ``rounds``)."""
    shown = sorted({r for r in TABLE_ROUNDS if r <= rounds} | {rounds})
    rows = []
    for name, h in histories.items():
        for r in shown:
            if r < len(h):
                rec = h.iloc[r]
                rows.append({"method": name, "round": r, "loglik": rec["loglik"],
                             "h_norm2": rec["h_norm2"], "cumulative_Mbit": rec["cumulative_bits"] / 1e6})
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def wide_table(table: pd.DataFrame) -> pd.DataFrame:
    """The display form: rounds down, (quantity, method) across, methods in their given order."""
    wide = table.pivot(index="round", columns="method")
    methods = list(dict.fromkeys(table["method"]))
    return wide.reindex(columns=pd.MultiIndex.from_product([TABLE_COLUMNS[2:], methods]))


def _render_png(histories) -> bytes:
    """The convergence figure as PNG bytes (rendered in memory: nothing is written here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    try:
        for name, h in histories.items():
            axes[0].semilogy(h["round"], h["h_norm2"], label=name)
            axes[1].loglog(h["cumulative_bits"], h["h_norm2"], label=name)
        axes[0].set(xlabel="round", ylabel="||h(Ŝ)||²", title="Mean-field norm per round")
        axes[1].set(xlabel="cumulative bits (up + down)", ylabel="||h(Ŝ)||²", title="... per bit sent")
        for ax in axes:
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend()
        fig.suptitle(f"{DEMO_CLIENTS} heterogeneous clients (Dirichlet {DEMO_DIRICHLET}), GMM K=4")
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=FIGURE_DPI)
    finally:
        plt.close(fig)
    return buffer.getvalue()
