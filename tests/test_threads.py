"""fedemstats._threads: small kernel calls run on the calling thread alone, and the pool's
size is restored after them, also when the kernel raises."""
import numba
import numpy as np
import pytest

from fedemstats import _threads
from fedemstats._threads import SERIAL_BELOW, run
from fedemstats.compression import make_compressor
from fedemstats.compression.streams import ClientStreams

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a pool of 2 threads")


def _threads_seen(x):
    """Stands for a kernel: the pool size a parallel region entered now would use."""
    return numba.get_num_threads()


def _raises(x):
    raise ValueError("kernel failed")


@pytest.fixture
def two_threads():
    previous = numba.get_num_threads()
    numba.set_num_threads(2)
    yield
    numba.set_num_threads(previous)


def test_small_work_runs_on_the_calling_thread_and_large_work_on_the_pool(two_threads):
    assert run(_threads_seen, SERIAL_BELOW - 1, 0.0) == 1
    assert numba.get_num_threads() == 2
    assert run(_threads_seen, SERIAL_BELOW, 0.0) == 2


def test_the_pool_size_comes_back_when_the_kernel_raises(two_threads):
    with pytest.raises(ValueError, match="kernel failed"):
        run(_raises, 1, 0.0)
    assert numba.get_num_threads() == 2


def test_a_caller_on_one_thread_stays_on_one(two_threads):
    numba.set_num_threads(1)
    for work in (1, 10 * SERIAL_BELOW):
        assert run(_threads_seen, work, 0.0) == 1
        assert numba.get_num_threads() == 1


def test_a_small_message_is_quantised_and_coded_on_the_calling_thread(two_threads, monkeypatch):
    """The compressor's kernels (levels, Rice code) go through :func:`run`: a 3 × 40 message
    sets the pool to one thread for each call, and gives the bytes the pool gives."""
    seen = []
    real = numba.set_num_threads
    monkeypatch.setattr(_threads.numba, "set_num_threads", lambda n: (seen.append(n), real(n)))
    comp = make_compressor("dither:s=4")
    x = np.random.default_rng(0).normal(size=(3, 40))
    small = comp.encode(comp.compress(x, ClientStreams(1, 2, np.arange(3)), np.array([0, 40])))
    assert seen.count(1) >= 2 and seen[-1] == 2
    monkeypatch.setattr(_threads, "SERIAL_BELOW", 0)
    seen.clear()
    assert comp.encode(comp.compress(x, ClientStreams(1, 2, np.arange(3)), np.array([0, 40]))) == small
    assert seen == []
