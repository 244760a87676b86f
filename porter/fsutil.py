"""Atomic file writes: a reader never sees a half-written artifact."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _read_umask() -> int:
    """The process umask by setting it and putting it back (there is no getter); not
    thread-safe, so done once at import."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_IMPORT_UMASK = _read_umask()


def _umask() -> int:
    """The current umask: from /proc on Linux (thread-safe), else the one at import."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return _IMPORT_UMASK


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``.

    Two concurrent writers of the same content both succeed and the file is always
    whole, because rename within one filesystem is atomic. The file gets the mode a plain
    ``open(path, "w")`` would give it (0666 less the umask), not mkstemp's private 0600,
    and an error names ``path``, never the temp file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        # The folder refuses new files: say so about the file the caller asked for.
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename == tmp:
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
        raise
    return path
