"""Expectation-space algorithms: they see a model and a federation, never raw rows."""
from .base import AlgorithmState, FitResult, StepSize, auto_step_size, make_step_size
from .fedem import FedEM, client_update, server_update
from .online import naive_compressed_em, online_em, stochastic_fedem
from .vr_fedem import VRFedEM

__all__ = ["FedEM", "VRFedEM", "client_update", "server_update", "online_em", "stochastic_fedem",
           "naive_compressed_em", "AlgorithmState", "FitResult", "StepSize", "auto_step_size",
           "make_step_size"]
