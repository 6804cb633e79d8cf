"""A real Flower deployment on 127.0.0.1: flower-superlink, 3 flower-supernode processes, `flwr run`.

One module-scoped scenario starts a SuperLink and SuperNodes on free loopback
ports with a temporary FLWR_HOME, telemetry and runtime dependency installation
off, runs the example app, kills one SuperNode mid-run, and stops every process
it started (by process group, in ``finally``), pass or fail. The two tests check
equivalence (rounds 1-2) and the partial round after the kill (round 3).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")

from fedemstats.flower import FedEMSettings, GMMProblem  # noqa: E402
from fedemstats.flower.reference import max_abs_difference, reference_run  # noqa: E402
from fedemstats.flower.testing import write_partitions  # noqa: E402

BIN = Path(sys.executable).parent
APP_DIR = Path(__file__).resolve().parent.parent / "examples" / "flower_gmm"
N_NODES = 3
TOL = 1e-10
#: bounded waits (seconds); a whole test stays well under the 3-minute budget
START_TIMEOUT, RUN_TIMEOUT, STOP_TIMEOUT = 30.0, 150.0, 10.0
POLL = 0.2

pytestmark = pytest.mark.skipif(not (BIN / "flower-superlink").exists() or not (BIN / "flwr").exists(),
                                reason="Flower command-line tools not installed (pip install 'fedemstats[flower]')")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(POLL)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


class Cluster:
    """SuperLink + SuperNodes as child processes, each in its own process group."""

    def __init__(self, root: Path, data: Path):
        self.root, self.data, self.procs, self.logs = root, data, {}, {}
        home = root / "flwr_home"
        home.mkdir()
        self.port = _free_port()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{self.port}"\n'
            "insecure = true\n")
        self.env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}

    def _spawn(self, name, args):
        log = open(self.root / f"{name}.log", "w")  # noqa: SIM115 - closed in stop()
        self.logs[name] = log
        self.procs[name] = subprocess.Popen([str(BIN / args[0]), *args[1:]], env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def start(self):
        self._spawn("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port",
                                  str(self.port), "--disable-runtime-dependency-installation"])
        _wait_port(self.port, START_TIMEOUT)
        for i in range(N_NODES):
            node_config = f'partition-id={i} data-path="{self.data / f"partition-{i}.csv"}"'
            self._spawn(f"node{i}", ["flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                                     "--host", "127.0.0.1", "--port", str(_free_port()),
                                     "--node-config", node_config])

    def kill(self, name):
        """SIGKILL a child's whole process group (the process and the apps it launched)."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT)

    def stop(self):
        for name, proc in self.procs.items():
            try:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(STOP_TIMEOUT)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                self.kill(name)
            finally:
                self.logs[name].close()

    def flwr_run(self, **config):
        values = " ".join(f"{k}={json.dumps(v)}" for k, v in config.items())
        done = subprocess.run([str(BIN / "flwr"), "run", str(APP_DIR), "test", "--run-config", values],
                              env=self.env, capture_output=True, text=True, timeout=START_TIMEOUT * 2)
        assert done.returncode == 0, done.stdout + done.stderr

    def log_tail(self, n=15):
        return "\n".join(f"--- {k}\n" + "\n".join((self.root / f"{k}.log").read_text().splitlines()[-n:])
                         for k in self.procs)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """One deployment, one `flwr run` of 3 full-participation rounds; node 2 is killed
    once round 2 is recorded. Returns (partitions, result after round 2, final result)."""
    root = tmp_path_factory.mktemp("deployment")
    data = root / "data"
    data.mkdir()
    parts = write_partitions(data, N_NODES, rows=80, dim=2, n_components=2, seed=4)
    out = root / "result.json"
    c = Cluster(root, data)
    try:
        c.start()
        c.flwr_run(**RUN_CONFIG, output=str(out))
        after_two = _wait_result(out, 2, c)
        c.kill("node2")  # partition 2 dies between round 2 and round 3
        final = _wait_result(out, 3, c)
    finally:
        c.stop()
    return parts, after_two, final


#: run config of the scenario (keys of [tool.flwr.app.config] in examples/flower_gmm)
RUN_CONFIG = {"num-rounds": 3, "compressor": "dither:s=4", "participation": 1.0, "step-size": 0.5,
              "seed": 13, "min-nodes": N_NODES, "round-timeout": 30.0, "node-wait": 90.0, "n-components": 2}


def _wait_result(path: Path, round_, cluster, timeout=RUN_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            result = json.loads(path.read_text())
            if result["round"] >= round_:
                return result
        time.sleep(POLL)
    raise TimeoutError(f"round {round_} not reached in {timeout:g} s\n{cluster.log_tail()}")


def test_deployment_equals_in_process_engine(scenario):
    parts, after_two, _ = scenario
    settings = FedEMSettings(n_rounds=2, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=13)
    diffs = max_abs_difference(after_two, reference_run(parts, GMMProblem(2), settings))
    assert max(diffs.values()) < TOL, diffs
    assert [h["n_active"] for h in after_two["history"]] == [3, 3, 3]
    assert all(h["reply_bytes"] > 0 for h in after_two["history"][1:])


def test_killed_supernode_round_is_partial(scenario):
    _, _, final = scenario
    assert final["round"] == 3
    before, last = final["history"][2], final["history"][3]
    assert before["n_active"] == 3 and before["failed_partitions"] == [] and not before["partial"]
    assert last["n_active"] == 2 and last["failed_partitions"] == [2] and last["partial"]
    # the lost node changed neither V nor the V_i mirror: V = sum_i w_i V_i still holds
    np.testing.assert_allclose(final["v"], np.array(final["weights"]) @ np.array(final["v_clients"]),
                               rtol=0, atol=1e-13)
