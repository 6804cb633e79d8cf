"""Neural-bridge benchmark on MNIST-5k (SPEC §8; papers 001, 002, 004). Runs outside CI.

    NUMBA_CACHE_DIR=.venv/numba_cache .venv/bin/python benchmarks/bench_neural.py [--quick]

Prints four tables and writes them to ``benchmarks/results/neural.md``:

1. FedAvg (E=5, B=10) vs FedSGD (E=1, B=inf): rounds to a test-accuracy target,
   iid and pathological non-iid (2 label shards per client), 100 clients, C=0.1.
2. FedSparse (low/mid/high lambda0, paper 001 Table 1) vs FedAvg and FedDrop:
   accuracy, sparsity, total bits.
3. FedPM vs FedPM + entropy regulariser (paper 002): bits per parameter and accuracy.
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
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

from fedemstats.datasets.mnist import load_mnist_5k
from fedemstats.neural import MLP, SGD, iid_clients, pathological_clients, run_hard_em
from fedemstats.neural.baselines import run_feddrop
from fedemstats.neural.fedpm import run_fedpm
from fedemstats.neural.fedsparse import run_fedsparse

LAYERS = (784, 200, 200, 10)
N_CLIENTS, C = 100, 0.1
TEST_ROWS = 1000
SEED = 0
# Rounds-to-target (table 1), two targets from the same runs. 90% is the
# brief's example; 93% is reached iid by FedAvg in ~35 rounds and by FedSGD
# (max 95.5% in 1000 rounds) in the pilot, so both are "reachable by both",
# and a higher target separates the methods more (paper 004 used 97% on full MNIST).
TARGETS = (0.90, 0.93)
CAPS = {"FedAvg": 300, "FedSGD": 1000}
FEDAVG_LR, FEDSGD_LR = 0.2, 0.5  # best of pilot grids: FedAvg {0.1, 0.2}, FedSGD {0.5, 1.0}
SPARSE_ROUNDS = 100
LAMBDA0 = {"low": 1e-4, "mid": 1e-3, "high": 1e-2}
PM_ROUNDS, PM_REG = 40, 3.0  # pilot, 30 rounds iid: reg 2 -> -0.23 bpp, -0.9 pt; reg 6 -> -0.35 bpp, -2.6 pt
RESULTS = pathlib.Path(__file__).parent / "results" / "neural.md"


def _data():
    X, y = load_mnist_5k()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=TEST_ROWS, random_state=SEED, stratify=y)
    splits = {"iid": iid_clients(Xtr, ytr, N_CLIENTS, random_state=SEED),
              "non-iid": pathological_clients(Xtr, ytr, N_CLIENTS, random_state=SEED)}
    return splits, (Xte, yte)


class _Reached(Exception):
    pass


def _rounds_to_targets(model, clients, test, cap, **kw):
    """First round at which the server model reaches each of TARGETS (None: not within ``cap``)."""
    Xte, yte = test
    first = {}

    def check(t, state):
        acc = np.mean(model.forward(state, Xte).argmax(axis=1) == yte)
        for target in TARGETS:
            if acc >= target and target not in first:
                first[target] = t
        if len(first) == len(TARGETS):
            raise _Reached(t)

    tic = time.perf_counter()
    try:
        run_hard_em(model, clients, rounds=cap, client_fraction=C, track_train_loss=False,
                    random_state=SEED, callback=check, **kw)
    except _Reached:
        pass
    return [first.get(target) for target in TARGETS], time.perf_counter() - tic


def table_rounds(splits, test):
    model = MLP(LAYERS)
    rows = ["| split | target | FedSGD (E=1, B=inf) | FedAvg (E=5, B=10) | FedAvg speed-up |",
            "|---|---|---|---|---|"]
    for split, clients in splits.items():
        sgd, t_sgd = _rounds_to_targets(model, clients, test, CAPS["FedSGD"], local_epochs=1,
                                        batch_size=None, lr=FEDSGD_LR)
        avg, t_avg = _rounds_to_targets(model, clients, test, CAPS["FedAvg"], local_epochs=5,
                                        batch_size=10, lr=FEDAVG_LR)
        for target, r_sgd, r_avg in zip(TARGETS, sgd, avg):
            ratio = f"{r_sgd / r_avg:.1f}x" if r_sgd and r_avg else "n/a"
            rows.append(f"| {split} | {target:.0%} | {r_sgd or '>' + str(CAPS['FedSGD'])} | "
                        f"{r_avg or '>' + str(CAPS['FedAvg'])} | {ratio} |")
        rows.append(f"| {split} | wall time | {t_sgd:.0f} s | {t_avg:.0f} s | |")
    return ("### Rounds to a test accuracy (MNIST-5k, 2NN 200-200, K=100, C=0.1; "
            f"lr FedSGD {FEDSGD_LR}, FedAvg {FEDAVG_LR})\n\n" + "\n".join(rows)
            + "\n\nPaper 004, 2NN, 97% target, C=0.1 (full MNIST, 600 rows/client): FedSGD 1468 rounds iid / 1817 non-iid; "
              "FedAvg E=1, B=10 (u=60 updates/round) 92 (16.0x) / 831 (2.2x); E=10, B=10 (u=600) 34 (43.2x) / 497 (3.7x). "
              "Here u = E n_k / B = 5 x 40 / 10 = 20.")


def _tail(history, key, n=10):
    return float(np.mean(history[key][-n:]))


def table_sparse(splits, test):
    clients, model = splits["iid"], MLP(LAYERS)
    kw = dict(rounds=SPARSE_ROUNDS, client_fraction=C, local_epochs=5, batch_size=10, lr=0.05,
              eval_data=test, random_state=SEED)
    tic = time.perf_counter()
    avg = run_hard_em(model, clients, track_train_loss=False, **kw)
    ref_acc, ref_bits = _tail(avg.history, "test_accuracy"), avg.ledger.total
    rows = ["| method | accuracy (last 10) | sparsity | total Mbit | bits vs FedAvg | seconds |",
            "|---|---|---|---|---|---|",
            f"| FedAvg | {ref_acc:.4f} | 0 | {ref_bits / 1e6:.0f} | 1.00 | {time.perf_counter() - tic:.0f} |"]
    tic = time.perf_counter()
    drop = run_feddrop(model, clients, rate=0.25, **kw)
    rows.append(f"| FedDrop (rate 0.25) | {_tail(drop.history, 'test_accuracy'):.4f} | - | "
                f"{drop.ledger.total / 1e6:.0f} | {drop.ledger.total / ref_bits:.2f} | "
                f"{time.perf_counter() - tic:.0f} |")
    for name, lam in LAMBDA0.items():
        tic = time.perf_counter()
        res = run_fedsparse(model, clients, lambda0=lam, temperature=0.01, **kw)
        rows.append(f"| FedSparse {name} (lambda0={lam:g}) | {_tail(res.history, 'test_accuracy'):.4f} | "
                    f"{res.sparsity:.3f} | {res.ledger.total / 1e6:.0f} | {res.ledger.total / ref_bits:.2f} | "
                    f"{time.perf_counter() - tic:.0f} |")
    return (f"### FedSparse vs FedAvg, iid, {SPARSE_ROUNDS} rounds (E=5, B=10, lr 0.05, float32 wire)\n\n"
            + "\n".join(rows))


def table_fedpm(splits, test):
    model = MLP(LAYERS)
    rows = ["| split | lambda | accuracy (last 10) | bpp coded (last 10) | bpp entropy (last 10) | density | seconds |",
            "|---|---|---|---|---|---|---|"]
    for split, clients in splits.items():
        for reg in (0.0, PM_REG):
            tic = time.perf_counter()
            res = run_fedpm(model, clients, rounds=PM_ROUNDS, client_fraction=C, local_epochs=3, batch_size=10,
                            lr=0.1, reg=reg, eval_data=test, random_state=SEED)
            h = res.history
            rows.append(f"| {split} | {reg:g} | {_tail(h, 'test_accuracy'):.4f} | {_tail(h, 'bpp_coded'):.3f} | "
                        f"{_tail(h, 'bpp_entropy'):.3f} | {h['density'][-1]:.3f} | {time.perf_counter() - tic:.0f} |")
    return f"### FedPM vs FedPM + regulariser ({PM_ROUNDS} rounds, E=3, B=10, Adam lr 0.1 on scores)\n\n" + "\n".join(rows)


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["rounds", "sparse", "fedpm", "speed"], nargs="*")
    args = parser.parse_args()
    splits, test = _data()
    tables = {"speed": lambda: table_speed(splits), "rounds": lambda: table_rounds(splits, test),
              "sparse": lambda: table_sparse(splits, test), "fedpm": lambda: table_fedpm(splits, test)}
    out = ["# Neural bridge benchmark (MNIST-5k: 4,000 train / 1,000 test rows)\n"]
    with threadpool_limits(limits=1):
        for name, make in tables.items():
            if args.only and name not in args.only:
                continue
            tic = time.perf_counter()
            text = make()
            print(text + f"\n\n({name}: {time.perf_counter() - tic:.0f} s)\n", flush=True)
            out.append(text + "\n")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(out))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
