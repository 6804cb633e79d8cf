"""FedEM simulates its clients in chunks (issue 15): the chunks change nothing a client
computes, only the order of the server's floating-point sums, and they bound a round's memory."""
import tracemalloc

import numpy as np
import pytest

import fedemstats.algorithms.fedem as fedem_module
from fedemstats.algorithms import FedEM
from fedemstats.algorithms.fine_start import EVERYONE_ROUNDS
from fedemstats.federation import Federation
from fedemstats.models.gmm import GaussianMixtureModel, make_params


def _problem(n_clients, rows=6, d=3, K=2, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(K, d))
    X = centres[rng.integers(0, K, n_clients * rows)] + rng.normal(size=(n_clients * rows, d))
    fed = Federation(X, np.arange(0, n_clients * rows + 1, rows))
    model = GaussianMixtureModel(K, d, "full", 1e-6, shift=X.mean(0))
    theta0 = make_params(np.full(K, 1 / K), centres + rng.normal(size=centres.shape),
                         covariances=np.repeat(np.eye(d)[None], K, axis=0), covariance_type="full")
    return fed, model, theta0


def _run(fed, model, theta0, rounds, **kw):
    run = FedEM(model, **kw).start(fed, theta0, random_state=5)
    for _ in range(rounds):
        run.step()
    return run


@pytest.mark.parametrize("kw", [dict(), dict(compressor="dither:s=4", participation=0.5),
                                dict(compressor="dither:s=4", batch_size=3)])
def test_chunked_rounds_equal_one_chunk(monkeypatch, kw):
    fed, model, theta0 = _problem(40)
    rounds = EVERYONE_ROUNDS + 5  # past the rounds that hear every client: 5 sampled rounds
    whole = _run(fed, model, theta0, rounds, **kw)
    # 3 clients per chunk: 14 chunks per round
    monkeypatch.setattr(fedem_module, "CHUNK_ENTRIES", 3 * model.q)
    chunked = _run(fed, model, theta0, rounds, **kw)
    # the clients' memories and messages are row-wise and identical; the server's sums
    # differ only by the order of additions
    np.testing.assert_allclose(chunked.state.v_clients, whole.state.v_clients, rtol=0, atol=1e-12)
    np.testing.assert_allclose(chunked.state.s_hat, whole.state.s_hat, rtol=0, atol=1e-12)
    assert chunked.ledger.total == whole.ledger.total
    np.testing.assert_allclose(chunked.history["loglik"].to_numpy(), whole.history["loglik"].to_numpy(),
                               rtol=0, atol=1e-12)


def test_round_memory_is_bounded_by_the_chunk_not_the_clients(monkeypatch):
    """Beyond the memories V_i (n × q, the state), a round allocates O(chunk × q)."""
    fed, model, theta0 = _problem(4000, rows=4)
    monkeypatch.setattr(fedem_module, "CHUNK_ENTRIES", 100 * model.q)
    run = FedEM(model, compressor="dither:s=4").start(fed, theta0, random_state=0)
    run.step()
    state_bytes = run.state.v_clients.nbytes
    tracemalloc.start()
    run.step()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # unchunked, a round held several (n × q) arrays at once (stats, Δ, its image in the
    # geometry, the message, the decoded q_i, the new memories): 9.4 × the state here.
    # Chunked, what grows with n is a dozen scalars per client (log-likelihoods, noise
    # estimates, participation draws): 0.6 × the state at q = 20, less at larger q.
    assert peak < state_bytes, (peak, state_bytes)
