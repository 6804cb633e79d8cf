"""A real, secured Flower deployment on 127.0.0.1: flower-superlink, SuperNodes, `flwr run`.

The deployment is the documented one (docs/flower.md): TLS with a CA and server
certificate generated here, and SuperNode authentication (`--enable-supernode-auth`;
node keys registered with `flwr supernode register`). One module-scoped scenario
starts a SuperLink and 3 registered SuperNodes on free loopback ports with a
temporary FLWR_HOME (telemetry and runtime dependency installation off), plus two
SuperNodes that must be refused: one whose key is not registered ("intruder") and
one that speaks plain HTTP ("plaintext"; it has no key, as Flower refuses to sign
requests over an insecure channel). It runs the example app, kills one registered
SuperNode mid-run, and stops every process it started (by process group, in
``finally``), pass or fail. The tests check equivalence with the in-process engine
(rounds 1-2), the partial round after the kill (round 3), and that the refused
nodes never took part.
"""
import re
import socket
import ssl
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")

from cryptography.hazmat.primitives import serialization  # noqa: E402  (a Flower dependency)

from _flower_cluster import Cluster, tools_installed, wait_result  # noqa: E402
from fedemstats.flower import FedEMSettings, GMMProblem  # noqa: E402
from fedemstats.flower.reference import max_abs_difference, reference_run  # noqa: E402
from fedemstats.flower.testing import write_partitions  # noqa: E402

N_NODES = 3
TOL = 1e-10
#: bounded wait for a round (seconds); the whole module stays under the 3-minute budget
RUN_TIMEOUT = 150.0
REGISTERED = [f"node{i}" for i in range(N_NODES)]
REFUSED = ("intruder", "plaintext")

pytestmark = pytest.mark.skipif(not tools_installed(),
                                reason="Flower command-line tools not installed (pip install 'fedemstats[flower]')")

#: run config of the scenario (keys of [tool.flwr.app.config] in examples/flower_gmm)
RUN_CONFIG = {"num-rounds": 3, "compressor": "dither:s=4", "participation": 1.0, "step-size": 0.5,
              "seed": 13, "min-nodes": N_NODES, "round-timeout": 30.0, "node-wait": 90.0, "n-components": 2}


def _tls_handshake(cluster):
    """Protocol version of a TLS handshake with the SuperLink, verified against the test CA for 127.0.0.1."""
    context = ssl.create_default_context(cafile=str(cluster.tls.ca_cert))
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return tls.version()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """One secured deployment, one `flwr run` of 3 full-participation rounds; node2 is killed
    once round 2 is recorded. The two refused SuperNodes start with the registered ones and
    would serve partition 3."""
    root = tmp_path_factory.mktemp("deployment")
    data = root / "data"
    data.mkdir()
    parts = write_partitions(data, N_NODES + 1, rows=80, dim=2, n_components=2, seed=4)
    out = root / "result.json"
    c = Cluster(root, data, secure=True)
    try:
        c.start_superlink()
        for name in (*REGISTERED, "intruder"):
            c.make_keys(name)
        ids = c.register(REGISTERED)  # the intruder's key is never registered
        for i, name in enumerate(REGISTERED):
            c.start_node(name, i)
        c.start_node("intruder", N_NODES)
        c.start_node("plaintext", N_NODES, plaintext=True)
        tls_version = _tls_handshake(c)
        c.flwr_run(**RUN_CONFIG, output=str(out))
        after_two = wait_result(out, 2, c, RUN_TIMEOUT)
        c.kill("node2")  # partition 2 dies between round 2 and round 3
        nodes = c.nodes()  # while round 3 waits for node2's reply
        final = wait_result(out, 3, c, RUN_TIMEOUT)
        exits = {name: c.wait_exit(name) for name in REFUSED}
    except BaseException:
        print(c.log_tail(40))  # shown by pytest with the set-up error
        raise
    finally:
        c.stop()
    return SimpleNamespace(parts=parts, after_two=after_two, final=final, ids=ids, nodes=nodes, exits=exits,
                           tls_version=tls_version, cluster=c)


def test_deployment_equals_in_process_engine(scenario):
    after_two = scenario.after_two
    settings = FedEMSettings(n_rounds=2, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=13)
    diffs = max_abs_difference(after_two, reference_run(scenario.parts[:N_NODES], GMMProblem(2), settings))
    assert max(diffs.values()) < TOL, diffs
    assert [h["n_active"] for h in after_two["history"]] == [3, 3, 3]
    assert all(h["reply_bytes"] > 0 for h in after_two["history"][1:])


def test_killed_supernode_round_is_partial(scenario):
    final = scenario.final
    assert final["round"] == 3
    before, last = final["history"][2], final["history"][3]
    assert before["n_active"] == 3 and before["failed_partitions"] == [] and not before["partial"]
    assert last["n_active"] == 2 and last["failed_partitions"] == [2] and last["partial"]
    # the lost node changed neither V nor the V_i mirror: V = sum_i w_i V_i still holds
    np.testing.assert_allclose(final["v"], np.array(final["weights"]) @ np.array(final["v_clients"]),
                               rtol=0, atol=1e-13)


def _took_part(log):
    return "Receiving:" in log or "[RUN " in log


def test_unregistered_supernode_is_refused(scenario):
    """The intruder's key is not registered: the SuperLink refuses its activation, it exits,
    never receives a message, and its partition never appears; the registered nodes run."""
    c = scenario.cluster
    intruder, superlink = c.log("intruder"), c.log("superlink")
    assert scenario.exits["intruder"] != 0, c.log_tail()
    assert "Failed to activate SuperNode" in intruder, intruder
    assert not _took_part(intruder), intruder
    # the SuperLink names the refused key: the intruder's own (logged as PEM bytes)
    key = serialization.load_ssh_public_key(c.node_keys["intruder"].public_key.read_bytes())
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    refusals = [line for line in superlink.splitlines() if "No SuperNode found with the given public key" in line]
    assert any(repr(pem) in line for line in refusals), superlink[-3000:]
    # the SuperLink knows the registered nodes only (the intruder never got a node id), and
    # only registered nodes served partitions
    assert set(scenario.nodes) == {scenario.ids[n] for n in REGISTERED}, scenario.nodes
    assert all(scenario.nodes[scenario.ids[n]] == "online" for n in REGISTERED[:-1]), scenario.nodes
    for name in REGISTERED:
        log = c.log(name)
        assert f"SuperNode ID: {scenario.ids[name]}" in log and _took_part(log), log[-2000:]
    assert scenario.final["partitions"] == list(range(N_NODES))
    assert all(h["n_active"] <= N_NODES for h in scenario.final["history"])


def test_superlink_accepts_only_tls(scenario):
    """The SuperLink serves TLS only (verified against the generated CA); a node that speaks
    plain HTTP never connects; the run itself went over TLS."""
    c = scenario.cluster
    assert scenario.tls_version in ("TLSv1.2", "TLSv1.3")
    assert re.search(r"running on https://127\.0\.0\.1:\d+", c.log("superlink")), c.log("superlink")[:2000]
    plaintext = c.log("plaintext")
    assert scenario.exits["plaintext"] != 0, c.log_tail()
    assert "Failed to initialize the connection to the SuperLink" in plaintext, plaintext
    assert not _took_part(plaintext), plaintext
