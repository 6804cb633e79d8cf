"""Unit gates of an MLP: which flat parameters belong to which unit (SPEC §8).

One gate per unit with incoming weights (every hidden and output unit): its
incoming weights and its bias. FedSparse (:mod:`.fedsparse`) prunes and samples
these gates; Federated Dropout (:mod:`.baselines`) drops hidden units with them.
"""
from __future__ import annotations

import numpy as np

__all__ = ["GateLayout"]


class GateLayout:
    """Group structure of an :class:`MLP` for unit gates (one gate per unit: incoming weights + bias).

    Per-layer reductions replace ``bincount`` over the ``n_params`` group ids:
    on the 2NN they are several times faster, and the client loop runs them
    every mini-batch.

    Parameters
    ----------
    model : MLP
    prune_output : bool
        Whether output units may be pruned (paper 001 kept them for ResNet20).

    Attributes
    ----------
    n_groups : int
    sizes : ndarray of shape (n_groups,)
        Parameters per group, ``|g|``.
    prunable : ndarray of bool of shape (n_groups,)
    """

    def __init__(self, model, prune_output=False):
        self.n_groups = int(model.n_groups)
        self.n_params = int(model.n_params)
        self.layers = []  # (weight slice, bias slice, n_in, n_out, first unit id)
        first = 0
        for (ws, bs), n_in, n_out in zip(model.layer_slices, model.layer_sizes[:-1], model.layer_sizes[1:]):
            self.layers.append((ws, bs, n_in, n_out, first))
            first += n_out
        self.sizes = np.concatenate([np.full(n_out, n_in + 1.0) for _, _, n_in, n_out, _ in self.layers])
        self.prunable = np.ones(self.n_groups, dtype=bool)
        if not prune_output:
            self.prunable[self.n_groups - model.layer_sizes[-1]:] = False

    def group_dot(self, a, b):
        """Per-group inner products ``sum_{j in g} a_j b_j``, shape (n_groups,)."""
        out = np.empty(self.n_groups)
        for ws, bs, n_in, n_out, first in self.layers:
            A, B = a[ws].reshape(n_in, n_out), b[ws].reshape(n_in, n_out)
            out[first:first + n_out] = np.einsum("ij,ij->j", A, B) + a[bs] * b[bs]
        return out

    def norms(self, w):
        """Group L2 norms ``||w_g||``, shape (n_groups,)."""
        return np.sqrt(self.group_dot(w, w))

    def expand(self, z, out=None):
        """Per-parameter copy of the group values ``z`` (n_groups,), shape (n_params,)."""
        out = np.empty(self.n_params, dtype=np.asarray(z).dtype) if out is None else out
        for ws, bs, n_in, n_out, first in self.layers:
            out[ws].reshape(n_in, n_out)[...] = z[first:first + n_out]
            out[bs] = z[first:first + n_out]
        return out

    def param_on(self, z):
        """Parameters that matter when the units with ``z`` (bool, (n_groups,)) are on, (n_params,).

        A weight matters when its own unit is on and, past the first layer, the
        hidden unit feeding it too (an off unit outputs ReLU(0) = 0).
        """
        on = self.expand(np.asarray(z, dtype=bool))
        for i, (ws, _, n_in, n_out, _) in enumerate(self.layers[1:]):
            prev_first = self.layers[i][4]
            on[ws].reshape(n_in, n_out)[...] &= z[prev_first:prev_first + n_in, None]
        return on
