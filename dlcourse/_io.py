"""Atomic writes: nothing the user saved is ever left half written."""
from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", encoding: str | None = None):
    """Open a temporary file beside ``path`` for writing; on success, flush it to disk and
    ``os.replace`` it onto ``path`` (readers see the old file or the new one, never half of
    one). If the block raises, the temporary file is deleted and ``path`` is untouched.

    Permissions: a file that replaces another keeps the old one's mode (a private checkpoint
    stays private, and its new bytes are never readable by others, even while written); a
    new file gets the mode any new file gets (0666 less the umask).

        with atomic_write("model.npz") as f:
            np.savez(f, ...)
    """
    path = Path(path)
    try:
        keep_mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        keep_mode = None
    fd, tmp = _open_beside(path, private=keep_mode is not None)
    if keep_mode is not None:
        try:
            os.chmod(tmp, keep_mode)              # before a byte is written
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.replace(tmp, path)
        except OSError as err:                    # name the user's file, not our temporary one
            raise type(err)(err.errno, f"cannot replace {path}: {err.strerror}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def check_writable(path) -> None:
    """Raise now the error :func:`atomic_write` would raise for ``path`` later (a missing or
    read-only folder, a folder that is a file), naming ``path``: creates the temporary file
    beside it and deletes it again. Use it before minutes of work whose result goes there."""
    fd, tmp = _open_beside(Path(path), private=True)
    os.close(fd)
    os.unlink(tmp)


def _open_beside(path: Path, private: bool):
    """:func:`_create_beside`, with an error that names ``path`` (the user's file), never
    the hidden temporary file."""
    try:
        return _create_beside(path, private)
    except OSError as err:
        raise type(err)(err.errno, f"cannot write {path}: {err.strerror} (in the folder "
                                   f"{path.parent})") from None


def _create_beside(path: Path, private: bool = False):
    """Create a new, unique temporary file in path's folder; return (fd, its path). Unlike
    tempfile.mkstemp (always mode 0600), the file gets the permissions any new file gets
    (0666 less the umask), so the saved file is as readable as one written directly;
    ``private`` creates it 0600 (the caller then sets the mode of the file it replaces)."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.part"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            return os.open(tmp, flags, 0o600 if private else 0o666), tmp
        except FileExistsError:
            continue
