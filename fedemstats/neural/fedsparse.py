"""FedSparse: hard-EM with a group spike-and-slab prior (paper 001, Algorithms 1-2, appendix B).

Server state: weights ``w`` and threshold logits ``v`` (one per prunable group =
one unit's incoming weights and bias). Gate probabilities (paper 001 eq. 16)

    theta_g = sigmoid((||w_g|| - tau_g) / T),    tau = softplus(v).

Client (Algorithm 2): starts at (w, v); every mini-batch samples group gates
from the hard-concrete relaxation (Louizos et al. 2018) whose P(z > 0) equals
``pi_sg = sigmoid((||w_sg|| - tau_sg) / T)``, and minimises (eq. 31, divided by
``n_s`` so that the data term is the mean loss)

    CE(w_s * z) + (lambda0 / n_s) sum_g |g| pi_sg
                - (ce_weight / n_s) sum_g [pi_sg logit(theta_g) + log(1 - theta_g)],

with SGD on ``w_s`` and Adamax on ``v_s``; weights are detached from pi
(appendix B, after Azarian et al. 2020). It returns ``z_s ~ Bern(pi_s)`` and
``z_s * w_s`` (eq. 12-15: unbiased one-sample estimates).

Server (Algorithm 1): pseudo-gradients ``grad_w = sum_s a_s z_s (w_hat_s - w)``
and ``grad_v = -sum_s a_s (z_s (1 - theta) - (1 - z_s) theta) sigmoid(v) / T``,
ascended with Adam and Adamax; groups with ``theta < eps`` are pruned before
each broadcast (appendix A). A pruned hidden unit outputs ReLU(0) = 0, so its
fan-out weights are dead too and are neither stored nor sent.

Communication (appendix A): only the values of live parameters travel, plus a
bit mask per group, both ways; the ledger counts exactly that.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from .._validation import check_int, check_positive, check_rng
from ..ledger import BitLedger
from .gates import GateLayout
from .optim import SGD, Adamax, Optimizer, make_optimizer
from .result import NeuralResult
from .rounds import (WIRE_BITS, accuracy, append_row, check_batch_size, check_eval_data, check_local, check_server,
                     check_wire_dtype, client_list, make_client_sampler, minibatches, new_history, on_wire,
                     sampler_for)

__all__ = ["FedSparseResult", "run_fedsparse", "hard_concrete"]

logger = logging.getLogger(__name__)

# Hard-concrete stretch interval and temperature: Louizos et al. (2018), section 4.
HC_BETA, HC_GAMMA, HC_ZETA = 2.0 / 3.0, -0.1, 1.1
# Shift making P(z > 0) of the hard concrete equal sigmoid(log_alpha - shift) (Louizos eq. 12).
_HC_SHIFT = HC_BETA * np.log(-HC_GAMMA / HC_ZETA)
# Keeps the uniform draw inside (0, 1) so that log(u) and log(1 - u) stay finite.
_U_EPS = 1e-12
# Smallest initial threshold tau (softplus(v) must stay positive).
_MIN_TAU = 1e-8


@dataclass
class FedSparseResult(NeuralResult):
    """Outcome of :func:`run_fedsparse` (a :class:`~.result.NeuralResult`).

    Attributes
    ----------
    model : MLP
    history : dict of lists
        Per round: ``round, n_active, uplink_bits, downlink_bits, uplink_values,
        local_loss, test_accuracy, sparsity, groups_alive, seconds``.
    ledger : BitLedger
    w : ndarray of shape (n_params,)
        Server weights, zero on pruned parameters; also ``params`` (the server
        prediction uses them with every live unit on: deterministic).
    v : ndarray of shape (n_groups,)
        Threshold logits, ``tau = softplus(v)``.
    alive : ndarray of bool of shape (n_groups,)
    theta : ndarray of shape (n_groups,)
        Final gate probabilities.
    """

    w: np.ndarray
    v: np.ndarray
    alive: np.ndarray
    theta: np.ndarray

    @property
    def params(self) -> np.ndarray:
        """Server weights with the pruned ones at zero, shape (n_params,)."""
        return self.w

    @property
    def sparsity(self) -> float:
        """Fraction of parameters removed: pruned groups and the fan-out of pruned units."""
        return 1.0 - float(GateLayout(self.model).param_on(self.alive).mean())


def _gate_logits(norms, v, temperature):
    return (norms - np.logaddexp(0.0, v)) / temperature


def hard_concrete(logit_pi, rng):
    """Hard-concrete gates with ``P(z > 0) = sigmoid(logit_pi)`` and their reparametrised slope.

    Returns
    -------
    z : ndarray of shape logit_pi.shape, values in [0, 1]
    dz_dlogit : ndarray
        ``dz / d logit_pi`` (zero where z is clipped to 0 or 1).
    """
    u = rng.uniform(_U_EPS, 1.0 - _U_EPS, size=np.shape(logit_pi))
    log_alpha = logit_pi + _HC_SHIFT
    s = expit((np.log(u) - np.log1p(-u) + log_alpha) / HC_BETA)
    stretched = s * (HC_ZETA - HC_GAMMA) + HC_GAMMA
    inside = (stretched > 0.0) & (stretched < 1.0)
    return np.clip(stretched, 0.0, 1.0), np.where(inside, (HC_ZETA - HC_GAMMA) * s * (1 - s) / HC_BETA, 0.0)


def _client_grads(model, lay, w_s, v_s, theta_logit, Xb, yb, cfg, active_groups, rng):
    """Loss and gradients of the batch objective (module docstring) w.r.t. w_s and v_s."""
    logit = _gate_logits(lay.norms(w_s), v_s, cfg["temperature"])  # weights detached
    z, dz = hard_concrete(logit, rng)
    z[~lay.prunable], dz[~lay.prunable] = 1.0, 0.0
    z[~active_groups], dz[~active_groups] = 0.0, 0.0
    zp = lay.expand(z)
    loss, g_eff = model.loss_and_grad(w_s * zp, Xb, yb)
    dlogit_dv = -expit(v_s) / cfg["temperature"]  # d softplus / dv = sigmoid(v)
    pi = expit(logit)
    dpi_dv = pi * (1.0 - pi) * dlogit_dv
    dloss_dz = lay.group_dot(g_eff, w_s)
    grad_v = dloss_dz * dz * dlogit_dv
    grad_v += (cfg["lambda0"] * lay.sizes - cfg["ce_weight"] * theta_logit) / cfg["n_rows"] * dpi_dv
    grad_v[~(active_groups & lay.prunable)] = 0.0
    return loss, g_eff * zp, grad_v


def _client_update(model, lay, w, v, alive, Xk, yk, cfg, rng, check):
    """Algorithm 2 on one client; returns (z_s bool (n_groups,), upload (n_params,), mean loss).

    ``check((w_s, v_s), loss)`` vets the local result before anything is uploaded.
    """
    theta_logit = _gate_logits(lay.norms(w), v, cfg["temperature"])
    w_s, v_s = w.copy(), v.copy()
    opt_w, opt_v = SGD(cfg["lr"]), Adamax(cfg["client_threshold_lr"])
    cfg = dict(cfg, n_rows=yk.shape[0])
    losses = []
    for idx in minibatches(yk.shape[0], cfg["batch_size"], cfg["epochs"], rng):
        loss, g_w, g_v = _client_grads(model, lay, w_s, v_s, theta_logit, Xk[idx], yk[idx], cfg, alive, rng)
        w_s, v_s = opt_w.step(w_s, g_w), opt_v.step(v_s, g_v)
        losses.append(loss)
    check((w_s, v_s), float(np.mean(losses)))
    pi = expit(_gate_logits(lay.norms(w_s), v_s, cfg["temperature"]))
    z = (rng.random(lay.n_groups) < pi) | ~lay.prunable
    z &= alive
    upload = np.where(lay.param_on(z), w_s, 0.0)
    return z, upload, float(np.mean(losses))


def _server_step(state, uploads, zs, weights, lay, cfg):
    """Algorithm 1: pseudo-gradient steps on w (Adam or closed-form mean) and v (Adamax)."""
    w, v, theta = state["w"], state["v"], state["theta"]
    a = weights / weights.sum()
    on = np.array([lay.param_on(z) for z in zs], dtype=np.float64)  # (n_active, n_params)
    zg = np.array(zs, dtype=np.float64)
    grad_w = a @ (on * (np.array(uploads) - w))
    if cfg["server_optimizer"] == "average":  # eq. 13: w = sum a z w_hat / sum a z
        mass = a @ on
        new_w = np.where(mass > 0, w + grad_w / np.where(mass > 0, mass, 1.0), w)
    else:
        new_w = cfg["server_optimizer"].step(w, -grad_w)  # optimizers descend; the paper ascends
    grad_v = -(a @ (zg * (1.0 - theta) - (1.0 - zg) * theta)) * expit(v) / cfg["temperature"]
    grad_v[~(state["alive"] & lay.prunable)] = 0.0
    state["w"] = np.where(lay.param_on(state["alive"]), new_w, 0.0)
    state["v"] = cfg["threshold_optimizer"].step(v, -grad_v)


def _prune(state, lay, cfg):
    """Refresh theta and drop groups with theta < eps (Algorithm 1, 'prune global model')."""
    theta = expit(_gate_logits(lay.norms(state["w"]), state["v"], cfg["temperature"]))
    state["alive"] &= ~(lay.prunable & (theta < cfg["prune_threshold"]))
    live = lay.param_on(state["alive"])
    state["w"] = np.where(live, state["w"], 0.0)
    state["theta"] = np.where(state["alive"], theta, 0.0)
    return live


def _init_state(model, lay, init, theta_init, temperature, rng):
    w = model.init_params(rng) if init is None else np.array(init, dtype=np.float64)
    if w.shape != (model.n_params,):
        raise ValueError(f"init must have shape ({model.n_params},); got {w.shape}.")
    # Start dense (appendix B): tau_g such that theta_g = theta_init for every group.
    tau = np.maximum(lay.norms(w) - temperature * np.log(theta_init / (1.0 - theta_init)), _MIN_TAU)
    v = np.log(np.expm1(tau))  # inverse softplus
    return {"w": w, "v": v, "alive": np.ones(lay.n_groups, dtype=bool), "theta": np.full(lay.n_groups, theta_init)}


def _check_open_unit(value, name, upper=1.0):
    v = check_positive(value, name)
    if not v < upper:
        raise ValueError(f"{name} must lie in (0, {upper}); got {value!r}.")
    return v


def _settings(lambda0, temperature, ce_weight, prune_threshold, theta_init, lr, client_threshold_lr,
              server_optimizer, threshold_optimizer, local_epochs, batch_size, wire_dtype):
    server = server_optimizer if server_optimizer == "average" else make_optimizer(server_optimizer)
    if isinstance(server, Optimizer):
        server.reset()
    thr = make_optimizer(threshold_optimizer)
    thr.reset()
    return {"lambda0": check_positive(lambda0, "lambda0", strict=False),
            "temperature": check_positive(temperature, "temperature T"),
            "ce_weight": check_positive(ce_weight, "ce_weight", strict=False),
            "prune_threshold": _check_open_unit(prune_threshold, "prune_threshold eps", 0.5),
            "theta_init": _check_open_unit(theta_init, "theta_init"),
            "lr": check_positive(lr, "lr"), "client_threshold_lr": check_positive(client_threshold_lr,
                                                                                   "client_threshold_lr"),
            "server_optimizer": server, "threshold_optimizer": thr,
            "epochs": check_int(local_epochs, "local_epochs E"), "batch_size": check_batch_size(batch_size),
            "bits": WIRE_BITS[check_wire_dtype(wire_dtype)], "wire_dtype": wire_dtype}


def _round(t, model, lay, state, clients, active, pi, cfg, rng):
    """Round ``t``: broadcast, local updates, server step.

    Returns (uplink bits, downlink bits, values up, loss, info).
    """
    state_alive = state["alive"].copy()
    live = lay.param_on(state_alive)
    n_gates = int((state_alive & lay.prunable).sum())
    bits = cfg["bits"]
    # Down: live weights, one threshold per live gate, the live-group bit mask.
    down = active.size * (int(live.sum()) * bits + n_gates * bits + int(lay.prunable.sum()))
    sent_w, sent_v = on_wire(state["w"], cfg["wire_dtype"]), on_wire(state["v"], cfg["wire_dtype"])
    zs, uploads, losses = [], [], []
    for k in active:
        def check(arrays, loss, k=int(k)):
            check_local(arrays, loss, round_=t, client=k, clients=clients, wire_dtype=cfg["wire_dtype"])

        z, upload, loss = _client_update(model, lay, sent_w, sent_v, state["alive"], *clients[k], cfg, rng, check)
        zs.append(z)
        uploads.append(on_wire(upload, cfg["wire_dtype"]))
        losses.append(loss)
    # Up: the values of the parameters switched on by z_s, plus z_s over the live gates.
    values_up = int(sum(lay.param_on(z).sum() for z in zs))
    up = values_up * bits + active.size * n_gates
    weights = np.array([clients[k][1].size for k in active], dtype=np.float64) / pi
    _server_step(state, uploads, zs, weights, lay, cfg)
    check_server((state["w"], state["v"]), round_=t, clients=clients, wire_dtype=cfg["wire_dtype"],
                 hint="" if cfg["server_optimizer"] == "average" else "; or use server_optimizer='average'")
    loss = float(weights @ np.array(losses) / weights.sum())
    info = {"z": zs, "uploads": uploads, "active": active, "alive": state_alive, "w_sent": sent_w}
    return up, down, values_up, loss, info


def run_fedsparse(model, clients, y=None, *, rounds=10, client_fraction=0.1, local_epochs=1, batch_size=10,
                  lr=0.05, lambda0=1e-3, temperature=1e-2, ce_weight=1e-4, prune_threshold=0.1,
                  theta_init=0.99, client_threshold_lr=1e-2, server_optimizer="average",
                  threshold_optimizer=None, prune_output=False, init=None, eval_data=None,
                  wire_dtype="float32", random_state=None, verbose=False, callback=None):
    """Train ``model`` with FedSparse (paper 001, Algorithms 1-2).

    Parameters
    ----------
    model : MLP
    clients : list of (X_k, y_k) or Federation
        X_k of shape (n_k, n_features), y_k of int class indices (n_k,); with a
        :class:`~fedemstats.federation.Federation`, pass its labels as ``y``.
    y : ndarray of shape (n_rows,), optional
    rounds, client_fraction, local_epochs, batch_size, lr
        As :func:`~fedemstats.neural.hard_em.run_hard_em` (C, E, B, local SGD rate).
    lambda0 : float >= 0
        L0 strength in nats per parameter (eq. 9); 0 still prunes nothing by design.
    temperature : float > 0
        T of eq. 16. The paper's 1e-3 makes the gate of a dense start
        (theta = 0.99, ``||w_g|| - tau_g = 0.0046``) flip on the first SGD
        steps of an MLP, pruning a random half of the units whatever lambda0;
        1e-2 leaves lambda0 in control (docs/neural_sparse.md).
    ce_weight : float >= 0
        Down-weighting of the cross-entropy to theta (paper: 1e-4).
    prune_threshold : float in (0, 0.5)
        eps: groups with theta < eps are pruned (paper: 0.1).
    theta_init : float in (0, 1)
        Initial gate probability of every group (paper: 0.99, a dense start).
    client_threshold_lr : float > 0
        Client Adamax rate on v_s (paper: 1e-3, which on digits pruned nothing in 150 rounds
        whatever λ0; ``docs/neural_sparse.md``).
    server_optimizer : "average", "sgd", "adam", "adamax" or Optimizer
        Step on ``-grad_w``. "average" is the closed-form M-step (eq. 13): the
        z-weighted mean of the uploads, i.e. FedAvg restricted to the parameters
        each client kept.
    threshold_optimizer : Optimizer, default Adamax(lr=1e-2) (paper)
    prune_output : bool
    init : ndarray of shape (n_params,), optional
    eval_data : (X_test, y_test), optional
    wire_dtype : {"float32", "float64"}
    random_state : None, int or numpy.random.Generator
    verbose : bool
    callback : callable(round, info), optional
        ``info`` has the round's ``z`` (list of bool (n_groups,)), ``uploads``
        (list of (n_params,) arrays, zero where nothing was sent), ``active``,
        and the broadcast ``alive`` (n_groups,) and ``w_sent`` (n_params,).

    Returns
    -------
    FedSparseResult

    Raises
    ------
    TrainingDivergedError
        A ``ValueError``: a client's result or the server state became inf or NaN.
    """
    rng = check_rng(random_state)
    cfg = _settings(lambda0, temperature, ce_weight, prune_threshold, theta_init, lr, client_threshold_lr,
                    server_optimizer, Adamax(lr=1e-2) if threshold_optimizer is None else threshold_optimizer,
                    local_epochs, batch_size, wire_dtype)
    clients = client_list(clients, y, model)
    eval_data = check_eval_data(eval_data, model)
    sampler = sampler_for(make_client_sampler(client_fraction), len(clients))
    lay = GateLayout(model, prune_output)
    state = _init_state(model, lay, init, cfg["theta_init"], cfg["temperature"], rng)
    _prune(state, lay, cfg)
    ledger = BitLedger()
    keys = ("round", "n_active", "uplink_bits", "downlink_bits", "uplink_values", "local_loss",
            "test_accuracy", "sparsity", "groups_alive", "seconds")
    history = new_history(keys)
    for t in range(1, check_int(rounds, "rounds") + 1):
        tic = time.perf_counter()
        active, pi = sampler.sample(t, len(clients), rng)
        up = down = values = 0
        loss, info = np.nan, {"z": [], "uploads": [], "active": active}
        if active.size:
            up, down, values, loss, info = _round(t, model, lay, state, clients, active, pi, cfg, rng)
        live = _prune(state, lay, cfg)  # before the next broadcast
        ledger.record(t, up, down, active.size)
        row = (t, int(active.size), up, down, values, loss, accuracy(model, state["w"], eval_data),
               1.0 - float(live.mean()), int(state["alive"].sum()), time.perf_counter() - tic)
        append_row(history, row)
        if verbose:
            logger.info("round %d: loss=%.4f acc=%.4f sparsity=%.3f", t, loss, row[6], row[7])
        if callback is not None:
            callback(t, info)
    return FedSparseResult(model=model, history=history, ledger=ledger, w=state["w"], v=state["v"],
                           alive=state["alive"], theta=state["theta"])
