"""Factor analysis on Flower (in-process grid): the same run as the in-process engine and
as ``FederatedFactorAnalysis``, on correlated, heterogeneous partitions.

The transport is :class:`fedemstats.flower.testing.LocalGrid` (the Message API without
processes), as in ``test_flower_local.py``; the tolerance is the adapter's 1e-10.
"""
import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")

from fedemstats.estimators import FederatedFactorAnalysis  # noqa: E402
from fedemstats.flower import FactorAnalysisProblem, FedEMSettings, FedEMStrategy, GMMProblem  # noqa: E402
from fedemstats.flower import make_client_app  # noqa: E402
from fedemstats.flower.problems import PROBLEM_TYPES, problem_from_spec  # noqa: E402
from fedemstats.flower.reference import max_abs_difference, reference_run  # noqa: E402
from fedemstats.flower.server import problem_from_run_config  # noqa: E402
from fedemstats.flower.testing import LocalGrid  # noqa: E402

TOL = 1e-10
N_PARTS, DIM, FACTORS = 8, 5, 2


#: Flower's telemetry off and a temporary FLWR_HOME (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("flower_env")


@pytest.fixture
def data(tmp_path):
    """Partitions of a 2-factor model with columns on scales 1e-3 to 1e3 (correlations up to
    0.9) and a shift per partition, so clients differ; written as CSV and read back."""
    rng = np.random.default_rng(7)
    loadings = rng.normal(size=(FACTORS, DIM)) * 2.0
    scales = np.logspace(-3, 3, DIM)
    folder = tmp_path / "data"
    folder.mkdir()
    parts = []
    for i in range(N_PARTS):
        z = rng.normal(size=(30 + 3 * i, FACTORS)) + 0.5 * i / N_PARTS
        X = (z @ loadings + 0.4 * rng.normal(size=(z.shape[0], DIM))) * scales + 10.0
        path = folder / f"partition-{i}.csv"
        np.savetxt(path, X, delimiter=",", fmt="%.17g")
        parts.append(np.loadtxt(path, delimiter=",", ndmin=2))
    return str(folder), parts


def _grid(folder, problem_type=FactorAnalysisProblem):
    return LocalGrid(make_client_app(problem_type), [{"partition-id": i, "data-dir": folder} for i in range(N_PARTS)])


@pytest.mark.parametrize("compressor, participation", [("dither:s=4", 1.0), ("dither:s=4", 5), ("identity", 1.0)])
def test_factor_analysis_on_flower_matches_the_in_process_engine(data, compressor, participation):
    folder, parts = data
    assert np.max(np.abs(np.corrcoef(np.vstack(parts).T) - np.eye(DIM))) > 0.9
    settings = FedEMSettings(n_rounds=6, compressor=compressor, participation=participation, step_size=0.5, seed=5)
    result = FedEMStrategy(FactorAnalysisProblem(FACTORS), settings).start(_grid(folder))
    reference = reference_run(parts, FactorAnalysisProblem(FACTORS), settings)
    diffs = max_abs_difference(result, reference)
    assert set(diffs) >= {"s_hat", "v", "components", "noise_variance", "mean"}
    # statistics are in the public standardised units; parameters in the data's (up to 1e6 here),
    # so each parameter array is held to TOL of its own magnitude
    for name, diff in diffs.items():
        magnitude = np.abs(result["theta"][name]).max() if name in result["theta"] else 1.0
        assert diff < TOL * max(magnitude, 1.0), (name, diff, magnitude)
    # the run moved: six rounds from θ_0 change the loadings by far more than the tolerance
    assert reference.history["loglik"].iloc[-1] > reference.history["loglik"].iloc[0] + 1e-3


def test_factor_analysis_on_flower_matches_federated_factor_analysis(data):
    folder, parts = data
    settings = FedEMSettings(n_rounds=6, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=5)
    result = FedEMStrategy(FactorAnalysisProblem(FACTORS), settings).start(_grid(folder))
    est = FederatedFactorAnalysis(FACTORS, compressor="dither:s=4", step_size=0.5, max_iter=settings.n_rounds + 1,
                                  tol=0.0, random_state=settings.seed).fit(parts)
    for name, fitted in (("components", est.components_), ("noise_variance", est.noise_variance_),
                         ("mean", est.mean_)):
        np.testing.assert_allclose(np.array(result["theta"][name]), fitted, rtol=0, atol=TOL * np.abs(fitted).max())


def test_a_node_serving_mixtures_refuses_a_factor_analysis_instruction(data, caplog):
    folder, _ = data
    settings = FedEMSettings(n_rounds=2, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=5,
                             node_wait=1.0)
    # the problem's spec comes with the very first message: the nodes refuse to describe themselves
    with pytest.raises(RuntimeError, match="0 node\\(s\\) described themselves"):
        FedEMStrategy(FactorAnalysisProblem(FACTORS), settings).start(_grid(folder, GMMProblem))
    assert caplog.text.count("this node serves 'gmm' problems; the server asked for 'fa'") == N_PARTS


def test_the_problem_round_trips_through_its_spec_and_the_run_config():
    problem = FactorAnalysisProblem(3)
    assert PROBLEM_TYPES["fa"] is FactorAnalysisProblem
    assert FactorAnalysisProblem.from_spec(problem.spec()) == problem
    assert problem_from_run_config({"problem": "fa", "n-factors": 3}) == problem
    with pytest.raises(ValueError, match="n-factors"):
        problem_from_run_config({"problem": "fa"})
    with pytest.raises(ValueError, match="not 'fa'"):
        FactorAnalysisProblem.from_spec(GMMProblem(2).spec())
    with pytest.raises(ValueError, match="n_factors"):
        FactorAnalysisProblem(0)
    # what a node rebuilds from a spec it received
    assert problem_from_spec(problem.spec()) == problem
    assert problem_from_spec(problem.spec(), FactorAnalysisProblem) == problem
    with pytest.raises(ValueError, match=r"unknown problem 'poisson'; registered: \['fa', 'gmm', 'imputer'\]"):
        problem_from_spec({"problem": "poisson"})
    with pytest.raises(ValueError, match="this node serves 'gmm' problems; the server asked for 'fa'"):
        problem_from_spec(problem.spec(), GMMProblem)


def test_private_factor_analysis_on_flower_equals_the_in_process_distributed_run(data):
    """SecAgg+ releases (Flower's own workflow and mod) of factor-analysis statistics end where the
    engine's ``mode="distributed"`` run ends, given the run's noise key (as test_flower_secagg.py)."""
    from flwr.app import Context, RecordDict

    from fedemstats.flower import PrivateFedEMStrategy, make_private_client_app, private_client
    from fedemstats.flower.reference import private_reference_run
    from fedemstats.privacy import DPConfig

    folder, parts = data
    parts, n = parts[:4], 4
    privacy = DPConfig(epsilon=4.0, mode="distributed", scale=3.0)
    settings = FedEMSettings(n_rounds=3, seed=11, participation=1.0, min_nodes=n, node_wait=5.0)
    reference = private_reference_run(parts, FactorAnalysisProblem(FACTORS), settings, privacy)
    key = {private_client.NOISE_KEY: int(reference.state.extra["dp"]["entropy"])}
    grid = LocalGrid(make_private_client_app(FactorAnalysisProblem),
                     [{"partition-id": i, "data-dir": folder, **key} for i in range(n)])
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    result = PrivateFedEMStrategy(FactorAnalysisProblem(FACTORS), settings, privacy).start(grid, context)
    assert result["round"] == 3
    s_hat = reference.state.s_hat
    assert np.max(np.abs(np.array(result["s_hat"]) - s_hat)) < 1e-8 * max(1.0, np.max(np.abs(s_hat)))
    np.testing.assert_allclose([h["epsilon"] for h in result["history"]], reference.history["epsilon"], rtol=1e-12)


def test_a_loader_that_returns_nan_is_refused_by_the_node(data, caplog):
    folder, parts = data

    def load(context):
        X = parts[int(context.node_config["partition-id"])].copy()
        X[0, 0] = np.nan
        return X

    grid = LocalGrid(make_client_app(FactorAnalysisProblem, load_partition=load),
                     [{"partition-id": i} for i in range(N_PARTS)])
    settings = FedEMSettings(n_rounds=2, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=5,
                             node_wait=1.0)
    with pytest.raises(RuntimeError, match="described themselves"):
        FedEMStrategy(FactorAnalysisProblem(FACTORS), settings).start(grid)
    assert caplog.text.count("the node's partition contains NaN") == N_PARTS
