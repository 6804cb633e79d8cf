"""Small independent models for testing the algorithms without the GMM code."""
import numpy as np

from fedemstats.layout import StatLayout
from fedemstats.models.base import Model


class GaussianMeanModel(Model):
    """x ~ N(mu, I): statistic = x, T(s) = s. EM converges in one step; any
    algorithm identity that holds for EM must hold here exactly."""

    def __init__(self, n_features):
        self.layout = StatLayout([("mean", (n_features,))])

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None):
        X, seg = federation.select(clients, batch, rng)
        sums = np.add.reduceat(X, seg[:-1], axis=0) if X.shape[0] else np.zeros((0, X.shape[1]))
        counts = np.diff(seg)[:, None]
        loglik = np.add.reduceat(-0.5 * ((X - theta) ** 2).sum(1), seg[:-1]) / counts[:, 0]
        return sums / counts, loglik

    def t_map(self, s):
        return np.asarray(s, dtype=float).copy()

    def n_parameters(self, theta):
        return theta.size

    def log_likelihood(self, X, theta):
        return -0.5 * ((X - theta) ** 2).sum(1)
