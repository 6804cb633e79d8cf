"""The trust region of the compression geometry (issue 11 item 2; docs/geometry.md, "Trust region").

``Geometry.step_fraction`` keeps a noisy step from taking a weight or whitened variance below a
fraction (the round's ratio) of its current value: small steps pass whole and the fixed point is
kept; a collapsing step is cut to the largest halving inside; below the ratio's ceiling the search
bisects toward the region's edge; no fraction inside gives 0.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from _geometry_cases import CASES, assert_edge, make_case, raw_min_eigenvalue, shrink_step

from fedemstats.models._geometry import MAX_HALVINGS, REFINE_BISECTIONS, TRUST_RATIO, refinements


@pytest.mark.parametrize("name", CASES)
def test_small_steps_are_accepted_whole(name):
    model, fed, theta, s_hat = make_case(name, em_steps=60)
    G = model.geometry(theta, s_hat)
    assert G.step_fraction(s_hat, model.mean_field(fed, s_hat)) == 1.0   # an EM step near convergence
    # small in the geometry's own units: a thousandth of a unit (whitened) step in every direction
    z = np.random.default_rng(0).standard_normal((1, model.q))
    small = G.inverse(1e-3 * z / np.linalg.norm(z))[0]
    assert G.step_fraction(s_hat, small) == 1.0
    assert G.step_fraction(s_hat, np.zeros(model.q)) == 1.0


# Not "gaussian-missing": since its start shrinks the pairwise correlations to a positive-definite
# matrix, the mean-field steps from it never leave the trust region, so there is no cut to test.
@pytest.mark.parametrize("name", ["gmm-full", "gmm-tied"])
def test_safeguarded_em_reaches_em_fixed_point(name):
    """s <- s + t h(s) with t = step_fraction (cut early on, 1 near the end) converges where EM does:
    the trust region keeps the fixed point."""
    model, fed, theta, s_hat = make_case(name, em_steps=1)
    s_em, s, cuts = s_hat.copy(), s_hat.copy(), 0
    for _ in range(150):
        s_em = s_em + model.mean_field(fed, s_em)
        h = model.mean_field(fed, s)
        t = model.geometry(model.t_map(s), s).step_fraction(s, h)
        cuts += t < 1
        s = s + t * h
    assert cuts > 0 and t == 1.0 and np.linalg.norm(model.mean_field(fed, s)) < 1e-8
    assert np.allclose(s, s_em, atol=1e-7)


@pytest.mark.parametrize("name", CASES)
def test_a_collapsing_step_is_cut_to_the_largest_safe_fraction(name):
    model, _, theta, s_hat = make_case(name, reg=0.0)
    G = model.geometry(theta, s_hat)
    step = -0.9 * shrink_step(name, model, s_hat)  # t = 1 leaves 0.1x, t = 1/2 leaves 0.55x
    t = G.step_fraction(s_hat, step)
    assert t == 0.5
    # s_hat = E_θ[s]: every margin is 1 there, so the region is TRUST_RATIO itself
    np.testing.assert_allclose(np.clip(G.margins(s_hat)[0], None, 1.0), 1.0, rtol=1e-12)
    assert np.all(G.margins(s_hat + t * step)[0] >= TRUST_RATIO)
    assert not np.all(G.margins(s_hat + 2 * t * step)[0] >= TRUST_RATIO)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("rho", [0.5, 1e-3])
def test_margins_measure_how_far_a_step_shrinks_the_model(name, rho):
    """``margins``: 1 at E_θ[s], ρ where a step takes the shrinking margin from 1 to ρ; a single
    vector is one row. ``shrink`` (bench_continuity's ρ) is then ρ, the ratio ``contains`` tests."""
    model, _, theta, s_hat = make_case(name, reg=0.0)
    G = model.geometry(theta, s_hat)
    point = s_hat - (1.0 - rho) * shrink_step(name, model, s_hat)
    np.testing.assert_allclose(G.margins(point).min(), rho, rtol=1e-9)
    np.testing.assert_array_equal(G.margins(point), G.margins(point[None]))
    assert G.margins(np.stack([s_hat, point])).shape[0] == 2
    # ``shrink``: the largest ratio at which the point is inside the region around s_hat
    np.testing.assert_allclose(G.shrink(s_hat, point), rho, rtol=1e-9)
    assert G.contains(s_hat, point - s_hat, 0.99 * rho) and not G.contains(s_hat, point - s_hat, 1.01 * rho)
    assert G.shrink(s_hat, s_hat) == pytest.approx(1.0, rel=1e-12)
    # relative to the start's own margin: from a start at 1/2, the same point is a shrink of 2ρ
    half = s_hat - 0.5 * shrink_step(name, model, s_hat)
    np.testing.assert_allclose(G.shrink(half, point), 2.0 * rho, rtol=1e-9)


@pytest.mark.parametrize("name", CASES)
def test_no_fraction_fits_returns_zero(name):
    model, _, theta, s_hat = make_case(name, reg=0.0)
    G = model.geometry(theta, s_hat)
    assert G.step_fraction(s_hat, -(2.0 ** (MAX_HALVINGS + 1)) * shrink_step(name, model, s_hat)) == 0.0
    assert G.step_fraction(s_hat, np.full(model.q, np.nan)) == 0.0


def test_trust_region_rejects_an_indefinite_covariance_and_accepts_a_valid_one():
    model, _, theta, s_hat = make_case("gmm-full")
    G = model.geometry(theta, s_hat)
    p = model.layout.unpack(s_hat)
    w, V = np.linalg.eigh(theta.covariances[0])
    step_parts = {k: np.zeros_like(v) for k, v in p.items()}
    step_parts["sum_xx"][0] = -2.0 * p["resp"][0] * w[0] * np.outer(V[:, 0], V[:, 0])  # t = 1: eigenvalue -w0
    step = model.layout.pack(step_parts)
    assert raw_min_eigenvalue(model, s_hat + step) < 0
    t = G.step_fraction(s_hat, step)
    assert 0 < t < 1 and t == 0.25    # 1 - 2t >= TRUST_RATIO
    accepted = s_hat + t * step
    assert raw_min_eigenvalue(model, accepted) >= TRUST_RATIO * w[0] * (1 - 1e-6)
    assert model.layout.unpack(accepted)["resp"].min() >= TRUST_RATIO * p["resp"].min()


@pytest.mark.parametrize("name", CASES)
def test_the_search_reaches_the_edge_as_the_ratio_shrinks(name):
    """Below TRUST_RATIO the largest halving inside is bisected toward the region's edge,
    ceil(log2(TRUST_RATIO / r)) times: the slack shrinks with the ratio, so a noiseless step is
    cut only where it must be. step = -2 x shrink: the margin 1 - 2t meets r at t = (1 - r) / 2;
    the halvings give 1/4 at any r (the search of the last release: 1/2 of the edge at r -> 0)."""
    model, _, theta, s_hat = make_case(name, reg=0.0)
    G = model.geometry(theta, s_hat)
    step = -2.0 * shrink_step(name, model, s_hat)
    assert G.step_fraction(s_hat, step) == G.step_fraction(s_hat, step, TRUST_RATIO) == 0.25
    for r in (TRUST_RATIO / 8, 1e-3, TRUST_RATIO * 2.0 ** -REFINE_BISECTIONS, 0.0):
        n = refinements(r)
        assert n == (REFINE_BISECTIONS if r <= TRUST_RATIO * 2.0 ** -REFINE_BISECTIONS
                     else math.ceil(math.log2(TRUST_RATIO / r)))
        t = G.step_fraction(s_hat, step, r)
        assert_edge(t, (1.0 - r) / 2.0, width=0.25 * 2.0 ** -n)
        assert np.all(G.margins(s_hat + t * step)[0] >= r)
    assert refinements(TRUST_RATIO) == refinements(1.0) == refinements(np.nan) == 0


@pytest.mark.parametrize("name", CASES)
def test_contains_is_a_whole_step_inside(name):
    """``contains`` (the broadcast's redraw check and "is Ŝ inside") says exactly whether
    ``step_fraction`` would return 1, at the default ratio and below it, without the search."""
    model, _, theta, s_hat = make_case(name, reg=0.0)
    G = model.geometry(theta, s_hat)
    shrink, rng = shrink_step(name, model, s_hat), np.random.default_rng(0)
    steps = [c * shrink for c in (0.0, -0.5, -0.74, -0.76, -0.9, -2.0)]
    steps += [G.inverse(c * rng.standard_normal((1, model.q)))[0] for c in (1e-3, 0.3, 3.0)]
    steps.append(np.full(model.q, np.nan))
    seen = set()
    for step in steps:
        for r in (TRUST_RATIO, 1e-3):
            whole = G.step_fraction(s_hat, step, r) == 1.0
            assert G.contains(s_hat, step, r) is whole
            seen.add(whole)
    assert seen == {True, False}
