"""The GMM kernels' vectorised exp and grouped log (issue 15: libm's scalar exp and log
were a third of a full-covariance round): accurate to an ulp, exact zeros below EXP_MIN."""
import numpy as np

from fedemstats.models._vexp import EXP_MIN, LOG_GROUP, exp_shifted, sum_log_norm


def test_exp_shifted_is_within_two_ulp_of_numpy_and_zero_below_the_floor():
    rng = np.random.default_rng(0)
    a = np.concatenate([-rng.random(20_000) * 700.0, -rng.random(1000) * 1e-3, [0.0, -np.inf, EXP_MIN - 1.0,
                                                                                  -1e300, 0.5, 3.0]])
    shift = np.concatenate([rng.normal(size=a.size - 6), np.zeros(6)])
    out, bits = np.empty(a.size), np.empty(a.size, dtype=np.int64)
    exp_shifted(a + shift, shift, a.size, bits, out)
    a = (a + shift) - shift  # the argument the kernel sees, rounded
    ref = np.exp(a)
    ok = (a >= EXP_MIN) & np.isfinite(a)
    ulp = np.abs(out[ok] - ref[ok]) / np.spacing(ref[ok])
    assert ulp.max() <= 2.0, ulp.max()
    assert np.all(out[~ok] == 0.0)
    assert out[a.size - 6] == 1.0  # exp(0) exactly


def test_sum_log_norm_equals_the_sum_of_logs():
    rng = np.random.default_rng(1)
    n = 5 * LOG_GROUP + 3  # a partial last group
    mx, sm = rng.normal(size=n) * 50, 1.0 + rng.random(n) * 99.0  # normalisers in [1, K]
    ref = np.sum(mx) + np.sum(np.log(sm))
    assert abs(sum_log_norm(mx, sm, n) - ref) <= 1e-14 * np.sum(np.abs(mx) + np.log(sm))
    assert sum_log_norm(mx, sm, n - 1) == sum_log_norm(mx[:-1], sm[:-1], n - 1)  # n bounds the rows read


def test_sum_log_norm_from_a_start_row_sums_only_rows_start_to_n():
    # the clients that share a chunk each sum their own rows start <= t < n
    rng = np.random.default_rng(2)
    n = 7 * LOG_GROUP + 5
    mx, sm = rng.normal(size=n) * 50, 1.0 + rng.random(n) * 99.0
    for start in (1, LOG_GROUP - 1, 3 * LOG_GROUP + 2, n - 1):
        ref = np.sum(mx[start:]) + np.sum(np.log(sm[start:]))
        assert abs(sum_log_norm(mx, sm, n, start) - ref) <= 1e-14 * np.sum(np.abs(mx[start:]) + np.log(sm[start:]))
    assert sum_log_norm(mx, sm, 5, 5) == 0.0  # no rows
