"""Curved-exponential-family model contract (SPEC §2).

For p(y, z; theta) = rho(y, z) exp(<s(y, z), phi(theta)> - psi(theta)) a model
exposes the *conditional expected sufficient statistics* averaged per client
(what a client sends) and the *M-step map* ``T`` (what the server applies).
Statistics and the T-map are kept apart so that algorithms can move in
statistic space (FedEM, VR-FedEM, online EM) between them.
"""
from __future__ import annotations

import numpy as np

from ..federation import Federation
from ..layout import StatLayout

__all__ = ["Model"]


class Model:
    """Abstract latent-variable model with a flat statistic vector.

    Subclasses set :attr:`layout` in ``__init__`` and implement the methods below.
    Parameter sets ``theta`` are model-specific frozen containers (e.g. a
    dataclass of arrays); algorithms treat them as opaque.

    Attributes
    ----------
    layout : StatLayout
        Named blocks of the statistic vector; ``q = layout.size``.
    shift : ndarray of shape (n_features,)
        Public centring point ``c``; second moments are computed on ``x - c``
        (SPEC §2, numerical care) and the shift is undone in :meth:`t_map`.
    """

    layout: StatLayout
    #: whether rows may contain NaN (missing values marginalised by the model)
    allow_nan: bool = False

    @property
    def q(self) -> int:
        return self.layout.size

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None):
        """Per-client mean conditional expected statistics in one vectorised pass.

        Parameters
        ----------
        federation : Federation
        theta : parameters
        clients : array-like of int of shape (n_active,), optional
            Clients to compute; all when ``None``.
        batch : int, optional
            Mini-batch size per client (rows drawn with ``rng``); all rows when ``None``.
        rng : numpy.random.Generator, optional

        Returns
        -------
        stats : ndarray of shape (n_active, q)
            Row ``j`` is ``(1/|B_j|) sum_{rows in B_j} E_theta[s(y, z) | y]``.
        loglik : ndarray of shape (n_active,)
            Mean log-likelihood of the same rows under ``theta`` (same pass).
        """
        raise NotImplementedError

    def t_map(self, s) -> object:
        """M-step: parameters maximising ``<s, phi(theta)> - psi(theta) - R(theta)``.

        Must be *total*: any ``s`` in R^q (noisy, quantised iterates) maps to valid
        parameters. Subclasses document their projection.

        Parameters
        ----------
        s : ndarray of shape (q,)
        """
        raise NotImplementedError

    def check_stats(self, s) -> np.ndarray:
        """``s`` as a float64 vector of shape (q,); ValueError if the shape is wrong or
        it holds NaN/inf (a T-map is total on R^q, not on non-finite input)."""
        s = np.asarray(s, dtype=np.float64)
        if s.shape != (self.q,):
            raise ValueError(f"s must have shape ({self.q},); got {s.shape}.")
        if not np.all(np.isfinite(s)):
            raise ValueError("s holds NaN or inf; the iterate diverged (lower the step size).")
        return s

    def unpack_stats(self, s) -> dict:
        """:meth:`check_stats`, then the layout's named blocks of ``s`` (the first lines of a T-map)."""
        return self.layout.unpack(self.check_stats(s))

    def log_likelihood(self, X, theta) -> np.ndarray:
        """Log-density of each row, shape (n_rows,)."""
        raise NotImplementedError

    def n_parameters(self, theta) -> int:
        """Number of free parameters (for BIC / AIC)."""
        raise NotImplementedError

    def segment_stats(self, X, seg, theta):
        """Segment-mean conditional expected statistics of given rows.

        Used when several parameter values must be evaluated on the *same* rows,
        e.g. the control variate of VR-FedEM (paper 003, Algorithm 2, line 8), whose
        mini-batch comes from one ``federation.select(clients, batch, rng)`` call.
        The default wraps the rows in a temporary :class:`~fedemstats.federation.Federation`
        and calls :meth:`client_stats`, so every model gets it for free; models may
        override it with a direct kernel call.

        Parameters
        ----------
        X : ndarray of shape (n_rows, n_features)
            Selected rows, segment by segment.
        seg : ndarray of int of shape (n_segments + 1,)
            Segment ``j`` is ``X[seg[j]:seg[j + 1]]``; no segment may be empty.
        theta : parameters

        Returns
        -------
        stats : ndarray of shape (n_segments, q)
        loglik : ndarray of shape (n_segments,)
            Mean log-likelihood of each segment's rows.
        """
        return self.client_stats(Federation(X, seg, allow_nan=self.allow_nan), theta)

    def mean_stats(self, federation, theta) -> np.ndarray:
        """Weighted full-pass mean statistic ``sum_i w_i s_i(theta)``, shape (q,)."""
        stats, _ = self.client_stats(federation, theta)
        return federation.weights @ stats
