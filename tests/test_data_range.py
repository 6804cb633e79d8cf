"""Data float64 cannot hold are refused in terms of the data (fedemstats._validation.check_data_range)."""
import numpy as np
import pytest

from fedemstats._validation import MAX_DATA_MAGNITUDE, MIN_DATA_SPREAD, check_data_range
from fedemstats.estimators import FederatedFactorAnalysis, FederatedGaussianMixture, FederatedImputer

ESTIMATORS = [lambda: FederatedFactorAnalysis(1), lambda: FederatedGaussianMixture(1),
              lambda: FederatedImputer(model="gaussian")]


@pytest.mark.parametrize("make", ESTIMATORS)
def test_all_constant_tiny_data_is_refused_naming_x(make):
    """Found by Hypothesis: a constant column of 1e-156 gave factor analysis a variance scale of
    1e-312 and NaN noise variances ('the iterate diverged')."""
    X = np.full((6, 2), 1e-156)
    with pytest.raises(ValueError, match=r"X is constant .* magnitude"):
        make().fit(X, groups=np.zeros(6, dtype=int))


def test_the_limits_themselves():
    check_data_range(np.full((3, 2), 1.0))                         # constant, ordinary: accepted
    check_data_range(np.full((3, 2), 2.0 * MIN_DATA_SPREAD))       # constant, above the limit
    check_data_range(np.zeros((3, 2)))                             # all zero is its own rescaling
    with pytest.raises(ValueError, match="constant"):
        check_data_range(np.full((3, 2), 0.5 * MIN_DATA_SPREAD))
    with pytest.raises(ValueError, match="vary by at most"):
        check_data_range(np.array([[0.0], [0.5 * MIN_DATA_SPREAD]]))
    with pytest.raises(ValueError, match="magnitude"):
        check_data_range(np.array([[0.0], [2.0 * MAX_DATA_MAGNITUDE]]))
