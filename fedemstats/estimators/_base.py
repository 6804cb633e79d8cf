"""What every federated EM estimator shares: input -> Federation, the hyper-parameters
of the federated algorithms and their validation, the algorithm run with progress
reporting, and the fitted history.

Subclasses (mixture, decomposition, impute) build a model and its initial
parameters; this base runs the algorithm the user chose (SPEC §7). Parameters are
validated as scikit-learn's own estimators do (``sklearn/mixture/_base.py``): the
shared :attr:`FederatedEMMixin._parameter_constraints` are merged into each
estimator's, checked by ``self._validate_params()`` at the start of ``fit``; the
compressor and participation specs are then parsed by their own builders, whose
errors name the parameter.
"""
from __future__ import annotations

import logging
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, RealNotInt, StrOptions
from sklearn.utils.validation import validate_data

from .._validation import check_data_range, check_rng
from ..algorithms.base import V_INIT_CHOICES
from ..algorithms.convergence import coverage_rounds
from ..algorithms.step_size import STEP_RULES
from ..algorithms.online import DEFAULT_ONLINE_POWER, ONLINE_POWER_RANGE
from ..algorithms.vr_fedem import FULL_BATCH
from ..compression import Compressor, make_compressor
from ..federation import MIN_CLIENT_ROWS, Federation, partition_iid
from ..participation import Participation, make_participation
from ..privacy import DPConfig
from ._private import run_private
from ._algorithms import ALGORITHMS

__all__ = ["FederatedEMMixin", "ALGORITHMS", "DEFAULT_ONLINE_POWER"]

logger = logging.getLogger("fedemstats")

#: how ``client_weights`` may be given as a string (else an array of n_clients weights)
CLIENT_WEIGHTS = ("samples", "uniform")
_POSITIVE_INT = Interval(Integral, 1, None, closed="left")
#: ``max_iter="auto"`` gives a run whose steps are noisy (compression either way, partial
#: participation) and which tests convergence this many times the exact-EM default: such a run
#: makes about half an exact EM step per round at ``dither:s=4`` and less under p = 0.5
#: (``docs/fedem.md``, "Step size"), so scikit-learn's 100 M-steps ended unconverged where exact
#: EM needs 30-70 (measured: breast-cancer and digits imputers, 113-250 rounds).
NOISY_MAX_ITER_FACTOR = 5
#: ``max_iter="auto"`` of a private fit: every round is a release, so more rounds mean more noise
#: in each (the budget is split). Held-out gap to exact EM (nats/row) of a K = 3 mixture on 6,000
#: rows (tests/test_privacy_covariances.py's table), three seeds, full covariances, by M-steps:
#: ε = 1: 4: 0.05-1.9, 6: 0.04-0.38, 10: 0.06-0.11, 20: 0.15-0.23, 40: 0.42-0.59;
#: ε = 4: 10: 0.007-0.016, 40: 0.019-0.027. At scikit-learn's 100 the fits diverged.
PRIVATE_MAX_ITER = 10


class FederatedEMMixin:
    """Shared machinery of the federated EM estimators (not a public class).

    Subclasses declare these federated hyper-parameters as ``__init__`` arguments:
    ``algorithm, compressor, participation, step_size, alpha, v_init, batch_size,
    k_in, online_power, online_gamma0, max_iter, tol, n_clients, client_weights,
    track_h, precondition, safeguard, downlink_compressor, random_state, verbose, verbose_interval,
    privacy``, and merge
    :attr:`_parameter_constraints` into their own.
    """

    _allow_nan = False

    @property
    def _column_names(self):
        """The fitted frame's column names (``feature_names_in_``) for messages, None for an array."""
        return getattr(self, "feature_names_in_", None)

    _parameter_constraints: dict = {
        "algorithm": [StrOptions(set(ALGORITHMS))],
        "compressor": [str, Compressor, None],
        "participation": [Interval(RealNotInt, 0, 1, closed="right"), _POSITIVE_INT, StrOptions({"full"}),
                          Participation, None],
        "step_size": [Interval(Real, 0, None, closed="neither"), StrOptions(set(STEP_RULES)), callable],
        "alpha": [Interval(Real, 0, None, closed="left"), None],
        "v_init": [StrOptions(set(V_INIT_CHOICES))],
        "batch_size": [_POSITIVE_INT, StrOptions({FULL_BATCH}), None],
        "k_in": [_POSITIVE_INT, None],
        "online_power": [Interval(Real, *ONLINE_POWER_RANGE, closed="right")],
        "online_gamma0": [Interval(Real, 0, 1, closed="right")],
        "max_iter": [_POSITIVE_INT, StrOptions({"auto"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_clients": [_POSITIVE_INT],
        "client_weights": [StrOptions(set(CLIENT_WEIGHTS)), "array-like"],
        "track_h": ["boolean"],
        "precondition": ["boolean"],
        "safeguard": ["boolean"],
        "downlink_compressor": [StrOptions({"auto"}), str, Compressor, None],
        "random_state": ["random_state", np.random.Generator, np.random.SeedSequence],
        "verbose": ["verbose"],
        "verbose_interval": [_POSITIVE_INT],
        "privacy": [DPConfig, None],
    }

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
            bad = [i for i, a in enumerate(X) if np.ndim(a) != 2]
            if bad:
                raise ValueError(f"client(s) {bad[:10]} of the list are not 2-D arrays (rows x features); every "
                                 "element of a list of clients must be one client's rows.")
            widths = [np.shape(a)[1] for a in X]
            other = [i for i, w in enumerate(widths) if w != widths[0]]
            if other:
                raise ValueError(f"client(s) {other[:10]} of the list have {widths[other[0]]} columns but client 0 "
                                 f"has {widths[0]}; every client needs the same features in the same order.")
            sizes = [np.shape(a)[0] for a in X]
            empty = [i for i, m in enumerate(sizes) if m == 0]
            if empty:
                raise ValueError(f"client(s) {empty[:10]} have no rows; every client needs at least one row.")
            groups = np.repeat(np.arange(len(X)), sizes)
            X = np.vstack([np.asarray(a, dtype=np.float64) for a in X])
        ensure = "allow-nan" if self._allow_nan else True
        X = validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite=ensure,
                          ensure_min_samples=min_rows)
        check_data_range(X, columns=self._column_names)
        if groups is None:
            n_clients = min(self.n_clients, max(1, X.shape[0] // MIN_CLIENT_ROWS))
            # a fresh stream from random_state: refits with an int seed split the rows alike
            groups = partition_iid(X.shape[0], n_clients, check_rng(self.random_state))
        elif np.shape(groups) != (X.shape[0],):
            raise ValueError(f"groups must have one label per row of X: expected shape ({X.shape[0]},), "
                             f"got {np.shape(groups)}.")
        # validate_data returned float64 with inf (and NaN, unless allowed) rejected: the
        # federation need not check it again, only have it in C order
        fed, order, labels = Federation.from_groups(np.ascontiguousarray(X), groups, weights=self.client_weights,
                                                    allow_nan=self._allow_nan, check_input=False)
        small = np.flatnonzero(fed.sizes < MIN_CLIENT_ROWS)
        if small.size:
            raise ValueError(
                f"client(s) {labels[small][:10].tolist()} hold fewer than {MIN_CLIENT_ROWS} rows; the mean "
                "statistic of one row is the row itself, so it would leave the client. Merge such "
                "clients with others or drop them.")
        self.client_labels_ = labels
        return fed, X, order

    def _check_federated_params(self):
        """scikit-learn's parameter validation, then the specs only their builders can parse."""
        self._validate_params()
        make_compressor(self.compressor)
        if self.downlink_compressor not in ("auto", None):
            make_compressor(self.downlink_compressor)
        make_participation(self.participation)

    # ------------------------------------------------------------------ run
    #: ``max_iter="auto"`` for exact EM: scikit-learn's default of the matching estimator
    _exact_max_iter = 100

    def _max_iter_for(self, algo, n_clients) -> int:
        """The M-steps a fit may take: ``max_iter``, or for ``"auto"`` :attr:`_exact_max_iter`,
        times :data:`NOISY_MAX_ITER_FACTOR` plus the rounds to hear every client
        (:func:`~fedemstats.algorithms.convergence.coverage_rounds`; 0 at full participation)
        when ``algo`` takes noisy steps and tests convergence (full batches, or VR-FedEM), and
        :data:`PRIVATE_MAX_ITER` for a private run (``algo`` None)."""
        if self.max_iter != "auto":
            return int(self.max_iter)
        if algo is None:
            return PRIVATE_MAX_ITER
        noisy = self.tol > 0 and algo.tests_convergence() and algo.stochastic(n_clients)
        if not noisy:
            return self._exact_max_iter
        # the convergence test waits until every client has reported (convergence.everyone_reported)
        return self._exact_max_iter * NOISY_MAX_ITER_FACTOR + coverage_rounds(algo.participation.inclusion(n_clients))

    def _run_algorithm(self, model, federation, theta0, rng):
        """Run the chosen algorithm for ``max_iter - 1`` rounds after round 0.

        Round 0 already performs one E-step (Ŝ_0 at θ_0) and one M-step (T(Ŝ_0)),
        so ``n_iter_ = rounds + 1`` counts M-steps exactly as scikit-learn counts
        EM iterations. With ``privacy`` the run is :func:`._private.run_private`'s.
        Sets ``max_iter_``, the M-steps allowed (:meth:`_max_iter_for`).
        """
        if getattr(self, "privacy", None) is not None:
            self.max_iter_ = self._max_iter_for(None, federation.n_clients)
            return run_private(self, model, federation, rng, self.max_iter_)
        algo = ALGORITHMS[self.algorithm](self, model)
        self.max_iter_ = self._max_iter_for(algo, federation.n_clients)
        bar = _progress_bar(self.verbose, self.max_iter_ - 1, type(self).__name__)

        def progress(k, row):
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loglik=f"{row['loglik']:.4g}", refresh=False)
            if self.verbose >= 2 and k % self.verbose_interval == 0:
                logger.info("round %d: loglik=%.6g uplink=%d bits", k, row["loglik"], row["uplink_bits"])

        try:
            result = algo.run(federation, theta0, self.max_iter_ - 1, rng, tol=self.tol, progress=progress)
        finally:
            if bar is not None:
                bar.close()
        return result

    def _fit_best_of(self, model, federation, n_init, initial_theta, rng):
        """Run from ``n_init`` starts (``initial_theta()`` draws each), store and return
        the run with the best final log-likelihood (scikit-learn's ``n_init`` rule)."""
        best = None
        private = getattr(self, "privacy", None) is not None
        for _ in range(n_init):
            # a private fit starts from a public θ_0 (run_private): the data-derived start would
            # read the clients' rows outside the mechanism, and move the generator by a
            # data-dependent number of draws before the noise is drawn from it
            result = self._run_algorithm(model, federation, None if private else initial_theta(), rng)
            if best is None or result.history["loglik"].iloc[-1] > best.history["loglik"].iloc[-1]:
                best = result
        self._store_run(best)
        return best

    def _store_run(self, result):
        self.history_ = result.history
        self.ledger_ = result.ledger
        self.n_iter_ = int(result.state.round) + 1
        self.converged_ = bool(result.converged)
        if not self.converged_ and result.tests_convergence:
            warnings.warn(f"{type(self).__name__} did not converge in {self.max_iter_} M-steps "
                          f"(max_iter={self.max_iter!r}, tol={self.tol}): increase max_iter, or look at "
                          "history_ (log-likelihood, step_size, rejected) for a stalled fit.", ConvergenceWarning, stacklevel=3)
        self.lower_bound_ = float(result.history["loglik"].iloc[-1])
        if "epsilon" in result.history:
            dp = result.state.extra["dp"]
            self.privacy_spent_ = {"epsilon": float(result.history["epsilon"].iloc[-1]),
                                   "delta": dp["plan"].delta, "noise_multiplier": dp["sigma"],
                                   "sensitivity": dp["sensitivity"], "releases": dp["plan"].rounds}


def _progress_bar(verbose, total, desc):
    if not verbose:
        return None
    from tqdm.auto import tqdm  # optional: only verbose fits need it
    return tqdm(total=total, desc=desc, leave=False)
