"""Reply validation on Flower (issue 13): the validator itself, and a poisoning run.

Faults are injected by the test-only Flower app ``tests/flower_poison_app`` (a Flower
mod on the real ClientApp's ``train`` handler, :mod:`flower_poison.faults`), the same
app the loopback deployment test deploys: the production node and strategy code paths
are the ones deployed.
"""
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")

from flwr.app import ConfigRecord, MetricRecord, RecordDict  # noqa: E402

from fedemstats.compression import make_compressor  # noqa: E402
from fedemstats.flower import FedEMSettings, FedEMStrategy, GMMProblem  # noqa: E402
from fedemstats.flower import protocol as P  # noqa: E402
from fedemstats.flower.records import compressed_to_record, to_array_record  # noqa: E402
from fedemstats.flower.reference import max_abs_difference, reference_run  # noqa: E402
from fedemstats.flower.testing import LocalGrid, write_partitions  # noqa: E402
from fedemstats.flower.validation import (InvalidReply, check_description, check_round_reply,  # noqa: E402
                                          check_stats_reply, over_bound)
from fedemstats.participation import FixedSizeParticipation, WithAbsences  # noqa: E402

# the test app folder holds the one fault-injection module (it is bundled for the deployment too)
sys.path.insert(0, str(Path(__file__).resolve().parent / "flower_poison_app"))
from flower_poison.faults import (INJECTED, RUN_CONFIG_KEY, absent_of, format_faults,  # noqa: E402
                                  parse_faults, poisoned_client_app)

#: equivalence tolerance of the acceptance criteria (never loosened)
TOL = 1e-10
N_PARTS = 10
#: contribution bound of the poisoning test: honest replies of this federation stay within
#: 2 x the round's median norm (measured 1.2-1.9), the blown-up one is 1e6 x
BOUND = 10.0


#: Flower's telemetry off and a temporary FLWR_HOME (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("flower_env")


# ---------------------------------------------------------------------- the validator
Q, BLOCKS = 30, np.array([0, 10, 30])


def _content(comp, message, loglik=-1.5, pid=3, rows=40):
    return RecordDict({P.PAYLOAD: compressed_to_record(comp, message),
                       P.METRICS: MetricRecord({P.PARTITION_ID: pid, "n-rows": rows, "loglik": loglik})})


def _honest(spec, q=Q, blocks=BLOCKS):
    comp = make_compressor(spec)
    return comp, comp.compress(np.random.default_rng(1).normal(size=(1, q)), np.random.default_rng(2), blocks)


def _with_bytes(content, fn):
    """``content`` with its payload's encoded bytes replaced by ``fn(bytes)``."""
    record = content[P.PAYLOAD]
    content[P.PAYLOAD] = ConfigRecord({**dict(record), "bytes": fn(record["bytes"])})
    return content


@pytest.mark.parametrize("spec", ["identity", "dither:s=4", "dither:s=4,coding=fixed", "dither:s=4,coding=elias",
                                  "dither:s=3,r=inf", "dither:s=8",
                                  "blockp:p=2", "randk:k=5"])
def test_honest_reply_is_accepted_and_travels_as_its_encoded_bytes(spec):
    comp, msg = _honest(spec)
    content = _content(comp, msg)
    # what travels is Compressor.encode's row: ceil(bits / 8) bytes, as the ledger counts them
    assert content[P.PAYLOAD]["bytes"] == comp.encode(msg)[0]
    assert len(content[P.PAYLOAD]["bytes"]) == -(-comp.bits(msg) // 8)
    message, loglik = check_round_reply(content, comp, Q, BLOCKS, 3, 40)
    np.testing.assert_array_equal(comp.decompress(message), comp.decompress(msg))
    assert loglik == -1.5


def _at(offset, new):
    """Bytes with ``new`` written at ``offset``."""
    return lambda b: b[:offset] + new + b[offset + len(new):]


#: the first float32 norm's sign bit (little endian: the fourth byte's top bit)
def _negative_first_norm(b):
    return b[:3] + bytes([b[3] | 0x80]) + b[4:]


#: where the level code starts after the norms of BLOCKS' two blocks: 16-bit norms at s <= 4
SHORT_HEAD, FLOAT_HEAD = 2 * 2, 2 * 4

# (compressor, corruption of the encoded bytes, words of the reason)
BAD_PAYLOADS = {
    "nan-short-norm": ("dither:s=4", _at(0, b"\xff\xff"), "NaN"),
    "nan-float-norm": ("dither:s=8", _at(0, b"\xff" * 4), "NaN"),
    "negative-norm": ("dither:s=8", _negative_first_norm, "negative"),
    "inf-value": ("identity", _at(0, np.array([np.inf]).tobytes()), "NaN or inf"),
    "short-fixed": ("dither:s=4,coding=fixed", lambda b: b[:-1], "length"),
    "short-rice": ("dither:s=4", lambda b: b[:-1], "length|Rice"),
    "long-rice": ("dither:s=4", lambda b: b + b"\x00", "length"),
    "long-values": ("identity", lambda b: b + b[:8], "bytes"),
    "odd-values": ("identity", lambda b: b[:-3], "bytes"),
    "level-above-s": ("dither:s=4,coding=fixed", lambda b: b[:SHORT_HEAD] + b"\xff" * (len(b) - SHORT_HEAD),
                      "level"),
    "rice-level-above-s": ("dither:s=4", lambda b: b[:SHORT_HEAD] + b"\xff" * (len(b) - SHORT_HEAD),
                           "level above s"),
    "bad-base3-byte": ("blockp:p=2", lambda b: b[:FLOAT_HEAD] + bytes([250]) * (len(b) - FLOAT_HEAD), "base-3"),
    "truncated-elias": ("dither:s=4,coding=elias", lambda b: b[:SHORT_HEAD + 1], "Elias|length"),
    "nan-randk": ("randk:k=5", _at(8, np.array([np.nan]).tobytes()), "NaN"),
    "inf-norm": ("blockp:p=2", _at(0, np.array([np.inf], dtype="<f4").tobytes()), "NaN or inf"),
    "too-short-for-norms": ("dither:s=4", lambda b: b[:1], "too short|length"),
    "empty": ("randk:k=5", lambda b: b"", "bytes"),
}


@pytest.mark.parametrize("kind", sorted(BAD_PAYLOADS))
def test_bad_payload_is_refused_with_reason(kind):
    spec, corrupt, words = BAD_PAYLOADS[kind]
    comp, msg = _honest(spec)
    content = _with_bytes(_content(comp, msg), corrupt)
    with pytest.raises(InvalidReply, match=words):
        check_round_reply(content, comp, Q, BLOCKS, 3, 40)


def test_bad_envelope_is_refused_with_reason():
    comp, msg = _honest("dither:s=4")
    cases = {
        "partition": (_content(comp, msg, pid=4), "partition 4"),
        "rows": (_content(comp, msg, rows=41), "41 rows"),
        "nan loglik": (_content(comp, msg, loglik=float("nan")), "loglik"),
    }
    no_payload = _content(comp, msg)
    del no_payload[P.PAYLOAD]
    cases["no payload"] = (no_payload, "no 'payload'")
    codec = _content(comp, msg)
    codec[P.PAYLOAD] = ConfigRecord({**dict(codec[P.PAYLOAD]), "codec": "identity"})
    cases["codec"] = (codec, "identity")
    not_bytes = _content(comp, msg)
    not_bytes[P.PAYLOAD] = ConfigRecord({"codec": "dither", "bytes": "text"})
    cases["not bytes"] = (not_bytes, "not bytes")
    for name, (content, words) in cases.items():
        with pytest.raises(InvalidReply, match=words):
            check_round_reply(content, comp, Q, BLOCKS, 3, 40)
    # the server's blocks, not the sender's, decide how the bytes are read: a reply coded for
    # two blocks does not fit three
    with pytest.raises(InvalidReply, match="length"):
        check_round_reply(_content(comp, msg), comp, Q, np.array([0, 10, 20, 30]), 3, 40)


def test_round_zero_and_description_checks():
    stats = RecordDict({P.ARRAYS: to_array_record(stats=np.ones(Q)),
                        P.METRICS: MetricRecord({P.PARTITION_ID: 1, "n-rows": 9, "loglik": -2.0})})
    np.testing.assert_array_equal(check_stats_reply(stats, Q, 1, 9)[0], np.ones(Q))
    for bad, words in ((np.ones(Q - 1), "shape"), (np.full(Q, np.nan), "NaN"),
                       (np.ones(Q, dtype=np.float32), "dtype")):
        stats[P.ARRAYS] = to_array_record(stats=bad)
        with pytest.raises(InvalidReply, match=words):
            check_stats_reply(stats, Q, 1, 9)
    desc = RecordDict({P.ARRAYS: to_array_record(mean=np.zeros(3), scatter=np.eye(3)),
                       P.METRICS: MetricRecord({P.PARTITION_ID: 1, "n-rows": 9})})
    assert check_description(desc, 2)[:2] == (1, 9)
    desc[P.ARRAYS] = to_array_record(mean=np.zeros(3), scatter=np.eye(2))
    with pytest.raises(InvalidReply, match="scatter"):
        check_description(desc, 2)
    desc[P.METRICS] = MetricRecord({P.PARTITION_ID: 1, "n-rows": 1})
    with pytest.raises(InvalidReply, match="1 rows"):
        check_description(desc, 2)
    # pairwise-complete descriptions (missing values): counts are whole numbers in [0, m_i]
    desc[P.METRICS] = MetricRecord({P.PARTITION_ID: 1, "n-rows": 9})
    pairs = {"mean": np.zeros(3), "scatter": np.eye(3), "pair_counts": np.full((3, 3), 7.0),
             "pair_sums": np.zeros((3, 3))}
    desc[P.ARRAYS] = to_array_record(**pairs)
    assert set(check_description(desc, 2, pairwise=True)[2]) == set(pairs)
    with pytest.raises(InvalidReply, match="no array 'pair_counts'"):
        desc[P.ARRAYS] = to_array_record(mean=np.zeros(3), scatter=np.eye(3))
        check_description(desc, 2, pairwise=True)
    for name, bad in (("pair_counts", np.full((3, 3), 10.0)), ("pair_counts", np.full((3, 3), 2.5)),
                      ("pair_counts", np.full((3, 3), -1.0))):
        desc[P.ARRAYS] = to_array_record(**{**pairs, name: bad})
        with pytest.raises(InvalidReply, match=f"{name}' holds values that are not whole numbers in \\[0, 9\\]"):
            check_description(desc, 2, pairwise=True)


def test_contribution_bound():
    norms = {0: 1.0, 1: 1.5, 2: 0.8, 3: 20.0}
    assert set(over_bound(norms, 10.0)) == {3}
    assert over_bound(norms, 0.0) == {}                      # off
    assert over_bound(norms, 20.0) == {}                     # 20 / median 1.25 = 16 < 20
    assert over_bound({0: 1.0, 1: 1e6}, 10.0) == {}          # too few replies to judge
    assert over_bound({0: 0.0, 1: 0.0, 2: 5.0}, 10.0) == {}  # zero median: no scale
    with pytest.raises(ValueError, match="contribution_bound"):
        FedEMSettings(contribution_bound=0.5)
    assert FedEMSettings.from_run_config({"contribution-bound": 10}).contribution_bound == 10.0


def test_with_absences_keeps_design_draws():
    base = FixedSizeParticipation(5)
    wrapped = WithAbsences(base, {1: [2, 3]})
    for round_ in (0, 1):
        a0, p0 = base.sample(round_, 10, np.random.default_rng(round_))
        a1, p1 = wrapped.sample(round_, 10, np.random.default_rng(round_))
        expected = a0 if round_ == 0 else a0[~np.isin(a0, [2, 3])]
        np.testing.assert_array_equal(a1, expected)
        np.testing.assert_array_equal(p1, p0[np.isin(a0, a1)])
    np.testing.assert_array_equal(wrapped.inclusion(10), base.inclusion(10))
    # a round that asks everyone (FedEM's fine start) loses its absent clients too, π = 1
    for round_, expected in [(0, np.arange(10)), (1, np.array([0, 1, 4, 5, 6, 7, 8, 9]))]:
        active, pi = wrapped.everyone(round_, 10)
        np.testing.assert_array_equal(active, expected)
        np.testing.assert_array_equal(pi, np.ones(expected.size))


# ---------------------------------------------------------------------- the poisoning run
#: (Flower round, partition) -> fault; round 1's messages are exactly zero under the
#: mean-field start (Δ_i = 0), so the bound has no median to judge by there
POISON = {(2, 2): "nan", (2, 5): "blow-up", (2, 7): "wrong-length",
          (3, 2): "wrong-length", (3, 5): "nan", (4, 7): "blow-up"}
POISON_SETTINGS = FedEMSettings(n_rounds=5, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=7,
                                contribution_bound=BOUND)


def _poisoned_run(tmp_path, caplog, settings, faults):
    """The in-process run of the deployment test's app: the same ClientApp and the faults in
    its run config (:mod:`flower_poison.faults`)."""
    write = write_partitions(tmp_path, N_PARTS, rows=40, dim=3, n_components=2, seed=3)
    app = poisoned_client_app(GMMProblem)
    grid = LocalGrid(app, [{"partition-id": i, "data-dir": str(tmp_path)} for i in range(N_PARTS)],
                     run_config={RUN_CONFIG_KEY: format_faults(faults)})
    with caplog.at_level(logging.WARNING):
        result = FedEMStrategy(GMMProblem(2), settings).start(grid)
    injected = [r.args[:2] for r in caplog.records if r.msg == INJECTED]
    assert sorted(injected) == sorted(faults)  # every fault was injected, once
    return result, write


def test_poisoned_replies_are_dropped_logged_and_match_absent_clients(tmp_path, caplog):
    result, parts = _poisoned_run(tmp_path, caplog, POISON_SETTINGS, POISON)
    absent = absent_of(POISON)
    rows = result["history"]
    for round_ in range(1, POISON_SETTINGS.n_rounds + 1):
        expected = absent.get(round_, [])
        assert rows[round_]["refused_partitions"] == expected, round_
        assert rows[round_]["failed_partitions"] == expected, round_
        assert rows[round_]["n_active"] == N_PARTS - len(expected)
    refusals = [r.getMessage() for r in caplog.records
                if r.name.startswith("fedemstats.flower") and "refused" in r.getMessage()]
    assert any("partition 2 refused" in m and "NaN" in m for m in refusals), refusals
    assert any("partition 5 refused" in m and "median" in m for m in refusals), refusals
    assert any("partition 7 refused" in m and "length" in m for m in refusals), refusals
    assert len(refusals) == len(POISON)
    reference = reference_run(parts, GMMProblem(2), POISON_SETTINGS, absent=absent)
    diffs = max_abs_difference(result, reference)
    assert max(diffs.values()) < TOL, diffs
    # the refusals changed the run: it is not the run in which everyone counted
    everyone = reference_run(parts, GMMProblem(2), POISON_SETTINGS)
    assert max(max_abs_difference(result, everyone).values()) > 1e3 * TOL
    # V = Σ w_i V_i: no refused q_i reached the server's memory or a mirror
    np.testing.assert_allclose(result["v"], np.array(result["weights"]) @ np.array(result["v_clients"]),
                               rtol=0, atol=1e-13)


def test_blown_up_reply_passes_without_the_bound(tmp_path, caplog):
    # well formed: only the contribution bound can tell it from an honest reply
    faults = {(4, 5): "blow-up"}
    settings = FedEMSettings(n_rounds=4, compressor="dither:s=4", participation=1.0, step_size=0.5, seed=7)
    result, parts = _poisoned_run(tmp_path, caplog, settings, faults)
    assert all(row["refused_partitions"] == [] for row in result["history"])
    reference = reference_run(parts, GMMProblem(2), settings, absent=absent_of(faults))
    assert max(max_abs_difference(result, reference).values()) > 1.0


def test_fault_spec_round_trips_and_rejects_typos():
    assert parse_faults(format_faults(POISON)) == POISON
    assert parse_faults("") == {}
    for bad in ("2:5:nans", "2:5", "two:5:nan"):
        with pytest.raises(ValueError):
            parse_faults(bad)
