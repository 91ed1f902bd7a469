"""Downloading a file once into a cache folder, verified and atomic.

Used by the MNIST, Fashion-MNIST and CIFAR-10 loaders of :mod:`dlcourse.data.datasets`
(notebook ``07_training_a_cnn`` points at them); :func:`download` is public for any other
file a learner wants. Tested on loopback: nothing here is needed offline.

Where downloads go: the folder named by the environment variable ``DLCOURSE_DATA``, or
else the user's cache folder (``$XDG_CACHE_HOME/dlcourse``, i.e. ``~/.cache/dlcourse``
on Linux; ``~/Library/Caches/dlcourse`` on macOS; ``%LOCALAPPDATA%\\dlcourse`` on
Windows). See :func:`data_dir`.
"""
from __future__ import annotations

import hashlib
import os
import sys
from http.client import IncompleteRead
from pathlib import Path
from typing import NamedTuple
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from .._io import atomic_write

__all__ = ["DownloadError", "ChecksumError", "download", "data_dir", "Remote", "fetch_remote",
           "OFFLINE_HINT"]

OFFLINE_HINT = ("dl.data.load_digits() needs no download: its 1797 8x8 digits ship "
                "with scikit-learn.")


class DownloadError(OSError):
    """A file could not be downloaded (the message says why and what to do instead)."""


class ChecksumError(DownloadError):
    """A downloaded file does not have the checksum it should have."""


def data_dir() -> Path:
    """The folder downloads go to: ``$DLCOURSE_DATA``, else the user's cache folder.

    ``~/.cache/dlcourse`` on Linux (or ``$XDG_CACHE_HOME/dlcourse``),
    ``~/Library/Caches/dlcourse`` on macOS, ``%LOCALAPPDATA%\\dlcourse`` on Windows.
    The folder is not created here; :func:`download` creates it when needed.
    """
    if os.environ.get("DLCOURSE_DATA"):
        return _check_data_folder(Path(os.environ["DLCOURSE_DATA"]).expanduser())
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    return base / "dlcourse"


def _check_data_folder(folder: Path) -> Path:
    """``$DLCOURSE_DATA`` as a folder, or an error naming the variable: a path that is (or runs
    through) a file could never hold the downloads."""
    for path in (folder, *folder.parents):
        if path.exists():
            if path.is_dir():
                return folder
            inside = "" if path == folder else f" (it would be inside the file {path})"
            raise DownloadError(f"DLCOURSE_DATA is set to {folder}, which is not a folder"
                                f"{inside}: it names the folder where downloads go. Point it "
                                f"at a folder (export DLCOURSE_DATA=~/dlcourse-data), or unset "
                                f"it to use the default cache folder.")
    return folder


class _Digests(NamedTuple):
    sha256: str
    md5: str | None


def _digest_file(path: Path, with_md5: bool) -> _Digests:
    sha = hashlib.sha256()
    md5 = hashlib.md5(usedforsecurity=False) if with_md5 else None
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
            if md5 is not None:
                md5.update(chunk)
    return _Digests(sha.hexdigest(), md5.hexdigest() if md5 else None)


def _sidecar(dest: Path) -> Path:
    """``file.gz.sha256``: the SHA-256 recorded after a download, to notice later damage.
    It never replaces a check: a digest the caller gives is compared on every call."""
    return dest.with_name(dest.name + ".sha256")


def _recorded_sha256(dest: Path) -> str | None:
    try:
        return _sidecar(dest).read_text().split()[0].lower()
    except (OSError, IndexError):
        return None


def _write_sidecar(dest: Path, sha256: str) -> None:
    """Write ``<sha256>  <name>`` (the ``sha256sum`` format), atomically."""
    with atomic_write(_sidecar(dest), "w") as f:
        f.write(f"{sha256}  {dest.name}\n")


def _mismatch(found: _Digests, sha256: str | None, md5: str | None, recorded: str | None):
    """What is wrong with a file's digests (a sentence), or None when all agree."""
    if sha256 and found.sha256 != sha256:
        return f"SHA-256 {found.sha256}, expected {sha256}"
    if not sha256 and recorded and found.sha256 != recorded:
        return f"SHA-256 {found.sha256}, but {recorded} was recorded when it was downloaded"
    if md5 and found.md5 != md5:
        return f"MD5 {found.md5}, expected {md5}"
    return None


def download(url: str, dest, sha256: str | None = None, md5: str | None = None,
             progress: bool = True) -> Path:
    """Download ``url`` to the file ``dest``, verify it, and return ``dest``.

    * **Reuse.** If ``dest`` already exists and passes the check below, nothing is
      downloaded. A file that fails it is downloaded again.
    * **Verification.** Every digest given (``sha256``, ``md5``) is checked on every
      call, on download and on reuse alike. After a download the file's SHA-256 is also
      recorded in a sidecar ``<dest>.sha256``; on reuse without a ``sha256`` the file
      must match it too, which catches later damage even when no digest is known. A file
      found at ``dest`` with no digest given and none recorded cannot be checked, so it is
      downloaded again (and recorded) rather than trusted.
      (Every file dlcourse itself downloads has a known SHA-256.)
    * **Atomic.** The bytes go to a temporary file in the same folder; only after it
      is verified does ``os.replace`` move it to ``dest``. A failed or interrupted
      download never leaves a half file under the final name, and never touches a
      file already at ``dest``. A download cut short (fewer bytes than the server
      announced) is an error, not a file.

    Args:
        url: ``https://...``, ``http://...`` or ``file://...``.
        dest: the final path (its folder is created if needed).
        sha256, md5: expected hex digests (either, both or neither).
        progress: show a progress bar (tqdm).

    Raises:
        DownloadError: the server could not be reached (e.g. offline) or refused, or
            the connection closed before the whole file arrived.
        ChecksumError: the downloaded bytes do not match the checksum.
    """
    return _download(url, Path(dest), sha256, md5, progress,
                     by_hand=f"download it by hand, check it, and put it at {dest}")


def _download(url, dest: Path, sha256, md5, progress, by_hand) -> Path:
    """:func:`download`; `by_hand` completes "... or <by_hand>" in the error messages."""
    sha256 = sha256.lower() if sha256 else None
    md5 = md5.lower() if md5 else None

    if dest.exists():
        recorded = _recorded_sha256(dest)
        found = _digest_file(dest, with_md5=bool(md5))   # a given MD5 is always checked
        problem = _mismatch(found, sha256, md5, recorded)
        if not (sha256 or md5 or recorded):   # nothing to check it against: never blessed
            problem = ("no digest was given and none was recorded when it was downloaded, "
                       "so it cannot be told from a damaged file")
        if problem is None:
            if recorded != found.sha256:
                _write_sidecar(dest, found.sha256)
            return dest
        print(f"dlcourse: {dest} cannot be reused ({problem}); downloading it again.",
              file=sys.stderr)

    created = [p for p in (dest.parent, *dest.parent.parents) if not p.exists()]  # deepest first
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        # Written to a temporary file beside dest, which becomes dest only once it is verified.
        with atomic_write(dest) as out:
            found = _fetch(url, out, with_md5=bool(md5), progress=progress, dest=dest,
                           by_hand=by_hand)
            problem = _mismatch(found, sha256, md5, None)
            if problem is not None:
                raise ChecksumError(
                    f"The file downloaded from {url} has {problem}. It was deleted and nothing "
                    f"was saved as {dest}. The download may have been corrupted (try again), or "
                    f"the mirror now serves a different file. You can also {by_hand}.")
    except BaseException:
        for folder in created:           # a failed download leaves no empty cache folder
            try:
                folder.rmdir()           # only if empty: never what something else put there
            except OSError:
                break
        raise
    _write_sidecar(dest, found.sha256)
    return dest


def _fetch(url: str, out, with_md5: bool, progress: bool, dest: Path,
           by_hand: str) -> _Digests:
    """Stream `url` into the open file `out` (which becomes `dest`), hashing and counting
    the bytes as it goes; a download shorter than the announced Content-Length raises."""
    from tqdm.auto import tqdm

    def offline(reason):
        return DownloadError(f"Could not download {url} ({reason}). Are you offline, or "
                             f"behind a firewall? Connect and try again, or {by_hand}. "
                             f"{OFFLINE_HINT}")

    def cut_short(received, expected):
        return DownloadError(f"The download of {url} was cut short: the connection closed "
                             f"after {received} of {expected} bytes. Nothing was saved as "
                             f"{dest}; run again to retry, or {by_hand}.")

    sha = hashlib.sha256()
    md5 = hashlib.md5(usedforsecurity=False) if with_md5 else None
    received = 0
    try:
        with urlopen(Request(url, headers={"User-Agent": "dlcourse"}), timeout=60) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=dest.name, disable=not progress) as bar:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    out.write(chunk)
                    sha.update(chunk)
                    if md5 is not None:
                        md5.update(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
    except HTTPError as err:
        raise DownloadError(f"The server answered HTTP {err.code} ({err.reason}) for {url}: "
                            f"the file may have moved. You can {by_hand}. "
                            f"{OFFLINE_HINT}") from err
    except URLError as err:
        raise offline(err.reason) from err
    except (TimeoutError, ConnectionError, IncompleteRead) as err:
        raise offline(f"connection lost: {err}") from err
    if total is not None and received < total:
        raise cut_short(received, total)
    return _Digests(sha.hexdigest(), md5.hexdigest() if md5 else None)


class Remote(NamedTuple):
    """A file to download: its name, URL, size in bytes and checksums."""
    filename: str
    url: str
    size: int
    sha256: str
    md5: str


def fetch_remote(remote: Remote, folder: Path, progress: bool, siblings=()) -> Path:
    """Download ``remote`` into ``folder`` (checked). ``siblings``: the set's other files, named
    in the advice for getting them by hand, so that one folder ends up holding them all."""
    names = ", ".join(f"{r.filename} ({r.size} bytes)" for r in (remote, *siblings))
    by_hand = (f"download {names} by hand into one folder and pass path=that_folder (from the "
               f"command line: dlcourse train --data-path that_folder)")
    return _download(remote.url, folder / remote.filename, remote.sha256, remote.md5,
                     progress, by_hand)
