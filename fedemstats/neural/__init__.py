"""Neural bridge: FedAvg and friends as hard-EM on NumPy MLPs (SPEC §8)."""
from .baselines import FedDropResult, run_feddrop, run_topk_masks
from .coding import decode_mask, encode_mask
from .fedpm import FedPMResult, run_fedpm
from .fedsparse import FedSparseResult, run_fedsparse
from .hard_em import HardEMResult, local_sgd, run_hard_em
from .mlp import MLP
from .optim import SGD, Adam, Adamax, Optimizer, make_optimizer
from .partition import dirichlet_clients, iid_clients, pathological_clients, split_clients
from .priors import GaussianPrior, LaplacePrior, MixturePrior, Prior, weighted_median
from .result import NeuralResult
from .rounds import TrainingDivergedError

__all__ = [
    "MLP", "SGD", "Adam", "Adamax", "Optimizer", "make_optimizer",
    "Prior", "GaussianPrior", "LaplacePrior", "MixturePrior", "weighted_median",
    "run_hard_em", "local_sgd", "NeuralResult", "HardEMResult", "TrainingDivergedError",
    "split_clients", "iid_clients", "pathological_clients", "dirichlet_clients",
    "run_fedsparse", "run_fedpm", "run_feddrop", "run_topk_masks", "encode_mask", "decode_mask",
    "FedSparseResult", "FedPMResult", "FedDropResult",
]
