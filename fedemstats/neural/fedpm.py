"""FedPM with the entropy regulariser (paper 002) on a fixed random MLP.

The weights never change: every weight is a signed constant ``±sigma_kaiming``
(``sqrt(2 / fan_in)``, signs from a seed the server broadcasts once; biases are
zero and not masked, as in the supermask literature). What is learnt is a
probability mask ``theta`` over the weights (paper 002, eq. 3-8):

* client: scores ``s = logit(theta)``; each mini-batch samples
  ``m ~ Bernoulli(sigmoid(s))`` and backpropagates through ``w = c * m`` with a
  straight-through estimator ``dm/dtheta = 1`` (eq. 7); the loss is the mean
  cross-entropy plus ``lam * mean(theta)`` (eq. 12, the proxy of the mask
  entropy; ``lam = 0`` is plain FedPM). After training it uploads **one**
  sampled mask, entropy coded (:mod:`.coding`).
* ``reg_mode="decoupled"`` applies the regulariser outside Adam (AdamW-style,
  see :data:`REG_MODES`); the default ``"adam"`` adds it to the Adam gradient.
* server: Beta-Bernoulli aggregation with ``alpha = beta = 1`` reset every
  round, whose posterior mode is the mean of the masks (eq. 8), clipped to
  ``[eps, 1 - eps]`` so that scores stay finite.

Bits per parameter are reported two ways: the actual coded size / N and the
binary-entropy estimate ``H(mean(m))`` of eq. 13.

The final model is one sub-network, the mode of the final theta: the weights
with ``theta > 1/2`` (:meth:`BernoulliRule.final_mask`; Top-k: the top k of
theta per layer). It is fixed at the end of the run
(:attr:`FedPMResult.mask`), so predictions draw nothing and are deterministic.
The mode rather than a sample: a sample also flips about ``clip_eps`` of the
settled weights, and on digits (the test setting, 3 seeds) the mode scores
86.7% against 84.8% for the sampled masks that the per-round
``test_accuracy`` evaluates (paper 002's protocol, kept so that the history
stays comparable with the benchmark tables).

The Top-k baseline of :mod:`.baselines` re-uses this loop with a different
mask rule (:class:`TopKRule`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, logit

from .._validation import check_int, check_positive, check_rng
from ..ledger import BitLedger
from .coding import coded_bits, empirical_entropy_bits
from .optim import DEFAULT_EPS, Adam
from .result import NeuralResult
from .rounds import (accuracy, append_row, check_batch_size, check_eval_data, check_local, client_list,
                     make_client_sampler, minibatches, new_history, sampler_for)

__all__ = ["MODE_THRESHOLD", "REG_MODES", "BernoulliRule", "FedPMResult", "run_fedpm", "signed_constants",
           "subnetwork_params"]

logger = logging.getLogger(__name__)

# How lambda * mean(theta) enters the client update.
# "adam": its gradient lambda / N * theta(1 - theta) is added to the data gradient
#   and goes through Adam (paper 002 eq. 12 as written). Adam divides each
#   coordinate by its own RMS, so a score with (near-)zero data gradient - about
#   34-37% of the scores on an MNIST-5k client (blank pixels; more on 2-class non-iid
#   clients) - moves at the full step lr per mini-batch whatever lambda is:
#   measured -1.01, -1.14, -1.17 logit per round for lambda = 0.1, 0.5, 2 (max
#   -1.2). lambda then barely controls the strength of the regulariser.
# "decoupled": AdamW-style (Loshchilov & Hutter, 2019): Adam sees only the data
#   gradient and, after each Adam step, s <- s - lr * lambda * theta(1 - theta),
#   i.e. lr * lambda * N * d mean(theta) / ds evaluated at the pre-step scores.
#   The scale N makes lambda a per-score decay rate in the units of Adam's
#   normalised step (lambda = 1: a quarter of a full step at theta = 1/2).
# Both modes are identical (bit for bit) at lambda = 0. "adam" stays the default:
#   on MNIST-5k non-iid (benchmarks/results/neural.md) decoupled is worse at equal
#   bpp (-0.155 bpp for -6.6 pt vs -0.234 bpp for -4.6 pt), as its decay also pulls
#   the scores that carry data gradient.
REG_MODES = ("adam", "decoupled")

# The broadcast seed of the signed constants and of the initial mask (round 1 downlink).
SEED_BITS = 64
# A weight is in the most probable sub-network when its keep probability exceeds this.
MODE_THRESHOLD = 0.5


def signed_constants(model, seed):
    """Fixed weights ``±sqrt(2 / fan_in)`` (signed Kaiming constant, paper 002 section IV).

    Parameters
    ----------
    model : MLP
    seed : int
        Shared by server and clients, so the weights never travel.

    Returns
    -------
    index : ndarray of int64 of shape (n_weights,)
        Positions of the weights (not the biases) in the flat parameter vector.
    constants : ndarray of shape (n_weights,)
    """
    rng = np.random.default_rng(seed)
    index, consts = [], []
    for (ws, _), n_in in zip(model.layer_slices, model.layer_sizes[:-1]):
        size = ws.stop - ws.start
        index.append(np.arange(ws.start, ws.stop, dtype=np.int64))
        consts.append(np.sqrt(2.0 / n_in) * rng.choice((-1.0, 1.0), size=size))
    return np.concatenate(index), np.concatenate(consts)


def subnetwork_params(model, index, constants, mask) -> np.ndarray:
    """Flat MLP parameters (n_params,) of the sub-network ``mask`` (bool, (n_weights,)) of the constants."""
    flat = np.zeros(model.n_params)
    flat[index] = constants * mask
    return flat


class BernoulliRule:
    """FedPM: masks sampled from sigmoid(scores), straight-through to theta (paper 002 eq. 5-7)."""

    name = "fedpm"

    def init_scores(self, theta, rng):
        return logit(theta)

    def train_mask(self, scores, rng):
        return rng.random(scores.shape) < expit(scores)

    def score_grad(self, grad_mask, scores, reg, n):
        theta = expit(scores)
        # d/ds [loss + reg * mean(theta)] with dm/dtheta = 1 (straight-through), dtheta/ds = theta(1-theta).
        return (grad_mask + reg / n) * theta * (1.0 - theta)

    def upload(self, scores, rng):
        return self.train_mask(scores, rng)

    def final_mask(self, theta):
        """The final sub-network: the mode of Bernoulli(theta), ``theta > 1/2`` (bool, (n_weights,))."""
        return theta > MODE_THRESHOLD


@dataclass
class FedPMResult(NeuralResult):
    """Outcome of :func:`run_fedpm` (a :class:`~.result.NeuralResult`).

    Attributes
    ----------
    model : MLP
    history : dict of lists
        Per round: ``round, n_active, uplink_bits, downlink_bits, bpp_coded,
        bpp_entropy, density, local_loss, test_accuracy, seconds``.
    ledger : BitLedger
    theta : ndarray of shape (n_weights,)
        Global probability mask.
    index, constants : ndarray of shape (n_weights,)
        Where the masked weights sit in the flat vector and their fixed values.
    mask : ndarray of bool of shape (n_weights,)
        The final sub-network, the rule's mode of the final theta
        (``theta > 1/2`` for FedPM). ``params`` and ``predict_proba`` use it,
        so predictions are deterministic.
    """

    theta: np.ndarray
    index: np.ndarray
    constants: np.ndarray
    mask: np.ndarray

    @property
    def params(self) -> np.ndarray:
        """Flat MLP parameters of the final sub-network, shape (n_params,)."""
        return self.subnetwork_params(self.mask)

    def subnetwork_params(self, mask) -> np.ndarray:
        """Flat MLP parameters (n_params,) of any sub-network ``mask`` (bool, (n_weights,)).

        E.g. ``mask=theta > 0.5`` for the most probable sub-network.
        """
        return subnetwork_params(self.model, self.index, self.constants, mask)


def _local_train(model, net, scores, Xk, yk, cfg, rng):
    """E epochs of mini-batch Adam on the scores; returns (scores, mean loss)."""
    opt = Adam(cfg["lr"], eps=cfg["adam_eps"])
    index, consts = net
    n_w = scores.size
    n = yk.shape[0]
    flat = np.zeros(model.n_params)
    losses = []
    for idx in minibatches(n, cfg["batch_size"], cfg["epochs"], rng):
        mask = cfg["rule"].train_mask(scores, rng)
        flat[index] = consts * mask
        loss, grad = model.loss_and_grad(flat, Xk[idx], yk[idx])
        coupled = 0.0 if cfg["decoupled"] else cfg["reg"]
        new = opt.step(scores, cfg["rule"].score_grad(grad[index] * consts, scores, coupled, n_w))
        if cfg["decoupled"] and cfg["reg"] > 0:
            # AdamW-style decay outside the normalisation (REG_MODES): lr * lambda * theta(1 - theta).
            new -= cfg["lr"] * cfg["rule"].score_grad(np.zeros(n_w), scores, cfg["reg"], 1)
        scores = new
        losses.append(loss)
    return scores, float(np.mean(losses))


def _round(t, model, net, theta, clients, active, cfg, rng):
    """Round ``t``: local training on every active client, then the Beta-Bernoulli mean; returns (theta, stats)."""
    masks, up_bits, entropies, losses = [], 0, [], []
    for k in active:
        scores = cfg["rule"].init_scores(theta, rng)
        scores, loss = _local_train(model, net, scores, *clients[k], cfg, rng)
        # A mask sampled from NaN scores is a valid-looking all-zero mask: check the scores and the loss.
        check_local((scores,), loss, round_=t, client=int(k), clients=clients)
        mask = cfg["rule"].upload(scores, rng)
        up_bits += coded_bits(mask)
        entropies.append(empirical_entropy_bits(mask))
        masks.append(mask)
        losses.append(loss)
    new_theta = np.clip(np.mean(masks, axis=0), cfg["eps"], 1.0 - cfg["eps"])
    n_w = theta.size
    return new_theta, {"up": up_bits, "bpp_coded": up_bits / (n_w * active.size),
                       "bpp_entropy": float(np.mean(entropies)), "loss": float(np.mean(losses)), "masks": masks}


def _downlink_bits(n_weights, n_active, n_last, first_round):
    """Seed in round 1; afterwards the per-weight mask counts of the last round, ceil(log2(K + 1)) bits each."""
    if first_round:
        return n_active * SEED_BITS
    return n_active * n_weights * int(np.ceil(np.log2(n_last + 1)))


def _settings(lr, reg, clip_eps, local_epochs, batch_size, rule, reg_mode="adam", adam_eps=DEFAULT_EPS):
    if reg_mode not in REG_MODES:
        raise ValueError(f"reg_mode must be one of {REG_MODES}; got {reg_mode!r}.")
    eps = check_positive(clip_eps, "clip_eps")
    if not eps < 0.5:
        raise ValueError(f"clip_eps must lie in (0, 0.5); got {clip_eps!r}.")
    return {"lr": check_positive(lr, "lr"), "reg": check_positive(reg, "reg lambda", strict=False),
            "eps": eps, "epochs": check_int(local_epochs, "local_epochs E"),
            "batch_size": check_batch_size(batch_size), "rule": rule, "decoupled": reg_mode == "decoupled",
            "adam_eps": check_positive(adam_eps, "adam_eps")}


def _initial_theta(theta_init, n_weights, eps, rng):
    if isinstance(theta_init, str) and theta_init == "uniform":
        return np.clip(rng.random(n_weights), eps, 1.0 - eps)  # paper 002 section IV: theta_0 ~ U(0, 1)
    value = check_positive(theta_init, "theta_init")
    if not value < 1.0:
        raise ValueError(f"theta_init must be 'uniform' or lie in (0, 1); got {theta_init!r}.")
    return np.full(n_weights, np.clip(value, eps, 1.0 - eps))


def run_fedpm(model, clients, y=None, *, rounds=10, client_fraction=0.1, local_epochs=1, batch_size=10,
              lr=0.1, reg=0.0, reg_mode="adam", adam_eps=DEFAULT_EPS, clip_eps=1e-2, theta_init="uniform",
              eval_data=None, random_state=None, verbose=False, rule=None, callback=None):
    """Train a probability mask over fixed random weights with FedPM (+ entropy regulariser).

    Parameters
    ----------
    model : MLP
    clients : list of (X_k, y_k) or Federation (labels as ``y``)
    y : ndarray, optional
    rounds, client_fraction, local_epochs, batch_size
        As :func:`~fedemstats.neural.hard_em.run_hard_em`.
    lr : float > 0
        Client Adam rate on the scores.
    reg : float >= 0
        lambda of ``lambda * mean(theta)`` (paper 002 eq. 12); 0 is plain FedPM.
    reg_mode : {"adam", "decoupled"}
        ``"adam"``: the regulariser gradient goes through Adam (eq. 12 as
        written); ``"decoupled"``: AdamW-style step
        ``s <- s - lr * lambda * theta(1 - theta)`` after each Adam step, so
        that lambda sets its strength (see :data:`REG_MODES`). Same result at
        ``reg = 0``.
    adam_eps : float > 0, default 1e-8
        The client Adam's epsilon. Score gradients are small (median
        ~1e-6 to 1e-5 on MNIST: the constants are ~0.05 and the loss a batch
        mean), and so is the regulariser's ``lambda / N * theta(1 - theta)``
        (~1e-6 at lambda = 1 for N = 2e5 weights). With the default epsilon Adam
        turns a score whose only gradient is the regulariser into a full
        ``lr`` step whatever lambda is; an epsilon near the median data gradient
        (1e-5) makes those steps proportional to lambda. Measured trade-offs
        are in ``benchmarks/results/neural.md``.
    clip_eps : float in (0, 0.5)
        Server clipping of theta to ``[eps, 1 - eps]``.
    theta_init : "uniform" or float in (0, 1)
    eval_data : (X_test, y_test), optional
        Accuracy of one sub-network sampled from theta each round (from a
        separate stream, so evaluation does not change training). The final
        model is the mode instead (``FedPMResult.mask``).
    random_state : None, int or numpy.random.Generator
    verbose : bool
    rule : mask rule, default :class:`BernoulliRule`
        How masks are drawn, scores updated and the final sub-network chosen
        (Top-k: :class:`~.baselines.TopKRule`).
    callback : callable(round, info), optional
        ``info`` has the round's uploaded ``masks`` (list of bool (n_weights,)) and the new ``theta``.

    Returns
    -------
    FedPMResult

    Raises
    ------
    TrainingDivergedError
        A ``ValueError``: a client's scores or loss became inf or NaN (features too large).
    """
    rng = check_rng(random_state)
    cfg = _settings(lr, reg, clip_eps, local_epochs, batch_size, BernoulliRule() if rule is None else rule,
                    reg_mode, adam_eps)
    clients = client_list(clients, y, model)
    eval_data = check_eval_data(eval_data, model)
    sampler = sampler_for(make_client_sampler(client_fraction), len(clients))
    # Evaluation masks come from their own stream: evaluating never changes training.
    eval_rng = np.random.default_rng(rng.integers(2 ** 63))
    index, consts = signed_constants(model, int(rng.integers(2 ** 63)))
    theta = _initial_theta(theta_init, index.size, cfg["eps"], rng)
    ledger = BitLedger()
    history = new_history(("round", "n_active", "uplink_bits", "downlink_bits", "bpp_coded", "bpp_entropy",
                           "density", "local_loss", "test_accuracy", "seconds"))
    n_last = 0
    for t in range(1, check_int(rounds, "rounds") + 1):
        tic = time.perf_counter()
        active, _ = sampler.sample(t, len(clients), rng)
        stats = {"up": 0, "bpp_coded": np.nan, "bpp_entropy": np.nan, "loss": np.nan}
        down = _downlink_bits(index.size, active.size, n_last, t == 1) if active.size else 0
        if active.size:
            theta, stats = _round(t, model, (index, consts), theta, clients, active, cfg, rng)
            n_last = active.size
        ledger.record(t, stats["up"], down, active.size)
        acc = accuracy(model, subnetwork_params(model, index, consts, eval_rng.random(theta.shape) < theta),
                       eval_data)
        row = (t, int(active.size), stats["up"], down, stats["bpp_coded"], stats["bpp_entropy"],
               float(theta.mean()), stats["loss"], acc, time.perf_counter() - tic)
        append_row(history, row)
        if verbose:
            logger.info("round %d: acc=%.4f bpp=%.3f density=%.3f", t, acc, stats["bpp_coded"], row[6])
        if callback is not None:
            callback(t, {"masks": stats.get("masks", []), "theta": theta})
    return FedPMResult(model=model, history=history, ledger=ledger, theta=theta, index=index, constants=consts,
                       mask=cfg["rule"].final_mask(theta))
