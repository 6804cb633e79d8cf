"""Differential privacy for the statistics rounds (issue 14): the configuration, row and
vector clipping, the Gaussian mechanism (central or distributed) and the accountant.

Layer: beside ``compression`` (it knows nothing of models; the algorithms combine them).
See ``docs/privacy.md`` for the threat model and the guarantee.
"""
from .accountant import (ACCOUNTANTS, PrivacyPlan, calibrate_noise_multiplier, dp_event, epsilon_spent,
                         sampling_rate)
from .clipping import clip_rows, clip_vectors
from .config import DPConfig, GEOMETRIES, LEVELS, MODES, check_privacy
from .mechanism import DP_STREAM_TAG, client_noise_generator, gaussian_noise, noise_share_std

__all__ = ["DPConfig", "LEVELS", "MODES", "GEOMETRIES", "check_privacy", "ACCOUNTANTS", "PrivacyPlan", "dp_event",
           "epsilon_spent", "calibrate_noise_multiplier", "sampling_rate", "clip_rows", "clip_vectors",
           "gaussian_noise", "noise_share_std", "client_noise_generator", "DP_STREAM_TAG"]
