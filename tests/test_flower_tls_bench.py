"""Opt-in benchmark: wall time per FedEM round on Flower, insecure vs TLS + SuperNode authentication.

Run with ``FEDEMSTATS_BENCH=1 python -m pytest -s tests/test_flower_tls_bench.py``.
The same small loopback deployment (SuperLink + 3 SuperNodes, GMM d = 2, K = 2,
80-82 rows per node, ``dither:s=4``, full participation) runs ``FEDEMSTATS_BENCH_ROUNDS``
rounds (default 8) once with ``--insecure`` and once secured as documented (TLS +
``--enable-supernode-auth`` with registered node keys), ``FEDEMSTATS_BENCH_REPEATS``
times each (default 1): one after the other, alternating, or with
``FEDEMSTATS_BENCH_PAIRED=1`` both at the same time (on a shared machine whose
background load changes, this gives both the same load). A round's wall time is the time between two
successive writes of the result file by the ServerApp (it writes after every round).
Prints the table (median and range of rounds 2..R; round 1 also waits for the first
ClientApp launches) and writes it as JSON next to the logs. After each run, the
idle SuperLink also answers plain requests, timed on a kept-alive connection and on a
new connection each (TCP + TLS handshake): the per-request price of TLS, without
Flower's 3 s polling and the ClientApp process launches that dominate a round.
"""
import json
import os
import ssl
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")
httpx = pytest.importorskip("httpx")  # a Flower dependency

from _flower_cluster import Cluster, tools_installed, wait_result  # noqa: E402
from fedemstats.flower.testing import write_partitions  # noqa: E402

N_NODES = 3
ROUNDS = int(os.environ.get("FEDEMSTATS_BENCH_ROUNDS", "8"))
REPEATS = int(os.environ.get("FEDEMSTATS_BENCH_REPEATS", "1"))
PAIRED = os.environ.get("FEDEMSTATS_BENCH_PAIRED") == "1"
RUN_CONFIG = {"compressor": "dither:s=4", "participation": 1.0, "step-size": 0.5, "seed": 13,
              "min-nodes": N_NODES, "round-timeout": 60.0, "node-wait": 90.0, "n-components": 2}

pytestmark = [
    pytest.mark.skipif(os.environ.get("FEDEMSTATS_BENCH") != "1", reason="benchmark: set FEDEMSTATS_BENCH=1"),
    pytest.mark.skipif(not tools_installed(), reason="Flower command-line tools not installed"),
]


def _request_latency(cluster, n_keepalive=200, n_new=50):
    """Median seconds of one HTTP(S) request to the idle SuperLink: on a kept-alive
    connection, and on a new connection each time (TCP + TLS handshake)."""
    verify = ssl.create_default_context(cafile=str(cluster.tls.ca_cert)) if cluster.secure else False
    url = f"{'https' if cluster.secure else 'http'}://{cluster.address}/"  # 404: transport and HTTP only

    def timed(client):
        t = time.perf_counter()
        client.get(url)
        return time.perf_counter() - t

    with httpx.Client(verify=verify) as client:
        timed(client)  # open the connection
        keepalive = statistics.median(timed(client) for _ in range(n_keepalive))
    fresh = []
    for _ in range(n_new):
        with httpx.Client(verify=verify) as client:
            fresh.append(timed(client))
    return {"keepalive": keepalive, "new_connection": statistics.median(fresh)}


def _one_run(root, data, secure):
    """Seconds: set-up (SuperLink start to run submitted), each round 1..ROUNDS, request latencies."""
    c = Cluster(root, data, secure=secure)
    writes = {}
    try:
        t0 = time.monotonic()
        c.start(N_NODES)
        c.flwr_run(**RUN_CONFIG, **{"num-rounds": ROUNDS, "output": str(root / "result.json")})
        submitted = time.monotonic()
        result = wait_result(root / "result.json", ROUNDS, c, timeout=60.0 * (ROUNDS + 2),
                             on_round=lambda r, ns: writes.setdefault(r, ns))
        time.sleep(5.0)  # let the ServerApp and ClientApps finish: measure on an idle SuperLink
        latency = _request_latency(c)
    except BaseException:
        print(c.log_tail(40))
        raise
    finally:
        c.stop()
    assert result["partitions"] == list(range(N_NODES))
    assert sorted(writes) == list(range(ROUNDS + 1)), f"a round was missed by the poll: {sorted(writes)}"
    rounds = [(writes[r] - writes[r - 1]) / 1e9 for r in range(1, ROUNDS + 1)]
    return {"setup": submitted - t0, "rounds": rounds, **latency}


def test_tls_overhead_per_round(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_partitions(data, N_NODES, rows=80, dim=2, n_components=2, seed=4)
    runs = {"insecure": [], "TLS + auth": []}
    for rep in range(REPEATS):
        roots = {}
        for label, secure in (("insecure", False), ("TLS + auth", True)):
            roots[label] = tmp_path / f"{'secure' if secure else 'insecure'}-{rep}"
            roots[label].mkdir()
        if PAIRED:  # both deployments at once: the same background load for both
            with ThreadPoolExecutor(2) as pool:
                futures = {label: pool.submit(_one_run, roots[label], data, label != "insecure") for label in runs}
                for label, future in futures.items():
                    runs[label].append(future.result())
        else:  # one after the other, alternating
            for label in runs:
                runs[label].append(_one_run(roots[label], data, label != "insecure"))
    table = {}
    for label, reps in runs.items():
        later = [t for run in reps for t in run["rounds"][1:]]
        table[label] = {"median": statistics.median(later), "min": min(later), "max": max(later),
                        "round1": statistics.median(run["rounds"][0] for run in reps),
                        "setup": statistics.median(run["setup"] for run in reps), "n": len(later),
                        "keepalive_ms": 1e3 * statistics.median(run["keepalive"] for run in reps),
                        "new_connection_ms": 1e3 * statistics.median(run["new_connection"] for run in reps)}
    (tmp_path / "bench.json").write_text(json.dumps({"runs": runs, "table": table}, indent=1))
    how = "both at once" if PAIRED else "one after the other"
    print(f"\nper-round wall time, {N_NODES} SuperNodes, {ROUNDS} rounds x {REPEATS} run(s) each, {how} (seconds)")
    print(f"{'deployment':<12} {'median r2..':>11} {'min':>6} {'max':>6} {'round 1':>8} {'set-up':>7} "
          f"{'req ms':>7} {'new conn ms':>11}")
    for label, row in table.items():
        print(f"{label:<12} {row['median']:>11.2f} {row['min']:>6.2f} {row['max']:>6.2f} {row['round1']:>8.2f} "
              f"{row['setup']:>7.2f} {row['keepalive_ms']:>7.2f} {row['new_connection_ms']:>11.2f}")
    extra = table["TLS + auth"]["median"] - table["insecure"]["median"]
    print(f"TLS + auth adds {extra:+.2f} s per round (median); results in {tmp_path / 'bench.json'}")
