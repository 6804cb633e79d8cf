"""What every federated EM estimator shares: input -> Federation, hyper-parameter
checks, the algorithm run with progress reporting, and the fitted history.

Subclasses (mixture, decomposition, impute) build a model and its initial
parameters; this base runs the algorithm the user chose (SPEC §7).
"""
from __future__ import annotations

import logging
import numbers

import numpy as np
from sklearn.utils.validation import validate_data

from .._validation import check_int, check_positive
from ..algorithms import FedEM
from ..compression import make_compressor
from ..federation import MIN_CLIENT_ROWS, Federation, partition_iid
from ..participation import FullParticipation, make_participation

__all__ = ["FederatedEMMixin", "ALGORITHMS", "register_algorithm"]

logger = logging.getLogger("fedemstats")


def _fedem(est, model):
    return FedEM(model, compressor=est.compressor, participation=est.participation,
                 step_size=est.step_size, alpha=est.alpha, v_init=est.v_init,
                 batch_size=est.batch_size, track_h=est.track_h)


def _exact_em(est, model):
    """Classical EM spread over clients: identity, everyone, γ = 1 (SPEC §3 identity)."""
    if make_compressor(est.compressor).omega(model.q) != 0.0 or not isinstance(
            make_participation(est.participation), FullParticipation):
        raise ValueError("algorithm='em' is exact EM: use compressor='identity' and participation=1.0, "
                         "or algorithm='fedem' for compressed / partial runs.")
    return FedEM(model, compressor=est.compressor, participation=1.0, step_size=1.0, alpha=1.0,
                 v_init="zero", batch_size=None, track_h=est.track_h)


#: algorithm name -> factory(estimator, model) returning an object with ``run(...)``
ALGORITHMS = {"fedem": _fedem, "em": _exact_em}


def register_algorithm(name, factory):
    """Make ``algorithm=name`` available to every estimator."""
    ALGORITHMS[name] = factory


class FederatedEMMixin:
    """Shared machinery of the federated EM estimators (not a public class).

    Subclasses must define the federated hyper-parameters as ``__init__``
    arguments with these names: ``algorithm, compressor, participation,
    step_size, alpha, v_init, batch_size, max_iter, tol, n_clients,
    client_weights, track_h, random_state, verbose``.
    """

    _allow_nan = False

    # ------------------------------------------------------------------ input
    def _federation(self, X, groups, *, reset=True, min_rows=1):
        """Validate ``X`` (array or list of client arrays) and build the Federation.

        Returns
        -------
        federation : Federation
        X_flat : ndarray of shape (n_samples, n_features)
            Rows in the caller's order.
        order : ndarray of shape (n_samples,)
            ``federation.X == X_flat[order]``.
        """
        if isinstance(X, (list, tuple)) and len(X) and np.ndim(X[0]) == 2:
            if groups is not None:
                raise ValueError("pass either a list of per-client arrays or groups=, not both.")
            sizes = [np.shape(a)[0] for a in X]
            empty = [i for i, m in enumerate(sizes) if m == 0]
            if empty:
                raise ValueError(f"client(s) {empty[:10]} have no rows; every client needs at least one row.")
            groups = np.repeat(np.arange(len(X)), sizes)
            X = np.vstack([np.asarray(a, dtype=np.float64) for a in X])
        ensure = "allow-nan" if self._allow_nan else True
        X = validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite=ensure,
                          ensure_min_samples=min_rows)
        if groups is None:
            n_clients = check_int(self.n_clients, "n_clients")
            rng = np.random.default_rng(_seed_of(self.random_state))
            n_clients = min(n_clients, max(1, X.shape[0] // MIN_CLIENT_ROWS))
            groups = partition_iid(X.shape[0], n_clients, rng)
        elif np.shape(groups) != (X.shape[0],):
            raise ValueError(f"groups must have one label per row of X: expected shape ({X.shape[0]},), "
                             f"got {np.shape(groups)}.")
        fed, order, labels = Federation.from_groups(X, groups, weights=self.client_weights,
                                                    allow_nan=self._allow_nan)
        small = np.flatnonzero(fed.sizes < MIN_CLIENT_ROWS)
        if small.size:
            raise ValueError(
                f"client(s) {labels[small][:10].tolist()} hold fewer than {MIN_CLIENT_ROWS} rows; the mean "
                "statistic of one row is the row itself, so it would leave the client. Merge such "
                "clients with others or drop them.")
        self.client_labels_ = labels
        return fed, X, order

    def _check_federated_params(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}; got {self.algorithm!r}.")
        make_compressor(self.compressor)
        make_participation(self.participation)
        if not (isinstance(self.step_size, str) or callable(self.step_size)):
            check_positive(self.step_size, "step_size")
        elif isinstance(self.step_size, str) and self.step_size != "auto":
            raise ValueError(f"step_size must be a positive float, 'auto' or a callable; got {self.step_size!r}.")
        if self.alpha is not None:
            check_positive(self.alpha, "alpha", strict=False)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size")
        check_int(self.max_iter, "max_iter")
        check_positive(self.tol, "tol", strict=False)

    # ------------------------------------------------------------------ run
    def _run_algorithm(self, model, federation, theta0, rng):
        """Run the chosen algorithm for ``max_iter - 1`` rounds after round 0.

        Round 0 already performs one E-step (Ŝ_0 at θ_0) and one M-step (T(Ŝ_0)),
        so ``n_iter_ = rounds + 1`` counts M-steps exactly as scikit-learn counts
        EM iterations.
        """
        algo = ALGORITHMS[self.algorithm](self, model)
        bar = _progress_bar(self.verbose, self.max_iter - 1, type(self).__name__)
        interval = getattr(self, "verbose_interval", 10)

        def progress(k, row):
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loglik=f"{row['loglik']:.4g}", refresh=False)
            if self.verbose >= 2 and k % interval == 0:
                logger.info("round %d: loglik=%.6g uplink=%d bits", k, row["loglik"], row["uplink_bits"])

        try:
            result = algo.run(federation, theta0, self.max_iter - 1, rng, tol=self.tol, progress=progress)
        finally:
            if bar is not None:
                bar.close()
        return result

    def _fit_best_of(self, model, federation, n_init, initial_theta, rng):
        """Run from ``n_init`` starts (``initial_theta()`` draws each), store and return
        the run with the best final log-likelihood (scikit-learn's ``n_init`` rule)."""
        best = None
        for _ in range(n_init):
            result = self._run_algorithm(model, federation, initial_theta(), rng)
            if best is None or result.history["loglik"].iloc[-1] > best.history["loglik"].iloc[-1]:
                best = result
        self._store_run(best)
        return best

    def _store_run(self, result):
        self.history_ = result.history
        self.ledger_ = result.ledger
        self.n_iter_ = int(result.state.round) + 1
        self.converged_ = bool(result.converged)
        self.lower_bound_ = float(result.history["loglik"].iloc[-1])


def _seed_of(random_state):
    """An int seed for the iid client split, stable across refits (None -> 0 is
    *not* used: None stays None so unseeded fits stay random)."""
    if random_state is None or isinstance(random_state, (numbers.Integral, np.integer)):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return random_state.randint(np.iinfo(np.int32).max)
    return random_state


def _progress_bar(verbose, total, desc):
    if not verbose:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, leave=False)


# Registers "vr-fedem" and "online"; imported last because it needs ALGORITHMS above.
from ..algorithms import registry_ext as _registry_ext  # noqa: E402,F401
