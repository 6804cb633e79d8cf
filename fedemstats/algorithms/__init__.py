"""Expectation-space algorithms: they see a model and a federation, never raw rows."""
from .base import AlgorithmState, FitResult, StepSize, auto_step_size, make_step_size
from .fedem import FedEM, client_update, server_update

__all__ = ["FedEM", "client_update", "server_update", "AlgorithmState", "FitResult",
           "StepSize", "auto_step_size", "make_step_size"]
