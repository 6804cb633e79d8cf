"""Flower simulation (Ray backend) of FedEM equals the in-process engine.

10 nodes, 5 rounds, dithering s=4, FixedSize(5) participation, fixed seed: the
final Ŝ, V, the mirrored V_i and θ = T(Ŝ) match ``FedEM(...).run`` to 1e-10.
"""
import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")
pytest.importorskip("ray", reason="Flower simulations need Ray: pip install 'fedemstats[flower]'")

from flwr.simulation import run_simulation  # noqa: E402

from fedemstats.algorithms.fine_start import EVERYONE_ROUNDS  # noqa: E402
from fedemstats.flower import FedEMSettings, GMMProblem, make_client_app, make_server_app  # noqa: E402
from fedemstats.flower.reference import max_abs_difference, reference_run  # noqa: E402
from fedemstats.flower.testing import write_partitions  # noqa: E402

TOL = 1e-10
N_NODES = 10
#: Ray may use both cores of the test machine, one per ClientApp actor
BACKEND = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
           "init_args": {"num_cpus": 2, "include_dashboard": False}}


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
def test_simulation_equals_in_process_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr_home"))
    parts = write_partitions(tmp_path, N_NODES, rows=60, dim=3, n_components=3, seed=8)
    # past the rounds that ask every node (the fine start's and the first coarse ones) into
    # sampled rounds (5 of N_NODES)
    settings = FedEMSettings(n_rounds=EVERYONE_ROUNDS + 3, compressor="dither:s=4", participation=5, step_size=0.5,
                             seed=2024, min_nodes=N_NODES, round_timeout=120.0,
                             # Ray's actors start slowly on a loaded machine: at the default 60 s
                             # none had answered round 0 while two benchmarks shared the 2 cores
                             node_wait=300.0)
    problem = GMMProblem(3)
    folder = str(tmp_path)

    def load(context):  # the node reads only its own partition file
        pid = int(context.node_config["partition-id"])
        return np.loadtxt(f"{folder}/partition-{pid}.csv", delimiter=",", ndmin=2)

    results = {}
    run_simulation(make_server_app(problem, settings, on_result=results.update),
                   make_client_app(GMMProblem, load), num_supernodes=N_NODES, backend_config=BACKEND)
    assert results, "the ServerApp did not finish"
    assert results["round"] == EVERYONE_ROUNDS + 3 and results["partitions"] == list(range(N_NODES))
    assert [h["n_active"] for h in results["history"]] == [N_NODES] * (1 + EVERYONE_ROUNDS) + [5] * 3
    diffs = max_abs_difference(results, reference_run(parts, problem, settings))
    assert max(diffs.values()) < TOL, diffs
