"""The common result of every neural training run (SPEC §8).

:func:`~.hard_em.run_hard_em`, :func:`~.fedsparse.run_fedsparse`,
:func:`~.fedpm.run_fedpm`, :func:`~.baselines.run_topk_masks` and
:func:`~.baselines.run_feddrop` all return a :class:`NeuralResult`: the final
server model as flat MLP parameters (``params``), its prediction
(``predict_proba``), the per-round ``history`` and the bit ``ledger``. Each
method adds its own state (priors, gates, masks) in a subclass; callers such as
:class:`~fedemstats.estimators.neural.FederatedMLPClassifier` use only this
interface.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..ledger import BitLedger
from .rounds import check_outputs

__all__ = ["NeuralResult"]


@dataclass
class NeuralResult:
    """Outcome of a neural training run.

    Attributes
    ----------
    model : MLP
    history : dict of lists
        One entry per round; the keys depend on the method (``round``,
        ``n_active``, ``uplink_bits``, ``downlink_bits`` and ``seconds`` always).
    ledger : BitLedger
    params : ndarray of shape (n_params,) or (n_components, n_params)
        The final server model (one row per component for a mixture); read-only property.
    """

    model: object
    history: dict
    ledger: BitLedger

    @property
    def params(self) -> np.ndarray:
        """The final server model's flat parameters, shape (n_params,) or (n_components, n_params)."""
        raise NotImplementedError(f"{type(self).__name__} must define params.")

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities of the final server model, shape (n_samples, n_outputs).

        Deterministic. Raises ``ValueError`` (naming the scale of ``X``) when the
        outputs overflow, instead of returning NaN.
        """
        return check_outputs(self._proba(X), X)

    def _proba(self, X) -> np.ndarray:
        """Unchecked prediction; subclasses whose server model is not ``params`` override it."""
        return self.model.predict_proba(self.params, X)

    def history_frame(self):
        """The history as a pandas DataFrame, one row per round."""
        return pd.DataFrame(self.history)
