"""Federated training of an MLP as hard-EM on a hierarchical model (SPEC §8).

One loop covers FedAvg, FedSGD, FedProx, FedOpt, the median and the mixture
server; they differ only in *settings* (E, B, the prior):

* sample a fraction C of the clients (McMahan et al., paper 004, Algorithm 1:
  m = max(C K, 1) clients per round);
* E-step on each active client: E epochs of mini-batch SGD (batch B, rate eta)
  on its mean loss plus the prior's pull term, started at the server state.
  This is the hard ("MAP") E-step of paper 001 eq. 3;
* M-step: the prior's server update from the returned phi_s, client s weighted
  by n_s / pi_s (n_k / n in paper 004 eq. for w_{t+1}; pi_s = inclusion
  probability, so that Bernoulli samplers stay unbiased).

FedAvg = GaussianPrior(0); FedSGD = the same with E = 1, B = None (full batch),
where one round is exactly one full-batch gradient step of the global loss.
"""
from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from .._validation import check_int, check_positive, check_rng
from ..ledger import BitLedger
from .priors import GaussianPrior, Prior
from .result import NeuralResult
from .rounds import (WIRE_BITS, append_row, check_batch_size, check_eval_data, check_local, check_server,
                     check_wire_dtype, client_list, make_client_sampler, minibatches, new_history, on_wire, sampler_for)

__all__ = ["HardEMResult", "run_hard_em", "local_sgd"]

logger = logging.getLogger(__name__)


@dataclass
class HardEMResult(NeuralResult):
    """Outcome of :func:`run_hard_em` (a :class:`~.result.NeuralResult`).

    Attributes
    ----------
    model : MLP
    history : dict of lists
        Per round: ``round, n_active, uplink_bits, downlink_bits, local_loss,
        train_loss, test_accuracy, seconds`` (missing metrics are NaN).
    ledger : BitLedger
    state : ndarray of shape (n_params,) or (n_components, n_params)
        Final server state (the mixture keeps one row per component); also ``params``.
    prior : Prior
    assignments : dict
        Client id -> mixture component it last started from.
    """

    state: np.ndarray
    prior: Prior
    assignments: dict = field(default_factory=dict)

    @property
    def params(self) -> np.ndarray:
        """The server state, shape (n_params,) or (n_components, n_params)."""
        return self.state

    def _proba(self, X) -> np.ndarray:
        return self.prior.predict_proba(self.model, self.state, X)


def local_sgd(model, phi, X, y, *, epochs, batch_size, lr, pull=None, rng=None):
    """E epochs of mini-batch SGD on a client's mean loss plus a pull term (in place).

    Parameters
    ----------
    model : MLP
    phi : ndarray of shape (n_params,)
        Updated in place and returned.
    X : ndarray of shape (n_rows, n_features)
    y : ndarray of int of shape (n_rows,)
    epochs : int >= 1
    batch_size : int or None
        None = full batch (deterministic, no shuffling).
    lr : float
    pull : callable phi -> ndarray or None, optional
        Gradient of the prior's local term.
    rng : numpy.random.Generator
        Shuffles the rows every epoch (paper 004: "split P_k into batches of size B").

    Returns
    -------
    phi : ndarray of shape (n_params,)
    mean_loss : float
        Mean over all mini-batches of the data loss (before each step).
    """
    losses = []
    for idx in minibatches(y.shape[0], batch_size, epochs, rng):
        loss, grad = model.loss_and_grad(phi, X[idx], y[idx])
        if pull is not None:
            g_prior = pull(phi)
            if g_prior is not None:
                grad += g_prior
        phi -= lr * grad
        losses.append(loss)
    return phi, float(np.mean(losses))


def _evaluate(model, prior, state, clients, eval_data, track_train_loss):
    train_loss = test_acc = np.nan
    if track_train_loss:
        Xall = np.concatenate([c[0] for c in clients])
        yall = np.concatenate([c[1] for c in clients])
        p = prior.predict_proba(model, state, Xall)[np.arange(yall.size), yall]
        train_loss = float(-np.mean(np.log(np.maximum(p, np.finfo(float).tiny))))
    if eval_data is not None:
        Xte, yte = eval_data
        test_acc = float(np.mean(prior.predict_proba(model, state, Xte).argmax(axis=1) == yte))
    return train_loss, test_acc


def _hooked(hook, client, phi):
    """``hook(client, phi)`` checked: the same shape, finite (a NaN upload used to surface as a server
    divergence blamed on the learning rate)."""
    out = hook(client, phi)
    if out is None or np.shape(out) != phi.shape:
        raise ValueError(f"uplink_hook returned {None if out is None else np.shape(out)} for client {client}; "
                         f"it must return the upload's shape {phi.shape}.")
    out = np.asarray(out, dtype=phi.dtype)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"uplink_hook returned inf or NaN for client {client}: no server can average that "
                         "(a robust prior such as the median needs finite uploads too); return finite values, "
                         "e.g. a large finite attack.")
    return out


def _round(t, model, prior, state, clients, active, pi, settings, rng, assignments):
    """One E-step on every active client plus the M-step of round ``t``; returns (state, local loss)."""
    sent = on_wire(state, settings["wire_dtype"])
    phis, losses, comps = [], [], []
    for k in active:
        Xk, yk = clients[k]
        phi, anchor, comp = prior.client_start(model, sent, Xk, yk)
        assignments[int(k)] = comp
        comps.append(comp)
        phi, loss = local_sgd(model, phi, Xk, yk, epochs=settings["epochs"], batch_size=settings["batch_size"],
                              lr=settings["lr"], pull=lambda p, a=anchor: prior.pull_grad(p, a), rng=rng)
        # A diverged client is an error, not an upload; the hook may then tamper with a sound one.
        check_local((phi,), loss, round_=t, client=int(k), clients=clients, wire_dtype=settings["wire_dtype"])
        if settings["uplink_hook"] is not None:
            phi = _hooked(settings["uplink_hook"], int(k), phi)
        phis.append(on_wire(phi, settings["wire_dtype"]))
        losses.append(loss)
    sizes = np.array([clients[k][1].size for k in active], dtype=np.float64)
    weights = sizes / pi
    new_state = prior.m_step(state, np.array(phis), weights, sizes, np.array(comps), rng=rng)
    check_server((new_state,), round_=t, clients=clients, wire_dtype=settings["wire_dtype"],
                 hint=prior.divergence_hint())
    return new_state, float(weights @ np.array(losses) / weights.sum())


def run_hard_em(model, clients, prior=None, *, y=None, rounds=10, client_fraction=1.0, local_epochs=1,
                batch_size=None, lr=0.1, init=None, eval_data=None, wire_dtype="float32",
                track_train_loss=True, uplink_hook=None, blas_threads=1, random_state=None, verbose=False,
                callback=None):
    """Train ``model`` federatedly by hard-EM (FedAvg and its generalisations).

    Parameters
    ----------
    model : MLP
    clients : list of (X_k, y_k) or Federation
        X_k of shape (n_k, n_features), y_k of int class indices in ``[0, n_outputs)`` of shape (n_k,).
    prior : Prior, default GaussianPrior(0) (FedAvg)
    y : ndarray of shape (n_rows,), optional
        The labels when ``clients`` is a :class:`~fedemstats.federation.Federation`, in *its* row
        order (``Federation.from_groups`` sorts rows by client: pass ``y[order]``).
    rounds : int >= 1
    client_fraction : float in (0, 1] or Participation
        C: each round ``max(1, round(C K))`` clients drawn uniformly without replacement.
    local_epochs : int >= 1
        E.
    batch_size : int >= 1, None or inf
        B; None / inf = full batch.
    lr : float > 0
        Local SGD rate eta.
    init : ndarray of shape (n_params,), optional
        Initial server parameters; default ``model.init_params(rng)``.
    eval_data : (X_test, y_test), optional
        Test accuracy is recorded each round when given.
    wire_dtype : {"float32", "float64"}
        Precision of parameters on the wire, both ways; counted in the ledger
        and applied (float32 rounding) to what clients and server receive.
    track_train_loss : bool
        Record the server model's loss on all training rows each round.
    uplink_hook : callable(client_id, phi) -> phi, optional
        Applied to each upload before it goes on the wire; simulates faulty or
        adversarial clients (robustness experiments).
    blas_threads : int or None, default 1
        BLAS threads during training (threadpoolctl); None leaves them alone.
    random_state : None, int or numpy.random.Generator
        The single source of randomness (init, sampling, shuffling, seeding).
    verbose : bool
        Progress bar and per-round log lines at INFO.
    callback : callable(round, state) , optional

    Returns
    -------
    HardEMResult

    Raises
    ------
    TrainingDivergedError
        A ``ValueError``: a client's local result or the server state became
        inf or NaN (:mod:`.rounds`); the message names the data scale and the fix.
    """
    rng = check_rng(random_state)
    prior = GaussianPrior(0.0) if prior is None else prior
    clients = client_list(clients, y, model)
    eval_data = check_eval_data(eval_data, model)
    settings = {"epochs": check_int(local_epochs, "local_epochs E"), "batch_size": check_batch_size(batch_size),
                "lr": check_positive(lr, "learning rate"), "wire_dtype": check_wire_dtype(wire_dtype),
                "uplink_hook": uplink_hook, "eval_data": eval_data, "track_train_loss": track_train_loss,
                "verbose": verbose, "callback": callback}
    sampler = sampler_for(make_client_sampler(client_fraction), len(clients))
    rounds = check_int(rounds, "rounds")
    w0 = model.init_params(rng) if init is None else np.array(init, dtype=np.float64)
    if w0.shape != (model.n_params,):
        raise ValueError(f"init must have shape ({model.n_params},); got {w0.shape}.")
    prior.reset()
    # Per-client batches are small matmuls: extra BLAS threads only add overhead
    # (10x slower under load on 2 cores, docs/neural.md).
    limit = nullcontext() if blas_threads is None else threadpool_limits(limits=blas_threads, user_api="blas")
    with limit:
        return _train(model, prior, prior.init_state(w0, rng), clients, sampler, rounds, settings, rng)


def _train(model, prior, state, clients, sampler, rounds, settings, rng):
    ledger, assignments = BitLedger(), {}
    history = new_history(("round", "n_active", "uplink_bits", "downlink_bits",
                           "local_loss", "train_loss", "test_accuracy", "seconds"))
    bits = WIRE_BITS[settings["wire_dtype"]]
    for t in tqdm(range(1, rounds + 1), disable=not settings["verbose"], desc=type(prior).__name__):
        tic = time.perf_counter()
        active, pi = sampler.sample(t, len(clients), rng)
        local_loss = np.nan
        down = up = 0
        if active.size:  # a Bernoulli sampler may pick nobody: the state is kept
            down = active.size * prior.floats_down(state) * bits
            up = active.size * model.n_params * bits
            state, local_loss = _round(t, model, prior, state, clients, active, pi, settings, rng, assignments)
        ledger.record(t, up, down, active.size)
        train_loss, test_acc = _evaluate(model, prior, state, clients, settings["eval_data"],
                                         settings["track_train_loss"])
        append_row(history, (t, int(active.size), up, down, local_loss, train_loss, test_acc,
                             time.perf_counter() - tic))
        if settings["verbose"]:
            logger.info("round %d: active=%d local_loss=%.4f train_loss=%.4f test_acc=%.4f",
                        t, active.size, local_loss, train_loss, test_acc)
        if settings["callback"] is not None:
            settings["callback"](t, state)
    return HardEMResult(model=model, history=history, ledger=ledger, state=state, prior=prior,
                        assignments=assignments)
