"""First-order optimizers on flat parameter vectors.

Used on clients (local E-step SGD) and on the server (FedOpt: an optimizer step
on the pseudo-gradient ``w - avg(phi)``; FedSparse: Adam/Adamax on ``w`` and the
gate logits).

Convention: :meth:`step` is **pure with respect to the caller's array**: it
returns a new array and never modifies ``params`` or ``grad``. Optimizer state
(momentum, moment estimates, step count) lives in the optimizer and is cleared
by :meth:`reset`; the state is created lazily with the shape of the first
``params`` seen.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_positive

__all__ = ["Optimizer", "SGD", "Adam", "Adamax", "make_optimizer"]

# Kingma & Ba (2015), section 2: default moment decay rates and denominator floor.
DEFAULT_BETA1 = 0.9
DEFAULT_BETA2 = 0.999
DEFAULT_EPS = 1e-8


class Optimizer:
    """Base class: subclasses implement :meth:`_update` returning the increment."""

    def __init__(self, lr):
        self.lr = check_positive(lr, "learning rate lr")
        self.t = 0

    def reset(self) -> None:
        """Forget all state (moments, step count)."""
        self.t = 0

    def step(self, params, grad) -> np.ndarray:
        """One descent step.

        Parameters
        ----------
        params, grad : ndarray of shape (n,)

        Returns
        -------
        new_params : ndarray of shape (n,)
            A new array; ``params`` and ``grad`` are left unchanged.
        """
        params = np.asarray(params, dtype=np.float64)
        grad = np.asarray(grad, dtype=np.float64)
        if params.shape != grad.shape:
            raise ValueError(f"params {params.shape} and grad {grad.shape} shapes differ.")
        self.t += 1
        return params - self._update(grad)

    def _update(self, grad):
        raise NotImplementedError

    def __repr__(self):
        keys = [k for k in vars(self) if not k.startswith("_") and k != "t"]
        return f"{type(self).__name__}(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in keys) + ")"


class SGD(Optimizer):
    """Plain or heavy-ball SGD: ``v <- momentum v + g; p <- p - lr v``.

    Parameters
    ----------
    lr : float > 0
    momentum : float in [0, 1)
    """

    def __init__(self, lr=0.1, momentum=0.0):
        super().__init__(lr)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must lie in [0, 1); got {momentum!r}.")
        self.momentum = float(momentum)
        self._v = None

    def reset(self):
        super().reset()
        self._v = None

    def _update(self, grad):
        if self.momentum == 0.0:
            return self.lr * grad
        self._v = grad.copy() if self._v is None else self.momentum * self._v + grad
        return self.lr * self._v


class _AdamBase(Optimizer):
    def __init__(self, lr, beta1, beta2, eps):
        super().__init__(lr)
        for name, b in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"{name} must lie in [0, 1); got {b!r}.")
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.eps = check_positive(eps, "eps")
        self._m = None
        self._u = None

    def reset(self):
        super().reset()
        self._m = None
        self._u = None

    def _moments(self, grad):
        if self._m is None:
            self._m = np.zeros_like(grad)
            self._u = np.zeros_like(grad)
        self._m = self.beta1 * self._m + (1.0 - self.beta1) * grad


class Adam(_AdamBase):
    """Adam (Kingma & Ba 2015, Algorithm 1) with bias correction."""

    def __init__(self, lr=1e-3, beta1=DEFAULT_BETA1, beta2=DEFAULT_BETA2, eps=DEFAULT_EPS):
        super().__init__(lr, beta1, beta2, eps)

    def _update(self, grad):
        self._moments(grad)
        self._u = self.beta2 * self._u + (1.0 - self.beta2) * grad * grad
        m_hat = self._m / (1.0 - self.beta1 ** self.t)
        v_hat = self._u / (1.0 - self.beta2 ** self.t)
        return self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


class Adamax(_AdamBase):
    """Adamax (Kingma & Ba 2015, Algorithm 2): infinity-norm second moment."""

    def __init__(self, lr=2e-3, beta1=DEFAULT_BETA1, beta2=DEFAULT_BETA2, eps=DEFAULT_EPS):
        super().__init__(lr, beta1, beta2, eps)

    def _update(self, grad):
        self._moments(grad)
        self._u = np.maximum(self.beta2 * self._u, np.abs(grad))
        # eps only guards coordinates whose gradient has been exactly zero so far.
        return (self.lr / (1.0 - self.beta1 ** self.t)) * self._m / (self._u + self.eps)


_OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adamax": Adamax}


def make_optimizer(spec, lr=None) -> Optimizer:
    """Build an optimizer from ``"sgd" | "adam" | "adamax"`` or return an instance as is."""
    if isinstance(spec, Optimizer):
        return spec
    if not isinstance(spec, str) or spec.lower() not in _OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(_OPTIMIZERS)} or an Optimizer; got {spec!r}.")
    cls = _OPTIMIZERS[spec.lower()]
    return cls() if lr is None else cls(lr=lr)
