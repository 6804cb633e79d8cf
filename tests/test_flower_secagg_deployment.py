"""Private FedEM with SecAgg+ on a real loopback deployment (issue 14, acceptance).

A secured SuperLink (TLS + SuperNode authentication, as in test_flower_deployment.py) and 4
registered SuperNodes on 127.0.0.1 run the example app ``examples/flower_gmm_private``:
``make_private_server_app`` (Flower's ``SecAggPlusWorkflow`` for every release) and
``make_private_client_app`` (Flower's ``secaggplus_mod``). The nodes get the in-process run's
entropy as their noise key (node config ``dp-noise-key``; a real node draws its own secret),
so the run must end where :func:`private_reference_run` ends: ≤ 1e-8, with no tolerance
for SecAgg+'s quantisation, because the shares are on its grid (``docs/privacy.md``).
The ServerApp's log (``flwr log``) must show each release go through the four SecAgg+ stages
and contain no statistic. Every process started is stopped in ``finally``, pass or fail.
"""
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")

from _flower_cluster import Cluster, tools_installed, wait_result  # noqa: E402
from fedemstats.flower import FedEMSettings, GMMProblem  # noqa: E402
from fedemstats.flower.private_client import NOISE_KEY  # noqa: E402
from fedemstats.flower.private_strategy import privacy_from_run_config  # noqa: E402
from fedemstats.flower.reference import private_reference_run  # noqa: E402
from fedemstats.flower.testing import write_partitions  # noqa: E402

APP = Path(__file__).resolve().parent.parent / "examples" / "flower_gmm_private"
N_NODES, N_ROUNDS, TOL = 4, 1, 1e-8
#: bounded wait for the whole run (seconds): 3 releases (one round) x 4 SecAgg+ stages, each
#: one `flwr-clientapp` launch per node (≈ 5 s of CPU each, mostly imports); one round, not two,
#: keeps the module under 3 minutes on CI's 2 cores
RUN_TIMEOUT = 400.0
RUN_CONFIG = {"num-rounds": N_ROUNDS, "participation": 1.0, "seed": 23, "min-nodes": N_NODES, "node-wait": 90.0,
              "round-timeout": 90.0, "n-components": 2, "dp-epsilon": 4.0, "dp-scale": 3.0}

pytestmark = pytest.mark.skipif(not tools_installed(),
                                reason="Flower command-line tools not installed (pip install 'fedemstats[flower]')")


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """The in-process reference, then one secured deployment running the private app."""
    root = tmp_path_factory.mktemp("secagg_deployment")
    data = root / "data"
    data.mkdir()
    parts = write_partitions(data, N_NODES, rows=50, dim=2, n_components=2, seed=8)
    settings = FedEMSettings.from_run_config(RUN_CONFIG)
    privacy = privacy_from_run_config(RUN_CONFIG)
    reference = private_reference_run(parts, GMMProblem(2), settings, privacy)
    out = root / "result.json"
    c = Cluster(root, data, secure=True)
    started = time.monotonic()
    try:
        c.start(N_NODES, extra_config={NOISE_KEY: int(reference.state.extra["dp"]["entropy"])})
        submitted = c.flwr_run(APP, **RUN_CONFIG, output=str(out))
        run_id = int(re.search(r"started run (\d+)", submitted).group(1))
        final = wait_result(out, N_ROUNDS, c, RUN_TIMEOUT)
        server_log = _server_log(c, run_id)
        (root / "serverapp.log").write_text(server_log)
    except BaseException:
        print(c.log_tail(40))
        raise
    finally:
        c.stop()
    return SimpleNamespace(final=final, reference=reference, server_log=server_log,
                           seconds=time.monotonic() - started)


def _server_log(cluster, run_id, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        log = cluster.flwr("log", str(run_id), "test", "--show")
        if "private FedEM finished" in log or time.monotonic() > deadline:
            return log
        time.sleep(1.0)


def test_deployment_equals_the_in_process_distributed_run(scenario):
    final, reference = scenario.final, scenario.reference
    assert final["round"] == N_ROUNDS and final["partitions"] == list(range(N_NODES))
    assert final["privacy"]["count"] == reference.state.extra["dp"]["count"]
    diff = float(np.max(np.abs(np.array(final["s_hat"]) - reference.state.s_hat)))
    print(f"max |deployment - in-process| on S_hat = {diff:.3g}; scenario {scenario.seconds:.0f} s")
    assert diff < TOL, diff
    np.testing.assert_allclose([h["epsilon"] for h in final["history"]], reference.history["epsilon"], rtol=1e-12)


def test_every_release_went_through_secagg_and_the_log_holds_no_statistic(scenario):
    log = scenario.server_log
    releases = 2 + N_ROUNDS  # the count, round 0's statistics, the rounds
    assert log.count("Secure aggregation completed") == releases, log[-3000:]
    assert "Secure aggregation halted" not in log
    # no array of numbers in the server's log (statistics would print as lists or arrays)
    assert not re.search(r"\[\s*-?\d+\.\d+(e[-+]?\d+)?\s*,\s*-?\d+\.\d+", log), log[-3000:]
