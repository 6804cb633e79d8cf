"""FedPM with the entropy regulariser (paper 002) and the Top-k mask baseline on scikit-learn digits_iid20."""
import numpy as np
import pytest

from fedemstats.neural import MLP
from fedemstats.neural.baselines import run_topk_masks
from fedemstats.neural.coding import coded_bits, empirical_entropy_bits
from fedemstats.neural.fedpm import run_fedpm, signed_constants

LAYERS = (64, 128, 10)  # a wide random network: masks select a sub-network of it
COMMON = dict(rounds=25, client_fraction=0.25, local_epochs=2, batch_size=10, lr=0.1)


@pytest.fixture(scope="module")
def plain(digits_iid20):
    clients, test = digits_iid20
    log = []
    res = run_fedpm(MLP(LAYERS), clients, reg=0.0, eval_data=test, random_state=0,
                    callback=lambda t, info: log.append(info), **COMMON)
    return res, log


@pytest.fixture(scope="module")
def regularised(digits_iid20):
    clients, test = digits_iid20
    return run_fedpm(MLP(LAYERS), clients, reg=3.0, eval_data=test, random_state=0, **COMMON)


def _tail(res, key, n=5):
    return float(np.mean(res.history[key][-n:]))


def test_fedpm_learns_a_mask(plain):
    res, _ = plain
    assert _tail(res, "test_accuracy") > 0.75  # chance is 0.1; the weights are never trained


def test_regulariser_lowers_bits_per_parameter(plain, regularised):
    res0, _ = plain
    assert _tail(regularised, "bpp_coded") < _tail(res0, "bpp_coded") - 0.15
    assert _tail(regularised, "bpp_entropy") < _tail(res0, "bpp_entropy") - 0.15
    assert regularised.history["density"][-1] < res0.history["density"][-1]
    assert _tail(regularised, "test_accuracy") > 0.6


def test_ledger_counts_the_coded_masks_and_server_takes_their_mean(plain):
    res, log = plain
    n_w = res.theta.size
    for t, info in enumerate(log):
        masks = info["masks"]
        assert res.ledger.uplink[t] == sum(coded_bits(m) for m in masks)
        assert res.history["bpp_coded"][t] == pytest.approx(res.ledger.uplink[t] / (n_w * len(masks)))
        assert res.history["bpp_entropy"][t] == pytest.approx(np.mean([empirical_entropy_bits(m) for m in masks]))
        np.testing.assert_allclose(info["theta"], np.clip(np.mean(masks, axis=0), 1e-2, 1 - 1e-2))
    # The coder is within a few percent of the entropy estimate (KT regret + byte rounding).
    assert abs(_tail(res, "bpp_coded") - _tail(res, "bpp_entropy")) < 0.01
    # Downlink: a seed in round 1, then ceil(log2(K + 1)) = 3 bits per weight for K = 5 clients.
    assert res.ledger.downlink[0] == 5 * 64
    assert res.ledger.downlink[1:] == [5 * n_w * 3] * (len(log) - 1)


def test_signed_constants():
    model = MLP((5, 4, 3))
    index, consts = signed_constants(model, 11)
    assert index.size == 5 * 4 + 4 * 3
    np.testing.assert_allclose(np.abs(consts[:20]), np.sqrt(2 / 5))
    np.testing.assert_allclose(np.abs(consts[20:]), np.sqrt(2 / 4))
    assert 0 < (consts > 0).sum() < consts.size
    np.testing.assert_array_equal(signed_constants(model, 11)[1], consts)


def test_reproducible_with_a_seed(digits_iid20):
    clients, _ = digits_iid20
    kw = dict(COMMON, rounds=2, reg=1.0)
    a = run_fedpm(MLP(LAYERS), clients, random_state=3, **kw)
    b = run_fedpm(MLP(LAYERS), clients, random_state=3, **kw)
    c = run_fedpm(MLP(LAYERS), clients, random_state=4, **kw)
    np.testing.assert_array_equal(a.theta, b.theta)
    assert a.ledger.uplink == b.ledger.uplink
    assert not np.array_equal(a.theta, c.theta)


def test_topk_uploads_exactly_k_per_layer(digits_iid20):
    clients, test = digits_iid20
    log = []
    model = MLP(LAYERS)
    res = run_topk_masks(model, clients, k=0.3, eval_data=test, random_state=0,
                         callback=lambda t, info: log.append(info), **dict(COMMON, rounds=3))
    sizes = [64 * 128, 128 * 10]
    for info in log:
        for mask in info["masks"]:
            assert [int(mask[:sizes[0]].sum()), int(mask[sizes[0]:].sum())] == [round(0.3 * n) for n in sizes]
    assert res.history["bpp_entropy"][-1] == pytest.approx(empirical_entropy_bits(np.arange(10) < 3), abs=1e-3)


@pytest.mark.parametrize("kw, match", [
    ({"reg": -0.1}, "reg"),
    ({"clip_eps": 0.0}, "clip_eps"),
    ({"clip_eps": 0.5}, "clip_eps"),
    ({"theta_init": 1.5}, "theta_init"),
    ({"theta_init": "normal"}, "theta_init"),
    ({"lr": 0.0}, "lr"),
    ({"batch_size": 0}, "batch_size"),
    ({"adam_eps": 0.0}, "adam_eps"),
])
def test_bad_input(digits_iid20, kw, match):
    with pytest.raises(ValueError, match=match):
        run_fedpm(MLP(LAYERS), digits_iid20[0], **kw)


def test_topk_bad_k(digits_iid20):
    for k in (0.0, 1.0):
        with pytest.raises(ValueError, match="k must"):
            run_topk_masks(MLP(LAYERS), digits_iid20[0], k=k)


def test_decoupled_regulariser(digits_iid20):
    """reg_mode="decoupled": bit-identical at lambda = 0; its strength follows lambda (REG_MODES).

    Through Adam, any lambda > 0 moves the scores with no data gradient (blank
    pixels) at the full step, so even lambda = 1e-3 cuts the density; decoupled,
    a tiny lambda leaves FedPM almost unchanged and a large one still compresses.
    """
    clients, _ = digits_iid20
    kw = dict(COMMON, rounds=4)

    def run(reg, mode):
        return run_fedpm(MLP(LAYERS), clients, reg=reg, reg_mode=mode, random_state=5, **kw)

    base, base_dec = run(0.0, "adam"), run(0.0, "decoupled")
    np.testing.assert_array_equal(base.theta, base_dec.theta)
    assert base.ledger.uplink == base_dec.ledger.uplink
    tiny_adam, tiny_dec, big_dec = run(1e-3, "adam"), run(1e-3, "decoupled"), run(3.0, "decoupled")
    d0 = base.history["density"][-1]
    assert abs(tiny_dec.history["density"][-1] - d0) < 0.01
    assert tiny_adam.history["density"][-1] < d0 - 0.05
    assert big_dec.history["density"][-1] < d0 - 0.05
    assert big_dec.history["bpp_coded"][-1] < base.history["bpp_coded"][-1] - 0.05
    with pytest.raises(ValueError, match="reg_mode"):
        run_fedpm(MLP(LAYERS), clients, reg_mode="adamw")


def test_adam_eps_makes_the_regulariser_scale_with_lambda(digits_iid20):
    """With Adam's epsilon above the regulariser gradient lambda / N * theta(1 - theta),
    a tiny lambda hardly moves the density (it does at the default epsilon, see
    test_decoupled_regulariser) and a large lambda still compresses."""
    clients, _ = digits_iid20
    kw = dict(COMMON, rounds=4)

    def density(reg):
        res = run_fedpm(MLP(LAYERS), clients, reg=reg, adam_eps=1e-5, random_state=5, **kw)
        return res.history["density"][-1]

    d0 = density(0.0)
    assert abs(density(1e-3) - d0) < 0.01
    assert density(3.0) < d0 - 0.05


def test_final_subnetwork_is_the_mode_of_each_rule(plain, digits_iid20):
    res, _ = plain
    np.testing.assert_array_equal(res.mask, res.theta > 0.5)
    np.testing.assert_array_equal(res.params[res.index], res.constants * res.mask)
    clients, _ = digits_iid20
    topk = run_topk_masks(MLP(LAYERS), clients, k=0.3, rounds=2, random_state=0)
    first = topk.model.layer_sizes[0] * topk.model.layer_sizes[1]  # weights of the first layer
    assert topk.mask[:first].sum() == round(0.3 * first)  # exactly the top k of theta per layer
