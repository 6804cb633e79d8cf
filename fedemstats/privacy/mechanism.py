"""The Gaussian mechanism: the server's draw (central) or each client's share (distributed)."""
from __future__ import annotations

import numpy as np

__all__ = ["gaussian_noise", "noise_share_std", "client_noise_generator", "DP_STREAM_TAG"]


def noise_share_std(std, n_active, mode):
    """Standard deviation of one party's noise so that the sum has std ``std``.

    Central: the server draws it all (``std``). Distributed: each of the ``n_active``
    clients draws N(0, std²/n_active), so the securely aggregated sum has variance std²
    (a client that drops out after drawing leaves the sum short of noise: the
    guarantee assumes every active client's share arrives).
    """
    return float(std) if mode == "central" else float(std) / np.sqrt(max(int(n_active), 1))


def gaussian_noise(shape, std, rng):
    """N(0, std² I) of ``shape`` from the caller's ``numpy.random.Generator``."""
    return std * rng.standard_normal(shape)


#: domain tag of the clients' noise streams (apart from their quantisation streams)
DP_STREAM_TAG = 0x44500001


def client_noise_generator(entropy, round_, client):
    """Client ``client``'s own generator of its round-``round_`` noise share, keyed by the
    run's public entropy: a node can reproduce it alone, and runs are seeded end to end."""
    return np.random.Generator(np.random.Philox(np.random.SeedSequence(
        [int(entropy), int(round_), int(client), DP_STREAM_TAG])))
