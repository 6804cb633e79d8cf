"""The missing-value models on Flower (in-process grid): nodes whose CSV rows miss values run the
same fit as the in-process engine and as ``FederatedImputer``, and refuse what they cannot fit.

Data: scikit-learn's diabetes (s1 and s2 correlate at 0.90), columns rescaled from 1e-2 to 1e3,
20 % of the cells missing at random, split over 6 nodes sorted by one column (heterogeneous),
with one node that never observes a column; for the Poisson model, the Portal rodent counts. The
transport is
:class:`fedemstats.flower.testing.LocalGrid`, as in ``test_flower_factor.py``; the tolerance is
the adapter's 1e-10 of each array's magnitude.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.datasets import load_diabetes

from _hypothesis_profiles import profile

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")

from fedemstats.estimators import FederatedImputer  # noqa: E402
from fedemstats.flower import (FedEMSettings, FedEMStrategy, GMMProblem, ImputerProblem,  # noqa: E402
                               PrivateFedEMStrategy, make_client_app)
from fedemstats.flower.problems import PROBLEM_TYPES, problem_from_spec  # noqa: E402
from fedemstats.flower.reference import max_abs_difference, reference_run  # noqa: E402
from fedemstats.flower.server import problem_from_run_config  # noqa: E402
from fedemstats.flower.testing import LocalGrid  # noqa: E402
from fedemstats.privacy import DPConfig  # noqa: E402

TOL = 1e-10
N_PARTS = 6
#: Flower's telemetry off and a temporary FLWR_HOME (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("flower_env")


def _write(folder, parts):
    folder.mkdir()
    for i, X in enumerate(parts):
        np.savetxt(folder / f"partition-{i}.csv", X, delimiter=",", fmt="%.17g")  # NaN is written "nan"
    return str(folder), [np.loadtxt(folder / f"partition-{i}.csv", delimiter=",", ndmin=2) for i in range(len(parts))]


def _diabetes_parts(scales):
    X = load_diabetes().data * scales
    rng = np.random.default_rng(0)
    X[rng.random(X.shape) < 0.2] = np.nan
    X[np.isnan(X).all(axis=1), 0] = 0.0
    parts = np.array_split(X[np.argsort(np.nan_to_num(X[:, 2]))], N_PARTS)
    parts[0][:, 3] = np.nan  # node 0 never observes column 3
    return parts


@pytest.fixture
def scaled(tmp_path):
    return _write(tmp_path / "scaled", _diabetes_parts(np.logspace(-2, 3, 10)))


@pytest.fixture
def standardised(tmp_path):
    X = load_diabetes().data
    return _write(tmp_path / "standardised", _diabetes_parts(1.0 / X.std(axis=0)))


def _grid(folder, problem_type=ImputerProblem, **node_config):
    return LocalGrid(make_client_app(problem_type),
                     [{"partition-id": i, "data-dir": folder, **node_config} for i in range(N_PARTS)])


def _assert_equivalent(result, reference):
    diffs = max_abs_difference(result, reference)
    for name, diff in diffs.items():
        magnitude = np.abs(result["theta"][name]).max() if name in result["theta"] else np.abs(reference.state.s_hat).max()
        assert diff < TOL * max(magnitude, 1.0), (name, diff, magnitude)
    # the run moved: its rounds changed the likelihood by far more than the tolerance
    assert reference.history["loglik"].iloc[-1] > reference.history["loglik"].iloc[0] + 1e-3


@pytest.mark.parametrize("compressor, participation", [("dither:s=4", 1.0), ("dither:s=4", 3), ("identity", 1.0)])
def test_gaussian_imputer_on_flower_matches_the_in_process_engine(scaled, compressor, participation):
    folder, parts = scaled
    X = np.vstack(parts)
    assert np.isnan(X).mean() > 0.19 and np.isnan(parts[0][:, 3]).all()
    settings = FedEMSettings(n_rounds=8, compressor=compressor, participation=participation, step_size=0.5, seed=3)
    result = FedEMStrategy(ImputerProblem(), settings).start(_grid(folder))
    _assert_equivalent(result, reference_run(parts, ImputerProblem(), settings))


def test_mixture_imputer_on_flower_matches_the_in_process_engine(standardised):
    """On standardised columns. With the columns rescaled from 1e-2 to 1e3 the mixture's run
    agrees to 2.4e-10 of Ŝ's magnitude only: the start's moments differ by rounding (1e-16, the
    nodes' sums against the pooled ones), the draws of the means amplify that to 9e-14, and the
    E-step's responsibilities, in the data's raw units, to 7e-10 after one pass."""
    folder, parts = standardised
    problem = ImputerProblem("gmm", 2)
    for participation in (1.0, 3):
        settings = FedEMSettings(n_rounds=8, compressor="dither:s=4", participation=participation, step_size=0.5,
                                 seed=3)
        result = FedEMStrategy(problem, settings).start(_grid(folder))
        _assert_equivalent(result, reference_run(parts, problem, settings))


@pytest.mark.parametrize("model, data", [("gaussian", "scaled"), ("gmm", "standardised")])
def test_imputer_on_flower_matches_federated_imputer(model, data, request):
    folder, parts = request.getfixturevalue(data)
    K = 1 if model == "gaussian" else 2
    settings = FedEMSettings(n_rounds=8, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=3)
    result = FedEMStrategy(ImputerProblem(model, K), settings).start(_grid(folder))
    est = FederatedImputer(model=model, n_components=K, init_params="random", compressor="dither:s=4",
                           step_size=0.5, max_iter=settings.n_rounds + 1, tol=0.0,
                           random_state=settings.seed).fit(parts)
    names = {"gaussian": ("mean", "covariance"), "gmm": ("weights", "means", "covariances")}[model]
    for name in names:
        value = getattr(est.theta_, name)
        np.testing.assert_allclose(np.array(result["theta"][name]), value, rtol=0, atol=TOL * np.abs(value).max())
    # the fitted model imputes a node's rows on the node: its missing cells get finite values
    filled = est.transform(parts[1])
    assert np.isfinite(filled).all() and np.array_equal(filled[~np.isnan(parts[1])], parts[1][~np.isnan(parts[1])])


@pytest.fixture
def portal(tmp_path):
    """The Portal rodent counts (12 species; never-surveyed plot-years are NaN) with 20 % of the
    observed counts hidden, the 24 plots grouped into 6 nodes of 4 plots: real counts, zeros and
    heterogeneous nodes (the plots carry different treatments)."""
    from fedemstats.datasets import load_portal_rodents

    portal = load_portal_rodents(min_captures=500)
    X = portal.data.astype(np.float64)
    X[np.random.default_rng(0).random(X.shape) < 0.2] = np.nan
    keep = ~np.isnan(X).all(axis=1)
    X, plots = X[keep], np.asarray(portal.groups)[keep]
    labels = np.unique(plots)
    return _write(tmp_path / "portal", [X[np.isin(plots, labels[i::N_PARTS])] for i in range(N_PARTS)])


@pytest.mark.parametrize("compressor, participation", [("dither:s=4", 1.0), ("dither:s=4", 3)])
def test_poisson_imputer_on_flower_matches_the_in_process_engine_and_federated_imputer(portal, compressor,
                                                                                     participation):
    folder, parts = portal
    assert (np.nan_to_num(np.vstack(parts)) == 0).mean() > 0.1  # many zero counts
    problem = ImputerProblem("poisson", 4)
    settings = FedEMSettings(n_rounds=8, compressor=compressor, participation=participation, step_size=0.5, seed=3)
    result = FedEMStrategy(problem, settings).start(_grid(folder))
    _assert_equivalent(result, reference_run(parts, problem, settings))
    if participation == 1.0:
        est = FederatedImputer(model="poisson", n_components=4, init_params="random", compressor=compressor,
                               step_size=0.5, max_iter=settings.n_rounds + 1, tol=0.0,
                               random_state=settings.seed).fit(parts)
        for name in ("weights", "rates"):
            value = getattr(est.theta_, name)
            np.testing.assert_allclose(np.array(result["theta"][name]), value, rtol=0,
                                       atol=TOL * np.abs(value).max())


def test_a_poisson_node_refuses_counts_that_are_not_whole_numbers(portal, caplog):
    folder, parts = portal

    def load(context):
        X = parts[int(context.node_config["partition-id"])].copy()
        X[2, np.flatnonzero(~np.isnan(X[2]))[0]] = 1.5
        return X

    grid = LocalGrid(make_client_app(ImputerProblem, load_partition=load), [{"partition-id": i} for i in range(N_PARTS)])
    with pytest.raises(RuntimeError, match="0 node\\(s\\) described themselves"):
        FedEMStrategy(ImputerProblem("poisson", 4), FedEMSettings(n_rounds=2, seed=3, node_wait=1.0)).start(grid)
    assert _refusing_nodes(caplog, "Non-integer values in data passed to the Poisson model") == N_PARTS


def _refusing_nodes(caplog, words):
    """How many distinct nodes logged a refusal containing ``words`` (a handler Flower adds to the
    package's logger after a simulation shows each record twice)."""
    return len({record.args[0] for record in caplog.records if words in record.getMessage()})


def test_a_node_refuses_a_row_with_no_observed_value(scaled, caplog):
    folder, parts = scaled

    def load(context):
        X = parts[int(context.node_config["partition-id"])].copy()
        X[1] = np.nan
        return X

    grid = LocalGrid(make_client_app(ImputerProblem, load_partition=load), [{"partition-id": i} for i in range(N_PARTS)])
    settings = FedEMSettings(n_rounds=2, seed=3, node_wait=1.0)
    with pytest.raises(RuntimeError, match="0 node\\(s\\) described themselves"):
        FedEMStrategy(ImputerProblem(), settings).start(grid)
    assert _refusing_nodes(caplog, "1 row(s) (e.g. [1]) have no observed value") == N_PARTS


@pytest.mark.parametrize("kept", [0, 1], ids=["never", "once-per-node"])
def test_a_column_no_node_observes_twice_stops_the_run_with_its_index(scaled, kept):
    """A node leaves out a column it observes in one row only (its mean would be that row's
    value): if every node does, the column is as unobserved."""
    folder, parts = scaled

    def load(context):
        X = parts[int(context.node_config["partition-id"])].copy()
        X[kept:, 7] = np.nan
        X[:kept, 7] = 1.0
        X[np.isnan(X).all(axis=1), 0] = 0.0
        return X

    grid = LocalGrid(make_client_app(ImputerProblem, load_partition=load), [{"partition-id": i} for i in range(N_PARTS)])
    with pytest.raises(RuntimeError, match=r"column\(s\) \[7\] are observed in at least 2 rows on no node"):
        FedEMStrategy(ImputerProblem(), FedEMSettings(n_rounds=2, seed=3)).start(grid)


def test_complete_row_problems_still_refuse_a_csv_with_missing_values(scaled, caplog):
    folder, _ = scaled
    with pytest.raises(RuntimeError, match="described themselves"):
        FedEMStrategy(GMMProblem(2), FedEMSettings(n_rounds=2, seed=3, node_wait=1.0)).start(_grid(folder, None))
    assert _refusing_nodes(caplog, "the node's partition contains NaN") == N_PARTS
    with pytest.raises(ValueError, match="complete-row problems only"):
        PrivateFedEMStrategy(ImputerProblem(), FedEMSettings(n_rounds=2, seed=3),
                             DPConfig(epsilon=4.0, mode="distributed", scale=3.0))


def test_the_problem_round_trips_through_its_spec_and_the_run_config():
    problem = ImputerProblem("gmm", 3, "diag", 1e-4)
    assert PROBLEM_TYPES["imputer"] is ImputerProblem
    assert ImputerProblem.from_spec(problem.spec()) == problem
    assert problem_from_run_config({"problem": "imputer"}) == ImputerProblem()
    assert problem_from_run_config({"problem": "imputer", "model": "gmm", "n-components": 3,
                                    "covariance-type": "diag", "reg-covar": 1e-4}) == problem
    assert problem_from_spec(problem.spec(), ImputerProblem) == problem
    # the example's run config keeps the mixture's n-components = 3: the Gaussian ignores it
    assert problem_from_run_config({"problem": "imputer", "n-components": 3, "init": "random"}) == ImputerProblem()
    with pytest.raises(ValueError, match="this node serves 'gmm' problems; the server asked for 'imputer'"):
        problem_from_spec(problem.spec(), GMMProblem)
    assert problem_from_run_config({"problem": "imputer", "model": "poisson", "n-components": 8}) == \
        ImputerProblem("poisson", 8)
    for kwargs, words in (({"model": "counts"}, "model must be one of"),
                          ({"n_components": 2}, "one component"),
                          ({"model": "gmm", "n_components": 2, "covariance_type": "tied"}, "covariance_type"),
                          ({"reg_covar": -1.0}, "reg_covar")):
        with pytest.raises(ValueError, match=words):
            ImputerProblem(**kwargs)


PROPERTY = profile("flower-imputer", 25, 250)


@PROPERTY
@given(seed=st.integers(0, 2 ** 32 - 1), n_nodes=st.integers(2, 5), d=st.integers(2, 4),
       nan_frac=st.sampled_from([0.0, 0.3, 0.6]), spread=st.sampled_from([0.0, 3.0]))
def test_any_small_federation_with_missing_values_runs_on_flower_as_in_process(seed, n_nodes, d, nan_frac, spread):
    """Nodes of 2 to 12 rows, up to 60 % of the cells missing (columns a node never sees, pairs
    never observed together), columns on scales up to 1e3: the Gaussian imputer's Flower run is
    the in-process run, or both refuse the federation the same way."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** (spread * rng.random(d))
    parts = []
    for _ in range(n_nodes):
        X = (rng.normal(size=(int(rng.integers(2, 13)), d)) @ (np.eye(d) + 0.8 * rng.normal(size=(d, d)))) * scales
        X[rng.random(X.shape) < nan_frac] = np.nan
        X[np.isnan(X).all(axis=1), 0] = scales[0]
        parts.append(X)
    if np.isnan(np.vstack(parts)).all(axis=0).any():
        return  # a column nobody observes: refused before any round (tested above)
    settings = FedEMSettings(n_rounds=3, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=seed % 1000,
                             min_nodes=n_nodes)
    grid = LocalGrid(make_client_app(ImputerProblem, load_partition=lambda c: parts[int(c.node_config["partition-id"])]),
                     [{"partition-id": i} for i in range(n_nodes)])
    if any(max(np.sum(~np.isnan(X[:, j])) for X in parts) < 2 for j in range(d)):
        # every node observes some column in one row at most, and shares none of it
        with pytest.raises(RuntimeError, match="are observed in at least 2 rows on no node"):
            FedEMStrategy(ImputerProblem(), settings).start(grid)
        with pytest.raises(ValueError, match="are observed in fewer than 2 rows of every client"):
            reference_run(parts, ImputerProblem(), settings)
        return
    result = FedEMStrategy(ImputerProblem(), settings).start(grid)
    reference = reference_run(parts, ImputerProblem(), settings)
    for name, diff in max_abs_difference(result, reference).items():
        magnitude = np.abs(result["theta"][name]).max() if name in result["theta"] else np.abs(reference.state.s_hat).max()
        assert diff < TOL * max(magnitude, 1.0), (name, diff, magnitude)
