"""Real ``pfl`` for ``bench_privacy.py``: its venv and its subprocess.

pfl 0.6.0 (pfl-research, PyPI ``pfl``) pins ``dp-accounting<0.6``; fedemstats uses 0.6.0, so
pfl lives in its own venv, ``.venv-pfl`` at the repository root (``make bench-pfl-venv``, or
:func:`ensure_venv` on first use: ``python -m venv`` then ``pip install pfl==0.6.0``). It is
the benchmark's optional extra, never a dependency of the package.

:func:`start` writes one table's split as ``.npy`` files and a ``config.json`` into a work
directory and starts ``_privacy_pfl_runner.py`` there under the pfl venv's Python (no
pickles: nothing of fedemstats crosses); :func:`collect` waits for it and reads
``result.json``. Several tables run as concurrent subprocesses while the parent fits ours.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

__all__ = ["PFL_VERSION", "VENV", "python_of_venv", "ensure_venv", "start", "collect"]

#: the pfl release the benchmark runs
PFL_VERSION = "0.6.0"
ROOT = Path(__file__).resolve().parents[1]
#: pfl's own venv (git-ignored)
VENV = ROOT / ".venv-pfl"
RUNNER = Path(__file__).resolve().parent / "_privacy_pfl_runner.py"


def python_of_venv(venv=VENV) -> Path:
    """The venv's interpreter."""
    return Path(venv) / "bin" / "python"


def ensure_venv(venv=VENV) -> Path:
    """The pfl venv's Python, creating the venv and installing pfl if ``pfl`` does not import.

    Raises
    ------
    RuntimeError
        If pip cannot install pfl (its output is in the message).
    """
    python = python_of_venv(venv)
    check = [str(python), "-c", f"import pfl, sys; sys.exit(pfl.__version__ != {PFL_VERSION!r})"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"pfl=={PFL_VERSION}"],
                          capture_output=True, text=True)
    if done.returncode != 0 or subprocess.run(check, capture_output=True).returncode != 0:
        raise RuntimeError(f"could not install pfl=={PFL_VERSION} into {venv}:\n{done.stdout}\n{done.stderr}")
    return python


def start(python, workdir, train, test, config):
    """Start pfl on one split; returns the running process.

    Parameters
    ----------
    python : path
        The pfl venv's interpreter (:func:`ensure_venv`).
    workdir : path
        Created if needed; receives ``train.npy``, ``test.npy``, ``config.json``, then the
        runner's ``result.json`` and ``log.txt``.
    train : ndarray of shape (n, d)
    test : ndarray of shape (m, d)
    config : dict
        ``n_components``, ``rounds``, ``runs`` (list of (ε, seed, clip C)), ``delta``,
        ``variance_scale``, ``responsibility_scale``.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    np.save(workdir / "train.npy", np.ascontiguousarray(train, dtype=np.float64))
    np.save(workdir / "test.npy", np.ascontiguousarray(test, dtype=np.float64))
    (workdir / "config.json").write_text(json.dumps(config))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # pfl's venv must not see this checkout's packages
    log = open(workdir / "log.txt", "w")
    return subprocess.Popen([str(python), str(RUNNER), str(workdir)], stdout=log, stderr=subprocess.STDOUT,
                            env=env, cwd=str(workdir))


def collect(process, workdir) -> dict:
    """Wait for a runner; returns ``{(epsilon, seed, clip): {"loglik", "noise_multiplier",
    "epsilon", "n_components", ...}}``.

    Raises
    ------
    RuntimeError
        If the runner failed (the tail of its log is in the message).
    """
    workdir = Path(workdir)
    if process.wait() != 0:
        tail = (workdir / "log.txt").read_text()[-3000:]
        raise RuntimeError(f"pfl runner failed in {workdir}:\n{tail}")
    raw = json.loads((workdir / "result.json").read_text())
    return {(float(r["epsilon_target"]), int(r["seed"]), float(r["clip"])): r for r in raw}
