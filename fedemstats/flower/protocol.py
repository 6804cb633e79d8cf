"""Names shared by the ClientApp and the strategy: message types and record keys.

Message types (``<category>.<action>`` as Flower routes them):

``query.describe``
    Server sends the problem's spec; node replies with its partition id, row count and local
    moments (mean and centred scatter; for a problem with missing values, the pairwise-complete
    moments of ``fedemstats.models._pair_moments``), from which the server forms the public
    shift and column scale, the client weights ``m_i / N`` and θ_0. Sent once per node (again
    for a node that (re)appears with a new node id).
``train.stats``
    Round 0 (``fedemstats.algorithms.start``). Server sends θ_0, or Ŝ_0 itself (the
    mean-field pass, which also starts the node's state); node replies with its exact
    local mean statistic s̄_i (uncompressed). In the quantised start (config ``start``)
    the node replies with s̄_i(θ_0) − E_θ0[s] dithered (``upload``; θ_0 comes as its statistics
    in short floats, packed in array ``theta``, their mantissa bits in config ``theta_mantissa``,
    or as it is when those would move it), then, sent θ_0 and
    the dithered broadcast of Ŝ_0 (``mean-field``), with s̄_i(T(Ŝ_0)) − Ŝ_0 dithered; it
    keeps Ŝ_0 and the decoded value as V_{0,i}.
``train``
    One FedEM round: server sends the broadcast updates the node missed (or the
    full Ŝ_k, and V_i to a node that lost its state) and the round config; node
    replies with the compact compressed Δ_i.
"""
from __future__ import annotations

__all__ = [
    "DESCRIBE", "STATS", "ROUND", "CONFIG", "SPEC", "ARRAYS", "PARAMS", "PARAMS_META",
    "PAYLOAD", "METRICS", "PARTITION_ID", "NUM_PARTITIONS", "DATA_PATH", "DATA_DIR",
    "UPDATES", "UPDATES_META", "STATE_ERROR",
]

DESCRIBE = "query.describe"
STATS = "train.stats"
ROUND = "train"

# record names inside a RecordDict
CONFIG = "config"          # ConfigRecord: round, entropy, alpha, client, partition-id, compressor
SPEC = "spec"              # ConfigRecord: the problem's public spec
ARRAYS = "arrays"          # ArrayRecord: shift, column_scale, s_hat, v (instruction) / stats, mean, scatter, ... (reply)
PARAMS = "params"          # ArrayRecord: arrays of θ (train.stats)
PARAMS_META = "params-meta"  # ConfigRecord: scalars and type name of θ
PAYLOAD = "payload"        # ConfigRecord: codec name and encoded bytes of the compressed Δ_i (round 0: the
                           # broadcast of Ŝ_0, or a dithered upload); flower/records.py
METRICS = "metrics"        # MetricRecord: partition-id, n-rows, loglik
UPDATES = "updates"        # ArrayRecord: the float64 steps among the broadcast updates base+1 ... k (flower/updates.py)
UPDATES_META = "updates-meta"  # ConfigRecord: their kinds and the encoded bytes of the compressed steps

#: starts the error of a node whose state does not match the instruction (resynchronise it)
STATE_ERROR = "fedem-state-mismatch"

# node-config / run-config keys
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
DATA_PATH = "data-path"    # node config: this node's CSV file
DATA_DIR = "data-dir"      # run or node config: folder of partition-<id>.csv files
