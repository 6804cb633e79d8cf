"""Round plumbing shared by every neural training loop (SPEC §8).

:func:`~.hard_em.run_hard_em`, :func:`~.fedsparse.run_fedsparse`,
:func:`~.fedpm.run_fedpm` and the baselines differ in what a client computes
and how the server combines it; they share everything here:

* the client list and its checks (:func:`client_list`, :func:`check_clients`);
* client sampling (:func:`make_client_sampler`, :func:`sampler_for`) and the
  mini-batch schedule of a local update (:func:`minibatches`);
* the wire precision (:data:`WIRE_BITS`, :func:`on_wire`);
* the per-round history and the server model's test accuracy;
* the divergence guards (:func:`check_local`, :func:`check_server`): a local
  result that is not finite, or not representable on the wire, never reaches
  the server, and a server state that is not finite is an error. Training
  raises :class:`TrainingDivergedError` (a ``ValueError``) that names the data
  scale and the fix instead of returning NaN parameters.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_int, check_probability
from ..federation import Federation
from ..ledger import FLOAT32_BITS, FLOAT64_BITS
from ..participation import FixedSizeParticipation, Participation

__all__ = ["WIRE_BITS", "TrainingDivergedError", "accuracy", "append_row", "check_batch_size",
           "check_clients", "check_eval_data", "check_labels", "check_local", "check_outputs", "check_server",
           "check_wire_dtype", "client_list",
           "divergence_message", "feature_scale", "make_client_sampler", "minibatches", "new_history",
           "on_wire", "sampler_for"]

WIRE_BITS = {"float32": FLOAT32_BITS, "float64": FLOAT64_BITS}
# Largest magnitude a float32 wire carries; a larger value would arrive as inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# Features above this magnitude are far from standardised: the divergence message
# then leads with rescaling X rather than with the learning rate.
UNSCALED_FEATURE_MAGNITUDE = 1e3
_FIX_SCALE = "standardise X (e.g. sklearn.preprocessing.StandardScaler) or lower the learning rate"
_FIX_RATE = "lower the learning rate (or standardise X)"


class TrainingDivergedError(ValueError):
    """Local or server training produced values that are not finite (inf or NaN)."""


# ---------------------------------------------------------------------- clients
def check_clients(clients, model):
    """Clients as ``[(X_k, y_k), ...]`` in the model's compute precision, checked against ``model``.

    Parameters
    ----------
    clients : sequence of (array of shape (n_k, n_features), array of shape (n_k,))
    model : MLP

    Returns
    -------
    list of (ndarray of shape (n_k, n_features), ndarray of intp of shape (n_k,))
    """
    if len(clients) == 0:
        raise ValueError("clients is empty; pass a list of (X_k, y_k) pairs.")
    out = []
    for k, (Xk, yk) in enumerate(clients):
        # stored in the model's compute precision so batches are not re-cast every step
        Xk = np.asarray(Xk, dtype=getattr(model, "dtype", np.float64))
        yk = np.asarray(yk)
        if Xk.ndim != 2 or Xk.shape[0] == 0 or yk.ndim == 0 or Xk.shape[0] != yk.shape[0]:
            raise ValueError(f"client {k}: need X (n_k >= 1, n_features) and y (n_k,); "
                             f"got {Xk.shape} and {yk.shape}.")
        yk = check_labels(yk, model.layer_sizes[-1], f"client {k}")
        if Xk.shape[1] != model.layer_sizes[0]:
            raise ValueError(f"client {k} has {Xk.shape[1]} features; the MLP expects {model.layer_sizes[0]}.")
        if not np.all(np.isfinite(Xk)):  # else training would "diverge" on the input itself
            raise ValueError(f"client {k}: X contains inf or NaN (in the model's {Xk.dtype} precision); "
                             f"remove them or rescale X.")
        out.append((Xk, yk))
    return out


def check_labels(y, n_outputs, what):
    """Class indices as ``intp`` (n,): one dimension, whole numbers in ``[0, n_outputs)``.

    A column vector (n, 1) broadcast the loss over every pair of rows and labels, a label −1
    wrapped to the last class, 2.7 was truncated to 2 and a label ``n_outputs`` was an
    IndexError deep in the loss: each is refused here, naming ``what``.
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{what}: y must be one-dimensional, shape (n,); got shape {y.shape} "
                         "(flatten it, e.g. y.ravel()).")
    encode = ("; encode labels as 0..n_classes-1 first (sklearn.preprocessing.LabelEncoder), or use "
              "FederatedMLPClassifier, which does")
    if y.dtype.kind not in "biuf":
        raise ValueError(f"{what}: y must hold class indices, got dtype {y.dtype}{encode}.")
    if y.size and (not np.all(np.isfinite(y)) or np.any(y != np.round(y)) or y.min() < 0 or y.max() >= n_outputs):
        raise ValueError(f"{what}: y must hold whole class indices in [0, {n_outputs}) for an MLP with "
                         f"{n_outputs} outputs; got values from {y.min().item()!r} to {y.max().item()!r}{encode}.")
    return y.astype(np.intp)


def check_eval_data(eval_data, model):
    """``(X_test, y_test)`` checked as a client's data (:func:`check_clients`), or None."""
    if eval_data is None:
        return None
    try:
        X, y = eval_data
    except (TypeError, ValueError):
        raise ValueError("eval_data must be a pair (X_test, y_test).") from None
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != model.layer_sizes[0] or np.shape(y)[:1] != X.shape[:1]:
        raise ValueError(f"eval_data: need X_test of shape (n, {model.layer_sizes[0]}) and y_test of shape "
                         f"(n,); got {X.shape} and {np.shape(y)}.")
    if not np.all(np.isfinite(X)):  # the test accuracy would be computed on NaN scores, silently
        raise ValueError("eval_data: X_test contains inf or NaN; remove those rows or rescale X_test.")
    return X, check_labels(y, model.layer_sizes[-1], "eval_data")


def client_list(data, y, model):
    """``[(X_k, y_k), ...]`` from such a list, or from a :class:`Federation` and labels ``y``.

    Parameters
    ----------
    data : list of (X_k, y_k) or Federation
    y : ndarray of shape (n_rows,), required with a Federation
        Labels in the federation's row order.
    model : MLP
        The clients are checked against it (:func:`check_clients`).
    """
    if isinstance(data, Federation):
        if y is None:
            raise ValueError("a Federation holds no labels; pass y= (one label per row, federation order).")
        y = np.asarray(y)
        if y.shape != (data.n_rows,):
            raise ValueError(f"y must have shape ({data.n_rows},); got {y.shape}.")
        data = [(data.client(i), y[data.offsets[i]:data.offsets[i + 1]]) for i in range(data.n_clients)]
    elif y is not None:
        raise ValueError("y= is only used with a Federation; client lists carry their labels.")
    return check_clients(data, model)


# ---------------------------------------------------------------------- schedule
def check_batch_size(batch_size):
    """``None`` or ``inf`` (full batch) or an int >= 1; returns None or int."""
    if batch_size is None or (isinstance(batch_size, float) and np.isinf(batch_size) and batch_size > 0):
        return None
    return check_int(batch_size, "batch_size B")


def make_client_sampler(client_fraction) -> Participation | float:
    """A :class:`Participation` as is, else the fraction C checked to lie in (0, 1]."""
    if isinstance(client_fraction, Participation):
        return client_fraction
    return check_probability(client_fraction, "client_fraction C")


def sampler_for(spec, n_clients) -> Participation:
    """The sampler of a run: ``spec`` itself, or ``max(1, round(C K))`` clients per round."""
    if isinstance(spec, Participation):
        return spec
    # Paper 004, Algorithm 1: m = max(C K, 1); rounding guards against 0.3 * 10 = 2.999...
    return FixedSizeParticipation(max(1, int(round(spec * n_clients))))


def minibatches(n_rows, batch_size, epochs, rng):
    """Row selections of ``epochs`` passes of mini-batches over ``n_rows`` rows.

    Parameters
    ----------
    n_rows : int
    batch_size : int or None
        None (or >= n_rows) = full batch: one ``slice(None)`` per epoch, no
        shuffling and no draw from ``rng``.
    epochs : int
    rng : numpy.random.Generator
        Shuffles the rows every epoch (paper 004: "split P_k into batches of size B").

    Yields
    ------
    slice or ndarray of int of shape (<= batch_size,)
    """
    full = batch_size is None or batch_size >= n_rows
    for _ in range(epochs):
        if full:
            yield slice(None)
            continue
        order = rng.permutation(n_rows)
        for start in range(0, n_rows, batch_size):
            yield order[start:start + batch_size]


# ---------------------------------------------------------------------- wire
def check_wire_dtype(wire_dtype) -> str:
    """``wire_dtype`` checked to be ``"float32"`` or ``"float64"``."""
    if wire_dtype not in WIRE_BITS:
        raise ValueError(f"wire_dtype must be one of {sorted(WIRE_BITS)}; got {wire_dtype!r}.")
    return wire_dtype


def on_wire(x, wire_dtype) -> np.ndarray:
    """What the receiver gets: ``x`` rounded to the wire precision, as float64 of the same shape."""
    return x.astype(np.float32).astype(np.float64) if wire_dtype == "float32" else x


# ---------------------------------------------------------------------- history
def new_history(keys) -> dict:
    """An empty per-round history: one list per key, in order."""
    return {key: [] for key in keys}


def append_row(history, row) -> None:
    """Append one round's values, in the history's key order."""
    for key, value in zip(history, row):
        history[key].append(value)


def accuracy(model, params, eval_data) -> float:
    """Test accuracy of the flat parameters ``params`` (n_params,) on ``(X, y)``; NaN without data."""
    if eval_data is None:
        return np.nan
    X, y = eval_data
    return float(np.mean(model.forward(params, np.asarray(X, dtype=np.float64)).argmax(axis=1) == np.asarray(y)))


# ---------------------------------------------------------------------- divergence guards
def feature_scale(X) -> float:
    """Largest ``|x|`` of an array or of every client's ``X_k`` (0 when empty)."""
    if isinstance(X, np.ndarray):
        return float(np.max(np.abs(X), initial=0.0))
    return max((feature_scale(np.asarray(Xk)) for Xk, _ in X), default=0.0)


def divergence_message(what, scale, hint="") -> str:
    """Why training stopped and the fix, in terms of the data scale ``max |X|``."""
    fix = _FIX_SCALE if scale > UNSCALED_FEATURE_MAGNITUDE else _FIX_RATE
    return f"{what}. The features reach max |X| = {scale:.3g}; {fix}{hint}."


def check_local(arrays, loss, *, round_, client, clients, wire_dtype="float64"):
    """Refuse a client's local result before the server sees it.

    Parameters
    ----------
    arrays : sequence of ndarray
        The client's final local state (its upload and any local-only values).
    loss : float
        Mean data loss of the local update; not finite once any step overflowed.
    round_, client : int
        For the message.
    clients : list of (X_k, y_k)
        The federation's data, for its scale.
    wire_dtype : {"float32", "float64"}
        The values must also be representable in this precision (a float32
        overflow would reach the server as inf).

    Raises
    ------
    TrainingDivergedError
    """
    _check(arrays, loss, f"the local training of client {client}", round_, clients, wire_dtype, "")


def check_server(arrays, *, round_, clients, wire_dtype="float64", hint=""):
    """A server state that is not finite (or not representable on the wire) is an error.

    ``hint`` is appended to the fix (e.g. the server optimizer's rate). Raises
    :class:`TrainingDivergedError`.
    """
    _check(arrays, 0.0, "the server update", round_, clients, wire_dtype, hint)


def _check(arrays, loss, who, round_, clients, wire_dtype, hint):
    if not (np.isfinite(loss) and all(np.all(np.isfinite(a)) for a in arrays)):
        what = f"{who} diverged in round {round_} (its loss or parameters became inf or NaN)"
    else:
        top = max(float(np.max(np.abs(a), initial=0.0)) for a in arrays) if wire_dtype == "float32" else 0.0
        if top <= _FLOAT32_MAX:
            return
        # float32 rounding would turn these values into inf on the receiving side
        what = f"{who} diverged in round {round_}: its values reached {top:.3g}, beyond the float32 wire range"
    raise TrainingDivergedError(divergence_message(what, feature_scale(clients), hint))


def check_outputs(proba, X) -> np.ndarray:
    """``proba`` (n_samples, n_outputs) if finite; else a ``ValueError`` naming the scale of ``X``.

    Logits overflow to inf (and the softmax to NaN) only when ``X`` is far
    larger than the parameters were fitted for.
    """
    if not np.all(np.isfinite(proba)):
        raise ValueError(divergence_message("the network's outputs overflow to inf or NaN on X",
                                            feature_scale(np.asarray(X, dtype=np.float64))))
    return proba
