"""Curved-exponential-family model contract (SPEC §2).

For p(y, z; theta) = rho(y, z) exp(<s(y, z), phi(theta)> - psi(theta)) a model
exposes the *conditional expected sufficient statistics* averaged per client
(what a client sends) and the *M-step map* ``T`` (what the server applies).
Statistics and the T-map are kept apart so that algorithms can move in
statistic space (FedEM, VR-FedEM, online EM) between them.

The whole contract, in the order of a fit: :meth:`Model.from_federation` (public
shift / scale from round-1 summaries), :meth:`Model.init_theta` (federated
initialisation), :meth:`Model.client_stats` and :meth:`Model.t_map` (the rounds, with
:meth:`Model.geometry` the compression geometry at each iterate),
:meth:`Model.mean_field` (the stationarity measure), then :meth:`Model.log_likelihood`,
:meth:`Model.n_parameters`, :meth:`Model.impute` and :meth:`Model.params_to_dict`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..federation import Federation
from ..layout import StatLayout
from ._geometry import Geometry, IdentityGeometry

__all__ = ["Model", "mean_field", "mean_field_norm2", "em_step_gain"]


def mean_field(model, federation, s) -> np.ndarray:
    """Mean field h(s) = Σ_i w_i s̄_i(T(s)) − s (paper 003, eq. (6)) from one full pass.

    Parameters
    ----------
    model : Model
    federation : Federation
    s : ndarray of shape (q,)

    Returns
    -------
    h : ndarray of shape (q,)
        Its roots are the fixed points of EM in expectation space.
    """
    s = np.asarray(s, dtype=np.float64)
    return model.mean_stats(federation, model.t_map(s)) - s


def mean_field_norm2(model, federation, s) -> float:
    """||h(s)||², the ε-stationarity measure of Theorems 1 and 3 of paper 003."""
    h = mean_field(model, federation, s)
    return float(h @ h)


def em_step_gain(model, federation, theta) -> float:
    """Mean log-likelihood per row that one exact EM step from ``theta`` adds (one full pass).

    ℓ(T(Σ_i w_i s̄_i(θ))) − ℓ(θ), ℓ the mean of ``model.log_likelihood`` over the
    federation's rows: at least 0 (EM never lowers the likelihood), and below ``tol`` where
    exact EM's own rule (scikit-learn's) would stop. It tells a fit that stopped at a
    stationary point from one that stopped early.

    Parameters
    ----------
    model : Model
    federation : Federation
    theta : parameters
        E.g. a fitted estimator's ``theta_``, with the model it was fitted with.

    Returns
    -------
    float
    """
    after = model.t_map(model.mean_stats(federation, theta))
    return float(model.log_likelihood(federation.X, after).mean() - model.log_likelihood(federation.X, theta).mean())


class Model:
    """Abstract latent-variable model with a flat statistic vector.

    Subclasses set :attr:`layout` in ``__init__`` and implement the methods that
    raise ``NotImplementedError`` below. Parameter sets ``theta`` are model-specific
    frozen dataclasses of arrays; algorithms treat them as opaque.

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
    #: the ``init_theta(method=...)`` choices of the model (empty: it takes no ``method``)
    init_methods: tuple = ()

    # ------------------------------------------------------------------ construction
    @classmethod
    def public_centring(cls, federation) -> dict:
        """Public ``shift`` / ``scale`` constructor arguments from round-1 client summaries.

        The default is none (models of first moments only); models with second moments
        override it (SPEC §2 numerical care).

        Returns
        -------
        dict
            Keyword arguments of the constructor, e.g. ``{"shift": mean}``.
        """
        return {}

    @classmethod
    def from_federation(cls, federation, **hyper):
        """The model for ``federation``'s features with its public shift / scale.

        Parameters
        ----------
        federation : Federation
        **hyper
            The other constructor arguments (e.g. ``n_components``, ``reg_covar``).
        """
        return cls(n_features=federation.n_features, **hyper, **cls.public_centring(federation))

    def init_theta(self, federation, rng=None, **kwargs):
        """Federated initial parameters θ_0: from client summaries, never from pooled rows.

        Parameters
        ----------
        federation : Federation
        rng : numpy.random.Generator or int, optional
        **kwargs
            Model-specific options (e.g. ``method="kmeans"``).
        """
        raise NotImplementedError(f"{type(self).__name__} does not define init_theta.")

    # ------------------------------------------------------------------ statistics and T-map
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
        raise NotImplementedError(f"{type(self).__name__} does not define client_stats.")

    def t_map(self, s) -> object:
        """M-step: parameters maximising ``<s, phi(theta)> - psi(theta) - R(theta)``.

        Must be *total*: any ``s`` in R^q (noisy, quantised iterates) maps to valid
        parameters. Subclasses document their projection.

        Parameters
        ----------
        s : ndarray of shape (q,)
        """
        raise NotImplementedError(f"{type(self).__name__} does not define t_map.")

    def expected_stats(self, theta) -> np.ndarray:
        """E_θ[s], the statistics the model itself implies, shape (q,): ``t_map`` maps them back
        to θ (up to its projection). The safeguard snaps an iterate that left the valid set
        (T had to repair it) to E_{T(Ŝ)}[s]; models without it are never snapped."""
        raise NotImplementedError(f"{type(self).__name__} does not define expected_stats.")

    def geometry(self, theta, s_hat) -> Geometry:
        """Compression geometry at the public iterate: an invertible linear map P on statistic
        vectors (``docs/geometry.md``). The default is the identity; models override it.

        Parameters
        ----------
        theta : parameters
            ``T(s_hat)``.
        s_hat : ndarray of shape (q,)
        """
        return IdentityGeometry(self.layout)

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

    def segment_stats(self, X, seg, theta):
        """Segment-mean conditional expected statistics of given rows.

        Used when several parameter values must be evaluated on the *same* rows,
        e.g. the control variate of VR-FedEM (paper 003, Algorithm 2, line 8), whose
        mini-batch comes from one ``federation.select(clients, batch, rng)`` call.
        The default wraps the rows in a temporary :class:`~fedemstats.federation.Federation`
        and calls :meth:`client_stats`.

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

    def mean_field(self, federation, s) -> np.ndarray:
        """h(s) = Σ_i w_i s̄_i(T(s)) − s, shape (q,); see :func:`mean_field`."""
        return mean_field(self, federation, s)

    def mean_field_norm2(self, federation, s) -> float:
        """||h(s)||²; see :func:`mean_field_norm2`."""
        return mean_field_norm2(self, federation, s)

    # ------------------------------------------------------------------ differential privacy
    #: whether private fits clip rows in the public geometry (counts of a Poisson model
    #: would stop being counts; its per-row statistics are clipped instead)
    dp_clips_rows: bool = True

    def dp_radius(self, clip, scale) -> float:
        """ρ: the norm bound of a clipped row in this model's statistic coordinates.

        Rows are clipped to ``clip`` in the public geometry u = (x − c) / scale; the model
        computes its moments on (x − shift) / self.scale, so ‖·‖ ≤ clip · max(scale / self.scale).
        """
        return float(clip * np.max(np.asarray(scale) / np.asarray(getattr(self, "scale", 1.0))))

    def dp_row_bound(self, radius) -> float:
        """B: the L2 norm bound of one row's statistic vector when ‖row‖ ≤ ``radius`` in the
        model's coordinates — the add/remove-one-row sensitivity of a sum of statistics
        (``docs/privacy.md``). Private fits also clip each row's statistic vector to B, which
        enforces it where the bound depends on θ (missing values, latent factors)."""
        raise NotImplementedError(f"{type(self).__name__} does not state a privacy sensitivity.")

    #: whether private fits may clip and noise the statistics in :meth:`geometry` (the
    #: current model's whitened coordinates, ``DPConfig(geometry="model")``); otherwise
    #: they use the public geometry
    dp_model_geometry: bool = False

    def dp_denoise(self, s, geometry, noise_std, previous=None) -> np.ndarray:
        """Project a noisy mean statistic onto what its noise level can support.

        The default is the identity. Models whose T-map would read noise as signal (a
        covariance's small eigenvalues) override it; the result must depend on ``s``,
        ``geometry``, ``noise_std`` and ``previous`` only (public quantities), so that it is
        post-processing of the release.

        Parameters
        ----------
        s : ndarray of shape (q,)
            The server's iterate after a private release.
        geometry : Geometry
            The coordinates in which the release's noise was added.
        noise_std : float
            Standard deviation of that noise on each coordinate of the mean statistic.
        previous : ndarray of shape (q,), optional
            E_θ[s] of the iterate θ the release was made at: what to keep of a part the
            release cannot resolve (the mixtures' empty components).

        Returns
        -------
        ndarray of shape (q,)
        """
        return np.asarray(s, dtype=np.float64)

    # ------------------------------------------------------------------ fitted parameters
    def log_likelihood(self, X, theta) -> np.ndarray:
        """Log-density of each row, shape (n_rows,)."""
        raise NotImplementedError(f"{type(self).__name__} does not define log_likelihood.")

    def n_parameters(self, theta) -> int:
        """Number of free parameters (for BIC / AIC)."""
        raise NotImplementedError(f"{type(self).__name__} does not define n_parameters.")

    def impute(self, X, theta, rng=None, sample=False) -> np.ndarray:
        """Missing entries (NaN) of ``X`` replaced by their conditional mean given the
        observed ones, or by a draw from that conditional when ``sample``.

        Parameters
        ----------
        X : ndarray of shape (n, n_features), NaN where missing
        theta : parameters
        rng : numpy.random.Generator, optional
            Used when ``sample``.
        sample : bool, default=False

        Returns
        -------
        ndarray of shape (n, n_features)
        """
        raise NotImplementedError(f"{type(self).__name__} cannot impute missing values; use a model "
                                  "that marginalises them (GaussianMissingModel, GaussianMixtureMissingModel, "
                                  "PoissonMixtureModel).")

    def params_to_dict(self, theta) -> dict:
        """Fitted parameters as plain named arrays (for JSON, Flower results, reports).

        The default lists the array fields of the parameter dataclass.

        Returns
        -------
        dict of str -> ndarray
        """
        return {f.name: getattr(theta, f.name) for f in dataclasses.fields(theta)
                if isinstance(getattr(theta, f.name), np.ndarray)}
