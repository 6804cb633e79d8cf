"""Issue 11: the fine start (``fedemstats.algorithms.fine_start``).

* which runs have one: a lossy compressor coarser than 64 levels, in FedEM only;
* its rounds hear every client, whatever the participation, and are exactly the first rounds
  of a 64-level run with every client, and the ledger counts them;
* the running noise estimates restart when the run's own compressor takes over;
* a client that missed rounds decodes each broadcast update with the compressor of its round;
* on the Portal counts the first step is no longer cut to half by the trust region, as a
  coarse first round is (the systematic cause of the 0.385 nats-per-row gap).
"""
import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.preprocessing import StandardScaler

from fedemstats.algorithms import FedEM, VRFedEM
from fedemstats.algorithms.broadcast import replay
from fedemstats.algorithms.controller import StepController
from fedemstats.algorithms.fine_start import EVERYONE_ROUNDS, FINE_START_LEVELS, FINE_START_ROUNDS, fine_start_compressor
from fedemstats.algorithms.private import PrivateFedEM
from fedemstats.datasets import load_portal_rodents
from fedemstats.federation import Federation, partition_iid
from fedemstats.models.gmm import GaussianMixtureModel
from fedemstats.models.gmm_init import init_params
from fedemstats.privacy import DPConfig

ROUNDS = FINE_START_ROUNDS + 3


def _problem(X, n_clients, K=3):
    fed = Federation.from_groups(X, partition_iid(X.shape[0], n_clients, random_state=0))[0]
    model = GaussianMixtureModel(K, X.shape[1], shift=X.mean(0))
    return fed, model, init_params(fed, model, "kmeans", np.random.default_rng(0))


@pytest.fixture(scope="module")
def diabetes():
    return _problem(StandardScaler().fit_transform(load_diabetes().data), 20)


def _coarse_and_fine_runs(problem, **kwargs):
    """Two runs from the same start and streams: dither:s=4 at p = 0.5 with its fine start, and
    a 64-level run with every client and none (what the fine start's rounds must equal)."""
    fed, model, theta0 = problem
    return [FedEM(model, compressor=c, participation=p, fine_start=f, **kwargs).start(fed, theta0, 3)
            for c, p, f in [("dither:s=4", 0.5, True), (f"dither:s={FINE_START_LEVELS}", 1.0, False)]]


@pytest.mark.parametrize("kwargs, uplink, downlink", [
    (dict(compressor="dither:s=4"), FINE_START_ROUNDS, FINE_START_ROUNDS),
    (dict(compressor="dither:s=2", downlink_compressor=None), FINE_START_ROUNDS, 0),
    (dict(compressor="dither:s=4", downlink_compressor="dither:s=1024"), FINE_START_ROUNDS, 0),
    (dict(compressor="randk:k=40"), FINE_START_ROUNDS, FINE_START_ROUNDS),
    (dict(compressor=f"dither:s={FINE_START_LEVELS}"), 0, 0),
    (dict(compressor="dither:s=1024"), 0, 0),
    (dict(compressor="identity"), 0, 0),
    (dict(compressor="dither:s=4", fine_start=False), 0, 0),
])
def test_only_a_coarser_lossy_compressor_starts_fine(diabetes, kwargs, uplink, downlink):
    _, model, _ = diabetes
    algo = FedEM(model, **kwargs)
    assert (algo.fine_rounds, algo.broadcast.fine_rounds) == (uplink, downlink)
    for k in range(ROUNDS):
        expected = fine_start_compressor() if k < uplink else algo.compressor
        assert algo.uplink_compressor(k) is expected
        assert algo.broadcast.compressor_at(k) is (fine_start_compressor() if k < downlink
                                                   else algo.broadcast.compressor)


def test_vr_fedem_and_private_fedem_have_no_fine_start(diabetes):
    _, model, _ = diabetes
    vr = VRFedEM(model, compressor="dither:s=4")
    private = PrivateFedEM(model, DPConfig(epsilon=1.0, delta=1e-5), downlink_compressor="dither:s=4")
    assert (vr.fine_rounds, vr.broadcast.fine_rounds) == (0, 0)
    assert (private.fine_rounds, private.broadcast.fine_rounds) == (0, 0)


def test_fine_rounds_are_a_64_level_runs_first_rounds(diabetes):
    """Same α and streams: the fine rounds of dither:s=4 at p = 0.5 are those of dither:s=64 with
    every client bit for bit (iterate, memories, ledger); the first coarse round samples clients
    and sends the coarse quantiser's fewer bits per client."""
    runs = _coarse_and_fine_runs(diabetes, alpha=0.5)
    for _ in range(FINE_START_ROUNDS):
        rows = [r.step() for r in runs]
        assert rows[0]["uplink_bits"] == rows[1]["uplink_bits"] > 0
        assert rows[0]["downlink_bits"] == rows[1]["downlink_bits"]
        np.testing.assert_array_equal(runs[0].state.s_hat, runs[1].state.s_hat)
        np.testing.assert_array_equal(runs[0].state.v_clients, runs[1].state.v_clients)
    assert runs[0].history["downlink_bits"].sum() > 0  # the fine steps were broadcast and caught up with
    rows = [r.step() for r in runs]
    per_client = [r.history["uplink_bits"].iloc[-1] / r.history["n_active"].iloc[-1] for r in runs]
    assert per_client[0] < 0.75 * per_client[1], rows
    for run in runs:
        assert run.ledger.total == int(run.history["cumulative_bits"].iloc[-1])


def test_fine_rounds_absorb_their_messages_with_the_fine_compressors_alpha(diabetes):
    """Default α is 1/(1 + ω) of each round's compressor: the fine rounds of dither:s=4 equal a
    64-level run's (whose α is the fine one) bit for bit, memories included; then the coarse α
    takes over. A given α holds in every round."""
    fed, model, theta0 = diabetes
    runs = _coarse_and_fine_runs(diabetes)
    fine, coarse = runs[0].alphas
    assert runs[1].alphas == (fine, fine)
    assert coarse == runs[0].algorithm.resolved_alpha(runs[0].algorithm.client_geometry(theta0, runs[0].state.s_hat))
    assert coarse < 0.75 < 0.95 < fine < 1.0
    for _ in range(FINE_START_ROUNDS):
        for r in runs:
            r.step()
        np.testing.assert_array_equal(runs[0].state.v_clients, runs[1].state.v_clients)
        np.testing.assert_array_equal(runs[0].state.s_hat, runs[1].state.s_hat)
    algo = runs[0].algorithm
    assert [algo.round_alpha(runs[0].alphas, k) for k in range(ROUNDS)] == \
        [fine] * FINE_START_ROUNDS + [coarse] * (ROUNDS - FINE_START_ROUNDS)
    given = FedEM(model, compressor="dither:s=4", alpha=0.3).start(fed, theta0, 3)
    assert given.alphas == (0.3, 0.3)


def test_noise_estimates_restart_when_the_coarse_quantiser_takes_over(diabetes):
    """After the first coarse round the downlink's running noise ratio is that round's alone;
    after the second fine round it averages two."""
    fed, model, theta0 = diabetes

    def ratios(n_rounds):
        run = FedEM(model, compressor="dither:s=4").start(fed, theta0, 0)
        for _ in range(n_rounds):
            run.step()
        kind, message = run.state.downlink.last
        assert kind == "message"
        signal, noise = run.algorithm.broadcast.compressor_at(n_rounds - 1).noise_estimate(message)
        return run.state.downlink.noise_ratio, float(noise.sum() / signal.sum())

    running, last = ratios(FINE_START_ROUNDS + 1)
    assert running == last
    running, last = ratios(2)
    assert running != last


def test_the_step_rules_noise_average_restarts_when_the_coarse_quantiser_takes_over(diabetes, monkeypatch):
    """The controller's running noise and total start from the first coarse round's values; every
    other round (k ≥ 1) carries the average on."""
    fed, model, theta0 = diabetes
    seen, gamma = {}, StepController.gamma

    def spy(self, cs, k, noise, total, downlink_noise=None):
        seen[k - 1] = (cs.noise_avg, cs.total_avg)
        return gamma(self, cs, k, noise, total, downlink_noise)

    monkeypatch.setattr(StepController, "gamma", spy)
    run = FedEM(model, compressor="dither:s=4").start(fed, theta0, 0)
    for _ in range(ROUNDS):
        run.step()
    assert set(seen) == set(range(ROUNDS))  # no rejection: one step rule per round
    restarted = [k for k, (noise, total) in seen.items() if noise is None and total is None]
    assert restarted == [0, FINE_START_ROUNDS]


@pytest.mark.parametrize("participation", [0.3, 4])
def test_the_fine_start_and_the_first_coarse_rounds_hear_every_client_then_clients_are_sampled(
        diabetes, participation):
    """Bernoulli and fixed-size sampling alike: the fine start's rounds and the first coarse ones
    (:data:`EVERYONE_ROUNDS` in all) take every client with π = 1 (as round 0 does), the later
    rounds a sample; without a fine start the sample starts at round 1."""
    fed, model, theta0 = diabetes
    n = fed.n_clients
    rounds = EVERYONE_ROUNDS + 3
    assert EVERYONE_ROUNDS > FINE_START_ROUNDS
    for kwargs, heard in [(dict(compressor="dither:s=4"), EVERYONE_ROUNDS),
                          (dict(compressor="dither:s=4", fine_start=False), 0),
                          (dict(compressor=f"dither:s={FINE_START_LEVELS}"), 0)]:
        algo = FedEM(model, participation=participation, **kwargs)
        rng = np.random.default_rng(1)
        for k in range(rounds):
            active, pi = algo.sample_round(k, n, rng)
            if k < heard:
                np.testing.assert_array_equal(active, np.arange(n))
                np.testing.assert_array_equal(pi, 1.0)
            else:
                assert active.size < n and np.all(pi < 1.0), (kwargs, k)
        run = algo.start(fed, theta0, 2)
        for _ in range(rounds):
            run.step()
        active = run.history["n_active"].to_numpy()[1:]
        assert np.all(active[:heard] == n) and np.all(active[heard:] < n), (kwargs, active)


def test_a_client_that_missed_rounds_decodes_each_update_with_its_rounds_compressor(diabetes):
    fed, model, theta0 = diabetes
    algo = FedEM(model, compressor="dither:s=4", participation=0.5)
    run = algo.start(fed, theta0, 5)
    s0, updates = run.state.s_hat.copy(), []
    for k in range(ROUNDS):
        run.step()
        kind, payload = run.state.downlink.last
        # as a framework carries it: the encoded bytes of the round's compressor
        updates.append((kind, algo.broadcast.compressor_at(k).encode(payload)[0] if kind == "message" else payload))
    s_hat, _ = replay(algo, s0, None, updates, 1)
    np.testing.assert_array_equal(s_hat, run.state.s_hat)
    # numbered one too late, the last fine update meets the coarse compressor: a clear error
    with pytest.raises(ValueError, match="corrupt"):
        replay(algo, s0, None, updates, 2)


@pytest.fixture(scope="module")
def portal_table():
    counts = load_portal_rodents(as_frame=False, min_captures=500).data
    surveyed = ~np.isnan(counts).all(axis=1)
    return StandardScaler().fit_transform(np.log1p(counts[surveyed]))


@pytest.fixture(scope="module")
def portal(portal_table):
    return _problem(portal_table, 24)


def test_the_first_step_on_zero_inflated_counts_is_not_cut_to_half(portal):
    """Round 1 collapses variances toward reg_covar; at 4 levels the trust region can only halve
    it (the systematic cause of the Portal gap); at the fine start's noise it is not cut (measured:
    the whole step)."""
    fed, model, theta0 = portal
    fractions = {f: FedEM(model, compressor="dither:s=4", fine_start=f).start(fed, theta0, 0).step()["step_fraction"]
                 for f in (False, True)}
    assert fractions[False] == 0.5
    assert fractions[True] > 0.5


def test_partial_participation_mostly_ends_at_exact_ems_optimum_on_zero_inflated_counts(portal, portal_table):
    """Portal counts, iid split over 24 clients, full covariances, p = 0.5, 16 quantisation and
    sampling streams: with the fine rounds sampled, the first steps' sampling noise near collapsing
    variances took 13 of them to another optimum, 0.385 nats per row below exact EM's (3 / 16
    landed); with every client heard in the fine start 12 / 16 landed, and with the first five
    coarse rounds heard too 14 / 16 land (as at p = 1)."""
    fed, model, theta0 = portal
    exact = FedEM(model).run(fed, theta0, 100, random_state=0, tol=1e-3)
    best = model.log_likelihood(portal_table, exact.theta).mean()
    landed = 0
    for seed in range(16):
        algo = FedEM(model, compressor="dither:s=4", participation=0.5)
        run = algo.run(fed, theta0, 800, random_state=seed, tol=1e-3)
        assert run.converged
        landed += bool(model.log_likelihood(portal_table, run.theta).mean() >= best - 1e-3)
    assert landed >= 10, landed
