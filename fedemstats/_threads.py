"""When numba's parallel kernels use threads beyond the calling one.

A parallel region ends at a barrier that waits for every thread of numba's pool. Where the
cores are busy (another fit, a test runner, Flower's simulated clients, each process with a
pool of its own), a pool thread the system has descheduled holds that barrier for its time
slice, however little work it was given. Measured on 2 cores under a load of 5: whitening 10
rows of 315 statistics took 7.8 ms with 2 threads against 90 µs on the calling thread alone,
and a compressed fit of a 3-component mixture with missing values (wine, 10 clients) spent
12.2 s on 59 rounds against 3.3 s. On an idle machine the threads only start to pay at about
64 such rows (20,000 elements: 128 µs either way; at 256 rows 511 against 260 µs).

:func:`run` therefore calls a kernel with ``numba.set_num_threads(1)`` when its work is below
:data:`SERIAL_BELOW`. Every parallel kernel of the package gives the same result whatever the
thread count (``tests/test_kernel_chunks.py``, ``tests/test_streams.py``), so this changes
timings only.
"""
from __future__ import annotations

import numba

__all__ = ["SERIAL_BELOW", "run"]

#: Elements (rows × columns a kernel reads) below which a parallel kernel runs on the calling thread.
SERIAL_BELOW = 1 << 14


def run(kernel, work, *args):
    """``kernel(*args)``, on the calling thread alone when ``work`` < :data:`SERIAL_BELOW`.

    Parameters
    ----------
    kernel : numba-compiled function with a parallel region
    work : int
        Elements the call reads (e.g. ``n_rows * q``).
    *args
        The kernel's arguments.
    """
    if work >= SERIAL_BELOW:
        return kernel(*args)
    previous = numba.get_num_threads()
    if previous == 1:
        return kernel(*args)
    numba.set_num_threads(1)
    try:
        return kernel(*args)
    finally:
        numba.set_num_threads(previous)
