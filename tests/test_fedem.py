"""FedEM engine: SPEC §3 identities, memories, participation, ledger, reproducibility."""
import numpy as np
import pytest
from _toy_models import GaussianMeanModel

from fedemstats.algorithms import FedEM, client_update, server_update
from fedemstats.algorithms.base import StepSize, theory_step_size, make_step_size
from fedemstats.algorithms.fine_start import EVERYONE_ROUNDS, fine_start_compressor
from fedemstats.compression.base import Compressor, Identity, Message, uniform_rows
from fedemstats.federation import Federation
from fedemstats.participation import BernoulliParticipation, FixedSizeParticipation


class RandomSign(Compressor):
    """Unbiased test compressor: each coordinate kept with prob 1/2 and doubled (ω = 1)."""

    name = "randomsign"

    def compress(self, x, rng, blocks=None):
        x = np.atleast_2d(x)
        keep = uniform_rows(rng, *x.shape) < 0.5
        return Message(self.name, x.shape[0], x.shape[1], {"values": np.where(keep, 2 * x, 0.0)})

    def decompress(self, message):
        return message.arrays["values"]

    def omega(self, q, blocks=None):
        return 1.0

    def row_bits(self, message):
        return np.full(message.n_rows, 7 * message.q)


def heterogeneous_federation(n_clients=12, d=3, seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 30, n_clients)
    X = np.vstack([rng.normal(loc=3 * i, size=(m, d)) for i, m in enumerate(sizes)])
    return Federation(X, np.concatenate([[0], np.cumsum(sizes)]))


def test_identity_full_participation_is_em():
    fed = heterogeneous_federation()
    model = GaussianMeanModel(3)
    res = FedEM(model, step_size=1.0, alpha=1.0).run(fed, np.zeros(3), 3, 0)
    # EM on the pooled data: one step reaches the sample mean (sample-size weights)
    np.testing.assert_allclose(res.state.s_hat, fed.X.mean(0), rtol=1e-12)


def test_server_memory_equals_weighted_client_memories_every_round():
    fed = heterogeneous_federation()
    model = GaussianMeanModel(3)
    algo = FedEM(model, compressor=RandomSign(), participation=BernoulliParticipation(0.4), step_size=0.2)
    run = algo.start(fed, np.zeros(3), random_state=3)
    # 1 / (1 + omega), omega = 1; the fine start's rounds: 1 / (1 + omega) of its own compressor
    fine = 1.0 / (1.0 + float(fine_start_compressor().omega(3, model.layout.offsets)))
    assert run.alphas == (fine, 0.5) and 0.9 < fine < 1.0
    for k in range(1, 30):
        assert run.step()["round"] == k
        np.testing.assert_allclose(run.state.v, fed.weights @ run.state.v_clients, atol=1e-12)


def test_mean_field_memories_make_compressed_fedem_exact_on_a_fixed_point_model():
    """For x ~ N(mu, I) client stats do not depend on θ, so with mean-field memories
    FedEM's Δ_i -> 0 and it must converge to the pooled mean despite compression and
    partial participation; naive compressed EM (α=0, V=0) keeps a noise floor."""
    fed = heterogeneous_federation()
    model = GaussianMeanModel(3)
    fedem = FedEM(model, compressor=RandomSign(), participation=0.5, step_size=0.3)
    naive = FedEM(model, compressor=RandomSign(), participation=0.5, step_size=0.3, alpha=0.0, v_init="zero")
    err_fedem = np.abs(fedem.run(fed, np.zeros(3), 200, 1).state.s_hat - fed.X.mean(0)).max()
    err_naive = np.abs(naive.run(fed, np.zeros(3), 200, 1).state.s_hat - fed.X.mean(0)).max()
    assert err_fedem < 1e-8
    assert err_naive > 1e-2


def test_empty_active_set_still_applies_H_equals_V():
    s_hat, v = np.array([1.0, 2.0]), np.array([0.5, -0.5])
    s_new, v_new, h = server_update(s_hat, v, np.empty((0, 2)), np.empty(0), np.empty(0), 0.1, 0.5)
    np.testing.assert_allclose(h, v)
    np.testing.assert_allclose(s_new, s_hat + 0.1 * v)
    np.testing.assert_allclose(v_new, v)


def test_horvitz_thompson_direction_is_unbiased_by_monte_carlo():
    rng = np.random.default_rng(0)
    n, q = 6, 3
    w = rng.dirichlet(np.ones(n))
    q_all = rng.normal(size=(n, q))
    v = rng.normal(size=q)
    sampler = BernoulliParticipation(np.linspace(0.2, 0.9, n))
    reps, hs = 20000, []
    for r in range(reps):
        active, pi = sampler.sample(r, n, rng)
        hs.append(server_update(np.zeros(q), v, q_all[active], w[active], pi, 1.0, 0.0)[2])
    hs = np.array(hs)
    se = hs.std(0) / np.sqrt(reps)
    assert np.all(np.abs(hs.mean(0) - (v + w @ q_all)) < 4 * se)


def test_client_update_uses_the_same_q_for_memory_and_message():
    rng = [np.random.default_rng(i) for i in range(4)]
    stats, v = np.ones((4, 5)), np.zeros((4, 5))
    msg, q_rows, v_new, _ = client_update(stats, np.zeros(5), v, RandomSign(), 0.25, rng)
    np.testing.assert_array_equal(q_rows, RandomSign().decompress(msg))
    np.testing.assert_allclose(v_new, 0.25 * q_rows)


def test_ledger_and_history_count_exact_bits():
    fed = heterogeneous_federation(n_clients=10)
    model = GaussianMeanModel(3)
    res = FedEM(model, compressor=RandomSign(), participation=FixedSizeParticipation(4),
                step_size=0.2, v_init="zero", downlink_compressor=None, fine_start=False).run(fed, np.zeros(3), 5, 0)
    h = res.history
    assert list(h["n_active"]) == [10, 4, 4, 4, 4, 4]
    # per active client: 7 bits per coordinate + one float64 log-likelihood up, Ŝ (q floats) down
    assert list(h["uplink_bits"][1:]) == [4 * (7 * 3 + 64)] * 5
    assert list(h["downlink_bits"][1:]) == [4 * 3 * 64] * 5
    assert res.ledger.total == int(h["cumulative_bits"].iloc[-1])


def test_compressed_downlink_counts_each_clients_catch_up():
    """Everyone takes part: each round, every client fetches the one update it missed."""
    fed = heterogeneous_federation(n_clients=10)
    res = FedEM(GaussianMeanModel(3), compressor="dither:s=4", step_size=0.2).run(fed, np.zeros(3), 6, 0)
    h = res.history
    updates = h["broadcast_bits"].to_numpy()
    # round k's clients fetch the update broadcast at the end of round k - 1 (round 1: Ŝ_0, sent in round 0)
    np.testing.assert_array_equal(h["downlink_bits"].to_numpy()[2:], 10 * updates[1:-1])
    assert (updates[1:] < 3 * 64).all()  # fewer bits than Ŝ as float64


def test_broadcast_catch_up_is_the_cheaper_of_the_updates_and_the_full_iterate():
    from fedemstats.algorithms.broadcast import Broadcast

    bc = Broadcast("dither:s=4", q=10)
    bs = bc.start(3, everyone_has_s0=True)
    bs.update_bits += [100, 200, 300, 400]  # updates to Ŝ_1 ... Ŝ_4
    bs.synced[:] = [0, 3, -1]
    assert bc.catch_up(bs, np.array([0, 1, 2]), 4) == min(1000, 640) + 400 + 640
    np.testing.assert_array_equal(bs.synced, [4, 4, 4])
    assert bc.catch_up(bs, np.array([1]), 4) == 0


def test_same_seed_same_history_and_different_seed_differs():
    fed = heterogeneous_federation()
    model = GaussianMeanModel(3)
    algo = FedEM(model, compressor=RandomSign(), participation=0.5, step_size=0.2)
    rounds = EVERYONE_ROUNDS + 6  # past the rounds that hear every client, into sampled ones
    a, b = algo.run(fed, np.zeros(3), rounds, 42), algo.run(fed, np.zeros(3), rounds, 42)
    np.testing.assert_array_equal(a.state.s_hat, b.state.s_hat)
    assert a.history.equals(b.history)
    c = algo.run(fed, np.zeros(3), rounds, 43)
    assert not a.history["n_active"].equals(c.history["n_active"])


def test_step_size_schedules():
    assert make_step_size(0.5)(10) == 0.5
    assert StepSize(1.0, 0.6)(4) == pytest.approx(4 ** -0.6)
    assert theory_step_size(0.0, 10, np.ones(10)) == 1.0
    small_n = theory_step_size(1.3, 20, np.ones(20))
    assert 0.05 < small_n < 0.2  # the SPEC §3 prototype: 0.1 converges, 0.25 oscillates
    assert theory_step_size(8.0, 20, np.ones(20)) < small_n  # more compression, smaller step
    assert theory_step_size(1.3, 20, np.full(20, 0.1)) < small_n  # partial participation too
    with pytest.raises(ValueError):
        make_step_size(-1.0)
    with pytest.raises(ValueError):
        make_step_size("fast")
    with pytest.raises(ValueError):
        make_step_size(lambda k: float("nan"))(1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(v_init="random"), "v_init"), (dict(alpha=-1.0), "alpha"), (dict(batch_size=0), "batch_size"),
    (dict(compressor="zip"), "unknown compressor"), (dict(participation=1.5), "participation"),
])
def test_fedem_bad_hyper_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FedEM(GaussianMeanModel(2), **kwargs)


def test_identity_compressor_bits():
    msg = Identity().compress(np.ones((3, 10)))
    assert Identity().bits(msg) == 3 * 10 * 64
    assert all(len(b) * 8 == 640 for b in Identity().encode(msg))


def test_identity_encode_decode_roundtrip():
    x = np.random.default_rng(0).normal(size=(3, 7))
    comp = Identity()
    back = comp.decompress(comp.decode(comp.encode(comp.compress(x)), 7))
    np.testing.assert_array_equal(back, x)


def test_divergence_is_a_clear_error_not_nan():
    """A step far too large for the compression noise blows Ŝ up; the user gets told
    what to change instead of a NaN model or an obscure overflow downstream."""
    from fedemstats.algorithms.fedem import DivergenceError

    fed = heterogeneous_federation()
    algo = FedEM(GaussianMeanModel(3), compressor=RandomSign(), step_size=50.0, alpha=0.0, v_init="zero",
                 safeguard=False)
    with pytest.raises(DivergenceError, match="Lower step_size"):
        algo.run(fed, np.zeros(3), 500, 0)
