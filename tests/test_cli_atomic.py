"""Outputs are atomic: a failed, interrupted or killed run never leaves a partial file.

Unit tests of :mod:`fedemstats._io`, then the command line under a full disk
(simulated in-process, and real in a subprocess with a file-size limit), a kill
during the final write, and SIGKILL in the middle of ``fedemstats fit``.
"""
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from _cli_helpers import TEMPORARY, assert_one_error, write_sample_csv
from fedemstats.cli import main

ROOT = Path(__file__).resolve().parents[1]
#: seconds allowed for a subprocess to start (imports numba) and log its first rounds
STARTUP_TIMEOUT = 120
FAILURE = 1


def leftovers(directory):
    """Temporary files in ``directory``."""
    return sorted(p.name for p in Path(directory).iterdir() if TEMPORARY.match(p.name))


def fail_half_way(fd, data):
    """Stand-in for ``_io._write_all``: writes half the bytes, then the disk is full."""
    os.write(fd, bytes(data[: len(data) // 2]))
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def _io():
    """The module under test, imported per test (so each test fails on its own where it is missing)."""
    from fedemstats import _io

    return _io


def cli_env():
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


# ------------------------------------------------------------------ fedemstats._io
def test_write_atomic_creates_replaces_and_leaves_no_temporary(tmp_path, _io):
    target = tmp_path / "out.json"
    _io.write_atomic(target, "first")
    umask = os.umask(0)
    os.umask(umask)
    assert target.read_text() == "first" and (target.stat().st_mode & 0o777) == (0o666 & ~umask)
    target.chmod(0o600)
    _io.write_atomic(target, b"second")
    assert target.read_bytes() == b"second" and (target.stat().st_mode & 0o777) == 0o600
    assert leftovers(tmp_path) == []


def test_failed_write_keeps_the_existing_file_byte_identical(tmp_path, _io, monkeypatch):
    target = tmp_path / "out.csv"
    target.write_bytes(b"old contents\n" * 100)
    monkeypatch.setattr(_io, "_write_all", fail_half_way)
    with pytest.raises(OSError) as info:
        _io.write_atomic(target, "new contents\n" * 1000)
    assert info.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old contents\n" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_several_outputs_are_written_all_or_none(tmp_path, _io, monkeypatch):
    first, second = tmp_path / "a.csv", tmp_path / "b.png"
    first.write_text("old a")
    real, calls = _io._write_all, []

    def second_fails(fd, data):
        calls.append(data)
        (real if len(calls) == 1 else fail_half_way)(fd, data)

    monkeypatch.setattr(_io, "_write_all", second_fails)
    with pytest.raises(OSError):
        _io.write_files_atomic({first: b"new a", second: b"new b" * 100})
    assert first.read_text() == "old a" and not second.exists() and leftovers(tmp_path) == []


def test_a_symlinked_output_stays_a_symlink(tmp_path, _io):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    _io.write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path, _io):
    target = tmp_path / "m.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = tmp_path / f".m.json.{dead.stdout.strip()}-0badcafe.tmp"
    live = tmp_path / f".m.json.{os.getpid()}-00c0ffee.tmp"  # a concurrent writer: kept
    other = tmp_path / f".other.json.{dead.stdout.strip()}-0badcafe.tmp"  # another output: kept
    for path in (stale, live, other):
        path.write_text("partial")
    _io.write_atomic(target, "{}")
    assert not stale.exists() and live.exists() and other.exists()


# ------------------------------------------------------------------ the command line, disk full
def _fit_argv(data, out):
    return ["fit", "gmm", str(data), "--client-column", "site", "--rounds", "2", "--out", str(out)]


def _impute_argv(data, out):
    return ["impute", "gaussian", str(data), "--client-column", "site", "--rounds", "2", "--out", str(out)]


@pytest.mark.parametrize("command", ["fit", "impute", "demo"])
def test_disk_full_keeps_existing_outputs_and_reports_one_line(command, tmp_path, _io, monkeypatch, capsys):
    data = write_sample_csv(tmp_path / "data.csv", missing=command == "impute")
    if command == "demo":
        folder = tmp_path / "demo"
        folder.mkdir()
        outputs = [folder / "demo_table.csv", folder / "demo_summary.csv", folder / "demo_convergence.png"]
        argv = ["demo", "--out", str(folder), "--rounds", "1"]
    else:
        outputs = [tmp_path / "result.out"]
        argv = (_fit_argv if command == "fit" else _impute_argv)(data, outputs[0])
    for i, path in enumerate(outputs):
        path.write_bytes(b"previous result %d\n" % i * 50)
    before = {p: p.read_bytes() for p in outputs}
    monkeypatch.setattr(_io, "_write_all", fail_half_way)
    assert main(argv) == FAILURE
    assert_one_error(capsys.readouterr().err, "could not write", str(outputs[0]), "No space left on device")
    assert {p: p.read_bytes() for p in outputs} == before
    assert leftovers(outputs[0].parent) == []


def test_real_file_size_limit_mid_write_keeps_the_existing_output(tmp_path):
    """Implementation-agnostic: the OS refuses the write half-way (RLIMIT_FSIZE -> EFBIG)."""
    data = write_sample_csv(tmp_path / "data.csv")
    out = tmp_path / "m.json"
    assert main(_fit_argv(data, out)) == 0  # the existing output (and a warm numba cache)
    before = out.read_bytes()
    command = [sys.executable, "-m", "fedemstats.cli", *_fit_argv(data, out)]
    limit = len(before) // 2

    def limit_file_size():  # CPython ignores SIGXFSZ, so the write fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run = subprocess.run([*command, "--seed", "1"], env=cli_env(), preexec_fn=limit_file_size,
                         capture_output=True, text=True, timeout=STARTUP_TIMEOUT)
    assert run.returncode == FAILURE, run.stderr
    assert_one_error(run.stderr, "could not write", str(out), "File too large")
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "m.json"]


KILL_MID_WRITE = """
import os, signal, sys
from fedemstats import _io
def killed_half_way(fd, data):
    os.write(fd, bytes(data[: len(data) // 2]))
    os.kill(os.getpid(), signal.SIGKILL)
_io._write_all = killed_half_way
from fedemstats.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_kill_during_the_final_write_leaves_one_named_temporary_that_the_next_run_removes(tmp_path):
    data = write_sample_csv(tmp_path / "data.csv")
    out = tmp_path / "m.json"
    out.write_text("previous result")
    run = subprocess.run([sys.executable, "-c", KILL_MID_WRITE, *_fit_argv(data, out)], env=cli_env(),
                         capture_output=True, text=True, timeout=STARTUP_TIMEOUT)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert out.read_text() == "previous result"
    left = leftovers(tmp_path)
    assert len(left) == 1 and left[0].startswith(".m.json.")
    assert main(_fit_argv(data, out)) == 0
    assert leftovers(tmp_path) == [] and json.loads(out.read_text())["model"] == "gmm"


# ------------------------------------------------------------------ SIGKILL in the middle of a fit
def _start_long_fit(data, out):
    """``fedemstats -vv fit`` that runs for hours unless killed (logs every 10 rounds)."""
    argv = ["-vv", "fit", "gmm", str(data), "--client-column", "site", "--n-components", "3",
            "--compressor", "dither:s=4", "--rounds", "100000", "--out", str(out)]
    return subprocess.Popen([sys.executable, "-m", "fedemstats.cli", *argv], env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for_rounds(proc):
    """Block until ``proc`` logs a round (it is then mid-fit); the stderr seen so far."""
    timer = threading.Timer(STARTUP_TIMEOUT, proc.kill)
    timer.start()
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "round 10:" in line:
                return "".join(seen)
    finally:
        timer.cancel()
    pytest.fail(f"the fit ended before logging its rounds: {''.join(seen)}")


def test_sigkill_during_fit_leaves_no_partial_output_and_keeps_an_existing_one(tmp_path):
    data = write_sample_csv(tmp_path / "data.csv", rows_per_client=200)
    existing, absent = tmp_path / "existing.json", tmp_path / "absent.json"
    existing.write_text(json.dumps({"previous": "result"}))
    before = existing.read_bytes()
    listing = sorted(p.name for p in tmp_path.iterdir())
    procs = [_start_long_fit(data, out) for out in (existing, absent)]  # both at once: 2 cores
    try:
        for proc in procs:
            _wait_for_rounds(proc)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stderr.close()
    assert [proc.returncode for proc in procs] == [-signal.SIGKILL] * 2
    assert existing.read_bytes() == before
    assert not absent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # not even a temporary
