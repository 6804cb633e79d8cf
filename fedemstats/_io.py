"""Atomic output files: an output is either the complete new file or the old one, never a mix.

Every file the command line writes (the fit's JSON, the imputed CSV, the demo's
table and figure) goes through :func:`write_atomic` or :func:`write_files_atomic`:

1. the content is serialised in memory first, so a failure while rendering it
   (a plotting error, a value that JSON cannot encode) touches no file at all;
2. it is written to a temporary file in the output's own directory (so the final
   rename never crosses a file system), flushed and ``fsync``-ed;
3. ``os.replace`` swaps it in (atomic on POSIX and Windows), and the directory is
   ``fsync``-ed so the rename itself survives a power cut.

On any failure (disk full, quota, interrupt) the temporary is removed and an
existing output is left byte-identical. A temporary exists only during step 2-3,
so a process killed while fitting leaves nothing behind. A process killed by
SIGKILL *during* step 2 cannot clean up: it leaves one hidden file named
``.<output name>.<pid>-<random>.tmp``; the next write of the same output removes
such leftovers once their process is gone (see :func:`remove_stale_temporaries`).
"""
from __future__ import annotations

import errno
import os
import re
import secrets
from pathlib import Path
from typing import Mapping

__all__ = ["write_atomic", "write_files_atomic", "temporary_name", "remove_stale_temporaries",
           "TEMPORARY_SUFFIX"]

#: suffix of every temporary file; with the leading dot and the output's name it is
#: recognisable as "an unfinished write of that output"
TEMPORARY_SUFFIX = ".tmp"
#: written in chunks so a failing write is detected (and cleaned up) early
CHUNK_BYTES = 1 << 20
#: permissions of a new output before the umask, as ``open(path, "w")`` would give
NEW_FILE_MODE = 0o666


def temporary_name(target: Path) -> Path:
    """A fresh temporary path next to ``target`` naming the output and the writing process."""
    token = secrets.token_hex(4)
    return target.with_name(f".{target.name}.{os.getpid()}-{token}{TEMPORARY_SUFFIX}")


def _pattern(target: Path):
    return re.compile(rf"^\.{re.escape(target.name)}\.(\d+)-[0-9a-f]+{re.escape(TEMPORARY_SUFFIX)}$")


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:  # e.g. platforms without signal 0: keep the file, be safe
        return True
    return True


def remove_stale_temporaries(target) -> list[Path]:
    """Remove temporaries of ``target`` left by processes that no longer run; return them.

    Temporaries of a live process (a concurrent write) are left alone.
    """
    target = Path(target)
    pattern = _pattern(target)
    removed = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match and not _process_alive(int(match.group(1))):
            try:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            except OSError:
                pass  # gone already or not ours to remove; never fail a write for it
    return removed


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to ``fd`` in chunks (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view[:CHUNK_BYTES])
        view = view[written:]


def _fsync_directory(directory: Path) -> None:
    """Make a rename durable; silently skipped where directories cannot be opened (Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):  # file systems without directory fsync
            raise
    finally:
        os.close(fd)


def _resolve(path) -> Path:
    # A symlinked output keeps being a symlink: the file it points to is replaced.
    return Path(os.path.realpath(os.fspath(path)))


def _write_temporary(target: Path, data: bytes) -> Path:
    """Write ``data`` to a new temporary next to ``target``; remove it again on any failure."""
    tmp = temporary_name(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), NEW_FILE_MODE)
    try:
        try:
            if target.exists():  # replacing a file must not change who may read it
                os.chmod(tmp, target.stat().st_mode & 0o7777)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_files_atomic(files: Mapping[os.PathLike | str, bytes]) -> None:
    """Write several outputs: all temporaries first, then the renames.

    If any temporary cannot be written, no output is touched. The renames
    themselves are atomic one by one (a crash between two renames can leave the
    first output new and the second old, each complete).
    """
    staged = []
    try:
        for path, data in files.items():
            target = _resolve(path)
            remove_stale_temporaries(target)
            staged.append((_write_temporary(target, data), target))
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            _unlink_quietly(tmp)  # already renamed ones are gone: harmless
        raise
    for directory in {target.parent for _, target in staged}:
        _fsync_directory(directory)


def write_atomic(path, data: bytes | str, *, encoding: str = "utf-8") -> None:
    """Replace ``path`` with ``data`` atomically (text is encoded with ``encoding``)."""
    if isinstance(data, str):
        data = data.encode(encoding)
    write_files_atomic({path: data})
