"""The numba cache directory of this source tree, one per state of its compiled sources.

numba checks only the time stamp of a cached function's own file, not of the helpers it
calls or inlines from other modules: after an edit of ``models/_gmm_tiles.py`` alone, the
kernels cached from ``models/_gmm_kernels.py`` kept running the old tiles, and the tests
passed on code that no longer existed. A directory keyed by the contents of every module
that uses numba rules that out. Used by ``tests/conftest.py`` (direct pytest runs) and the
Makefile (``make test`` and ``make demo``): ``python tests/_numba_cache_key.py`` prints it.
Earlier states' directories stay until ``make clean`` (or ``rm -rf .numba_cache``).
"""
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Hex digits of the key: distinct source states, not security.
KEY_DIGITS = 12


def numba_cache_dir(root: Path = ROOT) -> str:
    """``<root>/.numba_cache/<hash of the package's modules that use numba>``."""
    digest = hashlib.sha1()
    for path in sorted((root / "fedemstats").rglob("*.py")):
        source = path.read_bytes()
        if b"numba" in source:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + source)
    return str(root / ".numba_cache" / digest.hexdigest()[:KEY_DIGITS])


if __name__ == "__main__":
    print(numba_cache_dir())
