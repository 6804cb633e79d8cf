"""Issue 12, round 0: the quantised mean-field start (``fedemstats.algorithms.start``).

* it costs a fraction of the float64 start's bits, and the ledger holds exactly its transfers;
* θ_0 travels as its statistics in short floats, at the fewest mantissa bits whose rounding stays
  within START_THETA_TOLERANCE in the model's geometry, and the run starts from their T-map; every
  other run starts from θ_0 itself;
* Ŝ_0 and V_{0,i} are the decoded broadcast and mean-field uploads, recomputed from the
  public functions a node uses (a client reproduces them alone), and V = Σ w_i V_{0,i};
* it follows the float64 start's log-likelihood trajectory within 1e-3 nats per row;
* lossless runs, raw coordinates and VR-FedEM keep the float64 start.
"""
import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.preprocessing import StandardScaler

from fedemstats.algorithms import FedEM, VRFedEM
from fedemstats.algorithms.start import (ROUND0_LEVELS, START_THETA_FLAG_BITS, START_THETA_TOLERANCE,
                                         round0_compressor)
from fedemstats.federation import Federation, partition_iid
from fedemstats.compression.short_floats import (decode_short_floats, encode_short_floats, mantissa_bits,
                                                 round_mantissa, short_float_bits)
from fedemstats.ledger import FLOAT32_BITS, FLOAT64_BITS
from fedemstats.models.gmm import GaussianMixtureModel
from fedemstats.models.gmm_init import init_params


class _Float64Start(FedEM):
    """FedEM with today's float64 mean-field start."""

    quantise_start = False


@pytest.fixture(scope="module")
def problem():
    X = StandardScaler().fit_transform(load_diabetes().data)  # s1 and s2 correlate at 0.90
    fed = Federation.from_groups(X, partition_iid(X.shape[0], 20, random_state=0))[0]
    model = GaussianMixtureModel(3, X.shape[1], shift=X.mean(0))
    return fed, model, init_params(fed, model, "kmeans", np.random.default_rng(0))


def test_quantised_start_costs_a_fraction_and_the_ledger_holds_its_transfers(problem):
    fed, model, theta0 = problem
    n, q = fed.n_clients, model.q
    algo = FedEM(model, compressor="dither:s=4")
    assert algo.quantised_start(n)
    run = algo.start(fed, theta0, random_state=0)
    # the four transfers, rebuilt from the public functions with the run's entropy: θ_0 as short-float
    # statistics, from which everyone starts (test_theta0_travels_as_short_float_statistics)
    theta_message = algo.theta_message(theta0)
    start = algo.received_theta(theta_message)
    a0, g0 = algo.start_point(start)
    m0, q0 = algo.start_upload(model.client_stats(fed, start)[0], a0, g0, run.state.entropy, np.arange(n), "upload")
    mb, s0 = algo.start_broadcast(a0, g0, q0, fed.weights, run.state.entropy)
    theta1 = model.t_map(s0)
    m1, _ = algo.start_upload(model.client_stats(fed, theta1)[0], s0, model.geometry(theta1, s0),
                              run.state.entropy, np.arange(n), "mean-field")
    comp = round0_compressor()
    row = run.history.iloc[0]
    assert row["uplink_bits"] == comp.bits(m0) + comp.bits(m1) + 2 * n * FLOAT64_BITS
    assert theta_message.dtype == np.float32 and theta_message.shape == (q,)
    theta_bits = short_float_bits(q, mantissa_bits(theta_message)) + START_THETA_FLAG_BITS
    assert theta_bits < q * FLOAT32_BITS  # fewer mantissa bits than float32's 23 (20 here: collinear columns)
    assert row["downlink_bits"] == n * theta_bits + n * comp.bits(mb)
    assert np.array_equal(run.state.s_hat, s0)
    assert row["n_cond_exp"] == 2 * fed.n_rows
    float64 = _Float64Start(model, compressor="dither:s=4").start(fed, theta0, random_state=0).history.iloc[0]
    # two exact uploads, each with its log-likelihood (the mean-field one's starts the controller's memories)
    assert float64["uplink_bits"] == 2 * n * (q + 1) * FLOAT64_BITS
    assert row["uplink_bits"] < 0.25 * float64["uplink_bits"]
    # the broadcast of Ŝ_0 shrinks as much, and θ_0 below a quarter (the float64 start sends θ_0 itself)
    assert row["downlink_bits"] - n * theta_bits < 0.25 * n * q * FLOAT64_BITS
    assert float64["downlink_bits"] == n * model.n_parameters(theta0) * FLOAT64_BITS + n * q * FLOAT64_BITS
    assert row["downlink_bits"] < 0.65 * float64["downlink_bits"]


def test_quantised_start_state_is_what_every_client_decodes(problem):
    fed, model, theta0 = problem
    n = fed.n_clients
    algo = FedEM(model, compressor="dither:s=4", participation=0.5)
    state = algo.start(fed, theta0, random_state=3).state
    # T(E_θ[s]) = θ
    np.testing.assert_allclose(model.t_map(model.expected_stats(theta0)).means, theta0.means, atol=1e-12)
    # a client decodes θ_0 from the message's bytes alone
    message = algo.theta_message(theta0)
    bits = mantissa_bits(message)
    payload = encode_short_floats(message, bits)
    assert 8 * len(payload) - short_float_bits(message.size, bits) in range(8)
    start = algo.received_theta(decode_short_floats(payload, message.size, bits))
    a0, g0 = algo.start_point(start)
    stats0 = model.client_stats(fed, start)[0]
    _, q0 = algo.start_upload(stats0, a0, g0, state.entropy, np.arange(n), "upload")
    message, s0 = algo.start_broadcast(a0, g0, q0, fed.weights, state.entropy)
    assert np.array_equal(state.s_hat, s0)
    assert np.array_equal(algo.received_start(a0, g0, message), s0)  # a client decodes the same Ŝ_0
    # client 7 alone reproduces its memory from its own stream
    theta1 = model.t_map(s0)
    stats7 = model.client_stats(fed, theta1, np.array([7]))[0]
    _, v7 = algo.start_upload(stats7, s0, model.geometry(theta1, s0), state.entropy, np.array([7]), "mean-field")
    np.testing.assert_allclose(state.v_clients[7], v7[0], rtol=0, atol=1e-14 * np.abs(s0).max())
    np.testing.assert_allclose(state.v, fed.weights @ state.v_clients, rtol=0, atol=1e-15)
    # Ŝ_0 is the exact EM statistic to the dithering's precision, measured in the geometry:
    # the error of the mean and of the broadcast against the clients' deviations from a_0
    exact = fed.weights @ stats0
    err = np.linalg.norm(g0.forward((s0 - exact)[None, :]))
    spread = np.sqrt(fed.weights @ np.sum(g0.forward(stats0 - a0) ** 2, axis=1))
    assert 0.0 < err < 20.0 / ROUND0_LEVELS * spread, (err, spread)


@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_quantised_start_begins_where_the_float64_start_begins(problem, participation):
    # the log-likelihood at θ_0 and at θ_1 = T(Ŝ_0) (the history's rows 0 and 1) is the start's
    # doing; from round 1's step on, γ follows the messages' noise (zero after the float64
    # start, whose first messages are exact zeros) and the paths are two noisy paths of
    # dither:s=4: that both reach exact EM's solution is test_compressed_real_data's
    fed, model, theta0 = problem
    kw = dict(compressor="dither:s=4", participation=participation)
    quantised = FedEM(model, **kw).run(fed, theta0, 1, random_state=1)
    float64 = _Float64Start(model, **kw).run(fed, theta0, 1, random_state=1)
    ll_q, ll_f = quantised.history["loglik"].to_numpy(), float64.history["loglik"].to_numpy()
    assert ll_q[0] != ll_f[0] and abs(ll_q[0] - ll_f[0]) < 1e-5  # θ̃_0 is θ_0 in short floats
    assert abs(ll_q[1] - ll_f[1]) < 1e-4, (ll_q, ll_f)
    assert quantised.ledger.total < 0.6 * float64.ledger.total


@pytest.mark.parametrize("make", [
    lambda m: FedEM(m, participation=0.5),  # lossless uplink: every transfer stays exact
    lambda m: FedEM(m, compressor="dither:s=4", precondition=False),  # raw coordinates: the collapse of issue 11
    lambda m: FedEM(m),  # exact EM: no mean-field pass at all
    lambda m: VRFedEM(m, compressor="dither:s=4", batch_size="full"),  # its workers need exact statistics
    # as fine as the start's quantiser or finer: its 1e-3 error would be the largest in the run, and
    # compressed FedEM would not tend to exact EM as ω → 0 (test_compressed_real_data's continuity)
    lambda m: FedEM(m, compressor=f"dither:s={ROUND0_LEVELS}"),
    lambda m: FedEM(m, compressor=f"dither:s={2 ** 24}"),
])
def test_other_runs_keep_the_float64_start(problem, make):
    fed, model, theta0 = problem
    algo = make(model)
    assert not algo.quantised_start(fed.n_clients)
    row = algo.start(fed, theta0, random_state=0).history.iloc[0]
    passes = 1 + int(algo.mean_field_pass(fed.n_clients))
    n, q = fed.n_clients, model.q
    assert row["uplink_bits"] == passes * n * (q + 1) * FLOAT64_BITS


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_theta0_travels_as_short_float_statistics_at_the_fewest_mantissa_bits(problem, covariance_type):
    fed, _, _ = problem
    model = GaussianMixtureModel(3, fed.n_features, covariance_type=covariance_type, shift=fed.X.mean(0))
    theta0 = init_params(fed, model, "kmeans", np.random.default_rng(0))
    algo = FedEM(model, compressor="dither:s=4")
    message = algo.theta_message(theta0)
    assert message is not None and message.dtype == np.float32
    bits = mantissa_bits(message)
    assert 0 < bits < 23
    # E_θ0[s] rounded to those bits, which stay within the tolerance in the geometry at θ_0; one bit
    # fewer would not (so a shorter message would move the start further than the check allows)
    a0 = model.expected_stats(theta0)
    geometry = model.geometry(theta0, a0)
    assert np.array_equal(message, round_mantissa(a0.astype(np.float32), bits))
    assert np.max(np.abs(geometry.forward((message - a0)[None, :]))) <= START_THETA_TOLERANCE
    shorter = round_mantissa(a0.astype(np.float32), bits - 1)
    assert np.max(np.abs(geometry.forward((shorter - a0)[None, :]))) > START_THETA_TOLERANCE
    assert algo.theta_bits(theta0, message) == short_float_bits(model.q, bits) + START_THETA_FLAG_BITS
    start = algo.received_theta(message)
    for name, value in model.params_to_dict(theta0).items():
        moved = np.max(np.abs(model.params_to_dict(start)[name] - value)) / np.max(np.abs(value))
        assert 0.0 < moved < 1e-4, (name, moved)  # rounded, not dropped or replaced
    # the run's round 0 is evaluated at θ̃_0: its log-likelihood is θ_0's to the rounding, and
    # exactly that of the clients' uploads at θ̃_0
    ll_start = fed.weights @ model.client_stats(fed, start)[1]
    ll_theta0 = fed.weights @ model.client_stats(fed, theta0)[1]
    row = algo.start(fed, theta0, random_state=0).history.iloc[0]
    assert row["loglik"] == pytest.approx(ll_start, rel=0, abs=1e-12)
    assert abs(ll_start - ll_theta0) < 1e-5
    # a float64 start (exact EM) starts from θ_0 itself
    exact = FedEM(model).start(fed, theta0, random_state=0).history.iloc[0]
    assert exact["loglik"] == pytest.approx(ll_theta0, rel=0, abs=1e-12)


def test_theta0_whose_float32_statistics_cancel_travels_in_float64():
    # a component 1e4 standard deviations from the shift: its S2 / r − m mᵀ loses all of float32's
    # digits (rounding 6e-8 of m² = 6 variances), so θ_0 goes out as it is and the run starts there
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(100, 2)), 1e4 + rng.normal(size=(100, 2))])
    fed = Federation.from_groups(X, partition_iid(X.shape[0], 4, random_state=0))[0]
    model = GaussianMixtureModel(2, 2, covariance_type="diag", shift=np.zeros(2))
    theta0 = init_params(fed, model, "kmeans", np.random.default_rng(0))
    algo = FedEM(model, compressor="dither:s=4")
    a0 = model.expected_stats(theta0)
    moved = model.geometry(theta0, a0).forward((a0.astype(np.float32) - a0)[None, :])
    assert np.max(np.abs(moved)) > 1e3 * START_THETA_TOLERANCE
    assert algo.theta_message(theta0) is None
    start, message = algo.start_theta(theta0)
    assert start is theta0 and message is None
    assert algo.theta_bits(theta0, message) == model.n_parameters(theta0) * FLOAT64_BITS + START_THETA_FLAG_BITS
    n = fed.n_clients
    row = algo.start(fed, theta0, random_state=0).history.iloc[0]
    assert row["loglik"] == pytest.approx(fed.weights @ model.client_stats(fed, theta0)[1], rel=0, abs=1e-12)
    assert row["downlink_bits"] > n * model.n_parameters(theta0) * FLOAT64_BITS
