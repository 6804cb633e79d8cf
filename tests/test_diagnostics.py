"""Diagnostics: mean field, empirical ω, theorem bounds, convergence tables."""
import math

import numpy as np
import pandas as pd
import pytest
from _toy_models import GaussianMeanModel

from fedemstats import diagnostics as dg
from fedemstats.algorithms import FedEM, VRFedEM
from fedemstats.compression import Identity, make_compressor
from fedemstats.compression.base import Compressor, Message
from fedemstats.federation import Federation


def toy():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(2 * i, size=(10 + i, 3)) for i in range(4)])
    return Federation(X, np.concatenate([[0], np.cumsum([10 + i for i in range(4)])])), GaussianMeanModel(3)


def test_mean_field_of_the_toy_model_is_pooled_mean_minus_s():
    fed, model = toy()
    s = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(dg.mean_field(model, fed, s), fed.X.mean(0) - s, rtol=1e-12)
    assert dg.mean_field_norm2(model, fed, fed.X.mean(0)) < 1e-25


def test_em_step_gain_of_the_toy_model_is_half_the_squared_distance_to_the_pooled_mean():
    """x ~ N(μ, I): one EM step goes to the pooled mean x̄, and the mean of −½‖x − μ‖² rises by
    ½‖μ − x̄‖² (closed form, independent of the model code)."""
    fed, model = toy()
    theta = np.array([1.0, -2.0, 0.5])
    gain = dg.em_step_gain(model, fed, theta)
    assert gain == pytest.approx(0.5 * np.sum((theta - fed.X.mean(0)) ** 2), rel=1e-12)
    assert abs(dg.em_step_gain(model, fed, fed.X.mean(0))) < 1e-12


def test_fedem_history_h_norm2_matches_the_diagnostic():
    fed, model = toy()
    res = FedEM(model, step_size=0.5, track_h=True).run(fed, np.zeros(3), 3, 0)
    assert res.history["h_norm2"].iloc[-1] == pytest.approx(dg.mean_field_norm2(model, fed, res.state.s_hat))


@pytest.mark.parametrize("spec", ["dither:s=2", "blockp:p=2", "randk:k=5"])
def test_empirical_omega_is_within_the_bound(spec):
    comp = make_compressor(spec)
    rng = np.random.default_rng(1)
    est = dg.empirical_omega(comp, np.ones(50), rng, n_draws=400)
    assert est.bound == comp.omega(50) and est.n_draws == 400
    assert est.ci_low <= est.estimate <= est.ci_high and not est.violates_bound
    assert est.estimate > 0.5 * est.bound  # flat vectors nearly attain these bounds


class Cheater(Compressor):
    """Unbiased (keeps each coordinate w.p. 1/4, scaled by 4: ω = 3) but claims ω = 1."""

    def compress(self, x, rng, blocks=None):
        x = np.atleast_2d(x)
        keep = rng.random(x.shape) < 0.25
        return Message("cheat", x.shape[0], x.shape[1], {"v": np.where(keep, 4 * x, 0.0)})

    def decompress(self, message):
        return message.arrays["v"]

    def omega(self, q, blocks=None):
        return 1.0


def test_empirical_omega_detects_a_false_bound():
    est = dg.empirical_omega(Cheater(), np.ones(40), np.random.default_rng(0), n_draws=300)
    assert est.violates_bound and est.estimate == pytest.approx(3.0, rel=0.1)
    name, worst = dg.worst_case_omega(Cheater(), 40, np.random.default_rng(0), n_draws=100)
    assert worst.violates_bound and name in dg.omega_test_vectors(40, np.random.default_rng(0))


def test_empirical_omega_of_identity_is_zero_and_zero_vector_is_refused():
    est = dg.empirical_omega(Identity(), np.arange(1.0, 6.0), np.random.default_rng(0), n_draws=10)
    assert abs(est.estimate) < 1e-14
    with pytest.raises(ValueError, match="non-zero"):
        dg.empirical_omega(Identity(), np.zeros(5), np.random.default_rng(0))


def test_empirical_omega_is_reproducible():
    comp = make_compressor("dither:s=3")
    a = dg.empirical_omega(comp, np.arange(1.0, 30.0), np.random.default_rng(5), n_draws=50)
    b = dg.empirical_omega(comp, np.arange(1.0, 30.0), np.random.default_rng(5), n_draws=50)
    assert a == b


def test_theorem_step_sizes():
    # eq. (7): the compression term takes over once sqrt(n) / (1+ω)^{3/2} is small
    assert dg.fedem_gamma_max(1.0, 1.0, 1.0, 0.0, 100) == pytest.approx(0.5)
    assert dg.fedem_gamma_max(1.0, 1.0, 1.0, 15.0, 4) == pytest.approx(2 / (2 * math.sqrt(2) * 64))
    assert dg.em_gamma_max(1.0, 2.0) == 1.0
    # eq. (10): ≈ v_min / L_W when ω³ ≪ n, and decreasing in ω
    assert dg.vr_fedem_gamma(1.0, 1.0, 1.0, 1.0, 0.0, 10**8) == pytest.approx(1.0, rel=1e-3)
    gammas = [dg.vr_fedem_gamma(1.0, 2.0, 1.0, 1.0, w, 10) for w in (0.0, 1.0, 10.0, 100.0)]
    assert all(a > b for a, b in zip(gammas, gammas[1:]))
    assert dg.vr_fedem_batch_size(32, 1.0) == 8
    assert dg.compression_regime_ratio(1000, 9.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="v_min"):
        dg.fedem_gamma_max(0.0, 1.0, 1.0, 1.0, 10)
    with pytest.raises(ValueError, match="n"):
        dg.vr_fedem_gamma(1.0, 1.0, 1.0, 1.0, 1.0, 0)


@pytest.mark.parametrize("v_min, v_max, L_W, L", [(1.0, 1.0, 1.0, 1.0), (0.3, 2.0, 5.0, 0.7), (2.0, 3.0, 0.5, 4.0)])
def test_vr_fedem_gamma_is_spider_em_at_one_worker_without_compression(v_min, v_max, L_W, L):
    """Eq. (10) at n = 1, ω = 0 must be SPIDER-EM's v_min / (L_W + 2 v_max L) (Fort et al. 2020)."""
    assert dg.vr_fedem_gamma(v_min, v_max, L_W, L, 0.0, 1) == pytest.approx(v_min / (L_W + 2 * v_max * L))


def test_vr_fedem_gamma_against_eq_10():
    v_min, v_max, L_W, L, w, n = 0.5, 2.0, 3.0, 1.5, 4.0, 25
    factor = 4 * math.sqrt(2) * v_max * L / (L_W * math.sqrt(n)) * (1 + w) * math.sqrt(w + (1 + 10 * w) / 8)
    assert dg.vr_fedem_gamma(v_min, v_max, L_W, L, w, n) == pytest.approx(v_min / L_W / (1 + factor))
    assert dg.vr_fedem_gamma(v_min, v_max, L_W, 2 * L, w, n) < dg.vr_fedem_gamma(v_min, v_max, L_W, L, w, n)


def test_theory_step_is_continuous_at_no_compression():
    from fedemstats.algorithms.step_size import THEORY_STEP_SCALE, theory_step_size

    ones = np.ones(20)
    assert theory_step_size(0.0, 20, ones) == 1.0
    assert theory_step_size(1e-9, 20, ones) == 1.0  # the old rule gave 0.36 here
    steps = [theory_step_size(w, 20, ones) for w in np.logspace(-9, 3, 60)]
    assert all(a >= b for a, b in zip(steps, steps[1:]))  # monotone in ω, no jump
    big = 1e3  # the theorem's √n / ω^{3/2} decay for large ω
    assert theory_step_size(big, 20, ones) == pytest.approx(
        THEORY_STEP_SCALE * math.sqrt(20) / (math.sqrt(big) * (1 + big)))


def test_theory_step_shrinks_with_mini_batch_noise_as_corollary_2():
    from fedemstats.algorithms.step_size import corollary2_step, make_step_size, theory_step_size

    n, w, s2, k_max = 20, 0.5, 0.25, 400
    expected = min(math.sqrt(n / (k_max * (1 + 5 * w) * s2)), theory_step_size(w, n, np.ones(n)))
    assert corollary2_step(n, w, s2, k_max, 1.0) == pytest.approx(math.sqrt(n / (k_max * (1 + 5 * w) * s2)))
    assert theory_step_size(w, n, np.ones(n), sigma2=s2, k_max=k_max) == pytest.approx(expected)
    assert make_step_size("theory", omega=w, n_clients=n, inclusion=np.ones(n), sigma2=s2, k_max=k_max)(7) \
        == pytest.approx(expected)
    # a longer run or noisier batches need a smaller step: the noise is averaged out
    assert theory_step_size(w, n, np.ones(n), sigma2=s2, k_max=4 * k_max) == pytest.approx(expected / 2)


def test_convergence_table_epochs_and_first_reach():
    fed, model = toy()
    res = VRFedEM(model, step_size=0.5, batch_size=3, k_in=2, track_h=True).run(fed, np.zeros(3), 6, 0)
    tab = dg.convergence_table(res.history, fed.n_rows)
    assert list(tab.columns) == ["round", "epochs", "cumulative_bits", "cumulative_uplink_bits", "h_norm2",
                                 "loglik"]
    np.testing.assert_array_equal(tab["cumulative_uplink_bits"], np.cumsum(res.ledger.uplink))
    assert tab["epochs"].iloc[0] == 2.0 and np.all(np.diff(tab["epochs"]) >= 0)
    eps = tab["h_norm2"].iloc[3]
    assert dg.first_reach(tab, eps, "round") <= 3
    assert math.isnan(dg.first_reach(tab, -1.0))
    with pytest.raises(ValueError, match="by must be"):
        dg.first_reach(tab, 1.0, "seconds")


def test_rounds_to_reach_stops_early_and_needs_track_h():
    from test_online import problem
    model, fed, theta0 = problem()
    algo = FedEM(model, compressor="dither:s=4", step_size=0.5, track_h=True)
    full = dg.convergence_table(algo.run(fed, theta0, 60, 0).history, fed.n_rows)
    eps = 1e-10
    reached = dg.rounds_to_reach(algo, fed, theta0, eps, 60, 0)
    assert 1 < reached == dg.first_reach(full.iloc[1:], eps)
    assert math.isnan(dg.rounds_to_reach(algo, fed, theta0, 1e-300, 5, 0))
    with pytest.raises(ValueError, match="track_h"):
        dg.rounds_to_reach(FedEM(model), fed, theta0, eps, 5)


def test_plot_convergence_draws_one_line_per_run():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    tab = pd.DataFrame({"round": [0, 1, 2], "epochs": [1.0, 2.0, 3.0], "cumulative_bits": [10, 20, 30],
                        "h_norm2": [1.0, 0.1, 0.01], "loglik": [0.0, 0.0, 0.0]})
    ax = dg.plot_convergence({"a": tab, "b": tab}, "cumulative_bits", eps=0.05)
    assert len(ax.get_lines()) == 3 and ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="x must be"):
        dg.plot_convergence({"a": tab}, "time")
