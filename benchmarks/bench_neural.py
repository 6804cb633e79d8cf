"""Neural-bridge benchmark on MNIST-5k (SPEC §8; papers 001, 002, 004). Runs outside CI.

    NUMBA_CACHE_DIR=.venv/numba_cache .venv/bin/python benchmarks/bench_neural.py [--only rounds fedpm ...]

``--only`` regenerates the named tables and keeps the others from the results file.
Runs use JOBS worker processes (one BLAS thread each); on 2 cores the tables take about
2.5 (rounds), 20 (fedpm) and 30 (fedpm30) minutes. The shared set-up (data, pool) is in
``_neural_setup.py``; tables 1 and 3 are built in ``_neural_rounds.py`` and ``_neural_fedpm.py``.

Prints five tables and writes them to ``benchmarks/results/neural.md``:

1. FedAvg (E=5, B=10) vs FedSGD (E=1, B=inf): rounds to a test-accuracy target,
   iid and pathological non-iid (2 label shards per client), 100 clients, C=0.1;
   learning rate per method from equal-size grids, 2 seeds; u = E n_k / B sensitivity.
2. FedSparse (low/mid/high lambda0, paper 001 Table 1) vs FedAvg and FedDrop:
   accuracy, sparsity, total bits.
3. FedPM vs FedPM + entropy regulariser (paper 002): bits per parameter and accuracy,
   3 seeds; non-iid lambda chosen from a grid by a stated rule (``fedpm``: the benchmark's
   federation; ``fedpm30``: paper 002's 30-device non-iid setting, also with adam_eps 1e-5).
4. Speed: one local epoch of the 2NN (600 rows, B=10) in NumPy vs PyTorch, one thread each.

Everything is single-threaded (BLAS and torch), for fairness and because the
2-core machine is shared: multi-threaded OpenBLAS on 10 x 784 matrices is
dozens of times slower under contention.
"""
from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np
from _neural_fedpm import table_fedpm
from _neural_rounds import table_rounds
from _neural_setup import LAYERS, SEED, C, data, tail
from threadpoolctl import threadpool_limits

from fedemstats.neural import MLP, SGD, run_hard_em
from fedemstats.neural.baselines import run_feddrop
from fedemstats.neural.fedsparse import run_fedsparse

SPARSE_ROUNDS = 100
LAMBDA0 = {"low": 1e-4, "mid": 1e-3, "high": 1e-2}
RESULTS = pathlib.Path(__file__).parent / "results" / "neural.md"


def table_sparse(splits, test):
    clients, model = splits["iid"], MLP(LAYERS)
    kw = dict(rounds=SPARSE_ROUNDS, client_fraction=C, local_epochs=5, batch_size=10, lr=0.05,
              eval_data=test, random_state=SEED)
    tic = time.perf_counter()
    avg = run_hard_em(model, clients, track_train_loss=False, **kw)
    ref_acc, ref_bits = tail(avg.history, "test_accuracy"), avg.ledger.total
    rows = ["| method | accuracy (last 10) | sparsity | total Mbit | bits vs FedAvg | seconds |",
            "|---|---|---|---|---|---|",
            f"| FedAvg | {ref_acc:.4f} | 0 | {ref_bits / 1e6:.0f} | 1.00 | {time.perf_counter() - tic:.0f} |"]
    tic = time.perf_counter()
    drop = run_feddrop(model, clients, rate=0.25, **kw)
    rows.append(f"| FedDrop (rate 0.25) | {tail(drop.history, 'test_accuracy'):.4f} | - | "
                f"{drop.ledger.total / 1e6:.0f} | {drop.ledger.total / ref_bits:.2f} | "
                f"{time.perf_counter() - tic:.0f} |")
    for name, lam in LAMBDA0.items():
        tic = time.perf_counter()
        res = run_fedsparse(model, clients, lambda0=lam, temperature=0.01, **kw)
        rows.append(f"| FedSparse {name} (lambda0={lam:g}) | {tail(res.history, 'test_accuracy'):.4f} | "
                    f"{res.sparsity:.3f} | {res.ledger.total / 1e6:.0f} | {res.ledger.total / ref_bits:.2f} | "
                    f"{time.perf_counter() - tic:.0f} |")
    return (f"### FedSparse vs FedAvg, iid, {SPARSE_ROUNDS} rounds (E=5, B=10, lr 0.05, float32 wire)\n\n"
            + "\n".join(rows))


def _numpy_epoch(model, w, X, y, rng):
    opt = SGD(lr=0.05)
    order = rng.permutation(len(y))
    for start in range(0, len(y), 10):
        idx = order[start:start + 10]
        _, grad = model.loss_and_grad(w, X[idx], y[idx])
        w = opt.step(w, grad)
    return w


def _torch_epoch_fn(X, y):
    import torch

    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(784, 200), torch.nn.ReLU(), torch.nn.Linear(200, 200),
                              torch.nn.ReLU(), torch.nn.Linear(200, 10)).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    loss_fn = torch.nn.CrossEntropyLoss()

    def epoch():
        order = torch.randperm(len(yt))
        for start in range(0, len(yt), 10):
            idx = order[start:start + 10]
            opt.zero_grad()
            loss_fn(net(Xt[idx]), yt[idx]).backward()
            opt.step()
    return epoch


def _best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return min(times), float(np.median(times))


def table_speed(splits, repeats=15):
    X = np.concatenate([c[0] for c in splits["iid"]])[:600]
    y = np.concatenate([c[1] for c in splits["iid"]])[:600].astype(np.int64)
    model, rng = MLP(LAYERS), np.random.default_rng(SEED)
    w = model.init_params(rng)
    ours = _best_of(lambda: _numpy_epoch(model, w, X, y, rng), repeats)
    rows = ["| implementation (float64, 1 thread) | best s | median s | ratio to torch (best) |", "|---|---|---|---|"]
    try:
        theirs = _best_of(_torch_epoch_fn(X, y), repeats)
    except ImportError:
        print("torch is not installed: skipping the PyTorch row (pip install torch==2.13.0)")
        theirs = None
    ratio = f"{ours[0] / theirs[0]:.2f}" if theirs else "n/a"
    rows.append(f"| fedemstats MLP + SGD | {ours[0]:.4f} | {ours[1]:.4f} | {ratio} |")
    if theirs:
        rows.append(f"| PyTorch nn.Sequential + optim.SGD | {theirs[0]:.4f} | {theirs[1]:.4f} | 1.00 |")
    return "### One local epoch, 2NN, 600 rows, B=10 (60 steps)\n\n" + "\n".join(rows)


SECTIONS = {"speed": "### One local epoch", "rounds": "### Rounds to", "sparse": "### FedSparse vs",
            "fedpm": "### FedPM vs", "fedpm30": "### FedPM, paper 002"}


def _merge(old, new):
    """Replace in the markdown ``old`` the sections regenerated in ``new`` ({name: text}); keep the others."""
    chunks = {}
    for chunk in ("\n" + old).split("\n### ")[1:]:
        text = "### " + chunk.strip()
        name = next((n for n, head in SECTIONS.items() if text.startswith(head)), None)
        if name:
            chunks[name] = text
    chunks.update(new)
    return "\n\n".join(["# Neural bridge benchmark (MNIST-5k: 4,000 train / 1,000 test rows)"]
                         + [chunks[n] for n in SECTIONS if n in chunks]) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(SECTIONS), nargs="*",
                        help="regenerate only these tables; the others are kept from the results file")
    parser.add_argument("--pm-reg-mode", choices=["adam", "decoupled"], default="adam", help="FedPM regulariser mode (the table replaces the FedPM section)")
    args = parser.parse_args()
    splits, test = data()
    tables = {"speed": lambda: table_speed(splits), "rounds": table_rounds,
              "sparse": lambda: table_sparse(splits, test), "fedpm": lambda: table_fedpm("fedpm", args.pm_reg_mode),
              "fedpm30": lambda: table_fedpm("fedpm30", args.pm_reg_mode)}
    new = {}
    with threadpool_limits(limits=1):
        for name, make in tables.items():
            if args.only and name not in args.only:
                continue
            tic = time.perf_counter()
            new[name] = make()
            print(new[name] + f"\n\n({name}: {time.perf_counter() - tic:.0f} s)\n", flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = RESULTS.read_text() if RESULTS.exists() else ""
    RESULTS.write_text(_merge(old, new))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
