"""Diagnostics for the theory of FedEM / VR-FedEM (paper 003): mean field, empirical ω,
the theorems' step-size bounds, and convergence tables against rounds, epochs and bits.

Equation numbers refer to paper 003 (Dieuleveut, Fort, Moulines, Robin, "Federated
Expectation Maximization with heterogeneity mitigation and variance reduction").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from ._validation import check_int, check_positive, check_rng
from .algorithms.vr_fedem import theorem3_batch_size

__all__ = [
    "mean_field", "mean_field_norm2", "OmegaEstimate", "empirical_omega", "omega_test_vectors",
    "worst_case_omega", "fedem_gamma_max", "em_gamma_max", "vr_fedem_gamma", "vr_fedem_batch_size",
    "compression_regime_ratio", "convergence_table", "first_reach", "rounds_to_reach", "plot_convergence",
]

#: Largest number of float64 entries materialised at once when drawing Q(x) (≈ 32 MB)
_DRAW_CHUNK_ENTRIES = 4_000_000
#: x-axes understood by :func:`first_reach` and :func:`plot_convergence`
X_AXES = ("round", "epochs", "cumulative_bits", "cumulative_uplink_bits")


# ---------------------------------------------------------------------- mean field
def mean_field(model, federation, s) -> np.ndarray:
    """Mean field h(s) = Σ_i w_i s̄_i(T(s)) − s (paper 003, eq. (6)) from one full pass.

    Parameters
    ----------
    model : Model
    federation : Federation
    s : ndarray of shape (q,)

    Returns
    -------
    h : ndarray of shape (q,)
        Its roots are the fixed points of EM in expectation space.
    """
    s = np.asarray(s, dtype=np.float64)
    return model.mean_stats(federation, model.t_map(s)) - s


def mean_field_norm2(model, federation, s) -> float:
    """||h(s)||², the ε-stationarity measure of Theorems 1 and 3."""
    h = mean_field(model, federation, s)
    return float(h @ h)


# ---------------------------------------------------------------------- empirical omega
@dataclass(frozen=True)
class OmegaEstimate:
    """Monte-Carlo estimate of ω(x) = E||Q(x)||² / ||x||² − 1 for one vector x.

    Attributes
    ----------
    estimate, ci_low, ci_high : float
        Sample mean and a two-sided normal confidence interval.
    bound : float
        The compressor's stated ``omega(q, blocks)``.
    n_draws : int
    """

    estimate: float
    ci_low: float
    ci_high: float
    bound: float
    n_draws: int

    @property
    def violates_bound(self) -> bool:
        """True when the bound lies below the whole confidence interval."""
        return self.ci_low > self.bound


def empirical_omega(compressor, x, rng, n_draws=1000, blocks=None, confidence=0.99) -> OmegaEstimate:
    """Estimate ω(x) by compressing ``x`` ``n_draws`` times (A6 of paper 003).

    Parameters
    ----------
    compressor : Compressor
    x : ndarray of shape (q,)
        Non-zero test vector.
    rng : numpy.random.Generator
    n_draws : int, default=1000
    blocks : ndarray of int, optional
        Statistic block boundaries passed to the compressor.
    confidence : float, default=0.99

    Returns
    -------
    OmegaEstimate
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    norm2 = float(x @ x)
    if norm2 == 0.0:
        raise ValueError("x must be non-zero to estimate omega.")
    n_draws = check_int(n_draws, "n_draws", minimum=2)
    rng = check_rng(rng)
    chunk = max(1, _DRAW_CHUNK_ENTRIES // x.size)
    ratios = []
    for start in range(0, n_draws, chunk):
        rows = np.broadcast_to(x, (min(chunk, n_draws - start), x.size))
        decoded = compressor.decompress(compressor.compress(rows, rng, blocks))
        ratios.append(np.einsum("ij,ij->i", decoded, decoded) / norm2 - 1.0)
    r = np.concatenate(ratios)
    half = norm.ppf(0.5 + confidence / 2.0) * r.std(ddof=1) / math.sqrt(r.size)
    mean = float(r.mean())
    return OmegaEstimate(mean, mean - half, mean + half, float(compressor.omega(x.size, blocks)), r.size)


def omega_test_vectors(q, rng) -> dict:
    """Test vectors of length ``q`` that stress the known compressors.

    ``"flat"`` (equal magnitudes, random signs: the worst case of dithering and
    block-p), ``"gaussian"``, ``"heavy"`` (Cauchy: a few dominant coordinates) and
    ``"spike"`` (one large coordinate on a small flat background).

    Returns
    -------
    dict of str -> ndarray of shape (q,)
    """
    q = check_int(q, "q")
    rng = check_rng(rng)
    spike = np.full(q, 1e-3) * rng.choice([-1.0, 1.0], q)
    spike[rng.integers(q)] = 1.0
    return {"flat": rng.choice([-1.0, 1.0], q), "gaussian": rng.standard_normal(q),
            "heavy": rng.standard_cauchy(q), "spike": spike}


def worst_case_omega(compressor, q, rng, n_draws=1000, blocks=None, confidence=0.99):
    """The largest :func:`empirical_omega` over :func:`omega_test_vectors`.

    Returns
    -------
    name : str
        The worst test vector.
    estimate : OmegaEstimate
    """
    rng = check_rng(rng)
    estimates = {name: empirical_omega(compressor, x, rng, n_draws, blocks, confidence)
                 for name, x in omega_test_vectors(q, rng).items()}
    name = max(estimates, key=lambda k: estimates[k].estimate)
    return name, estimates[name]


# ---------------------------------------------------------------------- theorem bounds
def fedem_gamma_max(v_min, L_W, L, omega, n) -> float:
    """Largest constant step of Theorem 1 (paper 003, eq. (7)).

    γ_max = v_min / (2 L_W)  ∧  √n / (2√2 L (1 + ω)^{3/2}), with α = 1/(1+ω).
    Read from the paper's text (the extracted PDF is partly garbled): the √n /
    (1+ω)^{3/2} scaling is stated in the text and is what the scripts check.

    Parameters
    ----------
    v_min : float
        Lower bound of the spectrum of B(s) in ∇W(s) = −B(s) h(s) (A4).
    L_W : float
        Lipschitz constant of ∇W, W = F ∘ T (A4).
    L : float
        Quadratic mean of the Lipschitz constants L_i of the h_i (A5).
    omega : float
        Compression constant ω of A6.
    n : int
        Number of workers.
    """
    v_min, L_W, L = (check_positive(v, k) for v, k in ((v_min, "v_min"), (L_W, "L_W"), (L, "L")))
    omega, n = check_positive(omega, "omega", strict=False), check_int(n, "n")
    return min(v_min / (2.0 * L_W), math.sqrt(n) / (2.0 * math.sqrt(2.0) * L * (1.0 + omega) ** 1.5))


def em_gamma_max(v_min, L_W) -> float:
    """Step bound without compression: γ < 2 v_min / L_W (paper 003, eq. (9))."""
    return 2.0 * check_positive(v_min, "v_min") / check_positive(L_W, "L_W")


def vr_fedem_gamma(v_min, v_max, L_W, omega, n) -> float:
    """Theorem 3's constant step (paper 003, eq. (10)), with α = 1/(1+ω), b = ⌈k_in/(1+ω)²⌉:

    γ = (v_min / L_W) · [1 + 4√2 (v_max / (L_W √n)) (1 + ω) (ω + (1 + 10ω)/8)^{1/2}]^{-1}.

    For ω³ ≪ n it is ≈ v_min / L_W (as SPIDER-EM); for ω³ ≫ n it decays as
    √n / ω^{3/2}. Read from the paper's (partly garbled) extracted text.
    """
    v_min, v_max, L_W = (check_positive(v, k) for v, k in ((v_min, "v_min"), (v_max, "v_max"), (L_W, "L_W")))
    omega, n = check_positive(omega, "omega", strict=False), check_int(n, "n")
    factor = 4.0 * math.sqrt(2.0) * v_max / (L_W * math.sqrt(n)) * (1.0 + omega) \
        * math.sqrt(omega + (1.0 + 10.0 * omega) / 8.0)
    return v_min / L_W / (1.0 + factor)


def vr_fedem_batch_size(k_in, omega) -> int:
    """Theorem 3's mini-batch b = ⌈k_in / (1 + ω)²⌉."""
    return theorem3_batch_size(k_in, omega)


def compression_regime_ratio(n, omega) -> float:
    """√n / (1 + ω)^{3/2}: ≳ 1 means compression leaves γ_max unchanged (n ≳ ω³),
    ≪ 1 means γ_max shrinks by this factor (paper 003, §2 and §3)."""
    return math.sqrt(check_int(n, "n")) / (1.0 + check_positive(omega, "omega", strict=False)) ** 1.5


# ---------------------------------------------------------------------- convergence tables
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


class _Reached(Exception):
    """Raised by the progress hook of :func:`rounds_to_reach` to stop a run early."""


def rounds_to_reach(algorithm, federation, theta0, eps, max_rounds, random_state=None) -> float:
    """Rounds until ||h(Ŝ_k)||² <= ``eps``, stopping the run as soon as it does.

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

    def progress(k, row):
        if row["h_norm2"] <= eps:
            raise _Reached(k)

    try:
        algorithm.run(federation, theta0, max_rounds, random_state, progress=progress)
    except _Reached as hit:
        return float(hit.args[0])
    return float("nan")


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
