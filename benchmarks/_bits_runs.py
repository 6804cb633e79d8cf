"""Runs of the bits-to-accuracy benchmark (``bench_bits.py``, issue 12 item 4).

For one (table, split, model) of ``_real_tables`` / ``_real_models`` this module builds
the federation, the model and θ_0 exactly as the estimators do, runs exact EM to its fixed point
(:func:`reference_run`) and steps FedEM variants through the public stepping API
(:func:`fedem_run`), evaluating the true mean log-likelihood of every iterate on the
full data (a diagnostic outside the ledger; imputer: also the RMSE on the masked cells).

Targets (:class:`Reference`): the ``"ll"`` criterion is
``ll(θ_k) >= ll(fixed point) - LL_TOL`` (one-sided: a run that ends higher, e.g. at a
better optimum, is within); the imputer's ``"rmse"`` criterion is
``rmse(θ_k) <= (1 + RMSE_RTOL) · rmse(fixed point)``. A run "reaches" a criterion at the
first round whose parameters (``run.theta`` after the step; round 0 = ``T(Ŝ_0)``) meet
it, and pays ``run.ledger.total`` at that point (round 0 included, uplink + downlink).
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from _real_models import GMM_COMPONENTS, REG_COVAR, factor_count, mcar_mask
from fedemstats._validation import check_rng
from fedemstats.algorithms import FedEM
from fedemstats.estimators.impute import MODEL_CLASSES
from fedemstats.federation import Federation
from fedemstats.models.factor import FactorAnalysisModel
from fedemstats.models.gmm import GaussianMixtureModel
from fedemstats.models.gmm_init import TooFewSummariesError

__all__ = ["LL_TOL", "RMSE_RTOL", "FP_TOL", "FP_MAX_ROUNDS", "BUDGET_FACTOR", "BUDGET_MIN_ROUNDS",
           "BUDGET_MAX_ROUNDS", "BITS_CAP_RATIO", "HOLD_ROUNDS", "CHECK_ATOL", "EXACT_KWARGS", "Variant",
           "VARIANTS", "Problem", "make_problem", "Hit", "Reference", "FedemResult", "reference_run", "fedem_run", "criteria"]

logger = logging.getLogger("benchmarks.bits")

#: Target: within this many nats per row of the fixed point's mean log-likelihood.
LL_TOL = 1e-3
#: Imputer target: RMSE on the masked cells at most (1 + RMSE_RTOL) × the fixed point's.
RMSE_RTOL = 0.01
#: The fixed point: exact EM until its mean log-likelihood changes by less than this per round ...
FP_TOL = 1e-10
#: ... or this many rounds after round 0 (reported as capped).
FP_MAX_ROUNDS = 3000
#: FedEM's round budget: max(BUDGET_FACTOR × exact EM's rounds to the target, BUDGET_MIN_ROUNDS),
#: at most BUDGET_MAX_ROUNDS. Factor analysis's EM converges slowly (exact EM needs up to 2,400
#: rounds here): a cap at the fixed point's horizon (3,000) gave partial participation 1.3× exact
#: EM's rounds where every other row gets 20×; twice that keeps the stalled runs bounded.
BUDGET_FACTOR = 20
BUDGET_MIN_ROUNDS = 300
BUDGET_MAX_ROUNDS = 2 * FP_MAX_ROUNDS
#: A run also stops once its bits exceed this multiple of exact EM's bits to the target
#: without reaching it (8× the strictest threshold: a clear miss; the ratio is then a lower bound).
BITS_CAP_RATIO = 2.0
#: After reaching the target a run goes on this many rounds to see whether it stays there.
HOLD_ROUNDS = 10
#: The exact run's history log-likelihood and the direct evaluation must agree to this.
CHECK_ATOL = 1e-8
#: Exact EM as ``algorithm="em"`` builds it (``fedemstats/estimators/_algorithms.py``).
EXACT_KWARGS = dict(compressor="identity", participation=1.0, step_size=1.0, alpha=1.0, v_init="zero")


@dataclass(frozen=True)
class Variant:
    """A FedEM configuration: compressor and participation; everything else at its default.

    ``threshold`` is the judged bits ratio (None: reported, not judged)."""

    name: str
    compressor: str
    participation: float
    threshold: float | None = None

    def algorithm(self, model):
        return FedEM(model, compressor=self.compressor, participation=self.participation)


#: name -> Variant, in report order (issue 12 acceptance: default ≤ 0.25, p = 0.5 ≤ 0.5).
VARIANTS = {v.name: v for v in (
    Variant("default", "dither:s=4", 1.0, 0.25),
    Variant("p0.5", "dither:s=4", 0.5, 0.5),
    Variant("s2", "dither:s=2", 1.0),
    Variant("s8", "dither:s=8", 1.0),
    Variant("blockp", "blockp:p=2", 1.0),
)}


def criteria(kind):
    """The criteria of a model kind, the judged one first.

    The imputer is judged on the log-likelihood, as the other models; its RMSE criterion (the
    issue's) is reported beside it. Exact EM meets the RMSE one at round 0, 1 or 2 on every table
    (the conditional-mean imputation barely moves once the covariance is roughly right), so a
    ratio to it prices the start (θ_0's broadcast and the first uploads), not convergence."""
    return ("ll", "rmse") if kind == "imputer" else ("ll",)


@dataclass(eq=False)
class Problem:
    """One (table, split, model): the federation in its row order and how to start a run.

    ``mask`` / ``truth`` (imputer) are the missing cells and their values in the
    federation's row order; ``tol`` is the estimator's default ``tol`` (it sets the
    watchdog's slack and the convergence test, as in ``fit``)."""

    table: object
    split: object
    config: object
    fed: Federation
    mask: np.ndarray | None
    truth: np.ndarray
    tol: float
    notes: list = field(default_factory=list)

    @property
    def key(self):
        return self.table.name, self.split.name, self.config.name

    def build(self, seed):
        """(model, θ_0, rng) as the estimator's ``fit`` builds them; ``rng`` continues the
        stream the initialisation drew from (the estimator passes it on to the run)."""
        fed, cfg, rng = self.fed, self.config, check_rng(seed)
        if cfg.kind == "gmm":
            model = GaussianMixtureModel.from_federation(
                fed, n_components=GMM_COMPONENTS, covariance_type=cfg.covariance_type, reg_covar=REG_COVAR)
            try:
                theta0 = model.init_theta(fed, rng=rng, method="kmeans")
            except TooFewSummariesError:
                self.notes.append("k-means summaries too few: init_params='random' (as the estimator)")
                theta0 = model.init_theta(fed, rng=rng, method="random")
        elif cfg.kind == "fa":
            model = FactorAnalysisModel.from_federation(fed, n_factors=factor_count(fed.n_features))
            theta0 = model.init_theta(fed, noise_variance_init=None)
        else:
            model = MODEL_CLASSES["gaussian"].from_federation(fed, reg_covar=REG_COVAR)
            theta0 = model.init_theta(fed, rng=rng)
        return model, theta0, rng

    def values(self, model, theta):
        """{criterion: value} of parameters ``theta`` on the full data."""
        out = {"ll": float(np.mean(model.log_likelihood(self.fed.X, theta)))}
        if self.mask is not None:
            imputed = model.impute(self.fed.X, theta)
            out["rmse"] = float(np.sqrt(np.mean((imputed[self.mask] - self.truth[self.mask]) ** 2)))
        return out


def make_problem(table, split, config, seed):
    """The :class:`Problem` of ``table`` split by ``split`` for ``config`` (a ``ModelConfig``)."""
    X, mask = table.X, None
    if config.kind == "imputer":
        mask = mcar_mask(X.shape, seed)
        X = np.where(mask, np.nan, table.X)
    fed, order, _ = Federation.from_groups(X, split.groups, weights="samples", allow_nan=config.kind != "gmm")
    tol = float(config.estimator_class()().get_params()["tol"])
    return Problem(table, split, config, fed, None if mask is None else mask[order], table.X[order], tol)


def theta_arrays(model, theta):
    return {k: np.asarray(v) for k, v in model.params_to_dict(theta).items()}


@dataclass
class Hit:
    """Where a run first met a criterion: its round and the ledger at that point (bits)."""

    round: int
    bits: int
    up0: int
    down0: int
    up: int
    down: int

    @classmethod
    def at(cls, ledger, k):
        up, down = ledger.uplink[:k + 1], ledger.downlink[:k + 1]
        return cls(k, int(sum(up) + sum(down)), up[0], down[0], int(sum(up[1:])), int(sum(down[1:])))

    @property
    def round0(self):
        return self.up0 + self.down0


@dataclass
class Reference:
    """Exact EM from θ_0 to its fixed point, and when it first met each criterion."""

    status: str = "ok"
    fp_round: int = 0
    capped: bool = False
    fp: dict = field(default_factory=dict)
    last_change: float = np.nan
    est_remaining: float = np.nan
    hits: dict = field(default_factory=dict)
    theta0: dict | None = None
    start_check: str = ""
    round_bits: int = 0
    wall_s: float = 0.0

    @property
    def ok(self):
        return self.status == "ok"

    def target_met(self, crit, value):
        if crit == "ll":
            return value >= self.fp["ll"] - LL_TOL
        return value <= (1.0 + RMSE_RTOL) * self.fp["rmse"]

    def gap(self, crit, value):
        """Distance to the fixed point in units of the criterion (ll: nats/row; rmse: ratio − 1)."""
        return self.fp["ll"] - value if crit == "ll" else value / self.fp["rmse"] - 1.0


def _status(exc):
    text = str(exc).splitlines()[0][:90] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _estimator_check(problem, seed, exact_run, model):
    """Compare with the estimator's own round 0 (``algorithm='em'``, ``max_iter=1``): the
    same θ after round 0 and the same round-0 log-likelihood, or a mismatch note."""
    cfg, X = problem.config, problem.table.X
    if problem.mask is not None:
        X = np.where(mcar_mask(X.shape, seed), np.nan, X)
    est = cfg.estimator(problem.table, algorithm="em", max_iter=1, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, groups=problem.split.groups)
    mine, theirs = theta_arrays(model, exact_run.theta), theta_arrays(model, est.theta_)
    same = mine.keys() == theirs.keys() and all(np.array_equal(mine[k], theirs[k]) for k in mine)
    ll_same = float(est.history_["loglik"].iloc[0]) == float(exact_run.records._rows[0]["loglik"])
    return "" if same and ll_same else f"differs from the estimator's round 0 (θ equal: {same}, ll equal: {ll_same})"


def reference_run(problem, seed):
    """Exact EM to its fixed point (FP_TOL or FP_MAX_ROUNDS); never raises.

    The mean log-likelihood of θ after round k is the exact history ``loglik`` of round
    k + 1 (full participation, all rows); it is cross-checked against ``model.log_likelihood``
    at the fixed point and at each hit (CHECK_ATOL)."""
    ref, t0 = Reference(), time.perf_counter()
    try:
        model, theta0, rng = problem.build(seed)
        ref.theta0 = theta_arrays(model, theta0)
        run = FedEM(model, **EXACT_KWARGS).start(problem.fed, theta0, random_state=rng, tol=problem.tol)
        ref.start_check = _estimator_check(problem, seed, run, model)
        s_hats, lls = [run.state.s_hat.copy()], []
        while True:
            lls.append(float(run.step()["loglik"]))  # ll of the iterate before this step
            if len(lls) >= 2 and abs(lls[-1] - lls[-2]) < FP_TOL or len(lls) > FP_MAX_ROUNDS:
                break
            s_hats.append(run.state.s_hat.copy())
        k_fp = len(lls) - 1                        # last round whose θ has a known ll
        ref.fp_round, ref.capped = k_fp, len(lls) > FP_MAX_ROUNDS
        ref.fp = problem.values(model, model.t_map(s_hats[k_fp]))
        deltas = np.diff(lls)
        ref.last_change = float(deltas[-1]) if deltas.size else np.nan
        if ref.capped and deltas.size > 10 and np.all(deltas[-10:] > 0):
            r = float(np.clip(np.mean(deltas[-10:] / deltas[-11:-1]), 0.0, 1.0 - 1e-12))
            ref.est_remaining = float(deltas[-1] * r / (1.0 - r))
        if abs(ref.fp["ll"] - lls[k_fp]) > CHECK_ATOL:
            raise AssertionError(f"history ll {lls[k_fp]:.12g} != evaluated {ref.fp['ll']:.12g} at the fixed point")
        ref.round_bits = run.ledger.uplink[1] + run.ledger.downlink[1]
        for crit in criteria(problem.config.kind):
            for k in range(k_fp + 1):
                if crit == "ll":
                    met = ref.target_met("ll", lls[k])
                else:
                    met = ref.target_met(crit, problem.values(model, model.t_map(s_hats[k]))[crit])
                if met:
                    ref.hits[crit] = Hit.at(run.ledger, k)
                    direct = problem.values(model, model.t_map(s_hats[k]))["ll"]
                    if abs(direct - lls[k]) > CHECK_ATOL:
                        raise AssertionError(f"history ll {lls[k]:.12g} != evaluated {direct:.12g} at round {k}")
                    break
    except Exception as exc:  # noqa: BLE001 - a failing run is a row, never an abort
        ref.status = _status(exc)
        logger.warning("%s exact EM: %s", "/".join(problem.key), ref.status)
    ref.wall_s = time.perf_counter() - t0
    return ref


@dataclass
class FedemResult:
    """A FedEM run measured against a :class:`Reference`.

    ``hits``: criterion -> :class:`Hit` (missing: not reached); ``best`` / ``last``: the
    smallest and the final gap per criterion (:meth:`Reference.gap`); ``held``: the judged
    criterion still held over the HOLD_ROUNDS rounds after the hit (None: not reached);
    ``own_stop``: first round whose convergence test (estimator's default ``tol``) held;
    ``stop``: why the run ended."""

    variant: str
    status: str = "ok"
    rounds: int = 0
    budget: int = 0
    hits: dict = field(default_factory=dict)
    best: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    held: bool | None = None
    own_stop: int | None = None
    above_fp: bool = False
    stop: str = ""
    up0: int = 0
    down0: int = 0
    total_bits: int = 0
    total_up: int = 0
    total_down: int = 0
    wall_s: float = 0.0


def fedem_run(problem, variant, ref, seed):
    """Step ``variant`` from the reference's θ_0 until the target is reached and held, the
    round budget or the bits cap; never raises."""
    crits = criteria(problem.config.kind)
    main = crits[0]
    res, t0 = FedemResult(variant.name), time.perf_counter()
    rounds_ref = max(ref.hits[c].round for c in crits if c in ref.hits) if ref.hits else FP_MAX_ROUNDS
    res.budget = min(max(BUDGET_FACTOR * rounds_ref, BUDGET_MIN_ROUNDS), BUDGET_MAX_ROUNDS)
    cap = {c: BITS_CAP_RATIO * ref.hits[c].bits if c in ref.hits else np.inf for c in crits}
    res.best = {c: np.inf for c in crits}
    hold_bad, run = False, None
    try:
        model, theta0, rng = problem.build(seed)
        theta = theta_arrays(model, theta0)
        if theta.keys() != ref.theta0.keys() or not all(np.array_equal(theta[k], ref.theta0[k]) for k in theta):
            raise AssertionError("θ_0 differs from exact EM's")
        run = variant.algorithm(model).start(problem.fed, theta0, random_state=rng, tol=problem.tol)
        res.up0, res.down0 = run.ledger.uplink[0], run.ledger.downlink[0]
        k = 0
        while True:
            vals = problem.values(model, run.theta)
            for c in crits:
                gap = ref.gap(c, vals[c])
                res.best[c], res.last[c] = min(res.best[c], gap), gap
                if c not in res.hits and ref.target_met(c, vals[c]):
                    res.hits[c] = Hit.at(run.ledger, k)
            res.above_fp |= vals["ll"] > ref.fp["ll"] + LL_TOL
            if main in res.hits and k > res.hits[main].round:
                hold_bad |= not ref.target_met(main, vals[main])
            done = all(c in res.hits or run.ledger.total > cap[c] for c in crits)
            if done and (main not in res.hits or k >= res.hits[main].round + HOLD_ROUNDS):
                res.stop = "target" if main in res.hits else f"bits > {BITS_CAP_RATIO:g}× exact"
                break
            if k >= res.budget:
                res.stop = f"round budget {res.budget}"
                break
            row = run.step()
            k += 1
            res.rounds = k
            if res.own_stop is None and row.get("converged", False):
                res.own_stop = k
    except Exception as exc:  # noqa: BLE001
        res.status = _status(exc)
        logger.warning("%s %s: %s", "/".join(problem.key), variant.name, res.status)
    if main in res.hits:
        res.held = not hold_bad
    if run is not None:
        res.total_bits, res.total_up, res.total_down = run.ledger.total, run.ledger.total_uplink, \
            run.ledger.total_downlink
    res.wall_s = time.perf_counter() - t0
    return res
