"""Monte Carlo tests of ``Compressor.noise_estimate`` (issue 12 item 1: the empirical omega).

For every compressor and coding, 20,000 compressions of one x (flat, Gaussian,
heavy-tailed and spiky; one block and the layout's blocks) check, per draw, the
difference d = noise_sq − ||Q(x) − x||²: its mean must be 0 within 4 standard
errors where the estimate is documented unbiased, and not below −4 SE where it is
documented an upper estimate. The signal estimate is checked the same way against
||x||² (unbiased, or a lower estimate). A slack covers the norms' documented round-up:
a few float32 epsilons times ||x||², or 2**-7 ||x||² for dithering's 16-bit norms (at
s = 4, 1-8% of the noise, documented). The checker is itself shown to reject deliberately
wrong estimates.
"""
import math

import numpy as np
import pytest

from fedemstats.compression import BlockP, ClientStreams, Identity, RandK, RandomDithering

N_MC = 20_000
N_SE = 4.0
# the norms' round-up to float32 moves ||x_b||² by < 2 eps(float32) relative (documented) ...
SLACK = 4.0 * float(np.finfo(np.float32).eps)
# ... to 16 bits by < 2 * 2**-8 (RandomDithering's norm_bits=16, documented)
SHORT_NORM_SLACK = 2.0 ** -7
Q = 30
BLOCKS = np.array([0, 7, 20, 30], dtype=np.int64)
UNBIASED, UPPER = "unbiased", "upper"


def _vectors():
    rng = np.random.default_rng(11)
    spiky = 0.01 * rng.normal(size=Q)
    spiky[[3, 12, 25]] = [50.0, -40.0, 45.0]
    return {
        "flat": np.where(rng.random(Q) < 0.5, -1.0, 1.0),
        "gaussian": rng.normal(size=Q),
        "heavy": rng.standard_t(1.5, size=Q),
        "spiky": spiky,
    }


VECTORS = _vectors()
COMPRESSORS = {
    "identity": (Identity(), UNBIASED),
    "identity-f32": (Identity("float32"), UPPER),
    "dither-s4-r2": (RandomDithering(s=4), UNBIASED),
    "dither-s4-r2-float32-norms": (RandomDithering(s=4, norm_bits=32), UNBIASED),
    "dither-s4-r2-global": (RandomDithering(s=4, per_block=False), UNBIASED),
    "dither-s1-r2-elias": (RandomDithering(s=1, coding="elias"), UNBIASED),
    "dither-s4-inf": (RandomDithering(s=4, r=np.inf), UPPER),
    "dither-s2-inf-global-elias": (RandomDithering(s=2, r=np.inf, per_block=False, coding="elias"), UPPER),
    "dither-s1-inf": (RandomDithering(s=1, r=np.inf), UPPER),
    "blockp-2": (BlockP(p=2), UNBIASED),
    "blockp-inf": (BlockP(p=np.inf), UPPER),
    "randk-5": (RandK(k=5), UNBIASED),
    "randk-5-f32": (RandK(k=5, dtype="float32"), UNBIASED),
}


def _estimates(comp, x, blocks, seed=0):
    rows = np.broadcast_to(x, (N_MC, x.size))
    msg = comp.compress(rows, ClientStreams(seed, 1, np.arange(N_MC)), blocks)
    signal, noise = comp.noise_estimate(msg)
    actual = ((comp.decompress(msg) - x) ** 2).sum(axis=1)
    return signal, noise, actual, SHORT_NORM_SLACK if msg.meta.get("norm_bits") == 16 else SLACK


def _check_mean(diff, kind, scale, what, slack):
    """mean(diff) = 0 (unbiased) or >= 0 (kind "upper", "lower" flips the sign), within 4 SE."""
    mean = diff.mean()
    tol = N_SE * diff.std(ddof=1) / math.sqrt(diff.size) + slack * scale
    if kind == UNBIASED:
        assert abs(mean) <= tol, f"{what}: mean error {mean:.4g} beyond {tol:.3g}"
    else:
        sign = 1.0 if kind == UPPER else -1.0
        assert sign * mean >= -tol, f"{what}: {kind} estimate is {mean:.4g} on the wrong side (tol {tol:.3g})"


def check_noise_estimate(signal, noise, actual, x, kind, slack=SLACK):
    """noise_sq against the realised ||Q(x) − x||², signal_sq against ||x||², paired per draw."""
    norm2 = float(x @ x)
    _check_mean(noise - actual, kind, norm2, "noise_sq", slack)
    _check_mean(signal - norm2, kind if kind == UNBIASED else "lower", norm2, "signal_sq", slack)


@pytest.mark.parametrize("vector", sorted(VECTORS))
@pytest.mark.parametrize("name", sorted(COMPRESSORS))
@pytest.mark.parametrize("blocked", [False, True], ids=["one-block", "blocks"])
def test_noise_estimate_is_unbiased_or_documented_upper(name, vector, blocked):
    comp, kind = COMPRESSORS[name]
    x = VECTORS[vector]
    signal, noise, actual, slack = _estimates(comp, x, BLOCKS if blocked else None)
    assert signal.shape == noise.shape == (N_MC,)
    check_noise_estimate(signal, noise, actual, x, kind, slack)


def test_estimates_sum_to_the_decoded_norm():
    """signal_sq + noise_sq = ||q||² for every compressor (the unbiased total)."""
    x = np.broadcast_to(VECTORS["gaussian"], (50, Q))
    for comp, _ in COMPRESSORS.values():
        msg = comp.compress(x, np.random.default_rng(1), BLOCKS)
        signal, noise = comp.noise_estimate(msg)
        np.testing.assert_allclose(signal + noise, (comp.decompress(msg) ** 2).sum(axis=1), rtol=1e-12)


def test_exact_cases():
    """Identity float64 is exact; float32's bound holds row by row and is at most
    2**-48 ||x||²; block-p inf is exact on a flat block and on one spike."""
    x = np.vstack(list(VECTORS.values()))
    signal, noise = Identity().noise_estimate(Identity().compress(x))
    np.testing.assert_allclose(signal, (x ** 2).sum(axis=1), rtol=1e-15)
    assert np.all(noise == 0.0)
    msg = Identity("float32").compress(x)
    _, noise = Identity("float32").noise_estimate(msg)
    actual = ((Identity("float32").decompress(msg) - x) ** 2).sum(axis=1)
    assert np.all(noise >= actual) and np.any(actual > 0.0)
    assert np.all(noise <= 2.0 ** -48 * (x ** 2).sum(axis=1))
    comp = BlockP(p=np.inf)
    for row in (np.ones((1, Q)), np.eye(1, Q, 4) * 3.0):
        _, noise = comp.noise_estimate(comp.compress(row, np.random.default_rng(0)))
        assert noise[0] == 0.0


def test_upper_estimates_are_not_vacuous():
    """On a Gaussian vector the upper estimates stay within 3x the true noise."""
    x = VECTORS["gaussian"]
    for name in ("dither-s4-inf", "dither-s1-inf", "blockp-inf"):
        _, noise, actual, _ = _estimates(COMPRESSORS[name][0], x, BLOCKS)
        assert noise.mean() <= 3.0 * actual.mean(), name


@pytest.mark.parametrize("break_it", ["noise-95%", "randk-wrong-constant", "dither-inf-quarter-weights"])
def test_the_checker_rejects_wrong_estimates(break_it):
    """The checks above would catch a 5% bias, a wrong rand-k constant, and an
    'upper' dithering bound that is not one (g(1) = 1/4 violates sqrt(g0)+sqrt(g1) >= 1)."""
    if break_it == "noise-95%":
        # float32 norms: on blocks of 7-13 at s = 4 the 16-bit norms' documented slack is ~8% of the noise
        comp, kind, x = RandomDithering(s=4, norm_bits=32), UNBIASED, VECTORS["gaussian"]
        signal, noise, actual, slack = _estimates(comp, x, BLOCKS)
        noise = 0.95 * noise
    elif break_it == "randk-wrong-constant":
        comp, kind, x = RandK(k=5), UNBIASED, VECTORS["heavy"]
        signal, noise, actual, slack = _estimates(comp, x, None)
        noise = (Q / 5) * signal
    else:
        comp, kind, x, slack = RandomDithering(s=4, r=np.inf), UPPER, VECTORS["heavy"], SHORT_NORM_SLACK
        rows = np.broadcast_to(x, (N_MC, Q))
        msg = comp.compress(rows, ClientStreams(0, 1, np.arange(N_MC)))
        mag = np.abs(comp._levels(msg))
        noise = np.where(mag >= 1, 0.25, 0.0).sum(axis=1) * (msg.arrays["norms"][:, 0].astype(float) / 4) ** 2
        decoded = comp.decompress(msg)
        actual = ((decoded - x) ** 2).sum(axis=1)
        signal = (decoded ** 2).sum(axis=1) - noise
    with pytest.raises(AssertionError):
        check_noise_estimate(signal, noise, actual, x, kind, slack)
