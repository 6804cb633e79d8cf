"""Quantisation blocks in a model's geometry (``fedemstats.models._geometry_blocks.split_blocks``).

A layout block is cut into the chunks a model asks for (a mixture: one per component), but no
chunk shorter than ``MIN_BLOCK_SIZE`` coordinates where a statistic can avoid it: a block norm
costs what about 8 coordinates' levels cost. A block still shorter shares its shorter
neighbour's norm if the two hold at most ``MERGE_FACTOR * MIN_BLOCK_SIZE`` coordinates (a
longer union would dilute the short block's precision for a small saving). Not in the Poisson
geometry, which scales rather than whitens, so its blocks differ in scale. Checked on the
layouts of the models themselves (the sizes worked out by hand) and, with Hypothesis, on random
layouts against the rule's promises.
"""
import numpy as np
import pytest
from _geometry_cases import CASES, expected_parts, make_case
from _hypothesis_profiles import profile
from hypothesis import given
from hypothesis import strategies as st

from fedemstats.layout import StatLayout
from fedemstats.models import FactorAnalysisModel, GaussianMissingModel, GaussianMixtureModel
from fedemstats.models._geometry_blocks import MERGE_FACTOR, split_blocks

PROFILE = profile("geometry-blocks", 200, 2000)


def _gmm(K, d, ct):
    model = GaussianMixtureModel(K, d, covariance_type=ct)
    return model.layout, {"sum_x": K, "sum_xx": K if ct in ("full", "diag") else 1}


@pytest.mark.parametrize("layout_parts, expected", [
    # iris, diagonal: resp 3 | sum_x 4 + 4 + 4 | sum_xx 4 + 4 + 4 -> the components' chunks of 4
    # are not cut, and the weights (3) share the means' norm (15 <= 16)
    (_gmm(3, 4, "diag"), [0, 15, 27]),
    # iris, full: the packed second moments keep one chunk of 10 per component
    (_gmm(3, 4, "full"), [0, 15, 25, 35, 45]),
    # 4 components of 4 features: sum_x and sum_xx in 2 chunks of 8 each (the largest divisor of 4)
    (_gmm(4, 4, "diag"), [0, 12, 20, 28, 36]),
    # exactly MIN_BLOCK_SIZE features: every component keeps its chunks; the weights join the first
    (_gmm(3, 8, "diag"), [0, 11, 19, 27, 35, 43, 51]),
    # diabetes (d = 10), diagonal: only the weights move
    (_gmm(3, 10, "diag"), [0, 13, 23, 33, 43, 53, 63]),
    # diamonds (d = 7): the components' means in one chunk of 21; the weights keep their own
    # norm, as 3 + 21 > 16
    (_gmm(3, 7, "diag"), [0, 3, 24, 45]),
    # breast cancer (d = 30): nothing merges
    (_gmm(3, 30, "diag"), [0, 3, 33, 63, 93, 123, 153, 183]),
    # tied: one second-moment block (10 packed), the weights join the means
    (_gmm(3, 4, "tied"), [0, 15, 25]),
    # the Gaussian imputer on iris: sum_x (4) joins sum_xx (10)
    ((GaussianMissingModel(4).layout, {}), [0, 14]),
    # ... on diamonds: 7 + 28 > 16, each keeps its norm
    ((GaussianMissingModel(7).layout, {}), [0, 7, 35]),
    # factor analysis on iris (k = 2): sum_xx 4 | sum_xz 12 | sum_zz 6 -> 4 joins 12; 6 + 16 > 16
    ((FactorAnalysisModel(4, 2).layout, {}), [0, 16, 22]),
    # a short block between two that both fit joins the shorter: 10 | 3 | 12 -> 13 | 12
    ((StatLayout([("a", (10,)), ("b", (3,)), ("c", (12,))]), {}), [0, 13, 25]),
    # factor analysis on diabetes (k = 3): 10 | 40 | 10, nothing short
    ((FactorAnalysisModel(10, 3).layout, {}), [0, 10, 50, 60]),
])
def test_the_models_blocks_worked_out_by_hand(layout_parts, expected):
    layout, parts = layout_parts
    assert split_blocks(layout, parts).tolist() == expected
    assert split_blocks(layout, parts, min_size=1).tolist() == _requested(layout, parts).tolist()


def _requested(layout, parts):
    """The chunks a model asks for (no smallest size): each stored block cut into equal parts."""
    off = layout.offsets
    bounds = [0]
    for b, name in enumerate(layout.names):
        n = parts.get(name, 1)
        bounds += [int(off[b]) + (int(off[b + 1] - off[b]) // n) * (i + 1) for i in range(n)]
    return np.asarray(bounds)


@st.composite
def _layouts(draw):
    n_blocks = draw(st.integers(1, 6))
    chunks = [(draw(st.integers(1, 5)), draw(st.integers(1, 20))) for _ in range(n_blocks)]
    layout = StatLayout([(f"b{i}", (n * c,)) for i, (n, c) in enumerate(chunks)])
    return layout, {f"b{i}": n for i, (n, _) in enumerate(chunks)}


@PROFILE
@given(case=_layouts(), min_size=st.integers(1, 12))
def test_blocks_coarsen_the_requested_chunks_within_the_merge_limit(case, min_size):
    layout, parts = case
    blocks, fine = split_blocks(layout, parts, min_size), _requested(layout, parts)
    limit = MERGE_FACTOR * min_size
    assert blocks.dtype == np.int64 and blocks[0] == 0 and blocks[-1] == layout.size
    assert np.all(np.diff(blocks) > 0)
    assert set(blocks.tolist()) <= set(fine.tolist())          # only coarsens, never cuts anew
    off = layout.offsets.tolist()
    for start, stop in zip(blocks[:-1].tolist(), blocks[1:].tolist()):
        if stop - start <= limit:           # a union of short pieces stays within the limit
            continue
        # a longer block lies inside one statistic, as a whole number of its requested chunks
        b = np.searchsorted(off, start, side="right") - 1
        assert stop <= off[b + 1]
        size, n = off[b + 1] - off[b], parts[layout.names[b]]
        m, rest = divmod(size, stop - start)      # the statistic cut into m equal blocks ...
        assert rest == 0 and n % m == 0           # ... each a whole number of its n chunks
        assert (start - off[b]) % (stop - start) == 0
    sizes = np.diff(blocks)
    for i in np.flatnonzero(sizes < min_size):                 # a short block could join no neighbour
        for j in (i - 1, i + 1):
            if 0 <= j < sizes.size:
                assert sizes[i] + sizes[j] > limit
    if np.all(np.diff(fine) >= min_size):                      # nothing short: nothing merges
        assert blocks.tolist() == fine.tolist()


@pytest.mark.parametrize("name", CASES)
def test_every_geometry_quantises_on_its_models_blocks(name):
    model, _, theta, s_hat = make_case(name)
    G = model.geometry(theta, s_hat)
    if name.startswith("poisson"):
        # scaled, not whitened: the weights and each component's rates keep their own norms
        assert np.array_equal(G.blocks, split_blocks(model.layout, expected_parts(name, model), min_size=1))
        assert np.diff(G.blocks).tolist() == [3] + [model.n_features] * 3
    else:
        assert np.array_equal(G.blocks, split_blocks(model.layout, expected_parts(name, model)))
        assert G.blocks.size < split_blocks(model.layout, expected_parts(name, model), min_size=1).size


def test_bad_parts_are_refused():
    with pytest.raises(ValueError, match="does not split"):
        split_blocks(StatLayout([("a", (10,))]), {"a": 3})
