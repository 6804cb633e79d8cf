"""FedSparse (paper 001, Algorithms 1-2) and the Federated Dropout baseline on scikit-learn digits_iid20."""
import numpy as np
import pytest
from scipy.special import expit

from fedemstats.federation import Federation
from fedemstats.ledger import FLOAT32_BITS
from fedemstats.neural import MLP, run_hard_em
from fedemstats.neural.baselines import run_feddrop
from fedemstats.neural.fedsparse import _client_grads, hard_concrete, run_fedsparse
from fedemstats.neural.gates import GateLayout

ROUNDS = 30
COMMON = dict(rounds=ROUNDS, client_fraction=0.25, local_epochs=2, batch_size=10, lr=0.1)
SPARSE = dict(COMMON, temperature=0.01, client_threshold_lr=0.01)


@pytest.fixture(scope="module")
def fedavg(digits_iid20):
    clients, test = digits_iid20
    return run_hard_em(MLP((64, 32, 10)), clients, eval_data=test, random_state=0, **COMMON)


@pytest.fixture(scope="module")
def sparse_run(digits_iid20):
    clients, test = digits_iid20
    log = []
    res = run_fedsparse(MLP((64, 32, 10)), clients, lambda0=0.03, eval_data=test, random_state=0,
                        callback=lambda t, info: log.append(info), **SPARSE)
    return res, log


def test_fedsparse_prunes_and_stays_close_to_fedavg(fedavg, sparse_run):
    res, _ = sparse_run
    acc_avg = fedavg.history["test_accuracy"][-1]
    acc_sparse = res.history["test_accuracy"][-1]
    assert res.sparsity > 0.2
    assert acc_sparse >= acc_avg - 0.03, (acc_sparse, acc_avg)
    assert res.ledger.total < 0.8 * fedavg.ledger.total
    assert res.history["sparsity"][-1] == pytest.approx(res.sparsity)
    # Pruned units are exactly zero, as is their fan-out.
    lay = GateLayout(res.model)
    np.testing.assert_array_equal(res.w[~lay.param_on(res.alive)], 0.0)


def test_ledger_counts_exactly_the_sent_values_and_masks(sparse_run):
    res, log = sparse_run
    lay = GateLayout(res.model)
    is_weight = np.zeros(res.model.n_params, dtype=bool)
    for ws, _ in res.model.layer_slices:
        is_weight[ws] = True
    for t, info in enumerate(log):
        gates = int((info["alive"] & lay.prunable).sum())
        n_act = len(info["active"])
        values_up = sum(int(lay.param_on(z).sum()) for z in info["z"])
        for z, u in zip(info["z"], info["uploads"]):
            assert not np.any(u[~lay.param_on(z)])  # nothing outside z_s is sent
        # Every sent weight is a nonzero value (biases start at exactly zero, so only weights are checked).
        assert sum(int((lay.param_on(z) & is_weight).sum()) for z in info["z"]) == \
            sum(int(np.count_nonzero(u[is_weight])) for u in info["uploads"])
        assert res.ledger.uplink[t] == values_up * FLOAT32_BITS + n_act * gates
        live = lay.param_on(info["alive"])
        assert np.count_nonzero(info["w_sent"][is_weight]) == (live & is_weight).sum()
        assert res.ledger.downlink[t] == n_act * (int(live.sum()) * FLOAT32_BITS + gates * FLOAT32_BITS
                                                  + int(lay.prunable.sum()))
    assert res.ledger.total == sum(res.history["uplink_bits"]) + sum(res.history["downlink_bits"])


def test_lambda0_controls_sparsity(digits_iid20):
    clients, _ = digits_iid20
    sp = [run_fedsparse(MLP((64, 32, 10)), clients, lambda0=lam, random_state=0, **SPARSE).sparsity
          for lam in (0.0, 0.3)]
    assert sp[0] < 0.1 < sp[1] - 0.3


def test_reproducible_with_a_seed_and_federation_input(digits_iid20):
    clients, _ = digits_iid20
    kw = dict(SPARSE, rounds=3, lambda0=0.1)
    a = run_fedsparse(MLP((64, 32, 10)), clients, random_state=5, **kw)
    b = run_fedsparse(MLP((64, 32, 10)), clients, random_state=np.random.default_rng(5), **kw)
    fed = Federation.from_clients([c[0] for c in clients])
    c = run_fedsparse(MLP((64, 32, 10)), fed, y=np.concatenate([c[1] for c in clients]), random_state=5, **kw)
    d = run_fedsparse(MLP((64, 32, 10)), clients, random_state=6, **kw)
    for other in (b, c):
        np.testing.assert_array_equal(a.w, other.w)
        assert a.history["uplink_bits"] == other.history["uplink_bits"]
    assert not np.array_equal(a.w, d.w)


def test_hard_concrete_probability_and_slope():
    logits = np.array([-2.0, 0.0, 1.5])
    z, _ = hard_concrete(np.tile(logits, (200_000, 1)), np.random.default_rng(0))
    np.testing.assert_allclose((z > 0).mean(axis=0), expit(logits), atol=0.005)
    h = 1e-6
    zp, dz = hard_concrete(logits + h, np.random.default_rng(1))
    zm, _ = hard_concrete(logits - h, np.random.default_rng(1))
    z0, dz0 = hard_concrete(logits, np.random.default_rng(1))
    np.testing.assert_allclose(dz0, (zp - zm) / (2 * h), rtol=1e-4, atol=1e-8)


def test_threshold_gradient_matches_finite_differences():
    model = MLP((4, 3, 2))
    lay = GateLayout(model, prune_output=True)
    rng = np.random.default_rng(0)
    w = model.init_params(rng) + 0.1
    X, y = rng.standard_normal((6, 4)), np.array([0, 1, 1, 0, 1, 0])
    theta_logit = rng.standard_normal(lay.n_groups)
    cfg = {"temperature": 0.5, "lambda0": 0.3, "ce_weight": 0.2, "n_rows": 6}
    alive = np.ones(lay.n_groups, dtype=bool)

    def objective(v):
        logit = (lay.norms(w) - np.logaddexp(0.0, v)) / cfg["temperature"]
        z, _ = hard_concrete(logit, np.random.default_rng(3))
        pi = expit(logit)
        reg = (cfg["lambda0"] * lay.sizes - cfg["ce_weight"] * theta_logit) @ pi / cfg["n_rows"]
        return model.loss(w * lay.expand(z), X, y) + reg

    v = rng.standard_normal(lay.n_groups)
    _, _, grad_v = _client_grads(model, lay, w, v, theta_logit, X, y, cfg, alive, np.random.default_rng(3))
    eye, h = np.eye(v.size), 1e-6
    fd = np.array([(objective(v + h * e) - objective(v - h * e)) / (2 * h) for e in eye])
    np.testing.assert_allclose(grad_v, fd, rtol=1e-4, atol=1e-7)


def test_feddrop_sends_only_the_submodel(digits_iid20):
    clients, test = digits_iid20
    res = run_feddrop(MLP((64, 32, 10)), clients, rate=0.25, eval_data=test, random_state=0, **COMMON)
    # 24 of 32 hidden units kept: 64*24 + 24 weights and biases in, 24*10 + 10 out; plus a 32-bit unit mask.
    per_client = (64 * 24 + 24 + 24 * 10 + 10) * FLOAT32_BITS + 32
    assert res.ledger.uplink == [5 * per_client] * ROUNDS
    assert res.ledger.downlink == res.ledger.uplink
    assert res.history["test_accuracy"][-1] > 0.85


@pytest.mark.parametrize("kw, match", [
    ({"lambda0": -1.0}, "lambda0"),
    ({"prune_threshold": 0.0}, "prune_threshold"),
    ({"prune_threshold": 0.5}, "prune_threshold"),
    ({"prune_threshold": 0.7}, "prune_threshold"),
    ({"temperature": 0.0}, "temperature"),
    ({"theta_init": 1.0}, "theta_init"),
    ({"ce_weight": -0.1}, "ce_weight"),
    ({"wire_dtype": "float16"}, "wire_dtype"),
    ({"rounds": 0}, "rounds"),
    ({"client_fraction": 1.5}, "client_fraction"),
])
def test_bad_input(digits_iid20, kw, match):
    clients, _ = digits_iid20
    with pytest.raises(ValueError, match=match):
        run_fedsparse(MLP((64, 32, 10)), clients, **kw)


def test_federation_needs_labels(digits_iid20):
    fed = Federation.from_clients([c[0] for c in digits_iid20[0]])
    with pytest.raises(ValueError, match="labels"):
        run_fedsparse(MLP((64, 32, 10)), fed)
    with pytest.raises(ValueError, match="feature"):
        run_fedsparse(MLP((10, 4, 10)), digits_iid20[0])
