"""Command line and problem loop shared by the real-data benchmarks (``bench_real_data.py``, ``bench_bits.py``, ``bench_continuity.py``, ``bench_vr.py``)."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from _real_models import MODELS
from _real_splits import make_splits
from _real_tables import SEED, TABLES, load_table

__all__ = ["parse_real_args", "each_problem"]


def parse_real_args(argv, *, description, results, quick_tables, quick_models, extra=None):
    """Parse ``[--quick] [--only TABLE ...] [--models M ...] [extra ...] [--seed N] [--out PATH]``
    and set up logging.

    ``extra``: ``{flag: add_argument keyword arguments}`` of further selections (bench_bits'
    ``--variants``); like ``--only`` and ``--models``, giving one makes the run partial. A full
    run (no ``--quick``, no selection) writes ``results`` (or ``--out``); any other run writes
    only to ``--out``, if given.

    Returns
    -------
    args : argparse.Namespace
    names, models : list of str
        Tables and models to run.
    out : Path or None
        The results file (None: write none).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: tables {quick_tables}, model {quick_models}; writes no results file")
    parser.add_argument("--only", nargs="+", choices=list(TABLES), metavar="TABLE",
                        help=f"tables to run (of {', '.join(TABLES)})")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), help="models to run")
    selections = [parser.add_argument(flag, **kwargs) for flag, kwargs in (extra or {}).items()]
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results file (default: benchmarks/results/{results.name} for a full run, "
                             "none otherwise)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    names = args.only or (quick_tables if args.quick else list(TABLES))
    models = args.models or (quick_models if args.quick else list(MODELS))
    full = not (args.quick or args.only or args.models or any(getattr(args, a.dest) for a in selections))
    out = args.out or (results if full else None)
    return args, names, models, out


def each_problem(names, models, seed):
    """Yield ``(table, split, config)`` for every table in ``names``, its het and iid splits and
    every model in ``models``, in report order (each table loaded once)."""
    for name in names:
        table = load_table(name, seed=seed)
        for split in make_splits(table, seed=seed).values():
            for model_name in models:
                yield table, split, MODELS[model_name]
