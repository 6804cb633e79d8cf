"""Checks of every node reply before it touches the server's state (issue 13).

A node is trusted with nothing: a reply whose records, shapes, dtypes or values are not
those an honest node of this round would send is refused with a reason, and the strategy
then treats the node as failed for that round (its q_i reaches neither Ŝ nor the mirror
of V_i, and the node's pending commit is not confirmed). Quantised payloads are checked
by their compressor (:meth:`fedemstats.compression.Compressor.validate`: meta, array
dtypes and shapes, finite non-negative norms, levels within range) against the blocks
*the server* derives for the round, never the ones the message claims.

The optional contribution bound (:func:`over_bound`) drops replies whose message norm is
far above the round's median: a defence against a poisoning node whose payload is well
formed (see ``docs/flower.md`` for what it does to unbiasedness).
"""
from __future__ import annotations

import numpy as np

from . import protocol as P
from .records import compressed_from_record, from_array_record

__all__ = ["InvalidReply", "check_round_reply", "check_stats_reply", "check_description", "over_bound",
           "MIN_REPLIES_FOR_BOUND"]

#: fewest valid replies for the contribution bound to judge: with two, a poisoned norm is
#: at most twice their median and cannot be told from an honest one
MIN_REPLIES_FOR_BOUND = 3


class InvalidReply(ValueError):
    """A node reply the server refuses; the message is the reason (it is logged)."""


def _record(content, name):
    if name not in content:
        raise InvalidReply(f"the reply has no {name!r} record.")
    return content[name]


def _metric(content, key, kind):
    metrics = _record(content, P.METRICS)
    if key not in metrics:
        raise InvalidReply(f"the reply's metrics have no {key!r}.")
    value = metrics[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
        raise InvalidReply(f"metric {key!r} is {value!r}, not an integer.")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not np.isfinite(value):
            raise InvalidReply(f"metric {key!r} is {value!r}, not a finite number.")
        return float(value)
    return int(value)


def _check_origin(content, partition_id, n_rows):
    """The reply is for the partition instructed, with the row count it described."""
    pid = _metric(content, P.PARTITION_ID, int)
    if pid != partition_id:
        raise InvalidReply(f"the reply is for partition {pid}, the instruction for partition {partition_id}.")
    rows = _metric(content, "n-rows", int)
    if n_rows is not None and rows != n_rows:
        raise InvalidReply(f"the reply reports {rows} rows; partition {partition_id} described {n_rows}.")


def check_round_reply(content, compressor, q, blocks, partition_id, n_rows=None):
    """The compressed message and log-likelihood of a ``train`` reply, once checked.

    Parameters
    ----------
    content : RecordDict
        The reply's content.
    compressor : Compressor
        The round's compressor (the server's own, from the settings).
    q : int
        Length of the statistic.
    blocks : ndarray of int or None
        The round's compression blocks as the server derives them (the geometry's).
    partition_id : int
        The partition the instruction was for.
    n_rows : int, optional
        The row count the partition described (m_i).

    Returns
    -------
    message : Message
    loglik : float

    Raises
    ------
    InvalidReply
        Naming what is wrong.
    """
    _check_origin(content, partition_id, n_rows)
    loglik = _metric(content, "loglik", float)
    try:
        message = compressed_from_record(_record(content, P.PAYLOAD), compressor, q, blocks)
        compressor.validate(message, q, blocks)
    except InvalidReply:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        raise InvalidReply(f"invalid payload: {exc}") from exc
    return message, loglik


def check_stats_reply(content, q, partition_id, n_rows=None):
    """The exact statistic s̄_i (float64, shape (q,), finite) and log-likelihood of a round-0 reply.

    Raises
    ------
    InvalidReply
    """
    _check_origin(content, partition_id, n_rows)
    loglik = _metric(content, "loglik", float)
    arrays = from_array_record(_record(content, P.ARRAYS))
    stats = _float_array(arrays, "stats", (int(q),))
    return stats, loglik


def check_description(content, min_rows, pairwise=False):
    """(partition id, m_i, moments) of a ``query.describe`` reply, once checked.

    ``moments`` holds ``mean`` (d,) and ``scatter`` (d, d); with ``pairwise`` also ``pair_counts``
    (whole numbers between 0 and m_i) and ``pair_sums`` (d, d)
    (:func:`fedemstats.models._pair_moments.client_pair_moments`).

    Raises
    ------
    InvalidReply
    """
    pid = _metric(content, P.PARTITION_ID, int)
    rows = _metric(content, "n-rows", int)
    if rows < min_rows:
        raise InvalidReply(f"partition {pid} reports {rows} rows; at least {min_rows} are needed.")
    arrays = from_array_record(_record(content, P.ARRAYS))
    mean = _float_array(arrays, "mean", None)
    if mean.ndim != 1:
        raise InvalidReply(f"the mean has shape {mean.shape}, expected (n_features,).")
    d = mean.size
    moments = {"mean": mean, "scatter": _float_array(arrays, "scatter", (d, d))}
    if pairwise:
        moments.update(pair_counts=_float_array(arrays, "pair_counts", (d, d)),
                       pair_sums=_float_array(arrays, "pair_sums", (d, d)))
        counts = moments["pair_counts"]
        if np.any(counts < 0) or np.any(counts > rows) or np.any(counts != np.round(counts)):
            raise InvalidReply(f"array 'pair_counts' holds values that are not whole numbers in [0, {rows}].")
    return pid, rows, moments


def _float_array(arrays, name, shape):
    if name not in arrays:
        raise InvalidReply(f"the reply has no array {name!r}.")
    arr = arrays[name]
    if arr.dtype != np.float64:
        raise InvalidReply(f"array {name!r} has dtype {arr.dtype}, expected float64.")
    if shape is not None and arr.shape != shape:
        raise InvalidReply(f"array {name!r} has shape {arr.shape}, expected {shape}.")
    if not np.all(np.isfinite(arr)):
        raise InvalidReply(f"array {name!r} holds NaN or inf.")
    return arr


def over_bound(norms, factor):
    """Which replies the contribution bound drops: norm > ``factor`` × the round's median.

    Parameters
    ----------
    norms : dict
        client -> norm of its decoded message (in the compression coordinates).
    factor : float
        The bound's multiple of the median; 0 turns the bound off.

    Returns
    -------
    dict
        client -> reason, for the replies dropped. Nothing is dropped with fewer than
        :data:`MIN_REPLIES_FOR_BOUND` replies or a zero median (no scale to compare with).
    """
    if not factor or len(norms) < MIN_REPLIES_FOR_BOUND:
        return {}
    median = float(np.median(list(norms.values())))
    if median <= 0.0:
        return {}
    limit = factor * median
    return {c: f"message norm {n:.3g} exceeds {factor:g} x the round's median {median:.3g}"
            for c, n in norms.items() if n > limit}
