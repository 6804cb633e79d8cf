"""The fine start: FedEM's first rounds at a precision at which it follows exact EM (issue 11).

On a likelihood with several optima the first EM steps decide where a run ends. A coarse
quantiser at those steps does not add a small error to exact EM's path: it takes another
path. Measured on the Portal counts (GMM, full covariances, iid split; 16 quantisation
streams, the same θ_0), with ``dither:s=4`` every stream ended 0.385 nats per row below
exact EM's optimum, and with ``dither:s=16`` too. Two things made that systematic:
- the first steps are large, and so is the noise of a quantiser that is relative to them;
- at that noise the trust region can only halve a step that collapses a variance
  (:meth:`~fedemstats.models._geometry.Geometry.step_fraction`), so the first rounds are
  damped EM, which goes elsewhere.
At :data:`FINE_START_LEVELS` levels throughout, all 16 streams ended at exact EM's optimum.

So the first :data:`FINE_START_ROUNDS` rounds after round 0 use dithering at
:data:`FINE_START_LEVELS` levels, up and down, when the run's own compressor is coarser
(larger ω). Then the run's compressor takes over: the memories V_i by then hold the clients'
statistics finely, so the coarse quantiser carries only the later, small moves.

Measured at ``dither:s=4`` (share of 48 quantisation streams ending within 1e-3 nats per row of
exact EM's optimum after 150 rounds, p = 1), by the number of fine rounds:

=============  ======  ======  ======  ======  ======
Portal rows      0       2       3       4       5
=============  ======  ======  ======  ======  ======
iid / full      0/48   14/48   23/48   31/48   44/48
het / full      3/48   19/48   44/48   45/48   47/48
=============  ======  ======  ======  ======  ======

(iid / diag 11/16 → 16/16 and het / diag 16/16 → 16/16 with 3.) Fine rounds on one link only,
or at 16 or 32 levels, land far less often (``docs/fedem.md``). Each fine round costs about 2.5
times the bits of a coarse one (diabetes, GMM), and exact EM needs only 3 to 15 rounds on many
real tables: from 3 to 5 rounds ``bench_bits``'s median ratio to exact EM's bits rose from 0.128
to 0.142 at defaults (its passes 57 → 58 / 64) and ``bench_real_data`` went from 124 to 126 /
128. Under partial participation the first steps are noisy by sampling, which no quantiser
removes: at p = 0.5, Portal iid / full landed on 1/24 streams with 3 or 5 fine rounds.

So the fine rounds also hear every client (:func:`round_sample`), as round 0 already must:
partial participation starts when the run's compressor takes over. With the fine rounds
sampled at p = 0.5, the sampled steps near collapsing variances were cut by the trust region
and the first rounds were damped EM: Portal iid / full ended 0.385 and iid / diagonal 0.411
nats per row below exact EM's optimum in ``bench_real_data``, and on 13 of 16 streams of
``tests/test_fine_start.py``'s Portal problem. With every client heard, both rows end at exact
EM's optimum and 12 / 16 streams land (14 / 16 at p = 1); over ``random_state`` 0-5 the four
Portal mixture rows at p = 0.5 went from 22 / 24 within 1e-3 (or above) to 24 / 24, in fewer
rounds (median 100 → 73). Hearing everyone early does not cost bits either: 10,000 clients of
10 rows (three Gaussian components in 5 dimensions) took 85 rounds and 0.56× exact EM's bits at
p = 0.1 (160 and 0.84× sampled), 489 and 0.94× at p = 0.02 (1,022 and 1.67×), because memories
all refreshed by fine messages leave the coarse rounds' Horvitz-Thompson direction less noisy.

The first coarse rounds hear every client too (:data:`EVERYONE_ROUNDS` = 10 rounds in all): their
steps are still large (γ 0.9 to 0.6 on breast cancer's factor analysis), and a sampled round's
noise is each absent client's staleness, which grows with the distance the iterate has moved since
it last spoke. Sampled from round 6, breast cancer iid / factor analysis at p = 0.5 saw the relative
noise of H rise from 0.10 to 1.2 by round 13, γ fell to its floor, and 3 of 24 quantisation and
sampling streams (``random_state`` 0-23) ended on a ridge 0.136 nats per row below exact EM
(``docs/factor_analysis.md``). With rounds 6-10 asking everyone, 0 of 24 did (8 rounds in all:
seed 2 still did). At p = 1 nothing changes; at p = 0.5 ``bench_real_data`` went from 127 to 128 /
128 rows and the Portal problem of ``tests/test_fine_start.py`` from 12 to 14 / 16 landed streams
(p = 1: 14 / 16).

The fine rounds update the memories with the fine compressor's own α = 1/(1 + ω_fine) (about 1),
not the coarse one's (:func:`round_alpha`): paper 003 bounds α by 1/(1 + ω) of the quantiser
that produced q_i, and at α = 1/(1 + ω_coarse) the memories V_i absorb only part of each fine
message, so the first coarse round quantised what they had not absorbed (on a heterogeneous
split, Δ_i much larger than the mean field). Measured on diamonds / het / full (``dither:s=4``):
the first coarse round's relative noise was 2.5, the step fell to its floor and took 27 rounds to
exact EM's target; with the fine α, 0.21, and 7 rounds.

The switch restarts the running noise estimates (:meth:`.base.Algorithm.server_step`):
they measured the fine quantiser, and the coarse one's first steps taken with them were
too long (factor analysis on breast cancer then ended 0.14 nats per row below exact EM's
optimum on all four of its ``bench_real_data`` rows; with the restart on one).

``FedEM(fine_start=False)`` turns it off (the theory scripts run the paper's algorithm).
"""
from __future__ import annotations

import functools

from ..compression import make_compressor

__all__ = ["FINE_START_ROUNDS", "FINE_START_LEVELS", "EVERYONE_ROUNDS", "fine_start_compressor", "fine_rounds",
           "everyone_rounds", "round_compressor", "round_alpha", "round_sample"]

#: Rounds after round 0 that run at :data:`FINE_START_LEVELS` (see the module's measurements).
FINE_START_ROUNDS = 5
#: Dithering levels of the fine start: of 4, 16 and 64 levels throughout, the only one at which
#: compressed FedEM ended at exact EM's optimum on every measured Portal stream (16 / 16; 16: 0 / 16).
FINE_START_LEVELS = 64
#: Rounds after round 0 that ask every client (π = 1) in a run with a fine start: its
#: :data:`FINE_START_ROUNDS` fine rounds and the first five at the run's own compressor, whose
#: steps are still large enough that sampling's noise (each memory's staleness times the
#: distance the iterate moved) drowns them (see the module's measurements).
EVERYONE_ROUNDS = 10


@functools.cache
def fine_start_compressor():
    """The fine start's compressor: dithering at :data:`FINE_START_LEVELS` levels."""
    return make_compressor(f"dither:s={FINE_START_LEVELS}")


def fine_rounds(compressor, q, blocks, enabled=True) -> int:
    """How many rounds start fine for a run whose compressor is ``compressor``.

    Parameters
    ----------
    compressor : Compressor
    q : int
        Length of the statistic vector.
    blocks : ndarray of int
        Block offsets at which to compare the two compressors' ω (the layout's).
    enabled : bool
        The algorithm has a fine start at all (FedEM; not VR-FedEM, whose workers need
        exact statistics, nor the private algorithms).

    Returns
    -------
    int
        :data:`FINE_START_ROUNDS` if ``compressor`` is coarser than the fine start (its ω is
        larger), else 0: a lossless channel (ω = 0) stays exact, and a compressor as fine or
        finer keeps its own precision (so FedEM still tends to exact EM as ω → 0).
    """
    if not enabled:
        return 0
    fine = float(fine_start_compressor().omega(q, blocks))
    return FINE_START_ROUNDS if float(compressor.omega(q, blocks)) > fine else 0


def everyone_rounds(n_fine) -> int:
    """How many rounds after round 0 ask every client in a run whose first ``n_fine`` rounds
    start fine: :data:`EVERYONE_ROUNDS` with a fine start, else 0 (the participation's sample
    from round 1, as in paper 003)."""
    return EVERYONE_ROUNDS if n_fine else 0


def round_compressor(compressor, n_fine, round_):
    """The compressor of round ``round_`` on a channel whose first ``n_fine`` rounds start
    fine (:func:`fine_rounds`), else ``compressor``: both sides derive it from the round."""
    return fine_start_compressor() if round_ < n_fine else compressor


def round_alpha(alphas, n_fine, round_):
    """α of round ``round_``: ``alphas = (fine, coarse)`` are 1/(1 + ω) of the fine start's
    compressor and of the run's (:meth:`.base.Algorithm.resolved_alphas`); the first ``n_fine``
    rounds' memories absorb fine messages, the later ones coarse ones."""
    return alphas[0] if round_ < n_fine else alphas[1]


def round_sample(participation, n_everyone, round_, n_clients, rng):
    """(active, π) of round ``round_``: every client with π = 1 in the first ``n_everyone``
    rounds (:func:`everyone_rounds`; ``participation.everyone``: the fine start and the first
    coarse rounds hear everyone, as round 0 does), then ``participation``'s sample (which alone
    draws from ``rng``). Both the engine and the Flower strategy call it."""
    if round_ < n_everyone:
        return participation.everyone(round_, n_clients)
    return participation.sample(round_, n_clients, rng)
