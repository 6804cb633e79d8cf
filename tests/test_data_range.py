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


def test_a_matrix_positive_definite_only_by_round_off_is_repaired():
    """Found by Hypothesis: duplicated columns at 1e13 (variances 1e26, reg_covar 1e-6 lost in the
    sum) gave a covariance whose Cholesky succeeded on round-off alone; standardised, its conditional
    blocks were not positive definite and the imputer failed with numpy's LinAlgError."""
    from fedemstats._linalg import EIG_REL_FLOOR, safe_cholesky
    a = 5.5e26
    A = np.array([[a, a], [a, a * (1.0 + 4.0 * np.finfo(float).eps)]]) + 1e-6 * np.eye(2)
    L, used, repaired = safe_cholesky(A, 1e-6)
    assert repaired
    assert np.linalg.eigvalsh(used).min() >= 0.99 * EIG_REL_FLOOR * a
    well = np.array([[2.0, 0.5], [0.5, 1.0]])
    L, used, repaired = safe_cholesky(well)
    assert not repaired and used is well  # the fast path stays bit-exact


def test_imputer_on_duplicated_columns_at_a_large_scale():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 2)) @ rng.normal(size=(2, 2)) + rng.normal(size=2) * 3
    X[:, -1] = X[:, 0]
    imp = FederatedImputer("gaussian", n_components=2, max_iter=5, random_state=0)
    imp.fit(X * 1e13, groups=np.zeros(2, dtype=int))
    assert np.all(np.isfinite(imp.transform(X * 1e13)))


# ---------------------------------------------------------------------- column names in errors
def _frame(rng, n=40):
    import pandas as pd
    return pd.DataFrame(rng.normal(size=(n, 3)), columns=["height", "weight", "age"])


@pytest.mark.parametrize("make", [lambda: FederatedGaussianMixture(2), lambda: FederatedFactorAnalysis(1),
                                  lambda: FederatedImputer()])
def test_a_frame_s_column_out_of_range_is_named(make):
    rng = np.random.default_rng(0)
    df = _frame(rng)
    df["weight"] *= 10 * MAX_DATA_MAGNITUDE
    with pytest.raises(ValueError, match=r"column\(s\) \['weight'\] of X hold values"):
        make().fit(df)
    df = _frame(rng)
    df["age"] = rng.normal(size=len(df)) * MIN_DATA_SPREAD / 1e3
    with pytest.raises(ValueError, match=r"column\(s\) \['age'\] of X vary by"):
        make().fit(df)
    # an array keeps the indices
    with pytest.raises(ValueError, match=r"column\(s\) \[2\] of X vary by"):
        make().fit(df.to_numpy())


def test_the_imputers_name_a_frame_s_empty_and_negative_columns():
    rng = np.random.default_rng(1)
    df = _frame(rng)
    df["age"] = np.nan
    with pytest.raises(ValueError, match=r"column\(s\) \['age'\] have no observed value"):
        FederatedImputer().fit(df)
    counts = _frame(rng).abs().round()
    counts.loc[3, "weight"] = -2.0
    with pytest.raises(ValueError, match=r"Negative values in data passed to the Poisson model: column\(s\) "
                                         r"\['weight'\] of X \(e\.g\. row 3: -2\.0\)"):
        FederatedImputer(model="poisson", n_components=1).fit(counts)
    counts.loc[3, "weight"] = 2.0
    imputer = FederatedImputer(model="poisson", n_components=1).fit(counts)
    counts.loc[5, "height"] = 0.5
    with pytest.raises(ValueError, match=r"Non-integer values .* column\(s\) \['height'\] of X"):
        imputer.transform(counts)


def test_factor_analysis_names_a_frame_s_heywood_column():
    rng = np.random.default_rng(2)
    df = _frame(rng, n=200)
    df["weight (copy)"] = df["weight"]
    with pytest.warns(UserWarning, match=r"noise variance of feature\(s\) \[[^\]]*'weight[^\]]*\] is at its floor"):
        FederatedFactorAnalysis(1, random_state=0).fit(df)
