"""Throughput of the compressors (SPEC §6) on a dense float64 matrix, and many clients.

Throughput is input float64 megabytes (1 MB = 1e6 bytes) over seconds, for
``compress`` and for ``decompress``; numba compilation is triggered by a warm-up
call on a small matrix first and reported on its own. ``benchmarks/bench_gmm.py``
imports :func:`throughput_table`.

The "many clients" section (issue 15 item 3) times one round's client-side
randomness + quantisation of 100,000 clients (one row each: GMM K=5, d=10, full
covariances, q = 330 packed or 555 unpacked, the layout's blocks): today's
per-client ``client_round_rng`` Generators against one ``ClientStreams``, both
in the same run, interleaved, keeping the best of ``repeats``.

Run: ``python benchmarks/bench_compression.py [--quick]``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from fedemstats._validation import client_round_rng
from fedemstats.compression import ClientStreams, make_compressor

__all__ = ["throughput_table", "many_clients_table", "main"]

#: warm-up shape: large enough to hit every kernel path, small enough to be free
_WARMUP_SHAPE = (4, 200)
_MB = 1e6
#: GMM K=5, d=10, full covariances: weights, means, second moments (packed / unpacked)
MANY_CLIENT_LAYOUTS = {"packed q=330": (0, 5, 55, 330), "full q=555": (0, 5, 55, 555)}
MANY_CLIENT_SPECS = ("identity", "dither:s=4", "dither:s=4,r=inf", "blockp:p=2", "randk:k=33")
_ENTROPY, _ROUND = 2024, 7


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


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def many_clients_table(n_clients=100_000, repeats=3, rng=None) -> list:
    """Per-round client randomness + quantisation of ``n_clients`` one-row clients.

    Returns
    -------
    list of dict
        One row per (layout, compressor): ``layout``, ``compressor``, ``old_draw_s``
        (building the per-client Generators), ``old_s`` (that + ``compress`` with them),
        ``new_draw_s`` (building the ``ClientStreams``), ``new_s`` (that + ``compress``),
        each the best of ``repeats`` interleaved runs.
    """
    rng = np.random.default_rng(rng)
    clients = np.arange(n_clients)
    table = []
    for layout, bounds in MANY_CLIENT_LAYOUTS.items():
        blocks = np.array(bounds, dtype=np.int64)
        x = rng.normal(size=(n_clients, bounds[-1]))
        comps = [make_compressor(spec) for spec in MANY_CLIENT_SPECS]
        for comp in comps:  # compile / load the kernels of both paths
            comp.compress(x[:4], ClientStreams(_ENTROPY, _ROUND, clients[:4]), blocks)
            comp.compress(x[:4], [client_round_rng(_ENTROPY, _ROUND, i) for i in range(4)], blocks)
        best = {spec: dict.fromkeys(("old_draw_s", "old_s", "new_draw_s", "new_s"), np.inf)
                for spec in MANY_CLIENT_SPECS}
        for _ in range(repeats):
            gens, t_gens = _timed(lambda: [client_round_rng(_ENTROPY, _ROUND, i) for i in clients])
            for spec, comp in zip(MANY_CLIENT_SPECS, comps):
                _, t_old = _timed(lambda: comp.compress(x, gens, blocks))
                streams, t_streams = _timed(lambda: ClientStreams(_ENTROPY, _ROUND, clients))
                _, t_new = _timed(lambda: comp.compress(x, streams, blocks))
                b = best[spec]
                for key, value in (("old_draw_s", t_gens), ("old_s", t_gens + t_old),
                                   ("new_draw_s", t_streams), ("new_s", t_streams + t_new)):
                    b[key] = min(b[key], value)
        table += [{"layout": layout, "compressor": spec, **best[spec]} for spec in MANY_CLIENT_SPECS]
    return table


def main():
    """Print the throughput table (1000 x 10000) and the many-clients table (1e5 clients)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller problems, one repeat")
    args = parser.parse_args()
    scale, repeats = (10, 1) if args.quick else (1, 3)
    table = throughput_table(n_rows=1000 // scale, repeats=repeats)
    header = f"{'compressor':<18}{'compile s':>10}{'comp MB/s':>11}{'decomp MB/s':>13}{'bits/coord':>12}{'omega':>9}"
    print(header)
    for row in table:
        print(f"{row['compressor']:<18}{row['compile_s']:>10.3f}{row['compress_MBps']:>11.1f}"
              f"{row['decompress_MBps']:>13.1f}{row['bits_per_coord']:>12.3f}{row['omega']:>9.2f}")
    n_clients = 100_000 // scale
    print(f"\nmany clients: {n_clients} one-row clients, seconds per round (best of {repeats})")
    print(f"{'layout':<14}{'compressor':<18}{'old draw':>9}{'old total':>10}{'new draw':>9}"
          f"{'new total':>10}{'speed-up':>9}")
    for row in many_clients_table(n_clients, repeats):
        print(f"{row['layout']:<14}{row['compressor']:<18}{row['old_draw_s']:>9.3f}{row['old_s']:>10.3f}"
              f"{row['new_draw_s']:>9.4f}{row['new_s']:>10.3f}{row['old_s'] / row['new_s']:>9.1f}")


if __name__ == "__main__":
    main()
