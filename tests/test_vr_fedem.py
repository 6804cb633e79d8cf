"""VR-FedEM (paper 003, Algorithm 2): EM reduction, outer-loop refresh, memories, bad input."""
import numpy as np
import pytest
from _toy_models import GaussianMeanModel

from fedemstats.algorithms import FedEM, VRFedEM
from fedemstats.compression import make_compressor
from fedemstats.federation import Federation
from fedemstats.models import GaussianMixtureModel, make_params


def gmm_federation(n_clients=4, rows=60, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    z = np.concatenate([np.full(rows, i % 3) for i in range(n_clients)])  # heterogeneous clients
    X = means[z] + rng.standard_normal((z.size, 2))
    fed = Federation(X, np.arange(n_clients + 1) * rows)
    model = GaussianMixtureModel(3, 2, "full", shift=X.mean(0))
    theta0 = make_params(np.full(3, 1 / 3), means + 0.7, np.repeat(np.eye(2)[None], 3, 0))
    return model, fed, theta0


def exact_em_path(model, fed, theta0, gamma, n_rounds):
    """Ŝ_{k+1} = Ŝ_k + γ (s̄(T(Ŝ_k)) − Ŝ_k) from Ŝ_0 = s̄(θ_0), directly."""
    s = model.mean_stats(fed, theta0)
    path = [s]
    for _ in range(n_rounds):
        s = s + gamma * (model.mean_stats(fed, model.t_map(s)) - s)
        path.append(s)
    return np.array(path)


@pytest.mark.parametrize("gamma", [1.0, 0.6])
def test_one_worker_identity_full_batch_is_exact_em_with_step_gamma(gamma):
    model, fed, theta0 = gmm_federation(n_clients=1, rows=150)
    vr = VRFedEM(model, step_size=gamma, batch_size=150, k_in=4, safeguard=False)  # the recursion as stated
    run = vr.start(fed, theta0, random_state=0)
    expected = exact_em_path(model, fed, theta0, gamma, 11)
    for k in range(1, 12):
        assert run.step()["step_size"] == gamma
        np.testing.assert_allclose(run.state.s_hat, expected[k], rtol=1e-10, atol=1e-12)


def test_several_workers_identity_full_batch_is_exact_em():
    model, fed, theta0 = gmm_federation(n_clients=5)
    res = VRFedEM(model, step_size=1.0, batch_size="full", k_in=3).run(fed, theta0, 9, 0)
    np.testing.assert_allclose(res.state.s_hat, exact_em_path(model, fed, theta0, 1.0, 9)[-1], rtol=1e-10)


def test_local_statistic_is_the_full_local_mean_at_the_start_of_every_outer_loop():
    model, fed, theta0 = gmm_federation()
    vr = VRFedEM(model, compressor="dither:s=4", step_size=0.3, batch_size=7, k_in=5)
    run = vr.start(fed, theta0, random_state=1)
    state = run.state
    checked = 0
    for _ in range(22):
        if state.extra["inner"] in (0, state.extra["k_in"]):
            # the round about to run starts an outer loop: S_{t,0,i} is used as is (k = 0)
            run.step()
            start = state.extra["s_prev"]  # Ŝ_{t,0}
            full, _ = model.client_stats(fed, model.t_map(start))
            np.testing.assert_allclose(state.extra["s_local"], full, rtol=1e-12, atol=1e-12)
            checked += 1
        else:
            run.step()
    assert checked == 5  # t = 1 (init) and the refreshes at rounds 6, 11, 16, 21


def test_mini_batch_local_statistics_drift_from_the_full_mean_inside_a_loop():
    """Sanity of the test above: inside an outer loop S_{t,k,i} is a mini-batch estimate."""
    model, fed, theta0 = gmm_federation()
    run = VRFedEM(model, step_size=0.3, batch_size=5, k_in=10).start(fed, theta0, random_state=2)
    for _ in range(4):
        run.step()
    full, _ = model.client_stats(fed, model.t_map(run.state.extra["s_prev"]))
    assert np.abs(run.state.extra["s_local"] - full).max() > 1e-6


def test_server_memory_is_the_weighted_client_memories_and_bits_are_counted():
    model, fed, theta0 = gmm_federation()
    res = VRFedEM(model, compressor="dither:s=2", step_size=0.2, batch_size=10, k_in=4).run(fed, theta0, 13, 3)
    np.testing.assert_allclose(res.state.v, fed.weights @ res.state.v_clients, atol=1e-12)
    h = res.history
    assert list(h["outer"].iloc[1:]) == [1] * 4 + [2] * 4 + [3] * 4 + [4]
    assert (h["uplink_bits"].iloc[1:] > 0).all() and res.ledger.total == h["cumulative_bits"].iloc[-1]
    # identity would cost 64 q bits per worker; dithering s=2 must be cheaper
    assert h["uplink_bits"].iloc[1] < fed.n_clients * model.q * 64


def test_conditional_expectations_are_counted():
    model, fed, theta0 = gmm_federation(n_clients=4, rows=60)
    res = VRFedEM(model, step_size=0.5, batch_size=8, k_in=3).run(fed, theta0, 7, 0)
    n_ce = res.history["n_cond_exp"].to_numpy()
    N, nb = fed.n_rows, 2 * 8 * fed.n_clients
    # round 0: S_init pass + mean-field pass; k = 0 steps cost nothing new; refreshes cost N
    np.testing.assert_array_equal(n_ce, [2 * N, 0, nb, nb, N, nb, nb, N])


def test_converges_on_heterogeneous_gmm_and_is_reproducible():
    model, fed, theta0 = gmm_federation(n_clients=6, rows=80)
    vr = VRFedEM(model, compressor="dither:s=8,per_block=true", step_size=0.5, batch_size=10, k_in=8,
                 track_h=True)
    a, b = vr.run(fed, theta0, 120, 7), vr.run(fed, theta0, 120, 7)
    np.testing.assert_array_equal(a.state.s_hat, b.state.s_hat)
    assert a.history["h_norm2"].iloc[-1] < 1e-10 * a.history["h_norm2"].iloc[0]
    c = vr.run(fed, theta0, 120, 8)
    assert not np.array_equal(a.state.s_hat, c.state.s_hat)


def test_toy_model_fixed_point_is_reached_despite_compression():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(3 * i, size=(20, 3)) for i in range(5)])
    fed = Federation(X, np.arange(6) * 20)
    res = VRFedEM(GaussianMeanModel(3), compressor="randk:k=1", step_size=0.2, batch_size=4,
                  k_in=5).run(fed, np.zeros(3), 300, 0)
    np.testing.assert_allclose(res.state.s_hat, X.mean(0), atol=1e-8)


def test_defaults_follow_theorem_3():
    model, fed, _ = gmm_federation(n_clients=4, rows=100)
    vr = VRFedEM(model, compressor="dither:s=2")
    omega = make_compressor("dither:s=2").omega(model.q, model.layout.offsets)
    k_in, b = vr.resolved_sizes(fed)
    assert k_in == 10 and b == int(np.ceil(10 / (1 + omega) ** 2))


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("k_in", [0, -2, 1.5, True])
def test_k_in_must_be_a_positive_int(k_in):
    model, _, _ = gmm_federation()
    with pytest.raises(ValueError, match="k_in"):
        VRFedEM(model, k_in=k_in)


def test_batch_larger_than_a_client_is_refused_with_advice():
    model, fed, theta0 = gmm_federation(rows=30)
    with pytest.raises(ValueError, match=r"batch_size=31 exceeds the 30 rows .*batch_size <= 30.*'full'"):
        VRFedEM(model, batch_size=31).run(fed, theta0, 2, 0)


@pytest.mark.parametrize("batch", [0, -1, "all", 2.5])
def test_bad_batch_values(batch):
    model, _, _ = gmm_federation()
    with pytest.raises(ValueError, match="batch_size"):
        VRFedEM(model, batch_size=batch)


@pytest.mark.parametrize("participation", [0.5, 3, "partial"])
def test_partial_participation_is_refused(participation):
    model, _, _ = gmm_federation()
    with pytest.raises(ValueError, match="participation"):
        VRFedEM(model, participation=participation)


def test_fedem_history_gains_n_cond_exp_and_keeps_its_columns():
    model, fed, theta0 = gmm_federation()
    h = FedEM(model, batch_size=10, participation=2).run(fed, theta0, 3, 0).history
    assert list(h.columns[:7]) == ["round", "loglik", "h_norm2", "uplink_bits", "downlink_bits",
                                   "n_active", "step_size"]
    np.testing.assert_array_equal(h["n_cond_exp"], [2 * fed.n_rows, 20, 20, 20])
