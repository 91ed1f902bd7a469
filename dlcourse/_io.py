"""Atomic writes: nothing the user saved is ever left half written."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", encoding: str | None = None):
    """Open a temporary file beside ``path`` for writing; on success, flush it to disk and
    ``os.replace`` it onto ``path`` (readers see the old file or the new one, never half of
    one). If the block raises, the temporary file is deleted and ``path`` is untouched.

        with atomic_write("model.npz") as f:
            np.savez(f, ...)
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
