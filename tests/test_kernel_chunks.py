"""Chunks across client boundaries (GMM kernel) and the packed whitening matrices, against NumPy references."""
import numpy as np
import pytest

from fedemstats.federation import Federation
from fedemstats.models import _gmm_kernels as kernels
from fedemstats.models.gmm import GaussianMixtureModel, _kernel_arrays, estimate_log_prob_resp, make_params
from fedemstats.models._whiten_kernels import MAX_PACKED_FEATURES, PackedWhitening
from fedemstats.models.gmm_geometry import MomentWhitening

TYPES = ["full", "tied", "diag", "spherical"]
#: the serial and parallel kernels agree to rounding (a few ulps), see ``segment_sums_serial``
KERNEL_RTOL = 1e-14
K, D = 3, 4


def random_theta(ctype, rng, d=D):
    A = rng.normal(size=(K, d, d)) * 0.3 + np.eye(d)
    cov = A @ np.swapaxes(A, 1, 2)
    covs = {"full": cov, "tied": cov[0], "diag": np.diagonal(cov, axis1=1, axis2=2).copy(),
            "spherical": np.full(K, 1.3)}[ctype]
    return make_params(rng.dirichlet(np.ones(K)), rng.normal(scale=2.0, size=(K, d)), covs, covariance_type=ctype)


def reference_sums(model, X, seg, theta, hard):
    """Per-client mean statistics and mean log-likelihood row by row in NumPy."""
    log_norm, log_resp = estimate_log_prob_resp(X, theta)
    R = np.exp(log_resp)
    if hard:
        R = np.eye(K)[np.argmax(log_resp, axis=1)]
    Xs = X - model.shift
    xx = Xs[:, :, None] * Xs[:, None, :]
    second = {"full": np.einsum("nk,nij->nkij", R, xx), "tied": xx,
              "diag": R[:, :, None] * Xs[:, None, :] ** 2,
              "spherical": R * np.sum(Xs ** 2, axis=1)[:, None]}[model.covariance_type]
    rows = model.layout.pack({"resp": R, "sum_x": R[:, :, None] * Xs[:, None, :], "sum_xx": second})
    stats = np.array([rows[a:b].mean(0) for a, b in zip(seg[:-1], seg[1:])])
    return stats, np.array([log_norm[a:b].mean() for a, b in zip(seg[:-1], seg[1:])])


def odd_offsets(n, rng):
    """Clients of 1 row, of a few rows, one longer than a chunk and one longer than a row block."""
    sizes = [1, 1, 3, 1, kernels.CHUNK_ROWS + 5, 2, 1, 7, kernels.MIN_BLOCK_ROWS + 300, 1]
    sizes += list(rng.integers(1, 12, size=200))
    sizes.append(n - sum(sizes))
    assert sizes[-1] > 0
    return np.concatenate([[0], np.cumsum(sizes)])


@pytest.mark.parametrize("ctype", TYPES)
@pytest.mark.parametrize("hard", [False, True])
def test_chunks_across_client_boundaries_match_a_row_by_row_reference(ctype, hard):
    rng = np.random.default_rng(3)
    n = 4 * kernels.MIN_BLOCK_ROWS + 77  # several row blocks, blocks cut clients
    X = rng.normal(scale=2.0, size=(n, D))
    seg = odd_offsets(n, rng)
    theta = random_theta(ctype, rng)
    model = GaussianMixtureModel(K, D, ctype, shift=X.mean(0))
    stats, ll = model.client_stats(Federation(X, seg), theta, hard=hard)
    ref_stats, ref_ll = reference_sums(model, X, seg, theta, hard)
    assert np.allclose(stats, ref_stats, rtol=1e-10, atol=1e-10)
    assert np.allclose(ll, ref_ll, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ctype", ["full", "tied"])
@pytest.mark.parametrize("d", [1, 2, 3, 5, 6, 7, 9, 10, 11, 13])
def test_register_tiles_cover_every_edge_of_the_triangle(ctype, d):
    """The log-density and second-moment tiles are TILE wide with clamped edge tiles (and
    TILE x 2 ones for the last two columns): every d mod TILE must give every entry once."""
    rng = np.random.default_rng(d)
    X = rng.normal(scale=2.0, size=(700, d))
    seg = np.array([0, 5, 300, 700])
    theta = random_theta(ctype, rng, d)
    model = GaussianMixtureModel(K, d, ctype, shift=X.mean(0))
    stats, ll = model.client_stats(Federation(X, seg), theta)
    ref_stats, ref_ll = reference_sums(model, X, seg, theta, False)
    np.testing.assert_allclose(stats, ref_stats, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ll, ref_ll, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ctype", ["full", "diag"])
def test_serial_and_parallel_kernels_agree_on_small_clients(ctype):
    rng = np.random.default_rng(4)
    n = 3 * kernels.MIN_BLOCK_ROWS + 11
    X = rng.normal(size=(n, D))
    seg = odd_offsets(n, rng)
    model = GaussianMixtureModel(K, D, ctype)
    args = (X, seg, model.shift, *_kernel_arrays(random_theta(ctype, rng), model.shift),
            {"full": kernels.COV_FULL, "diag": kernels.COV_DIAG}[ctype], model.q, False)
    # the same blocks and order of addition, but two compilations: LLVM may vectorise or contract
    # the fastmath sums differently in each (measured 1 ulp apart on a few sums in some sessions)
    parallel, serial = kernels.segment_sums(*args), kernels.segment_sums_serial(*args)
    np.testing.assert_allclose(parallel, serial, rtol=KERNEL_RTOL, atol=KERNEL_RTOL * np.abs(serial).max())


def test_clients_without_rows_inside_a_chunk_get_zero_sums():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, D))
    model = GaussianMixtureModel(K, D, "full")
    arrays = _kernel_arrays(random_theta("full", rng), model.shift)
    out = kernels.segment_sums_serial(X, np.array([0, 3, 3, 10, 10, 10, 40]), model.shift, *arrays,
                                      kernels.COV_FULL, model.q, False)
    assert np.all(out[[1, 3, 4]] == 0.0)
    whole = kernels.segment_sums_serial(X, np.array([0, 40]), model.shift, *arrays, kernels.COV_FULL, model.q, False)
    assert np.allclose(out.sum(0), whole[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ctype", ["full", "tied"])
def test_packed_whitening_equals_the_moment_algebra(ctype):
    rng = np.random.default_rng(6)
    model = GaussianMixtureModel(K, D, ctype, shift=rng.normal(size=D))
    theta = random_theta(ctype, rng)
    weights = theta.weights.copy()
    weights[1] = 1e-12  # below MIN_WEIGHT: identity map for that component
    theta = make_params(weights / weights.sum(), theta.means, theta.covariances, covariance_type=ctype)
    geo = model.geometry(theta, model.expected_stats(theta))
    assert geo._packed is not None and geo.fallback[1]
    x = rng.normal(size=(50, model.q))
    y = geo.forward(x)
    d0, d1, d2 = geo._split(x)
    assert np.allclose(y, geo._join(d0, *geo.map.forward(d0, d1, d2)), rtol=1e-12, atol=1e-12)
    z = geo.inverse(y)
    y0, y1, y2 = geo._split(y)
    assert np.allclose(z, geo._join(y0, *geo.map.inverse(y0, y1, y2)), rtol=1e-11, atol=1e-11)
    assert np.allclose(z, x, rtol=1e-10, atol=1e-10)
    assert np.array_equal(geo.forward(x[3]), y[3:4])  # one vector is one row


def test_packed_whitening_is_not_used_for_diagonal_layouts():
    model = GaussianMixtureModel(K, D, "diag")
    theta = random_theta("diag", np.random.default_rng(7))
    assert model.geometry(theta, model.expected_stats(theta))._packed is None
    assert isinstance(model.geometry(theta, model.expected_stats(theta)).map, MomentWhitening)


def test_packed_whitening_does_not_depend_on_the_thread_count_or_the_batch():
    import numba

    from fedemstats._threads import SERIAL_BELOW
    from fedemstats.models._whiten_kernels import ROW_CHUNK
    rng = np.random.default_rng(8)
    model = GaussianMixtureModel(K, D, "full")
    theta = random_theta("full", rng)
    geo = model.geometry(theta, model.expected_stats(theta))
    x = rng.normal(size=(7 * ROW_CHUNK + 3, model.q))
    assert x.size >= SERIAL_BELOW  # smaller batches run on the calling thread alone (fedemstats._threads)
    previous, results = numba.get_num_threads(), []
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            results.append(geo.forward(x))
    finally:
        numba.set_num_threads(previous)
    for y in results[1:]:
        assert np.array_equal(y, results[0])
    assert np.array_equal(geo.forward(x[ROW_CHUNK + 1:2 * ROW_CHUNK + 2]), results[0][ROW_CHUNK + 1:2 * ROW_CHUNK + 2])


def test_wide_full_mixtures_whiten_with_the_moment_algebra():
    """Above MAX_PACKED_FEATURES the sandwich matrices would hold t² terms per component (d = 64:
    4.3 million); the geometry then uses the moment algebra on the packed layout, and agrees."""
    d = MAX_PACKED_FEATURES + 1
    rng = np.random.default_rng(8)
    model = GaussianMixtureModel(2, d, "full", shift=np.zeros(d))
    A = rng.normal(size=(2, d, d))
    theta = make_params(np.array([0.4, 0.6]), rng.normal(size=(2, d)), A @ np.swapaxes(A, 1, 2) / d + np.eye(d),
                        covariance_type="full")
    wide = model.geometry(theta, model.expected_stats(theta))
    assert wide._packed is None and model.layout.is_symmetric("sum_xx")
    x = rng.normal(size=(4, model.q))
    y = wide.forward(x)
    packed = PackedWhitening(False, wide.map.m, wide.map.L, wide.map.L_inv, wide.map.L2, wide.map.L2_inv)
    assert np.allclose(packed.apply(x, True), y, rtol=1e-10, atol=1e-10)
    assert np.allclose(wide.inverse(y), x, rtol=1e-9, atol=1e-9)
