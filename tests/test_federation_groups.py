"""Client labels that cannot be ordered are refused naming ``groups`` (issue 13, class 3)."""
import numpy as np
import pandas as pd
import pytest

from fedemstats.estimators import FederatedGaussianMixture
from fedemstats.federation import Federation

X = np.arange(24, dtype=np.float64).reshape(12, 2)


@pytest.mark.parametrize("groups, error", [
    (["a"] * 6 + [1] * 6, TypeError),
    (pd.Series(["a"] * 6 + [1] * 6), TypeError),
    (np.array(["a"] * 6 + [2.5] * 6, dtype=object), TypeError),
    (["a"] * 11 + [None], ValueError),
    (pd.Series([1.0] * 6 + [np.nan] * 6), ValueError),
    (np.array([0.0] * 11 + [np.nan]), ValueError),
])
def test_unorderable_labels_name_groups(groups, error):
    with pytest.raises(error, match="groups"):
        Federation.from_groups(X, groups)


def test_the_estimator_passes_the_message_on():
    with pytest.raises(TypeError, match="groups mixes"):
        FederatedGaussianMixture(1, max_iter=2).fit(X, groups=[0] * 6 + ["b"] * 6)


@pytest.mark.parametrize("groups", [[0] * 6 + [1] * 6, [0] * 6 + [1.5] * 6, ["a"] * 6 + ["b"] * 6,
                                    pd.Series([3] * 6 + [2] * 6), [True] * 6 + [2] * 6])
def test_labels_of_one_kind_still_work(groups):
    fed, order, labels = Federation.from_groups(X, groups)
    assert fed.n_clients == 2 and sorted(order.tolist()) == list(range(12))
    assert labels.tolist() == sorted(set(list(groups)))
