"""Real ``pfl`` (pfl-research 0.6.0) on the privacy benchmark's splits: run in pfl's own venv.

This script imports only numpy, the standard library and ``pfl``; it never imports
fedemstats (pfl needs ``dp-accounting<0.6``, fedemstats 0.6.0, so the two live in separate
venvs: ``make bench-pfl-venv`` makes ``.venv-pfl``). ``bench_privacy.py`` runs it as a
subprocess and passes the data as ``.npy`` files (no pickles)::

    .venv-pfl/bin/python benchmarks/_privacy_pfl_runner.py WORKDIR

``WORKDIR`` holds ``train.npy`` (n, d), ``test.npy`` (m, d) and ``config.json``
(``n_components``, ``rounds``, ``runs``: a list of [ε, seed, clip C], ``delta``,
``variance_scale``, ``responsibility_scale``). The script writes ``result.json``: per run,
the held-out mean log-likelihood per row, pfl's noise multiplier, the ε that pfl's
accountant reports for that multiplier (a check of its calibration) and the number of
components left.

What runs is pfl's own code end to end:

* ``pfl.algorithm.ExpectationMaximizationGMM`` with pfl's "mixing up" schedule
  (``make_compute_new_num_components``): pfl starts from one unit Gaussian and splits the
  heaviest components; here it doubles every iteration from iteration 1 up to
  ``n_components``, then the remaining iterations settle the parameters;
* ``pfl.model.GaussianMixtureModel`` (diagonal covariances; its whitened sufficient
  statistics, its variance floor and component pruning);
* ``pfl.aggregate.SimulatedBackend`` over a ``FederatedDataset`` with **one user per
  training row** (row-level DP: pfl clips per user), the cohort being every user in every
  iteration (``MinimizeReuseUserSampler`` cycles through them; sampling rate 1, so no
  amplification, like the package's accounting of full participation);
* ``pfl.privacy.CentrallyAppliedPrivacyMechanism(GaussianMechanism.from_privacy_accountant(
  RDPPrivacyAccountant(rounds, 1.0, "gaussian", ε, δ), clip))``: each user's statistic
  vector is clipped to ``clip`` and the server adds N(0, (σ clip)²) to the sum.

pfl divides by the (un-noised) number of users in the cohort: it treats the count as
public, which the package does not (it releases a noisy count). The held-out
log-likelihood is the exact diagonal-mixture log-density of pfl's final components,
computed with numpy (checked against pfl's own ``Mixture.density`` on a few rows).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

#: relative tolerance of the cross-check against pfl's own per-row density
DENSITY_CHECK_RTOL = 1e-8
#: rows of the held-out set on which the numpy log-density is checked against pfl's
DENSITY_CHECK_ROWS = 5


def mixture_arrays(model):
    """(weights (K,), means (K, d), variances (K, d)) of a pfl GaussianMixtureModel."""
    weights = np.array([w for w, _ in model.components])
    means = np.array([g.mean for _, g in model.components])
    variances = np.array([g.variance for _, g in model.components])
    return weights, means, variances


def mixture_loglik(X, weights, means, variances):
    """Per-row log-density of a diagonal Gaussian mixture, shape (n,)."""
    z = (X[:, None, :] - means[None]) ** 2 / variances[None]
    comp = -0.5 * (z.sum(-1) + np.log(2 * np.pi * variances).sum(-1)[None]) + np.log(weights)[None]
    top = comp.max(1, keepdims=True)
    return (top + np.log(np.exp(comp - top).sum(1, keepdims=True)))[:, 0]


def fit_one(train, cfg, epsilon, seed, clip):
    """pfl's EM-GMM at ``epsilon`` with per-user clip ``clip``; returns (model, noise
    multiplier, ε pfl's accountant reports for that multiplier)."""
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm.expectation_maximization_gmm import (EMGMMHyperParams, ExpectationMaximizationGMM,
                                                            make_compute_new_num_components)
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import MinimizeReuseUserSampler
    from pfl.hyperparam import ModelHyperParams
    from pfl.model.gaussian_mixture_model import GaussianMixtureModel, GMMHyperParams
    from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism, RDPPrivacyAccountant

    np.random.seed(seed)  # pfl draws every seed (cohorts, noise) from numpy's global state
    n, d = train.shape
    rows = [train[i:i + 1] for i in range(n)]
    users = FederatedDataset(lambda i: Dataset(rows[i], user_id=i), MinimizeReuseUserSampler(range(n)))
    accountant = RDPPrivacyAccountant(num_compositions=cfg["rounds"], sampling_probability=1.0,
                                      mechanism="gaussian", epsilon=epsilon, delta=cfg["delta"])
    mechanism = GaussianMechanism.from_privacy_accountant(accountant, clip)
    backend = SimulatedBackend(training_data=users, val_data=users,
                               postprocessors=[CentrallyAppliedPrivacyMechanism(mechanism)])
    train_params = GMMHyperParams(variance_scale=cfg["variance_scale"],
                                  responsibility_scale=cfg["responsibility_scale"])
    grow = make_compute_new_num_components(num_initial_iterations=1, mix_up_interval=1,
                                           max_num_components=cfg["n_components"], fraction_new_components=1.0)
    algo_params = EMGMMHyperParams(central_num_iterations=cfg["rounds"], evaluation_frequency=cfg["rounds"] + 1,
                                   val_cohort_size=None, compute_cohort_size=lambda _it, _k: n,
                                   compute_new_num_components=grow)
    model = GaussianMixtureModel(d, cached_model_train_params=train_params)
    model = ExpectationMaximizationGMM().run(algorithm_params=algo_params, backend=backend, model=model,
                                             model_train_params=train_params,
                                             model_eval_params=ModelHyperParams(),
                                             send_metrics_to_platform=False)
    sigma = float(accountant.cohort_noise_parameter)
    check = RDPPrivacyAccountant(num_compositions=cfg["rounds"], sampling_probability=1.0, mechanism="gaussian",
                                 noise_parameter=sigma, delta=cfg["delta"])
    return model, sigma, float(check.epsilon)


def main(workdir):
    workdir = Path(workdir)
    cfg = json.loads((workdir / "config.json").read_text())
    train, test = np.load(workdir / "train.npy"), np.load(workdir / "test.npy")
    out = []
    for epsilon, seed, clip in cfg["runs"]:
        model, sigma, eps_spent = fit_one(train, cfg, float(epsilon), int(seed), float(clip))
        weights, means, variances = mixture_arrays(model)
        ll = mixture_loglik(test, weights, means, variances)
        own = np.array([model.model.density(x).log_value for x in test[:DENSITY_CHECK_ROWS]])
        if not np.allclose(own, ll[:DENSITY_CHECK_ROWS], rtol=DENSITY_CHECK_RTOL):
            raise RuntimeError(f"numpy log-density {ll[:DENSITY_CHECK_ROWS]} != pfl's {own}")
        out.append({"epsilon_target": float(epsilon), "seed": int(seed), "clip": float(clip), "loglik": float(ll.mean()),
                    "noise_multiplier": sigma, "epsilon": eps_spent, "n_components": int(weights.size)})
        print(json.dumps(out[-1]), flush=True)
    (workdir / "result.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
