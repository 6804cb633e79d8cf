"""Hard-EM federated training: FedAvg/FedSGD settings, priors, robustness (SPEC §8)."""
import numpy as np
import pytest

from fedemstats.ledger import FLOAT32_BITS
from fedemstats.neural import (MLP, GaussianPrior, LaplacePrior, MixturePrior, iid_clients,
                               pathological_clients, run_hard_em, split_clients, weighted_median)
from fedemstats.participation import BernoulliParticipation

ATTACK_SCALE = 100.0     # the faulty client uploads 100 x its parameters
MAX_MEDIAN_DROP = 0.02   # median server: accuracy loss under attack, in accuracy units
MIN_MEAN_DROP = 0.20     # mean server: "collapse" = at least 20 points lost


def _accuracy(result, X, y):
    return float(np.mean(result.predict_proba(X).argmax(axis=1) == y))


def test_fedavg_one_client_full_batch_is_one_gd_step(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    model = MLP((64, 16, 10))
    w0 = model.init_params(np.random.default_rng(1))
    res = run_hard_em(model, [(Xtr, ytr)], GaussianPrior(0.0), rounds=1, client_fraction=1.0, local_epochs=1,
                      batch_size=None, lr=0.3, init=w0, wire_dtype="float64", random_state=0)
    expected = w0 - 0.3 * model.loss_and_grad(w0, Xtr, ytr)[1]
    np.testing.assert_allclose(res.state, expected, rtol=1e-13, atol=1e-15)


def test_fedsgd_over_unequal_clients_is_pooled_gd_step(digits_standardised):
    # n_k/n weighting makes the average of client steps the gradient step of the pooled mean loss.
    Xtr, _, ytr, _ = digits_standardised
    model = MLP((64, 10))
    w0 = model.init_params(np.random.default_rng(2))
    cuts = [100, 400, 1257]
    clients = [(Xtr[a:b], ytr[a:b]) for a, b in zip([0] + cuts[:-1], cuts)]
    res = run_hard_em(model, clients, rounds=1, batch_size=float("inf"), lr=0.5, init=w0,
                      wire_dtype="float64", random_state=0)
    expected = w0 - 0.5 * model.loss_and_grad(w0, Xtr[:1257], ytr[:1257])[1]
    np.testing.assert_allclose(res.state, expected, rtol=1e-12, atol=1e-14)


def test_fedavg_learns_digits_and_records_history(digits_standardised):
    Xtr, Xte, ytr, yte = digits_standardised
    model = MLP((64, 32, 10))
    clients = iid_clients(Xtr, ytr, 10, random_state=0)
    res = run_hard_em(model, clients, rounds=20, client_fraction=0.5, batch_size=32, lr=0.1,
                      eval_data=(Xte, yte), random_state=0)
    h = res.history_frame()
    assert len(h) == 20 and h["n_active"].eq(5).all()
    assert h["uplink_bits"].eq(5 * model.n_params * FLOAT32_BITS).all()
    assert h["downlink_bits"].eq(5 * model.n_params * FLOAT32_BITS).all()
    assert res.ledger.total_uplink == h["uplink_bits"].sum()
    assert h["train_loss"].iloc[-1] < h["train_loss"].iloc[0]
    assert h["test_accuracy"].iloc[-1] > 0.9


def test_tiny_fraction_still_samples_one_client(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    res = run_hard_em(MLP((64, 10)), iid_clients(Xtr, ytr, 5, random_state=0), rounds=3,
                      client_fraction=0.01, random_state=0)
    assert res.history["n_active"] == [1, 1, 1]


def test_bernoulli_participation_with_empty_rounds_keeps_state(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    res = run_hard_em(MLP((64, 10)), iid_clients(Xtr, ytr, 2, random_state=0), rounds=30,
                      client_fraction=BernoulliParticipation(0.2), random_state=0)
    assert 0 in res.history["n_active"]
    assert np.all(np.isfinite(res.state))


def test_reproducible_with_seed(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    clients = pathological_clients(Xtr, ytr, 6, random_state=0)
    kw = dict(rounds=3, client_fraction=0.5, batch_size=16, lr=0.05)
    a = run_hard_em(MLP((64, 8, 10)), clients, random_state=7, **kw)
    b = run_hard_em(MLP((64, 8, 10)), clients, random_state=np.random.default_rng(7), **kw)
    c = run_hard_em(MLP((64, 8, 10)), clients, random_state=8, **kw)
    np.testing.assert_array_equal(a.state, b.state)
    assert a.history["local_loss"] == b.history["local_loss"]
    assert not np.array_equal(a.state, c.state)


def test_fedopt_sgd_with_unit_rate_equals_mean(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    clients = iid_clients(Xtr, ytr, 4, random_state=0)
    kw = dict(rounds=3, batch_size=64, random_state=3, wire_dtype="float64")
    a = run_hard_em(MLP((64, 10)), clients, GaussianPrior(0.0), **kw)
    b = run_hard_em(MLP((64, 10)), clients, GaussianPrior(0.0, server_optimizer="sgd", server_lr=1.0), **kw)
    np.testing.assert_allclose(a.state, b.state, rtol=1e-12, atol=1e-14)


def test_fedprox_pull_keeps_local_models_closer(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    model = MLP((64, 10))
    w0 = model.init_params(0)
    dists = []
    for lam in (0.0, 1.0):
        res = run_hard_em(model, [(Xtr, ytr)], GaussianPrior(lam), rounds=1, local_epochs=5, batch_size=32,
                          lr=0.1, init=w0, random_state=0)
        dists.append(np.linalg.norm(res.state - w0))
    assert dists[1] < 0.8 * dists[0]


def test_median_server_is_robust_to_a_scaled_client(digits_standardised):
    Xtr, Xte, ytr, yte = digits_standardised
    model = MLP((64, 32, 10))
    clients = iid_clients(Xtr, ytr, 10, random_state=0)

    def attack(k, phi):
        return ATTACK_SCALE * phi if k == 0 else phi

    acc = {}
    for name, prior in (("mean", GaussianPrior(0.0)), ("median", LaplacePrior(0.0))):
        for hook in (None, attack):
            res = run_hard_em(model, clients, prior, rounds=20, batch_size=32, lr=0.1, uplink_hook=hook,
                              track_train_loss=False, random_state=0)
            acc[name, hook is not None] = _accuracy(res, Xte, yte)
    assert acc["median", False] > 0.85 and acc["mean", False] > 0.85
    assert acc["median", False] - acc["median", True] < MAX_MEDIAN_DROP
    assert acc["mean", False] - acc["mean", True] > MIN_MEAN_DROP


def test_weighted_median_matches_numpy_and_repetition():
    rng = np.random.default_rng(0)
    V = rng.standard_normal((6, 40))
    np.testing.assert_allclose(weighted_median(V), np.median(V, axis=0))
    np.testing.assert_allclose(weighted_median(V[:5]), np.median(V[:5], axis=0))
    w = np.array([1, 3, 2, 1, 1, 4])
    np.testing.assert_allclose(weighted_median(V, w), np.median(np.repeat(V, w, axis=0), axis=0))
    with pytest.raises(ValueError):
        weighted_median(V, -w)


def test_mixture_separates_conflicting_label_maps(digits_standardised):
    Xtr, Xte, ytr, yte = digits_standardised
    rng = np.random.default_rng(0)
    perm = np.roll(np.arange(10), 3)  # group B names every digit with another's label
    gtr, gte = rng.integers(0, 2, ytr.size), rng.integers(0, 2, yte.size)
    ytr_g, yte_g = np.where(gtr == 1, perm[ytr], ytr), np.where(gte == 1, perm[yte], yte)
    clients = [c for g in (0, 1) for c in iid_clients(Xtr[gtr == g], ytr_g[gtr == g], 5, random_state=g)]
    model = MLP((64, 32, 10))
    kw = dict(rounds=30, batch_size=32, lr=0.1, track_train_loss=False, random_state=0)
    mix = run_hard_em(model, clients, MixturePrior(2, lam=0.01), **kw)
    avg = run_hard_em(model, clients, GaussianPrior(0.0), **kw)
    comps = [mix.assignments[k] for k in range(10)]
    assert len(set(comps[:5])) == 1 and len(set(comps[5:])) == 1 and comps[0] != comps[5]
    for g in (0, 1):
        Xg, yg = Xte[gte == g], yte_g[gte == g]
        personal = mix.prior.personal_proba(model, mix.state, Xtr[gtr == g], ytr_g[gtr == g], Xg)
        acc_mix = np.mean(personal.argmax(axis=1) == yg)
        acc_avg = np.mean(avg.predict_proba(Xg).argmax(axis=1) == yg)
        assert acc_mix > acc_avg
        assert acc_mix > 0.85
    assert mix.history["downlink_bits"][-1] == 10 * 2 * model.n_params * FLOAT32_BITS


def test_soft_mixture_reduces_to_gaussian_with_one_component(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    clients = iid_clients(Xtr, ytr, 3, random_state=0)
    kw = dict(rounds=2, batch_size=64, random_state=0, wire_dtype="float64")
    a = run_hard_em(MLP((64, 10)), clients, GaussianPrior(0.1), **kw)
    b = run_hard_em(MLP((64, 10)), clients, MixturePrior(1, lam=0.1, assignment="soft"), **kw)
    np.testing.assert_allclose(b.state[0], a.state, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw, match", [
    (dict(client_fraction=0.0), "client_fraction"), (dict(client_fraction=1.5), "client_fraction"),
    (dict(local_epochs=0), "local_epochs"), (dict(batch_size=0), "batch_size"),
    (dict(lr=-1.0), "learning rate"), (dict(wire_dtype="float16"), "wire_dtype"),
])
def test_bad_settings_raise(digits_standardised, kw, match):
    Xtr, _, ytr, _ = digits_standardised
    with pytest.raises(ValueError, match=match):
        run_hard_em(MLP((64, 10)), [(Xtr, ytr)], rounds=1, **kw)


def test_split_clients_round_trip():
    X = np.arange(20, dtype=float).reshape(10, 2)
    y = np.arange(10) % 3
    groups = np.array(list("bababbaacc"))
    clients = split_clients(X, y, groups)
    assert [c[0].shape[0] for c in clients] == [4, 4, 2]
    np.testing.assert_array_equal(clients[0][1], y[groups == "a"])
    with pytest.raises(ValueError):
        split_clients(X, y, groups[:5])
