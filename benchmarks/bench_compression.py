"""Throughput of the compressors (SPEC §6) on a dense float64 matrix.

Throughput is input float64 megabytes (1 MB = 1e6 bytes) over seconds, for
``compress`` and for ``decompress``; numba compilation is triggered by a warm-up
call on a small matrix first and reported on its own. Run as a script to print
the table; ``benchmarks/bench_gmm.py`` imports :func:`throughput_table`.
"""
from __future__ import annotations

import time

import numpy as np

from fedemstats.compression import make_compressor

__all__ = ["throughput_table", "main"]

#: warm-up shape: large enough to hit every kernel path, small enough to be free
_WARMUP_SHAPE = (4, 200)
_MB = 1e6


def _specs(q: int) -> list:
    return ["identity", "dither:s=4", "dither:s=4,r=inf", "blockp:p=2", f"randk:k={max(q // 100, 1)}"]


def _best_time(fn, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def throughput_table(n_rows=1000, q=10000, repeats=3, rng=None) -> list:
    """Measure compress / decompress throughput of the standard compressors.

    Parameters
    ----------
    n_rows, q : int
        Shape of the float64 input matrix (standard normal entries).
    repeats : int
        Timed repetitions; the best (minimum) time is kept.
    rng : numpy.random.Generator or int, optional
        Source of the input and of the compressors' randomness.

    Returns
    -------
    list of dict
        One row per compressor with keys ``compressor``, ``compile_s`` (first call
        on a small warm-up input, i.e. numba compilation or cache load),
        ``compress_MBps``, ``decompress_MBps``, ``bits_per_coord`` and ``omega``.
    """
    rng = np.random.default_rng(rng)
    x = rng.normal(size=(n_rows, q))
    warm = rng.normal(size=_WARMUP_SHAPE)
    mb = x.nbytes / _MB
    table = []
    for spec in _specs(q):
        comp = make_compressor(spec)
        t0 = time.perf_counter()
        comp.decompress(comp.compress(warm, rng))
        compile_s = time.perf_counter() - t0
        msg = comp.compress(x, rng)
        t_c = _best_time(lambda: comp.compress(x, rng), repeats)
        t_d = _best_time(lambda: comp.decompress(msg), repeats)
        table.append({
            "compressor": spec, "compile_s": compile_s,
            "compress_MBps": mb / t_c, "decompress_MBps": mb / t_d,
            "bits_per_coord": comp.bits(msg) / x.size, "omega": comp.omega(q),
        })
    return table


def main():
    """Print the throughput table for a 1000 x 10000 float64 matrix."""
    table = throughput_table()
    header = f"{'compressor':<18}{'compile s':>10}{'comp MB/s':>11}{'decomp MB/s':>13}{'bits/coord':>12}{'omega':>9}"
    print(header)
    for row in table:
        print(f"{row['compressor']:<18}{row['compile_s']:>10.3f}{row['compress_MBps']:>11.1f}"
              f"{row['decompress_MBps']:>13.1f}{row['bits_per_coord']:>12.3f}{row['omega']:>9.2f}")


if __name__ == "__main__":
    main()
