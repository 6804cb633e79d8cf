"""Tests of the unbiased compressors (SPEC §6).

Monte Carlo checks use a fixed seed and a tolerance of 4 standard errors
computed from the sample itself; the helpers are themselves tested on
deliberately wrong quantisers so that a broken compressor cannot pass.
"""
import math
import struct

import numpy as np
import pytest

from fedemstats.compression import (
    BlockP, Identity, RandK, RandomDithering, make_compressor,
)
from fedemstats.compression._bits import pack_fixed, unpack_fixed

N_MC = 20_000
N_SE = 4.0  # Monte Carlo tolerance in standard errors
# Norms travel as float32 rounded up, so a coordinate with |x_j| = ||x_b|| is kept
# with probability 1 - O(2**-24): no feasible sample sees the miss, and the sample
# mean sits at the float32 norm, a relative 2**-23 above x_j, with zero sample
# variance. That float32 resolution is the smallest bias a Monte Carlo test can see.
FLOAT_SLACK = float(np.finfo(np.float32).eps)
BLOCKS = np.array([0, 3, 10, 18], dtype=np.int64)

COMPRESSORS = {
    "dither-s4-r2": RandomDithering(s=4),
    "dither-s2-inf": RandomDithering(s=2, r=np.inf),
    "dither-s1-elias": RandomDithering(s=1, coding="elias"),
    "dither-s3-block": RandomDithering(s=3, per_block=True),
    "dither-s2-block-inf-elias": RandomDithering(s=2, r=np.inf, per_block=True, coding="elias"),
    "blockp-2": BlockP(p=2),
    "blockp-inf": BlockP(p=np.inf),
    "randk-5": RandK(k=5),
    "randk-5-f32": RandK(k=5, dtype="float32"),
}


def _x(q=18, seed=1):
    rng = np.random.default_rng(seed)
    # blocks of very different scales, signs and an exact zero
    x = rng.normal(size=q) * np.repeat([10.0, 0.1, 1.0], [3, 7, q - 10])
    x[4] = 0.0
    return x


def _draws(comp, x, blocks=None, n=N_MC, seed=0):
    rows = np.broadcast_to(x, (n, x.size))
    return comp.decompress(comp.compress(rows, np.random.default_rng(seed), blocks))


def assert_unbiased(samples, x):
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / math.sqrt(samples.shape[0])
    err = np.abs(mean - x)
    bad = err > N_SE * se + FLOAT_SLACK * np.abs(x)
    assert not bad.any(), f"biased coordinates {np.flatnonzero(bad)}: err {err[bad]}, se {se[bad]}"


def assert_second_moment(samples, x, omega):
    sq = np.sum(samples ** 2, axis=1)
    bound = (1.0 + omega) * np.sum(x ** 2)
    margin = N_SE * sq.std(ddof=1) / math.sqrt(sq.size)
    assert sq.mean() <= bound + margin, f"E||Q||^2 = {sq.mean()} > (1+omega)||x||^2 = {bound} (+{margin})"


# -- the Monte Carlo helpers have power -----------------------------------------
def test_unbiasedness_check_detects_a_biased_quantiser():
    x = _x()
    s, nrm = 4, np.linalg.norm(x)
    u = s * np.abs(x) / nrm
    noise = np.random.default_rng(0).random((N_MC, x.size)) * 1e-3
    biased = np.sign(x) * nrm / s * np.floor(u) + noise  # deterministic rounding: biased
    with pytest.raises(AssertionError, match="biased"):
        assert_unbiased(biased, x)


def test_second_moment_check_detects_a_too_small_omega():
    comp, x = RandomDithering(s=1), np.ones(4)  # tight case: E||Q||^2 = 2||x||^2
    samples = _draws(comp, x)
    assert_second_moment(samples, x, comp.omega(4))
    with pytest.raises(AssertionError):
        assert_second_moment(samples, x, 0.9 * comp.omega(4))


# -- unbiasedness and variance ----------------------------------------------------
@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_unbiased_and_variance_bound(name):
    comp, x = COMPRESSORS[name], _x()
    samples = _draws(comp, x, BLOCKS)
    assert samples.shape == (N_MC, x.size) and samples.dtype == np.float64
    assert_unbiased(samples, x)
    assert_second_moment(samples, x, comp.omega(x.size, BLOCKS))


@pytest.mark.parametrize("comp, x", [
    (RandomDithering(s=1), np.ones(4)),                           # omega = min(1, 2) attained
    (BlockP(p=2), np.ones(9)),                                    # sqrt(d) ||x||^2 attained
    (BlockP(p=np.inf), np.r_[1.0, np.full(8, 0.25)]),             # (1 + sqrt(d))/2 attained
    (RandK(k=3), np.arange(1.0, 10.0)),                           # q/k ||x||^2 always
])
def test_omega_is_attained_in_tight_cases(comp, x):
    samples = _draws(comp, x)
    sq = np.sum(samples ** 2, axis=1)
    expected = (1.0 + comp.omega(x.size)) * np.sum(x ** 2)
    assert abs(sq.mean() - expected) <= N_SE * sq.std(ddof=1) / math.sqrt(sq.size)


def test_omega_formulas():
    assert RandomDithering(s=4, block_size=None).omega(100) == pytest.approx(min(100 / 64, 10 / 4))
    assert RandomDithering(s=4).omega(100) == pytest.approx(min(50 / 64, math.sqrt(50) / 4))  # 2 chunks of 50
    assert RandomDithering(s=1, block_size=None).omega(10_000) == pytest.approx(100.0)
    assert RandomDithering(s=1).omega(10_000) == pytest.approx(min(64 / 4, 8.0))  # chunks of <= 64
    per_block = RandomDithering(s=2, per_block=True)
    assert per_block.omega(18, BLOCKS) == pytest.approx(min(8 / 16, math.sqrt(8) / 2))
    single = RandomDithering(s=2, per_block=False, block_size=None)
    assert single.omega(18, BLOCKS) == pytest.approx(min(18 / 16, math.sqrt(18) / 2))
    assert RandomDithering(s=2).omega(18, BLOCKS) == per_block.omega(18, BLOCKS)  # per-block by default
    assert BlockP(p=2).omega(18, BLOCKS) == pytest.approx(math.sqrt(8) - 1)
    assert BlockP(p=np.inf).omega(16) == pytest.approx((1 + 4) / 2 - 1)
    assert RandK(k=4).omega(20) == pytest.approx(4.0)


# -- bits and wire format ---------------------------------------------------------
def _bitstring_to_bytes(bits):
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))


def _sign(lev):
    return "" if lev == 0 else str(int(lev < 0))


def _reference_rice(levels):
    """Every parameter k in 0..31 tried; the shortest code wins (the smallest k on a tie)."""
    def code(k):
        return format(k, "05b") + "".join(
            "0" * (abs(int(lev)) >> k) + "1" + (format(abs(int(lev)) & ((1 << k) - 1), f"0{k}b") if k else "")
            + _sign(lev) for lev in levels)
    return min((code(k) for k in range(32)), key=len)


def _reference_norm_bytes(norms32, norm_bits):
    """Float32 little endian, or bits 15..30 of each float32 (the sign bit is always 0)."""
    if norm_bits == 32:
        return b"".join(struct.pack("<f", float(v)) for v in norms32)
    words = [int.from_bytes(struct.pack("<f", float(v)), "little") for v in norms32]
    assert all(w % 2 ** 15 == 0 and w < 2 ** 31 for w in words)  # nothing below the 16 bits sent
    return b"".join((w >> 15).to_bytes(2, "little") for w in words)


def _reference_dither_payload(norms32, levels, s, coding, norm_bits):
    if coding == "rice":
        code = _reference_rice(levels)
    elif coding == "elias":
        code = "".join("0" * ((abs(int(lev)) + 1).bit_length() - 1) + format(abs(int(lev)) + 1, "b") + _sign(lev)
                       for lev in levels)
    else:
        code = "".join(format(lev + s, f"0{(2 * s).bit_length()}b") for lev in levels)
    return (_reference_norm_bytes(norms32, norm_bits) + _bitstring_to_bytes(code),
            norm_bits * norms32.size + len(code))


@pytest.mark.parametrize("comp", [RandomDithering(s=3, per_block=False), RandomDithering(s=4, per_block=True),
                                  RandomDithering(s=3, per_block=False, coding="fixed"),
                                  RandomDithering(s=4, per_block=True, coding="fixed"),
                                  RandomDithering(s=4, norm_bits=32), RandomDithering(s=1024, norm_bits=16),
                                  RandomDithering(s=1024), RandomDithering(s=2, coding="elias"),
                                  RandomDithering(s=5, r=np.inf, per_block=True, coding="elias")],
                         ids=repr)
def test_dither_bytes_match_reference_encoder(comp):
    x = np.vstack([_x(), np.zeros(18), _x(seed=7)])
    msg = comp.compress(x, np.random.default_rng(3), BLOCKS)
    y, norms = comp.decompress(msg), msg.arrays["norms"]
    bl = np.asarray(msg.meta["blocks"])
    scale = np.repeat(norms.astype(np.float64), np.diff(bl), axis=1)
    levels = np.rint(np.divide(y * comp.s, scale, out=np.zeros_like(y), where=scale > 0)).astype(int)
    payloads, bits = comp.encode(msg), comp.row_bits(msg)
    for i in range(x.shape[0]):
        ref, ref_bits = _reference_dither_payload(norms[i], levels[i], comp.s, comp.coding, msg.meta["norm_bits"])
        assert payloads[i] == ref and bits[i] == ref_bits


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 32])
def test_fixed_width_packing_matches_reference_and_round_trips(width):
    """The word-at-a-time packer: every width up to 32 bits, rows of any length."""
    codes = np.random.default_rng(width).integers(0, 2 ** width, size=(3, 37))
    packed = pack_fixed(codes, width)
    for row, ref in zip(packed, codes):
        assert row.tobytes() == _bitstring_to_bytes("".join(format(int(c), f"0{width}b") for c in ref))
    np.testing.assert_array_equal(unpack_fixed(packed, 37, width), codes)


def test_blockp_bytes_match_reference_encoder():
    comp, x = BlockP(), _x()
    msg = comp.compress(x, np.random.default_rng(4), BLOCKS)
    y, norms = comp.decompress(msg)[0], msg.arrays["norms"][0]
    syms = np.sign(y).astype(int) % 3  # -1 -> 2
    syms = np.r_[syms, np.zeros(-len(syms) % 5, dtype=int)].reshape(-1, 5)
    ref = norms.astype("<f4").tobytes() + bytes(int(t @ 3 ** np.arange(5)) for t in syms)
    assert comp.encode(msg)[0] == ref
    assert comp.row_bits(msg)[0] == 32 * 3 + 8 * 4


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_encode_decode_round_trip_and_exact_lengths(name):
    comp = COMPRESSORS[name]
    x = np.vstack([_x(seed=s) for s in range(5)] + [np.zeros(18)])
    msg = comp.compress(x, np.random.default_rng(5), BLOCKS)
    payloads = comp.encode(msg)
    assert [len(p) for p in payloads] == [-(-b // 8) for b in comp.row_bits(msg)]
    assert comp.bits(msg) == int(np.sum(comp.row_bits(msg)))
    back = comp.decode(payloads, 18, BLOCKS)
    np.testing.assert_array_equal(comp.decompress(back), comp.decompress(msg))
    assert comp.encode(back) == payloads


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_message_is_compact_and_rebuilds_from_its_encoded_bytes(name):
    comp = COMPRESSORS[name]
    x = np.vstack([_x(seed=s) for s in range(4)])
    msg = comp.compress(x, np.random.default_rng(6), BLOCKS)
    assert all(isinstance(a, np.ndarray) and a.dtype.kind in "uif" for a in msg.arrays.values())
    assert not any(a.dtype == np.float64 and a.shape == x.shape for a in msg.arrays.values())
    back = comp.decode(comp.encode(msg), x.shape[1], BLOCKS)
    np.testing.assert_array_equal(comp.decompress(back), comp.decompress(msg))
    np.testing.assert_array_equal(comp.decompress(msg.rows([2, 0])), comp.decompress(msg)[[2, 0]])


def test_decode_rejects_wrong_payloads():
    comp = RandomDithering(s=4)
    payload = comp.encode(comp.compress(_x(), np.random.default_rng(0)))[0]
    with pytest.raises(ValueError, match="payload length|Rice payload"):
        comp.decode([payload[:-1]], 18)
    with pytest.raises(ValueError, match="payload length"):
        comp.decode([payload + b"\x00"], 18)
    with pytest.raises(ValueError, match="level above s"):
        comp.decode([payload[:2] + b"\xff" * (len(payload) - 2)], 18)  # one 16-bit norm, then ones
    fixed = RandomDithering(s=4, coding="fixed")
    with pytest.raises(ValueError, match="level is outside"):
        fixed.decode([payload[:2] + b"\xff" * 9], 18)  # 4-bit code 15 is level 11 > s
    values = Identity().encode(Identity().compress(_x()))[0]
    for bad in (values[:-1], values + b"\x00" * 8):
        with pytest.raises(ValueError, match="identity payloads must be 144 bytes"):
            Identity().decode([bad], 18)
    with pytest.raises(ValueError, match="rand-k payloads"):
        RandK(k=5).decode([payload], 18)
    with pytest.raises(ValueError, match="block-p"):
        BlockP().decode([b"\x00" * 4 + b"\xff" * 4], 18)


@pytest.mark.parametrize("q", [100, 1000])
def test_dither_s4_saves_tenfold_over_float64(q):
    x = np.random.default_rng(0).normal(size=(3, q))
    dither, ident = RandomDithering(s=4), Identity()
    rng = np.random.default_rng(1)
    assert 10 * dither.bits(dither.compress(x, rng)) <= ident.bits(ident.compress(x, rng))


def test_elias_is_shorter_when_levels_are_mostly_zero():
    x = np.random.default_rng(0).normal(size=(2, 10_000))
    fixed, elias = RandomDithering(s=1, coding="fixed"), RandomDithering(s=1, coding="elias")
    bits_fixed = fixed.bits(fixed.compress(x, np.random.default_rng(1)))
    bits_elias = elias.bits(elias.compress(x, np.random.default_rng(1)))
    assert bits_elias < 0.75 * bits_fixed  # ~0.8% non-zero levels: ~1.03 vs 2 bits


# -- reproducibility, blocks, zeros ------------------------------------------------
@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_same_seed_same_message(name):
    comp, x = COMPRESSORS[name], np.vstack([_x(), _x(seed=3)])
    a = comp.compress(x, np.random.default_rng(42), BLOCKS)
    b = comp.compress(x, np.random.default_rng(42), BLOCKS)
    c = comp.compress(x, np.random.default_rng(43), BLOCKS)
    assert all(np.array_equal(a.arrays[k], b.arrays[k]) for k in a.arrays)
    assert comp.encode(a) == comp.encode(b) != comp.encode(c)


def test_per_block_norms_are_float32_rounded_up():
    x = _x()
    x[0] = float(np.float32(0.1)) + 1e-12  # nearest float32 of this 2-norm lies below it
    for comp, r in [(RandomDithering(s=2, per_block=True, norm_bits=32), 2), (BlockP(p=np.inf), np.inf)]:
        norms = comp.compress(x, np.random.default_rng(0), BLOCKS).arrays["norms"][0]
        exact = [np.linalg.norm(x[a:b], ord=r) for a, b in zip(BLOCKS[:-1], BLOCKS[1:])]
        assert norms.dtype == np.float32 and norms.shape == (3,)
        assert np.all(norms.astype(np.float64) >= exact)
        assert np.all(norms.astype(np.float64) <= np.nextafter(np.float32(exact), np.float32(np.inf)))


@pytest.mark.parametrize("s", [1, 2, 4])
def test_short_norms_are_the_next_16_bit_value_up(s):
    """At s <= 4 a norm travels in 16 bits: the smallest float32 >= the exact norm whose low
    15 bits are zero (found by stepping float32 values up), at most 2**-8 above it."""
    x = _x()
    comp = RandomDithering(s=s)
    msg = comp.compress(x, np.random.default_rng(0), BLOCKS)
    assert msg.meta["norm_bits"] == 16
    norms = msg.arrays["norms"][0]
    for (a, b), sent in zip(zip(BLOCKS[:-1], BLOCKS[1:]), norms):
        exact = np.linalg.norm(x[a:b])
        ref = np.float32(exact)
        while float(ref) < exact or int(ref.view(np.uint32)) % 2 ** 15:
            ref = np.nextafter(ref, np.float32(np.inf))
        assert sent == ref and exact <= float(sent) <= exact * (1 + 2.0 ** -8)
    assert RandomDithering(s=5).compress(x, np.random.default_rng(0)).meta["norm_bits"] == 32


def test_a_norm_with_more_bits_than_sent_is_refused():
    comp = RandomDithering(s=4)
    msg = comp.compress(_x()[None, :], np.random.default_rng(0), BLOCKS)
    msg.arrays["norms"] = np.nextafter(msg.arrays["norms"], np.float32(np.inf))
    with pytest.raises(ValueError, match="16 wire bits"):
        comp.validate(msg, 18, BLOCKS)


def test_per_block_dithering_has_lower_variance_on_unequal_blocks():
    x = _x()  # blocks at scales 10, 0.1, 1
    whole = _draws(RandomDithering(s=2, per_block=False), x, BLOCKS, n=5000)
    blocked = _draws(RandomDithering(s=2, per_block=True), x, BLOCKS, n=5000)
    small = slice(BLOCKS[1], None)  # the 0.1- and 1-scale blocks: no longer swamped by the 10-scale norm
    assert np.sum(blocked.var(axis=0)[small]) < 0.1 * np.sum(whole.var(axis=0)[small])


def test_randk_keeps_exactly_k_distinct_uniform_coordinates():
    comp, q, k = RandK(k=4), 12, 4
    y = comp.decompress(comp.compress(np.ones((N_MC, q)), np.random.default_rng(0)))
    assert np.all(np.count_nonzero(y, axis=1) == k)
    freq = np.count_nonzero(y, axis=0) / N_MC
    se = math.sqrt(k / q * (1 - k / q) / N_MC)
    assert np.all(np.abs(freq - k / q) <= N_SE * se)


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_zero_rows_decode_to_zero(name):
    comp = COMPRESSORS[name]
    x = np.zeros((3, 18))
    x[1, 3:10] = 1.5  # a non-zero row among zero rows: only its blocks may be non-zero
    y = comp.decompress(comp.compress(x, np.random.default_rng(0), BLOCKS))
    assert np.all(y[[0, 2]] == 0) and np.all(np.isfinite(y))
    assert comp(np.zeros(18), np.random.default_rng(0), BLOCKS).shape == (18,)


# -- parameters and specs ------------------------------------------------------------
@pytest.mark.parametrize("factory, match", [
    (lambda: RandomDithering(s=0), "s=0"), (lambda: RandomDithering(s=2.5), "s=2.5"),
    (lambda: RandomDithering(s=2, r=1), "r=1"), (lambda: RandomDithering(coding="huffman"), "coding"),
    (lambda: RandomDithering(per_block="yes"), "per_block"), (lambda: BlockP(p=1), "p=1"),
    (lambda: RandomDithering(norm_bits=8), "norm_bits"), (lambda: RandomDithering(norm_bits=True), "norm_bits"),
    (lambda: RandK(k=0), "k=0"), (lambda: RandK(k=3, dtype="float16"), "dtype"),
    (lambda: RandK(k=20).compress(np.ones(10), np.random.default_rng(0)), "k=20.*q=10"),
    (lambda: RandomDithering(per_block=True).compress(np.ones(10), None, [0, 4, 9]), "blocks"),
    (lambda: RandomDithering().compress(np.array([1.0, np.nan]), np.random.default_rng(0)), "NaN"),
])
def test_bad_parameters_raise(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


@pytest.mark.parametrize("spec, cls, attrs", [
    ("dither:s=4", RandomDithering, {"s": 4, "r": 2.0, "per_block": True, "coding": "rice"}),
    ("dither:s=4,per_block=false", RandomDithering, {"per_block": False}),
    ("dither:s=4,r=inf", RandomDithering, {"s": 4, "r": np.inf}),
    ("dither:s=2,per_block=true,coding=elias", RandomDithering, {"per_block": True, "coding": "elias"}),
    ("dither:s=4,coding=fixed,norm_bits=32", RandomDithering, {"coding": "fixed", "norm_bits": 32}),
    ("blockp:p=2", BlockP, {"p": 2.0}), ("blockp:p=inf", BlockP, {"p": np.inf}),
    ("randk:k=10", RandK, {"k": 10, "dtype": "float64"}),
])
def test_spec_parsing(spec, cls, attrs):
    comp = make_compressor(spec)
    assert type(comp) is cls
    assert {k: getattr(comp, k) for k in attrs} == attrs


@pytest.mark.parametrize("spec", ["dither:s=0", "dither:t=3", "dither:coding=rle", "dither:norm_bits=24", "blockp:p=3",
                                  "randk:k=-1", "randk"])
def test_bad_specs_raise(spec):
    with pytest.raises(ValueError):
        make_compressor(spec)


@pytest.mark.parametrize("spec", ["dither:s=4", "blockp:p=2", "randk:k=5,dtype=float32", "identity"])
def test_per_row_generators_make_each_row_reproducible_alone(spec):
    """A client quantises with its own stream: compressing all rows together with one
    Generator per row equals compressing each row alone with its Generator (what a
    Flower node does), so in-process and framework runs draw the same noise."""
    comp = make_compressor(spec)
    x = np.random.default_rng(0).normal(size=(4, 30))
    together = comp.decompress(comp.compress(x, [np.random.default_rng(100 + j) for j in range(4)]))
    alone = np.vstack([comp.decompress(comp.compress(x[j:j + 1], [np.random.default_rng(100 + j)]))
                       for j in range(4)])
    np.testing.assert_array_equal(together, alone)
    if spec != "identity":  # identity draws no noise, so it needs no generator at all
        with pytest.raises(ValueError, match="one per row"):
            comp.compress(x, [np.random.default_rng(0)])
