"""Private FedEM with Flower's SecAgg+ (issue 14): in-process nodes through LocalGrid.

The ServerApp side is :class:`PrivateFedEMStrategy` driving Flower's own
``SecAggPlusWorkflow``; the nodes are the production private ClientApp with Flower's
``secaggplus_mod``. LocalGrid delivers copies of the messages, as a transport would.

* With the nodes' noise keys set to the in-process run's entropy, the Flower run equals
  :func:`private_reference_run` (the engine's ``mode="distributed"``) to ≤ 1e-8: the shares
  are on SecAgg+'s grid, which its quantiser maps to integers exactly.
* The server never holds a node's share: every reply that reaches it carries no array and
  masked integers that do not match the node's quantised share, and the legacy strategy
  the workflow drives sees only the aggregate.
* Without a given key each node draws its own secret: the server cannot reproduce the noise.
"""
import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")

from flwr.app import Context, RecordDict  # noqa: E402
from flwr.common import bytes_to_ndarray  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: E402

from fedemstats import DPConfig  # noqa: E402
from fedemstats.algorithms.private_stats import public_model  # noqa: E402
from fedemstats.flower import (FedEMSettings, GMMProblem, PrivateFedEMStrategy,  # noqa: E402
                               make_private_client_app)
from fedemstats.flower import private_client, secagg  # noqa: E402
from fedemstats.flower.private_strategy import privacy_from_run_config  # noqa: E402
from fedemstats.flower.reference import private_reference_run  # noqa: E402
from fedemstats.flower.testing import LocalGrid, write_partitions  # noqa: E402

N_NODES, TOL = 5, 1e-8
PRIVACY = DPConfig(epsilon=4.0, mode="distributed", scale=3.0)


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    folder = tmp_path_factory.mktemp("secagg")
    return folder, write_partitions(folder, N_NODES, rows=60, dim=3, n_components=2, seed=3)


def _run(folder, settings, privacy=PRIVACY, key=None):
    extra = {} if key is None else {private_client.NOISE_KEY: int(key)}
    grid = LocalGrid(make_private_client_app(GMMProblem),
                     [{"partition-id": i, "data-dir": str(folder), **extra} for i in range(N_NODES)])
    strategy = PrivateFedEMStrategy(GMMProblem(2), settings, privacy)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    return strategy.start(grid, context), grid


@pytest.mark.parametrize("participation", [1.0, 3])
def test_flower_secagg_run_equals_the_in_process_distributed_run(partitions, participation):
    folder, parts = partitions
    settings = FedEMSettings(n_rounds=3, seed=11, participation=participation, min_nodes=N_NODES, node_wait=5.0)
    reference = private_reference_run(parts, GMMProblem(2), settings, PRIVACY)
    result, _ = _run(folder, settings, key=reference.state.extra["dp"]["entropy"])
    assert result["round"] == 3
    assert result["privacy"]["count"] == reference.state.extra["dp"]["count"]
    diff = float(np.max(np.abs(np.array(result["s_hat"]) - reference.state.s_hat)))
    assert diff < TOL * max(1.0, float(np.max(np.abs(reference.state.s_hat)))), diff
    model = public_model(GMMProblem(2).build_model(3, np.zeros(3)), PRIVACY)
    for name, value in model.params_to_dict(model.t_map(reference.state.s_hat)).items():
        np.testing.assert_allclose(result["theta"][name], value, rtol=0, atol=TOL)
    # the accountant's ε after each release is the engine's
    np.testing.assert_allclose([h["epsilon"] for h in result["history"]], reference.history["epsilon"], rtol=1e-12)
    assert [h["n_active"] for h in result["history"][1:]] == list(reference.history["n_active"][1:])


def test_the_server_never_holds_a_node_share(partitions, monkeypatch):
    """Record each node's true share (node side) and everything that reaches the server."""
    folder, _ = partitions
    shares, aggregates, replies = {}, [], []
    real_shares = private_client.stats_shares

    def recording_shares(model, federation, theta, clients, streams_of, config, geometry, release, key):
        out = real_shares(model, federation, theta, clients, streams_of, config, geometry, release, key)
        shares[(release.stream, int(streams_of[0]))] = (out[0].copy(), release.grid)
        return out
    monkeypatch.setattr(private_client, "stats_shares", recording_shares)
    real_aggregate = secagg._OneSum.aggregate_fit

    def recording_aggregate(self, server_round, results, failures):
        aggregates.append([list(r.parameters.tensors) for _, r in results])
        return real_aggregate(self, server_round, results, failures)
    monkeypatch.setattr(secagg._OneSum, "aggregate_fit", recording_aggregate)
    real_send = LocalGrid.send_and_receive

    def recording_send(self, messages, *, timeout=None):
        out = real_send(self, messages, timeout=timeout)
        replies.extend(out)
        return out
    monkeypatch.setattr(LocalGrid, "send_and_receive", recording_send)
    _run(folder, FedEMSettings(n_rounds=2, seed=4, min_nodes=N_NODES, node_wait=5.0))

    assert len(shares) == 3 * N_NODES  # round 0 and two rounds, every node
    masked = []
    for reply in replies:
        # no reply carries an array: the mod clears them, only masked integers travel
        assert all(len(record) == 0 for record in reply.content.array_records.values())
        configs = reply.content.config_records.get(RECORD_KEY_CONFIGS)
        if configs is not None and Key.MASKED_PARAMETERS in configs:
            masked.append([bytes_to_ndarray(b) for b in configs[Key.MASKED_PARAMETERS]])
    assert len(masked) == len(shares) + N_NODES  # the count release too
    levels = [np.rint((u + g.clip_range) / g.step).astype(np.int64) for u, g in shares.values()]
    for vectors in masked:
        vector = vectors[-1].astype(np.int64).ravel() % 2 ** 32
        for own in levels:
            if own.size == vector.size:
                assert np.mean(vector == own) < 0.5, "a masked vector equals a node's quantised share"
    # the strategy sees one aggregate per release, identical in every result
    assert len(aggregates) == 4
    for tensors in aggregates:
        assert all(t == tensors[0] for t in tensors)


def test_nodes_draw_their_own_secret_noise_keys(partitions):
    folder, parts = partitions
    settings = FedEMSettings(n_rounds=1, seed=11, min_nodes=N_NODES, node_wait=5.0)
    reference = private_reference_run(parts, GMMProblem(2), settings, PRIVACY)
    first, grid = _run(folder, settings)
    second, _ = _run(folder, settings)
    gap = float(np.max(np.abs(np.array(first["s_hat"]) - reference.state.s_hat)))
    assert gap > 1e-6 and first["s_hat"] != second["s_hat"]
    keys = [private_client.noise_key(c) for c in grid.contexts.values()]
    assert len(set(keys)) == N_NODES and all(k.bit_length() > 64 for k in keys)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="distributed"):
        PrivateFedEMStrategy(GMMProblem(2), FedEMSettings(), DPConfig(epsilon=1.0))
    cfg = privacy_from_run_config({"dp-epsilon": 2.0, "dp-noise-multiplier": 0.0, "dp-public-count": 0,
                                   "dp-center": 0.0, "dp-scale": 2.0, "dp-level": "client"})
    assert (cfg.epsilon, cfg.noise_multiplier, cfg.public_count, cfg.scale, cfg.level, cfg.mode) == \
        (2.0, None, None, 2.0, "client", "distributed")
    with pytest.raises(ValueError, match="epsilon"):
        privacy_from_run_config({"dp-epsilon": -1.0})
