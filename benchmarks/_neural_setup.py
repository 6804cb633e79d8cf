"""Shared set-up of the neural-bridge benchmark: MNIST-5k splits, the 2NN, the job pool."""
from __future__ import annotations

import functools
import multiprocessing

import numpy as np
from sklearn.model_selection import train_test_split

from fedemstats.datasets.mnist import load_mnist_5k
from fedemstats.neural import iid_clients, pathological_clients

LAYERS = (784, 200, 200, 10)
N_CLIENTS, C = 100, 0.1
TEST_ROWS = 1000
SEED = 0
# paper 002's non-iid setting has 30 devices (the FedPM "fedpm30" table)
N_DEVICES_PM = 30
JOBS = 2


@functools.lru_cache(maxsize=1)
def data():
    """``({split: [(X_k, y_k), ...]}, (X_test, y_test))``; splits "iid", "non-iid" (2 shards per
    client, N_CLIENTS) and "non-iid-30" (2 shards per device, N_DEVICES_PM)."""
    X, y = load_mnist_5k()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=TEST_ROWS, random_state=SEED, stratify=y)
    splits = {"iid": iid_clients(Xtr, ytr, N_CLIENTS, random_state=SEED),
              "non-iid": pathological_clients(Xtr, ytr, N_CLIENTS, random_state=SEED),
              "non-iid-30": pathological_clients(Xtr, ytr, N_DEVICES_PM, random_state=SEED)}
    return splits, (Xte, yte)


def run_jobs(fn, jobs):
    """``{job: fn(*job)}``, spread over JOBS processes (one BLAS thread each)."""
    with multiprocessing.get_context("fork").Pool(JOBS) as pool:
        return dict(zip(jobs, pool.starmap(fn, jobs)))


def tail(history, key, n=10):
    """Mean of the last ``n`` rounds of ``history[key]``."""
    return float(np.mean(history[key][-n:]))
