"""Expectation-space algorithms: they see a model and a federation, never raw rows."""
from .base import Algorithm, AlgorithmRun, AlgorithmState, FitResult
from .fedem import DivergenceError, FedEM, client_update, server_update, weighted_sums
from .history import History
from .online import naive_compressed_em, online_em, stochastic_fedem
from .step_size import StepSize, theory_step_size, make_step_size
from .vr_fedem import VRFedEM

__all__ = ["Algorithm", "AlgorithmRun", "FedEM", "VRFedEM", "DivergenceError", "client_update", "server_update",
           "weighted_sums", "online_em", "stochastic_fedem", "naive_compressed_em", "AlgorithmState", "FitResult",
           "History", "StepSize", "theory_step_size", "make_step_size"]
