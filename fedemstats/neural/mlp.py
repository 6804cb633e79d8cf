"""A small NumPy multilayer perceptron whose parameters live in one flat vector.

The flat layout is what makes the neural bridge look like the statistics part
(SPEC §2, §8): a client's local MAP estimate phi_s is a float64 vector of length
``n_params`` that priors average, take medians of, or cluster, and that the
bit ledger counts.

Layout of the flat vector, layer by layer: ``W_l`` (shape (in, out), row-major)
then ``b_l`` (shape (out,)). Hidden layers use ReLU, the output layer a softmax.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_int, check_rng

__all__ = ["MLP"]


class MLP:
    """Fully connected ReLU network with a softmax output, on a flat parameter vector.

    Parameters
    ----------
    layer_sizes : sequence of int, length >= 2
        ``(n_features, hidden_1, ..., n_outputs)``, e.g. ``(784, 200, 200, 10)``.
    dtype : {numpy.float64, numpy.float32}, default float64
        Precision of the forward/backward pass. The flat parameter vector and
        the returned gradient are always float64 (what clients and the server
        exchange and average); float32 computes about 2x faster on MNIST-sized
        layers (see ``docs/neural.md``).

    Attributes
    ----------
    layer_sizes : tuple of int
    n_params : int
        Length of the flat parameter vector.
    layer_slices : list of (slice, slice)
        ``(weight slice, bias slice)`` into the flat vector, one pair per layer.
    n_groups : int
        Number of units with incoming weights (all hidden and output units).

    Notes
    -----
    Vectorised: one matmul per layer and direction; the time goes to BLAS, so
    numba would not help. Small per-client batches are fastest with one BLAS
    thread (:func:`~fedemstats.neural.hard_em.run_hard_em` limits it).
    """

    def __init__(self, layer_sizes, dtype=np.float64):
        sizes = tuple(check_int(s, "layer size") for s in layer_sizes)
        if len(sizes) < 2:
            raise ValueError(f"layer_sizes needs at least (n_in, n_out); got {layer_sizes!r}.")
        self.layer_sizes = sizes
        self.layer_slices = []
        start = 0
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            w = slice(start, start + n_in * n_out)
            b = slice(w.stop, w.stop + n_out)
            self.layer_slices.append((w, b))
            start = b.stop
        self.n_params = start
        self.n_groups = int(sum(sizes[1:]))
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float64, np.float32):
            raise ValueError(f"dtype must be float64 or float32; got {dtype!r}.")

    @property
    def n_layers(self) -> int:
        return len(self.layer_slices)

    def __repr__(self):
        extra = "" if self.dtype == np.float64 else f", dtype={self.dtype.name}"
        return f"MLP(layer_sizes={self.layer_sizes}{extra})"

    # ------------------------------------------------------------------ layout
    def views(self, flat):
        """Per-layer ``(W, b)`` views into ``flat`` (no copy).

        Parameters
        ----------
        flat : ndarray of shape (n_params,)

        Returns
        -------
        list of (ndarray of shape (in, out), ndarray of shape (out,))
            Writing into a view writes into ``flat``.
        """
        if flat.shape != (self.n_params,):
            raise ValueError(f"flat parameters must have shape ({self.n_params},); got {flat.shape}.")
        out = []
        for (ws, bs), n_in, n_out in zip(self.layer_slices, self.layer_sizes[:-1], self.layer_sizes[1:]):
            out.append((flat[ws].reshape(n_in, n_out), flat[bs]))
        return out

    def neuron_groups(self) -> np.ndarray:
        """Group id of every parameter: a unit's incoming weights and its bias.

        Returns
        -------
        groups : ndarray of int64 of shape (n_params,)
            Values in ``[0, n_groups)``; units are numbered layer by layer. Used
            by group-sparse priors (FedSparse, paper 001 appendix B) to switch a
            whole neuron on or off.
        """
        groups = np.empty(self.n_params, dtype=np.int64)
        first = 0
        for (ws, bs), n_in, n_out in zip(self.layer_slices, self.layer_sizes[:-1], self.layer_sizes[1:]):
            unit = first + np.arange(n_out, dtype=np.int64)
            groups[ws] = np.tile(unit, n_in)  # row-major (in, out): column j is unit j
            groups[bs] = unit
            first += n_out
        return groups

    def init_params(self, rng=None) -> np.ndarray:
        """He/Kaiming-normal weights (std sqrt(2 / fan_in)), zero biases.

        Parameters
        ----------
        rng : numpy.random.Generator, int or None

        Returns
        -------
        flat : ndarray of float64 of shape (n_params,)
        """
        rng = check_rng(rng)
        flat = np.zeros(self.n_params)
        for (W, _), n_in in zip(self.views(flat), self.layer_sizes[:-1]):
            # He et al. (2015): keeps the ReLU activations' variance constant across layers.
            W[...] = rng.standard_normal(W.shape) * np.sqrt(2.0 / n_in)
        return flat

    # ------------------------------------------------------------------ compute
    def _check_X(self, X):
        X = np.asarray(X, dtype=self.dtype)
        if X.ndim != 2 or X.shape[1] != self.layer_sizes[0]:
            raise ValueError(
                f"X must have shape (n_samples, {self.layer_sizes[0]}); got {X.shape}."
            )
        return X

    def _compute_views(self, flat):
        if self.dtype == np.float64:
            return self.views(flat)
        return [(W.astype(self.dtype), b.astype(self.dtype)) for W, b in self.views(flat)]

    def _forward_cache(self, flat, X):
        """Activations of every layer: [X, h_1, ..., h_{L-1}, logits]."""
        acts = [X]
        layers = self._compute_views(flat)
        for i, (W, b) in enumerate(layers):
            z = acts[-1] @ W
            z += b
            if i < len(layers) - 1:
                np.maximum(z, 0.0, out=z)
            acts.append(z)
        return acts

    def forward(self, flat, X) -> np.ndarray:
        """Logits of shape (n_samples, n_outputs) for ``X`` of shape (n_samples, n_features)."""
        return self._forward_cache(flat, self._check_X(X))[-1]

    def predict_proba(self, flat, X) -> np.ndarray:
        """Softmax probabilities (float64), shape (n_samples, n_outputs)."""
        return _softmax(self.forward(flat, X).astype(np.float64))

    def loss(self, flat, X, y) -> float:
        """Mean softmax cross-entropy of integer labels ``y`` of shape (n_samples,)."""
        logp = _log_softmax(self.forward(flat, X).astype(np.float64))
        return float(-logp[np.arange(logp.shape[0]), np.asarray(y, dtype=np.intp)].mean())

    def loss_and_grad(self, flat, X, y):
        """Mean softmax cross-entropy and its gradient with respect to ``flat``.

        Parameters
        ----------
        flat : ndarray of shape (n_params,)
        X : ndarray of shape (n_samples, n_features)
        y : ndarray of int of shape (n_samples,)
            Class indices in ``[0, n_outputs)``.

        Returns
        -------
        loss : float
        grad : ndarray of float64 of shape (n_params,)
            A new array (the caller may keep or modify it).
        """
        X = self._check_X(X)
        y = np.asarray(y, dtype=np.intp)
        n = X.shape[0]
        acts = self._forward_cache(flat, X)
        logp = _log_softmax(acts[-1])
        rows = np.arange(n)
        loss = float(-logp[rows, y].mean(dtype=np.float64))
        # d(mean CE)/d logits = (softmax - onehot) / n
        delta = np.exp(logp)
        delta[rows, y] -= 1.0
        delta /= n
        grad = np.empty(self.n_params)
        gviews = self.views(grad)
        layers = self._compute_views(flat)
        for i in range(self.n_layers - 1, -1, -1):
            gW, gb = gviews[i]
            gW[...] = acts[i].T @ delta
            gb[...] = delta.sum(axis=0)
            if i > 0:
                delta = delta @ layers[i][0].T
                delta *= acts[i] > 0.0  # ReLU derivative at the stored post-activation
        return loss, grad


def _log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    z -= np.log(np.exp(z).sum(axis=1, keepdims=True))
    return z


def _softmax(z):
    return np.exp(_log_softmax(z))
