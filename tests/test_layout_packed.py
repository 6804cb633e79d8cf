"""Packed symmetric statistics (issue 12 item 3): the layout, the models' packed
statistics against full per-row references, and the uplink bits they save."""
import numpy as np
import pytest

from fedemstats.algorithms import FedEM
from fedemstats.compression import make_compressor
from fedemstats.federation import Federation
from fedemstats.layout import StatLayout, sym_size
from fedemstats.models.factor import FactorAnalysisModel, init_factor
from fedemstats.models.gaussian_missing import GaussianMissingModel
from fedemstats.models.gmm import GaussianMixtureModel, make_params
from fedemstats.models.gmm_missing import GaussianMixtureMissingModel

FLOAT64_BITS = 64


def random_symmetric(rng, lead, d):
    A = rng.normal(size=lead + (d, d))
    return A + np.swapaxes(A, -1, -2)


def test_symmetric_block_stores_the_upper_triangle_row_by_row():
    lay = StatLayout([("w", (2,)), ("c", (2, 3, 3), "sym"), ("t", (1,))])
    assert lay.block_size("c") == 2 * 6 and lay.size == 2 + 12 + 1
    np.testing.assert_array_equal(lay.offsets, [0, 2, 14, 15])
    full = np.arange(18.0).reshape(2, 3, 3)
    full = full + np.swapaxes(full, -1, -2)
    flat = lay.pack({"w": np.zeros(2), "c": full, "t": np.zeros(1)})
    # component 0 then component 1, each (0,0) (0,1) (0,2) (1,1) (1,2) (2,2)
    expected = [full[k, i, j] for k in range(2) for i in range(3) for j in range(i, 3)]
    np.testing.assert_array_equal(flat[lay.slice("c")], expected)


def test_pack_unpack_round_trip_on_stacks_and_views_of_plain_blocks():
    rng = np.random.default_rng(0)
    lay = StatLayout([("m", (3, 4)), ("c", (3, 4, 4), "sym"), ("s", (4, 4), "sym")])
    parts = {"m": rng.normal(size=(5, 3, 4)), "c": random_symmetric(rng, (5, 3), 4),
             "s": random_symmetric(rng, (5,), 4)}
    flat = lay.pack(parts)
    assert flat.shape == (5, 3 * 4 + 3 * sym_size(4) + sym_size(4))
    back = lay.unpack(flat)
    for name in parts:
        np.testing.assert_array_equal(back[name], parts[name])
    np.testing.assert_array_equal(lay.pack(back), flat)
    assert np.shares_memory(back["m"], flat) and not np.shares_memory(back["c"], flat)


def test_pack_symmetrises_and_entry_weights_give_the_frobenius_norm():
    rng = np.random.default_rng(1)
    lay = StatLayout([("v", (2,)), ("c", (2, 3, 3), "sym")])
    A = rng.normal(size=(2, 3, 3))
    flat = lay.pack({"v": np.ones(2), "c": A})
    np.testing.assert_allclose(lay.unpack(flat)["c"], 0.5 * (A + np.swapaxes(A, 1, 2)), rtol=1e-15)
    full = lay.unpack(flat)
    frob = np.sum(full["v"] ** 2) + np.sum(full["c"] ** 2)
    assert np.sum(lay.entry_weights() * flat ** 2) == pytest.approx(frob, rel=1e-14)


@pytest.mark.parametrize("bad", [("c", (3, 4), "sym"), ("c", (3,), "sym"), ("c", (3, 3), "diag")])
def test_only_square_trailing_blocks_can_be_symmetric(bad):
    with pytest.raises(ValueError, match="sym"):
        StatLayout([bad])


def gmm_problem(d, K=3, n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + rng.normal(scale=3, size=(K, d))[rng.integers(K, size=n)]
    covs = np.array([np.eye(d) * (1 + k) + 0.1 for k in range(K)])
    theta = make_params(np.full(K, 1 / K), rng.normal(size=(K, d)), covs)
    return X, theta


def gmm_reference(X, theta, shift, ctype):
    """Full (unpacked) mean statistics of one client, row by row from the responsibilities."""
    from fedemstats.models.gmm import estimate_log_prob_resp

    r = np.exp(estimate_log_prob_resp(X, theta)[1])
    Z = X - shift
    out = {"resp": r.mean(0), "sum_x": r.T @ Z / len(X)}
    out["sum_xx"] = (np.einsum("nk,ni,nj->kij", r, Z, Z) if ctype == "full" else Z.T @ Z) / len(X)
    return out


@pytest.mark.parametrize("ctype", ["full", "tied"])
def test_gmm_statistics_are_the_packed_full_statistics(ctype):
    X, theta = gmm_problem(d=7)
    theta = make_params(theta.weights, theta.means, theta.covariances if ctype == "full" else theta.covariances[0],
                        covariance_type=ctype)
    shift = X.mean(0)
    model = GaussianMixtureModel(3, 7, ctype, shift=shift)
    stats, _ = model.client_stats(Federation(X, [0, 150, 400]), theta)
    for i, (a, b) in enumerate([(0, 150), (150, 400)]):
        ref = model.layout.pack(gmm_reference(X[a:b], theta, shift, ctype))
        np.testing.assert_allclose(stats[i], ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("d", [10, 16])
def test_identity_uplink_bits_of_full_covariances_are_halved_up_to_the_diagonal(d):
    K, n_clients = 3, 4
    X, theta = gmm_problem(d, K)
    fed = Federation(X, np.linspace(0, X.shape[0], n_clients + 1).astype(int))
    model = GaussianMixtureModel(K, d, "full", shift=X.mean(0))
    packed_q = K + K * d + K * d * (d + 1) // 2
    assert model.q == packed_q
    res = FedEM(model, step_size=1.0, alpha=1.0, v_init="zero").run(fed, theta, 2, random_state=0)
    # each client also sends its float64 log-likelihood
    assert (res.history["uplink_bits"].iloc[1:] == n_clients * FLOAT64_BITS * (packed_q + 1)).all()
    stats, _ = model.client_stats(fed, theta)
    message = make_compressor("identity").compress(stats, None, model.layout.offsets)
    bits_packed = int(make_compressor("identity").bits(message))
    bits_full = n_clients * FLOAT64_BITS * (K + K * d + K * d * d)
    assert bits_packed == n_clients * FLOAT64_BITS * packed_q
    # the second-moment block is half of the full one plus half of its diagonal
    second_packed = bits_packed - n_clients * FLOAT64_BITS * (K + K * d)
    second_full = bits_full - n_clients * FLOAT64_BITS * (K + K * d)
    assert second_packed == second_full // 2 + n_clients * FLOAT64_BITS * K * d // 2


def test_missing_value_models_declare_packed_second_moments():
    d, k = 6, 2
    assert GaussianMissingModel(d).layout.symmetric == {"sum_xx"}
    assert GaussianMissingModel(d).q == d + sym_size(d)
    assert GaussianMixtureMissingModel(2, d).q == 2 + 2 * d + 2 * sym_size(d)
    assert GaussianMixtureMissingModel(2, d, "diag").layout.symmetric == frozenset()
    fa = FactorAnalysisModel(d, k)
    assert fa.layout.symmetric == {"sum_zz"} and fa.q == d + d * (k + 1) + sym_size(k + 1)


def test_factor_t_map_reads_the_packed_second_moment():
    """T-map of exact statistics = one EM step; the packed S_zz must unpack to the full matrix."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 2)) @ rng.normal(size=(2, 6)) + rng.normal(size=(300, 6))
    fed = Federation(X, [0, 120, 300])
    model = FactorAnalysisModel(6, 2, shift=X.mean(0))
    theta = init_factor(fed, 2)
    s = fed.weights @ model.client_stats(fed, theta)[0]
    szz = model.layout.unpack(s)["sum_zz"]
    np.testing.assert_array_equal(szz, szz.T)
    assert szz[-1, -1] == pytest.approx(1.0)
    new = model.t_map(s)
    assert np.all(np.isfinite(new.components)) and np.all(new.noise_variance > 0)


@pytest.mark.parametrize("ctype", ["full", "tied"])
def test_diagonal_precision_factors_give_scikit_learns_numbers(ctype):
    """Full / tied covariances that are diagonal (the k-means labelling pass uses the
    identity) take the kernel's cheaper diagonal form; the numbers stay scikit-learn's."""
    from scipy.special import logsumexp
    from sklearn.mixture._gaussian_mixture import _estimate_log_gaussian_prob

    from fedemstats.models.gmm import estimate_log_prob_resp

    rng = np.random.default_rng(5)
    X, _ = gmm_problem(d=6)
    variances = rng.uniform(0.5, 3.0, size=(3, 6))
    covs = np.array([np.diag(v) for v in variances]) if ctype == "full" else np.diag(variances[0])
    theta = make_params(np.array([0.2, 0.3, 0.5]), rng.normal(size=(3, 6)), covs, covariance_type=ctype)
    ref = _estimate_log_gaussian_prob(X, theta.means, theta.precisions_cholesky, ctype) + np.log(theta.weights)
    log_norm, log_resp = estimate_log_prob_resp(X, theta)
    np.testing.assert_allclose(log_norm, logsumexp(ref, axis=1), rtol=1e-12)
    model = GaussianMixtureModel(3, 6, ctype, shift=X.mean(0))
    stats, loglik = model.client_stats(Federation(X, [0, X.shape[0]]), theta)
    r = np.exp(ref - logsumexp(ref, axis=1)[:, None])
    Z = X - model.shift
    second = np.einsum("nk,ni,nj->kij", r, Z, Z) if ctype == "full" else Z.T @ Z
    expected = model.layout.pack({"resp": r.mean(0), "sum_x": r.T @ Z / len(X), "sum_xx": second / len(X)})
    np.testing.assert_allclose(stats[0], expected, rtol=1e-10, atol=1e-12)
    assert loglik[0] == pytest.approx(log_norm.mean(), rel=1e-12)
