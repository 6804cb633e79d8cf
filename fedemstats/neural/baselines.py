"""Baselines of the sparse neural bridge (SPEC §8): Top-k masks and Federated Dropout.

* **Top-k masks** (Ramanujan et al. 2019 "edge-popup", the Top-k baseline of
  paper 002): the FedPM loop of :mod:`.fedpm` with a deterministic rule. Each
  layer keeps the fraction ``k`` of its weights with the largest scores; the
  gradient reaches the scores straight through the top-k selection; clients
  upload their top-k mask (coded with :mod:`.coding`) and the server averages
  the masks into theta (clients restart from ``scores = theta``).
* **Federated Dropout** (Caldas et al. 2018, the FedDrop baseline of paper
  001): every round each client receives a sub-model made of a random fraction
  ``1 - rate`` of the hidden units of every hidden layer, trains it with local
  SGD and returns it; the server averages every parameter over the clients whose
  sub-model held it. Only the sub-model travels, both ways.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from .._validation import check_int, check_positive, check_rng
from ..ledger import BitLedger
from .fedpm import run_fedpm
from .gates import GateLayout
from .hard_em import local_sgd
from .result import NeuralResult
from .rounds import (WIRE_BITS, accuracy, append_row, check_batch_size, check_eval_data, check_local, check_server,
                     check_wire_dtype, client_list, make_client_sampler, new_history, on_wire, sampler_for)

__all__ = ["TopKRule", "run_topk_masks", "FedDropResult", "run_feddrop"]

logger = logging.getLogger(__name__)

# Scores restart at theta plus a jitter this small: it only breaks ties between
# weights with the same theta (clients draw different jitters).
_TIE_JITTER = 1e-6


class TopKRule:
    """Deterministic top-k masks per layer with a straight-through score gradient.

    Parameters
    ----------
    k : float in (0, 1)
        Fraction of each layer's weights kept.
    layer_sizes : sequence of int
        Number of masked weights per layer, in order (set by :func:`run_topk_masks`).
    """

    name = "topk"

    def __init__(self, k, layer_sizes=()):
        self.k = check_positive(k, "k")
        if not self.k < 1.0:
            raise ValueError(f"k must lie in (0, 1); got {k!r}.")
        self.bounds = np.concatenate([[0], np.cumsum(layer_sizes)]).astype(np.int64)

    def init_scores(self, theta, rng):
        return theta + _TIE_JITTER * rng.random(theta.shape)

    def train_mask(self, scores, rng):
        mask = np.zeros(scores.shape, dtype=bool)
        for lo, hi in zip(self.bounds[:-1], self.bounds[1:]):
            keep = max(1, int(round(self.k * (hi - lo))))
            top = np.argpartition(scores[lo:hi], hi - lo - keep)[hi - lo - keep:]
            mask[lo + top] = True
        return mask

    def score_grad(self, grad_mask, scores, reg, n):
        return grad_mask  # edge-popup: d loss / d score := d loss / d mask

    def upload(self, scores, rng):
        return self.train_mask(scores, rng)

    def final_mask(self, theta):
        """The final sub-network: the top k of theta in each layer (bool, (n_weights,))."""
        return self.train_mask(theta, None)


def run_topk_masks(model, clients, y=None, *, k=0.5, rounds=10, client_fraction=0.1, local_epochs=1,
                   batch_size=10, lr=0.1, clip_eps=1e-2, eval_data=None, random_state=None, verbose=False,
                   callback=None):
    """Top-k mask baseline (paper 002): FedPM's loop with :class:`TopKRule`.

    Parameters are those of :func:`~fedemstats.neural.fedpm.run_fedpm` (without
    ``reg``) plus ``k``, the fraction of weights kept per layer. The masks are
    initialised at theta = 0.5 (the top-k of the jitter: a random sub-network).

    Returns
    -------
    FedPMResult
    """
    sizes = [ws.stop - ws.start for ws, _ in model.layer_slices]
    return run_fedpm(model, clients, y, rounds=rounds, client_fraction=client_fraction,
                     local_epochs=local_epochs, batch_size=batch_size, lr=lr, reg=0.0, clip_eps=clip_eps,
                     theta_init=0.5, eval_data=eval_data, random_state=random_state, verbose=verbose,
                     rule=TopKRule(k, sizes), callback=callback)


@dataclass
class FedDropResult(NeuralResult):
    """Outcome of :func:`run_feddrop` (a :class:`~.result.NeuralResult`).

    Attributes
    ----------
    model, history, ledger
        As :class:`~.result.NeuralResult`.
    w : ndarray of shape (n_params,)
        The full server model (``params``); predictions use every unit.
    """

    w: np.ndarray

    @property
    def params(self) -> np.ndarray:
        """The full server model, shape (n_params,)."""
        return self.w


class _SubModel:
    """The MLP restricted to the parameters in ``on``: what :func:`local_sgd` trains on a client."""

    def __init__(self, model, on):
        self.model, self.on = model, on.astype(np.float64)

    def loss_and_grad(self, flat, X, y):
        loss, grad = self.model.loss_and_grad(flat * self.on, X, y)
        return loss, grad * self.on


def _unit_mask(lay, rate, rng):
    """Keep exactly round((1 - rate) n) random units of each hidden layer (Caldas et al. 2018)."""
    z = np.ones(lay.n_groups, dtype=bool)
    for _, _, _, n_out, first in lay.layers[:-1]:
        drop = int(round(rate * n_out))
        z[first + rng.choice(n_out, size=drop, replace=False)] = False
    return z


def _feddrop_round(t, model, lay, w, clients, active, pi, cfg, rng):
    """Round ``t``: every active client trains a random sub-model; returns (w, bits each way, loss)."""
    sent = on_wire(w, cfg["wire_dtype"])
    total = np.zeros(model.n_params)
    mass = np.zeros(model.n_params)
    bits, losses = 0, []
    n_hidden = lay.n_groups - model.layer_sizes[-1]
    for k, p_k in zip(active, pi):
        on = lay.param_on(_unit_mask(lay, cfg["rate"], rng))
        Xk, yk = clients[k]
        phi, loss = local_sgd(_SubModel(model, on), sent * on, Xk, yk, epochs=cfg["epochs"],
                              batch_size=cfg["batch_size"], lr=cfg["lr"], rng=rng)
        check_local((phi,), loss, round_=t, client=int(k), clients=clients, wire_dtype=cfg["wire_dtype"])
        a = yk.size / p_k  # n_k / pi_k as in run_hard_em
        total += a * on * on_wire(phi, cfg["wire_dtype"])
        mass += a * on
        # Both ways: the sub-model's values plus the kept-unit mask of the hidden layers.
        bits += int(on.sum()) * cfg["bits"] + n_hidden
        losses.append(loss)
    new_w = np.where(mass > 0, total / np.where(mass > 0, mass, 1.0), w)
    check_server((new_w,), round_=t, clients=clients, wire_dtype=cfg["wire_dtype"])
    return new_w, bits, float(np.mean(losses))


def run_feddrop(model, clients, y=None, *, rate=0.25, rounds=10, client_fraction=0.1, local_epochs=1,
                batch_size=10, lr=0.05, init=None, eval_data=None, wire_dtype="float32", random_state=None,
                verbose=False):
    """Federated Dropout (Caldas et al. 2018) on the hidden units of an MLP.

    Parameters
    ----------
    model : MLP
    clients : list of (X_k, y_k) or Federation (labels as ``y``)
    rate : float in (0, 1)
        Fraction of the units of every hidden layer dropped from each client's sub-model.
    rounds, client_fraction, local_epochs, batch_size, lr, init, eval_data, wire_dtype, random_state, verbose
        As :func:`~fedemstats.neural.hard_em.run_hard_em`.

    Returns
    -------
    FedDropResult
    """
    rng = check_rng(random_state)
    rate = check_positive(rate, "rate")
    if not rate < 1.0:
        raise ValueError(f"rate must lie in (0, 1); got {rate!r}.")
    cfg = {"rate": rate, "epochs": check_int(local_epochs, "local_epochs E"),
           "batch_size": check_batch_size(batch_size), "lr": check_positive(lr, "lr"),
           "bits": WIRE_BITS[check_wire_dtype(wire_dtype)], "wire_dtype": wire_dtype}
    clients = client_list(clients, y, model)
    eval_data = check_eval_data(eval_data, model)
    sampler = sampler_for(make_client_sampler(client_fraction), len(clients))
    lay = GateLayout(model)
    w = model.init_params(rng) if init is None else np.array(init, dtype=np.float64)
    ledger = BitLedger()
    history = new_history(("round", "n_active", "uplink_bits", "downlink_bits", "local_loss", "test_accuracy",
                           "seconds"))
    for t in range(1, check_int(rounds, "rounds") + 1):
        tic = time.perf_counter()
        active, pi = sampler.sample(t, len(clients), rng)
        bits, loss = 0, np.nan
        if active.size:
            w, bits, loss = _feddrop_round(t, model, lay, w, clients, active, pi, cfg, rng)
        ledger.record(t, bits, bits, active.size)
        append_row(history, (t, int(active.size), bits, bits, loss, accuracy(model, w, eval_data),
                             time.perf_counter() - tic))
        if verbose:
            logger.info("round %d: loss=%.4f acc=%.4f", t, loss, history["test_accuracy"][-1])
    return FedDropResult(model=model, history=history, ledger=ledger, w=w)
