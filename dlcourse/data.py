"""Data: toy sets, real image sets, and the few tools that feed them to a model.

Notebook ``01_perceptron`` uses the synthetic 2-D sets (:func:`make_blobs`,
:func:`make_xor`, :func:`make_circles`, :func:`make_spirals`). Notebook
``04_mlp_on_digits`` introduces :func:`load_digits`, :class:`Standardizer`,
:func:`one_hot` and :func:`batches`. The larger image sets (:func:`load_mnist`,
:func:`load_fashion_mnist`, :func:`load_cifar10`) are downloaded once into a cache
folder and read with small parsers written here (:func:`read_idx`,
:func:`read_cifar10_bin`) -- no pickle, no framework.

Conventions, everywhere in this module:

* images are ``float32`` in ``[0, 1]``, laid out ``(N, C, H, W)``; flat features are
  ``(N, D)``;
* labels are ``int64`` class indices, shape ``(N,)``;
* every split is fixed and seeded, so a number in a notebook can be reproduced;
* everything here runs on NumPy (the CPU). The GPU enters in one place only:
  ``batches(..., device="gpu")`` copies each batch there.

Where downloads go: the folder named by the environment variable ``DLCOURSE_DATA``, or
else the user's cache folder (``$XDG_CACHE_HOME/dlcourse``, i.e. ``~/.cache/dlcourse``
on Linux; ``~/Library/Caches/dlcourse`` on macOS; ``%LOCALAPPDATA%\\dlcourse`` on
Windows). See :func:`data_dir`.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import sys
import tarfile
from dataclasses import dataclass
from http.client import IncompleteRead
from pathlib import Path
from typing import NamedTuple
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

import numpy as np

from ._io import atomic_write
from .backend import get_array_module, rng, to_device

__all__ = [
    "Dataset", "DataFormatError", "DownloadError", "ChecksumError",
    "load_digits", "make_blobs", "make_xor", "make_circles", "make_spirals", "POINT_SETS",
    "load_mnist", "load_fashion_mnist", "load_cifar10",
    "read_idx", "read_cifar10_bin", "download", "data_dir",
    "Standardizer", "one_hot", "batches",
]

SPLIT_SEED = 0   # the seed of every train/validation/test split made in this module

DIGITS_CLASSES = tuple(str(d) for d in range(10))
MNIST_CLASSES = DIGITS_CLASSES
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")

_OFFLINE_HINT = ("dl.data.load_digits() needs no download: its 1797 8x8 digits ship "
                 "with scikit-learn.")


class DataFormatError(ValueError):
    """A data file is not what it should be (wrong header, wrong size, bad labels)."""


class DownloadError(OSError):
    """A file could not be downloaded (the message says why and what to do instead)."""


class ChecksumError(DownloadError):
    """A downloaded file does not have the checksum it should have."""


# ======================================================================================
# The result of a loader.
# ======================================================================================
@dataclass(eq=False)   # comparing arrays with == is ambiguous: compare fields yourself
class Dataset:
    """A dataset already split into train / validation / test.

    ``X_*`` are float32 arrays ``(N, D)`` or ``(N, C, H, W)``; ``y_*`` are int64 ``(N,)``.
    ``classes[k]`` is the name of label ``k``.

    It unpacks into three ``(X, y)`` pairs::

        (X_train, y_train), (X_val, y_val), (X_test, y_test) = dl.data.load_digits()
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    classes: tuple
    name: str

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The ``(X, y)`` pair of split ``"train"``, ``"val"`` or ``"test"``."""
        name = _check_split(name)
        return getattr(self, f"X_{name}"), getattr(self, f"y_{name}")

    def __iter__(self):
        yield self.split("train")
        yield self.split("val")
        yield self.split("test")

    def __repr__(self) -> str:  # the default repr would print every pixel
        parts = ", ".join(f"{s}={getattr(self, 'X_' + s).shape}" for s in ("train", "val", "test"))
        return f"Dataset({self.name!r}, {parts}, classes={self.num_classes})"


_SPLITS = ("train", "val", "test")


def _check_split(split):
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {_SPLITS} (or None for all three), "
                         f"got {split!r}.")
    return split


def _stratified_holdout(y: np.ndarray, n_holdout: int, seed: int = SPLIT_SEED):
    """Indices ``(keep, holdout)`` with ``len(holdout) == n_holdout``, both sorted.

    Stratified: every class keeps (almost exactly) its share in both parts. Tiny data
    where that is impossible (fewer held-out samples than classes, or a class with one
    sample) gets a plain seeded random split instead.
    """
    if n_holdout == 0:
        return np.arange(len(y)), np.arange(0)
    from sklearn.model_selection import train_test_split  # imported late: it is slow
    counts = np.unique(y, return_counts=True)[1]
    can_stratify = min(n_holdout, len(y) - n_holdout) >= len(counts) and counts.min() >= 2
    keep, holdout = train_test_split(np.arange(len(y)), test_size=n_holdout,
                                     stratify=y if can_stratify else None, random_state=seed)
    return np.sort(keep), np.sort(holdout)


def _check_val_size(val_size, n_train, name):
    if isinstance(val_size, bool) or not isinstance(val_size, (int, np.integer)):
        raise TypeError(f"val_size must be an int (a number of images), got {val_size!r}.")
    if not 0 <= val_size < n_train:
        raise ValueError(f"{name}: val_size={val_size} must be at least 0 and smaller than "
                         f"the {n_train} training images found. Pass a smaller val_size "
                         f"(0 for no validation split).")
    return int(val_size)


def _finish(X_train, y_train, X_test, y_test, val_size, split, classes, name):
    """Carve the validation split out of train and return what `split` asks for."""
    if split == "test":
        return X_test, y_test
    keep, held = _stratified_holdout(y_train, val_size)
    if split == "train":
        return X_train[keep], y_train[keep]
    if split == "val":
        return X_train[held], y_train[held]
    return Dataset(X_train[keep], y_train[keep], X_train[held], y_train[held],
                   X_test, y_test, classes, name)


# ======================================================================================
# 8x8 digits: bundled with scikit-learn, no download.
# ======================================================================================
DIGITS_SIZES = {"train": 1257, "val": 270, "test": 270}


def load_digits(split: str | None = None, *, flat: bool = True):
    """scikit-learn's 1797 handwritten digits, 8x8 pixels, in a fixed split.

    The split is stratified (each digit keeps its share) and seeded with
    ``SPLIT_SEED = 0``: first 270 test images are set aside, then 270 validation
    images, leaving **1257 train / 270 val / 270 test**. It is the same on every machine.

    Args:
        split: ``None`` for a :class:`Dataset` holding all three splits, or
            ``"train"``, ``"val"``, ``"test"`` for one ``(X, y)`` pair.
        flat: ``True`` (default) gives ``X`` of shape ``(N, 64)`` for an MLP;
            ``False`` gives images ``(N, 1, 8, 8)`` for a CNN.

    Returns:
        ``X`` float32 in ``[0, 1]`` (pixels were 0..16, divided by 16), ``y`` int64
        ``(N,)`` with values 0..9.

    Example::

        (X_train, y_train), (X_val, y_val), (X_test, y_test) = dl.data.load_digits()
        X_train.shape   # (1257, 64)
    """
    if split is not None:
        _check_split(split)
    from sklearn.datasets import load_digits as sklearn_digits  # ships with sklearn
    raw = sklearn_digits()
    X = (raw.data / 16.0).astype(np.float32)           # (1797, 64), in [0, 1]
    y = raw.target.astype(np.int64)                     # (1797,)
    if not flat:
        X = X.reshape(-1, 1, 8, 8)                       # (N, C=1, H=8, W=8)

    rest, test = _stratified_holdout(y, DIGITS_SIZES["test"])
    train, val = _stratified_holdout(y[rest], DIGITS_SIZES["val"])
    train, val = rest[train], rest[val]                  # back to indices into X
    splits = {"train": train, "val": val, "test": test}
    if split is not None:
        return X[splits[split]], y[splits[split]]
    return Dataset(X[train], y[train], X[val], y[val], X[test], y[test],
                   DIGITS_CLASSES, "digits")


# ======================================================================================
# Synthetic 2-D sets for the perceptron and the first MLPs.
# Each returns X float32 (N, 2) and y int64 (N,), in shuffled order.
# ======================================================================================
def _check_n(n, at_least, fn):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < at_least:
        raise ValueError(f"{fn}(n=...) needs an int n >= {at_least} (the number of points), "
                         f"got {n!r}.")
    return int(n)


def _check_noise(noise, fn):
    if not noise >= 0:
        raise ValueError(f"{fn}(noise=...) must be >= 0 (a standard deviation), got {noise!r}.")
    return float(noise)


def _check_turns(turns):
    ok = (not isinstance(turns, bool) and isinstance(turns, (int, float, np.integer, np.floating))
          and np.isfinite(turns) and turns > 0)
    if not ok:
        raise ValueError(f"make_spirals(turns=...) is the number of revolutions of each arm and "
                         f"must be a positive finite number, got {turns!r}. Try turns=1.5 for "
                         f"a harder set (the default, 2/pi ~ 0.64, is the CS231n set).")
    return float(turns)


def _shuffled(X, y, gen):
    order = gen.permutation(len(y))
    return X[order].astype(np.float32), y[order].astype(np.int64)


def _class_sizes(n, k):
    """Split n points over k classes as evenly as possible: [n//k + 1, ..., n//k]."""
    return [n // k + (1 if c < n % k else 0) for c in range(k)]


def make_blobs(n: int = 200, *, separable: bool = True, margin: float = 0.5,
               seed: int | None = None):
    """Two Gaussian blobs: class 0 around (-1.5, -1.5), class 1 around (1.5, 1.5).

    With ``separable=True`` the classes are **guaranteed** linearly separable: the line
    ``x0 + x1 = 0`` separates them, and every point lies at least ``margin`` from it
    (points closer than that are drawn again). So a perceptron always converges.
    With ``separable=False`` the blobs are wider and overlap: no line gets every point
    right, and the perceptron never stops updating.

    Returns ``X`` float32 ``(n, 2)``, ``y`` int64 ``(n,)`` in ``{0, 1}`` (use
    ``2 * y - 1`` for ``{-1, +1}`` labels). ``seed=None`` uses the generator set by
    ``dl.manual_seed``.
    """
    n = _check_n(n, 2, "make_blobs")
    gen = rng(seed)
    w = np.array([1.0, 1.0]) / np.sqrt(2.0)            # unit normal of the separating line
    std = 1.0 if separable else 1.7
    X_parts, y_parts = [], []
    for label, m in enumerate(_class_sizes(n, 2)):
        sign = 1.0 if label == 1 else -1.0
        center = sign * np.array([1.5, 1.5])
        kept = np.empty((0, 2))
        while len(kept) < m:                           # rejection sampling (fast: ~90% kept)
            pts = center + std * gen.standard_normal((2 * m, 2))
            if separable:
                pts = pts[sign * (pts @ w) >= margin]  # right side, at least `margin` away
            kept = np.concatenate([kept, pts])
        X_parts.append(kept[:m])
        y_parts.append(np.full(m, label))
    return _shuffled(np.concatenate(X_parts), np.concatenate(y_parts), gen)


def make_xor(n: int = 200, *, noise: float = 0.3, seed: int | None = None):
    """XOR: four clusters at (+-1, +-1); label 1 where the two signs differ.

    No line separates the classes (the perceptron's famous failure); one hidden layer
    does. ``noise`` is the standard deviation of each cluster.

    Returns ``X`` float32 ``(n, 2)``, ``y`` int64 ``(n,)`` in ``{0, 1}``.
    """
    n = _check_n(n, 4, "make_xor")
    noise = _check_noise(noise, "make_xor")
    gen = rng(seed)
    corners = np.array([[-1, -1], [1, 1], [-1, 1], [1, -1]], dtype=np.float64)
    which = np.concatenate([np.full(m, c) for c, m in enumerate(_class_sizes(n, 4))])
    X = corners[which] + noise * gen.standard_normal((n, 2))
    y = (corners[which, 0] != corners[which, 1]).astype(np.int64)   # signs differ -> 1
    return _shuffled(X, y, gen)


def make_circles(n: int = 200, *, noise: float = 0.05, factor: float = 0.5,
                 seed: int | None = None):
    """Two rings: class 0 on the circle of radius 1, class 1 on radius ``factor``.

    Returns ``X`` float32 ``(n, 2)``, ``y`` int64 ``(n,)`` in ``{0, 1}``.
    """
    n = _check_n(n, 2, "make_circles")
    noise = _check_noise(noise, "make_circles")
    if not 0 < factor < 1:
        raise ValueError(f"make_circles(factor=...) is the inner radius and must be "
                         f"between 0 and 1, got {factor!r}.")
    gen = rng(seed)
    X_parts, y_parts = [], []
    for label, (m, radius) in enumerate(zip(_class_sizes(n, 2), (1.0, factor))):
        angle = gen.uniform(0, 2 * np.pi, m)
        ring = radius * np.stack([np.cos(angle), np.sin(angle)], axis=1)
        X_parts.append(ring + noise * gen.standard_normal((m, 2)))
        y_parts.append(np.full(m, label))
    return _shuffled(np.concatenate(X_parts), np.concatenate(y_parts), gen)


def make_spirals(n: int = 300, *, classes: int = 2, noise: float = 0.2,
                 turns: float = 2 / np.pi, seed: int | None = None):
    """Interleaved spiral arms, one per class (the CS231n "spiral" set).

    Point ``i`` of class ``k`` sits at radius ``r`` (0 to 1 along the arm) and angle
    ``theta = 2*pi*k/classes + 2*pi*turns*r + noise * N(0, 1)``.

    ``turns`` is how many revolutions each arm makes from the centre to radius 1. The
    default ``2/pi`` (about 0.64 of a revolution: ``theta`` grows by 4 radians along the
    arm, as in the CS231n set) gives arms that barely wrap; a larger value such as
    ``turns=1.5`` winds them around each other, a harder set to separate.

    Returns ``X`` float32 ``(n, 2)``, ``y`` int64 ``(n,)`` in ``{0, ..., classes-1}``.
    """
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 2:
        raise ValueError(f"make_spirals(classes=...) needs an int >= 2, got {classes!r}.")
    n = _check_n(n, classes, "make_spirals")
    noise = _check_noise(noise, "make_spirals")
    turns = _check_turns(turns)
    gen = rng(seed)
    X_parts, y_parts = [], []
    for k, m in enumerate(_class_sizes(n, classes)):
        r = np.linspace(0.0, 1.0, m)
        # The default turns makes 2 * np.pi * turns exactly 4.0: the same points, bit for bit,
        # as before turns= existed (stored notebook outputs rely on it).
        theta = 2 * np.pi * k / classes + 2 * np.pi * turns * r + noise * gen.standard_normal(m)
        X_parts.append(np.stack([r * np.sin(theta), r * np.cos(theta)], axis=1))
        y_parts.append(np.full(m, k))
    return _shuffled(np.concatenate(X_parts), np.concatenate(y_parts), gen)


#: The 2-D point sets by name: ``POINT_SETS[name](n, seed=...)`` gives ``(X, y)``.
POINT_SETS = {"blobs": make_blobs, "xor": make_xor, "circles": make_circles,
              "spirals": make_spirals}


# ======================================================================================
# File formats: IDX (MNIST, Fashion-MNIST) and CIFAR-10 binary.
# ======================================================================================
# IDX header: 2 zero bytes, 1 byte type code, 1 byte number of dimensions, then one
# big-endian uint32 per dimension, then the data, big-endian, C order.
_IDX_DTYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
               0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def _read_bytes(source) -> tuple[bytes, str]:
    """All bytes of a path, a binary file object, or bytes; plus a name for messages."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "<bytes>"
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return f.read(), str(source)
    if hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, bytes):
            raise TypeError("read_idx/read_cifar10_bin need a file opened in binary mode "
                            "('rb'), got a text file.")
        return data, getattr(source, "name", "<file object>")
    raise TypeError(f"Expected a path, a binary file object or bytes, got "
                    f"{type(source).__name__}.")


def _gunzip_if_needed(data: bytes, name: str) -> bytes:
    if data[:2] == b"\x1f\x8b":                          # the gzip magic number
        try:
            return gzip.decompress(data)
        except (EOFError, OSError, gzip.BadGzipFile) as err:
            raise DataFormatError(f"{name} is a damaged gzip file ({err}). The download "
                                  f"was probably cut short: delete it and load again.") from None
    return data


def read_idx(source) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not.

    Args:
        source: a path, a binary file object, or the bytes themselves. Gzip is detected
            from the content (magic bytes ``1f 8b``), not from the file name.

    Returns:
        A NumPy array of the shape and type the header declares, in native byte order:
        e.g. ``uint8 (60000, 28, 28)`` for MNIST images, ``uint8 (60000,)`` for labels.

    Raises:
        DataFormatError: the header is wrong, or the data is shorter or longer than
            the header promises.
    """
    data, name = _read_bytes(source)
    data = _gunzip_if_needed(data, name)
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataFormatError(f"{name} is not an IDX file: it should start with two zero "
                              f"bytes, then a type code and a number of dimensions, but it "
                              f"starts with {data[:4].hex(' ') or 'nothing'}. Is it an MNIST "
                              f"file, and is it complete?")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise DataFormatError(f"{name}: unknown IDX type code 0x{code:02X} (known: {known}).")
    dtype = _IDX_DTYPES[code]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataFormatError(f"{name} is truncated: its header declares {ndim} dimensions "
                              f"({header} header bytes) but the file has {len(data)} bytes.")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(data) - header
    if found != expected:
        what = "truncated" if found < expected else "longer than its header says"
        raise DataFormatError(f"{name} is {what}: the header declares shape {shape} of "
                              f"{dtype.name}, i.e. {expected} data bytes, but {found} follow. "
                              f"A cut-short download is the usual cause: delete the file "
                              f"and load again.")
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="))        # a writable, native-order copy


CIFAR10_RECORD = 1 + 3 * 32 * 32    # 1 label byte, then 1024 red, 1024 green, 1024 blue


def read_cifar10_bin(source) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 binary batch (e.g. ``data_batch_1.bin``): no pickle involved.

    Each record is 3073 bytes: the label (0..9), then the 32x32 red plane, the green
    plane and the blue plane, each row by row.

    Args:
        source: a path, a binary file object, or bytes.

    Returns:
        ``images`` uint8 ``(N, 3, 32, 32)`` and ``labels`` int64 ``(N,)``.
    """
    data, name = _read_bytes(source)
    if len(data) == 0 or len(data) % CIFAR10_RECORD:
        raise DataFormatError(f"{name} is not a CIFAR-10 binary batch: its size, {len(data)} "
                              f"bytes, should be a positive multiple of {CIFAR10_RECORD} "
                              f"(1 label byte + 3072 pixel bytes per image; a full batch is "
                              f"10000 images). The file may be cut short, or be the python "
                              f"(pickle) version: dlcourse reads cifar-10-binary.tar.gz.")
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, CIFAR10_RECORD)   # (N, 3073)
    labels = records[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise DataFormatError(f"{name}: found label {labels.max()}, but CIFAR-10 labels are "
                              f"0..9. Is this a CIFAR-100 file (2 label bytes per record)?")
    images = records[:, 1:].reshape(-1, 3, 32, 32).copy()                       # (N, C, H, W)
    return images, labels


# ======================================================================================
# Downloading, once, into a cache folder.
# ======================================================================================
def data_dir() -> Path:
    """The folder downloads go to: ``$DLCOURSE_DATA``, else the user's cache folder.

    ``~/.cache/dlcourse`` on Linux (or ``$XDG_CACHE_HOME/dlcourse``),
    ``~/Library/Caches/dlcourse`` on macOS, ``%LOCALAPPDATA%\\dlcourse`` on Windows.
    The folder is not created here; :func:`download` creates it when needed.
    """
    if os.environ.get("DLCOURSE_DATA"):
        return Path(os.environ["DLCOURSE_DATA"]).expanduser()
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    return base / "dlcourse"


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
      must match it too, which catches later damage even when no digest is known.
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
        if problem is None:
            if recorded != found.sha256:
                _write_sidecar(dest, found.sha256)
            return dest
        print(f"dlcourse: {dest} is damaged or incomplete ({problem}); "
              f"downloading it again.", file=sys.stderr)

    dest.parent.mkdir(parents=True, exist_ok=True)
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
                             f"{_OFFLINE_HINT}")

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
                            f"{_OFFLINE_HINT}") from err
    except URLError as err:
        raise offline(err.reason) from err
    except (TimeoutError, ConnectionError, IncompleteRead) as err:
        raise offline(f"connection lost: {err}") from err
    if total is not None and received < total:
        raise cut_short(received, total)
    return _Digests(sha.hexdigest(), md5.hexdigest() if md5 else None)


# ======================================================================================
# MNIST and Fashion-MNIST.
# ======================================================================================
class _Remote(NamedTuple):
    """A file to download: its name, URL, size in bytes and checksums."""
    filename: str
    url: str
    size: int
    sha256: str
    md5: str


# SHA-256 values as published in tensorflow/datasets' url_checksums (and used by many other
# loaders); MD5 values as published by torchvision and the dataset authors. Sizes in bytes.
_MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/"


def _remote(base_url, filename, size, sha256, md5) -> _Remote:
    return _Remote(filename, base_url + filename, size, sha256, md5)


MNIST_FILES = {
    "train_images": _remote(
        _MNIST_URL, "train-images-idx3-ubyte.gz", 9912422,
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    "train_labels": _remote(
        _MNIST_URL, "train-labels-idx1-ubyte.gz", 28881,
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "d53e105ee54ea40749a09fcbcd1e9432"),
    "test_images": _remote(
        _MNIST_URL, "t10k-images-idx3-ubyte.gz", 1648877,
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "9fb629c4189551a2d022fa330f9573f3"),
    "test_labels": _remote(
        _MNIST_URL, "t10k-labels-idx1-ubyte.gz", 4542,
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        "ec29112dd5afa0611ce80d1b7f02629c"),
}

FASHION_MNIST_FILES = {
    "train_images": _remote(
        _FASHION_URL, "train-images-idx3-ubyte.gz", 26421880,
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
    "train_labels": _remote(
        _FASHION_URL, "train-labels-idx1-ubyte.gz", 29515,
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        "25c81989df183df01b3e8a0aad5dffbe"),
    "test_images": _remote(
        _FASHION_URL, "t10k-images-idx3-ubyte.gz", 4422102,
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        "bef4ecab320f06d8554ea6380940ec79"),
    "test_labels": _remote(
        _FASHION_URL, "t10k-labels-idx1-ubyte.gz", 5148,
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        "bb300cfdad3c16e7a12a480ee83cd310"),
}

CIFAR10_FILE = _remote(
    _CIFAR10_URL, "cifar-10-binary.tar.gz", 170052171,
    "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
    "c32a1d4ab5d03f1284b67883e8d87530")


def _fetch_remote(remote: _Remote, folder: Path, progress: bool, siblings=()) -> Path:
    """Download ``remote`` into ``folder`` (checked). ``siblings``: the set's other files, named
    in the advice for getting them by hand, so that one folder ends up holding them all."""
    names = ", ".join(f"{r.filename} ({r.size} bytes)" for r in (remote, *siblings))
    by_hand = (f"download {names} by hand into one folder and pass path=that_folder (from the "
               f"command line: dlcourse train --data-path that_folder)")
    return _download(remote.url, folder / remote.filename, remote.sha256, remote.md5,
                     progress, by_hand)


def _find_local(folder: Path, remote: _Remote) -> Path:
    """A user-supplied file: `name.gz`, or unzipped `name`, or Kaggle-style `name.idx3`."""
    gz = remote.filename
    plain = gz[:-3] if gz.endswith(".gz") else gz
    for candidate in (gz, plain, plain.replace("-idx", ".idx")):
        if (folder / candidate).is_file():
            return folder / candidate
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    where = (f"the folder holds {present}" if present is not None
             else "that folder does not exist")
    raise FileNotFoundError(f"Looked for {gz} (or {plain}) in {folder}, but {where}. Pass the "
                            f"folder that holds the four MNIST-format files, or leave path=None "
                            f"to download them.")


def _load_idx_pair(images_file, labels_file, name, side=28):
    """Images float32 (N, 1, side, side) in [0, 1] and labels int64 (N,), checked."""
    images = read_idx(images_file)
    labels = read_idx(labels_file)
    if images.ndim != 3 or images.shape[1:] != (side, side) or images.dtype != np.uint8:
        raise DataFormatError(f"{name}: expected uint8 images of shape (N, {side}, {side}) in "
                              f"{images_file}, found {images.dtype} {images.shape}. Are the "
                              f"image and label files swapped?")
    if labels.ndim != 1 or len(labels) != len(images):
        raise DataFormatError(f"{name}: {images_file} holds {len(images)} images but "
                              f"{labels_file} holds labels of shape {labels.shape}; expected "
                              f"({len(images)},). Are the files from the same split?")
    if labels.size and labels.max() > 9:
        raise DataFormatError(f"{name}: labels must be 0..9, found {labels.max()} in "
                              f"{labels_file}.")
    X = images.reshape(-1, 1, side, side).astype(np.float32)
    X /= 255.0                                           # in place: no second big copy
    return X, labels.astype(np.int64)


def _load_idx_dataset(name, files, classes, split, flat, path, val_size, progress):
    if split is not None:
        _check_split(split)
    if path is None:
        folder = data_dir() / name
        locate = lambda key: _fetch_remote(files[key], folder, progress,   # noqa: E731
                                           [r for k, r in files.items() if k != key])
    else:
        folder = Path(path).expanduser()
        locate = lambda key: _find_local(folder, files[key])               # noqa: E731

    X_train = y_train = X_test = y_test = None
    if split != "test":
        X_train, y_train = _load_idx_pair(locate("train_images"), locate("train_labels"), name)
        val_size = _check_val_size(val_size, len(y_train), name)
    if split is None or split == "test":
        X_test, y_test = _load_idx_pair(locate("test_images"), locate("test_labels"), name)
    if flat:
        X_train = None if X_train is None else X_train.reshape(len(X_train), -1)
        X_test = None if X_test is None else X_test.reshape(len(X_test), -1)
    return _finish(X_train, y_train, X_test, y_test, val_size, split, classes, name)


def load_mnist(split: str | None = None, *, flat: bool = False, path=None,
               val_size: int = 5000, progress: bool = True):
    """MNIST handwritten digits, 28x28: 55000 train / 5000 val / 10000 test.

    The validation split is carved from the official 60000 training images, stratified
    and seeded (``SPLIT_SEED = 0``); the official 10000 test images are the test split.

    The four files are downloaded once from the ossci-datasets mirror into
    ``data_dir() / "mnist"`` and checked by SHA-256 (see :func:`download`).
    ``path="/my/folder"`` reads files you already have instead (``.gz`` or unzipped;
    they are not checksummed, but their headers and sizes are checked).

    Args:
        split: ``None`` for a :class:`Dataset`, or ``"train"``, ``"val"``, ``"test"``
            for one ``(X, y)`` pair (``"test"`` alone does not read the training files).
        flat: ``False`` (default) gives ``(N, 1, 28, 28)``; ``True`` gives ``(N, 784)``.
        path: a folder holding the MNIST files, or ``None`` to download.
        val_size: images moved from train to val (0 for none).
        progress: show a progress bar while downloading.

    Returns:
        ``X`` float32 in ``[0, 1]`` (pixels divided by 255), ``y`` int64 in 0..9.
    """
    return _load_idx_dataset("mnist", MNIST_FILES, MNIST_CLASSES, split, flat, path,
                             val_size, progress)


def load_fashion_mnist(split: str | None = None, *, flat: bool = False, path=None,
                       val_size: int = 5000, progress: bool = True):
    """Fashion-MNIST (Zalando clothes), 28x28: 55000 train / 5000 val / 10000 test.

    A drop-in replacement for MNIST that is harder to get right. Same format, same
    arguments and same split rule as :func:`load_mnist`; files are downloaded from
    the authors' S3 mirror into ``data_dir() / "fashion_mnist"``. Class names are in
    ``FASHION_MNIST_CLASSES`` (and ``Dataset.classes``).
    """
    return _load_idx_dataset("fashion_mnist", FASHION_MNIST_FILES, FASHION_MNIST_CLASSES,
                             split, flat, path, val_size, progress)


# ======================================================================================
# CIFAR-10 (binary version).
# ======================================================================================
_CIFAR_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
_CIFAR_TEST = ("test_batch.bin",)


def _cifar_batches(source: Path, names) -> tuple[np.ndarray, np.ndarray]:
    """Read the named batches from the .tar.gz (without extracting it) or a folder."""
    if source.is_dir():
        missing = [n for n in names if not (source / n).is_file()]
        if missing:
            raise FileNotFoundError(f"{source} should hold the CIFAR-10 binary batches "
                                    f"{list(names)}, but {missing} are missing.")
        parts = [read_cifar10_bin(source / n) for n in names]
    else:
        parts = []
        with tarfile.open(source, "r:gz") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            for n in names:
                if n not in members:
                    raise DataFormatError(f"{source} has no {n}: is it cifar-10-binary.tar.gz "
                                          f"(not the python or matlab version)?")
                data = tar.extractfile(members[n]).read()
                parts.append(read_cifar10_bin(io.BytesIO(data)))
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    X = images.astype(np.float32)
    X /= 255.0
    return X, labels


def _cifar_source(path) -> Path:
    """Where the user's CIFAR-10 lives: the tar.gz itself, or a folder of .bin files."""
    path = Path(path).expanduser()
    for candidate in (path, path / "cifar-10-batches-bin"):
        if candidate.is_dir() and (candidate / "test_batch.bin").is_file():
            return candidate
    if path.is_file():
        return path
    if (path / CIFAR10_FILE.filename).is_file():
        return path / CIFAR10_FILE.filename
    raise FileNotFoundError(f"No CIFAR-10 binary data at {path}: expected "
                            f"{CIFAR10_FILE.filename}, or a folder (e.g. cifar-10-batches-bin) "
                            f"with data_batch_1.bin ... data_batch_5.bin and test_batch.bin.")


def load_cifar10(split: str | None = None, *, flat: bool = False, path=None,
                 val_size: int = 5000, progress: bool = True):
    """CIFAR-10, 32x32 colour images: 45000 train / 5000 val / 10000 test.

    The validation split is carved from the official 50000 training images, stratified
    and seeded (``SPLIT_SEED = 0``). Reads the *binary* version,
    ``cifar-10-binary.tar.gz`` (162 MiB, downloaded once into ``data_dir() / "cifar10"``
    and checked by SHA-256), straight from the archive with :func:`read_cifar10_bin`:
    no extraction and no pickle. ``path=`` may name that archive, a folder holding it,
    or the extracted ``cifar-10-batches-bin`` folder.

    Args:
        split, flat, path, val_size, progress: as in :func:`load_mnist`.

    Returns:
        ``X`` float32 in ``[0, 1]`` of shape ``(N, 3, 32, 32)`` (``(N, 3072)`` when
        ``flat``), ``y`` int64 in 0..9; names in ``CIFAR10_CLASSES``.
        Note the memory: the 50000 training images take 600 MiB as float32.
    """
    if split is not None:
        _check_split(split)
    if path is None:
        source = _fetch_remote(CIFAR10_FILE, data_dir() / "cifar10", progress)
    else:
        source = _cifar_source(path)
    X_train = y_train = X_test = y_test = None
    if split != "test":
        X_train, y_train = _cifar_batches(source, _CIFAR_TRAIN)
        val_size = _check_val_size(val_size, len(y_train), "cifar10")
    if split is None or split == "test":
        X_test, y_test = _cifar_batches(source, _CIFAR_TEST)
    if flat:
        X_train = None if X_train is None else X_train.reshape(len(X_train), -1)
        X_test = None if X_test is None else X_test.reshape(len(X_test), -1)
    return _finish(X_train, y_train, X_test, y_test, val_size, split, CIFAR10_CLASSES,
                   "cifar10")


# ======================================================================================
# Preprocessing and batching.
# ======================================================================================
class Standardizer:
    """Per-feature standardization: ``(X - mean) / std``, with mean and std from train.

    Fit on the **training split only**, then transform train, val and test with those
    same numbers -- fitting on val or test would leak them into training::

        scaler = Standardizer().fit(X_train)
        X_train, X_val = scaler.transform(X_train), scaler.transform(X_val)

    ``X`` is ``(N, ...)``: statistics are taken over axis 0, so each pixel of
    ``(N, 64)`` or ``(N, 1, 8, 8)`` gets its own mean and std. Features whose training
    std is below ``eps`` (pixels that are always 0, like the corners of the digits)
    are only centred, not scaled: dividing by a std of ~0 would turn the rare test
    image where that pixel is not 0 into huge values. Works on NumPy and CuPy arrays.
    """

    def __init__(self, eps: float = 1e-6):
        self.eps = eps
        self.mean_ = None   # (...) : the shape of one sample, X.shape[1:]
        self.std_ = None

    def fit(self, X) -> "Standardizer":
        """Learn per-feature mean and std from ``X`` ``(N, ...)``; returns ``self``."""
        if X.ndim < 2 or len(X) < 1:
            raise ValueError(f"Standardizer.fit expects X of shape (N, features...) with "
                             f"N >= 1, got shape {X.shape}. For a single feature use "
                             f"X.reshape(-1, 1).")
        xp = get_array_module(X)
        self.mean_ = X.mean(axis=0)
        std = X.std(axis=0)
        self.std_ = xp.where(std < self.eps, xp.ones_like(std), std)   # constant -> 1
        return self

    def _params_for(self, X, method):
        if self.mean_ is None:
            raise RuntimeError(f"Standardizer.{method} was called before fit: call "
                               f"scaler.fit(X_train) first (on the training split only).")
        if X.shape[1:] != self.mean_.shape:
            raise ValueError(f"Standardizer was fit on samples of shape {self.mean_.shape}, "
                             f"but {method} got X of shape {X.shape} (samples "
                             f"{X.shape[1:]}). Was it fit on a different form of the data "
                             f"(flat vs image)?")
        if get_array_module(X) is get_array_module(self.mean_):
            return self.mean_, self.std_
        device = "gpu" if get_array_module(X) is not np else "cpu"
        return to_device(self.mean_, device), to_device(self.std_, device)

    def transform(self, X):
        """``(X - mean) / std``, same shape and dtype as ``X``."""
        mean, std = self._params_for(X, "transform")
        return ((X - mean) / std).astype(X.dtype, copy=False)

    def fit_transform(self, X):
        """``fit(X)`` then ``transform(X)``: use it on the training split only."""
        return self.fit(X).transform(X)

    def inverse_transform(self, X):
        """Undo :meth:`transform`: ``X * std + mean``."""
        mean, std = self._params_for(X, "inverse_transform")
        return (X * std + mean).astype(X.dtype, copy=False)

    def __repr__(self) -> str:
        fitted = "not fitted" if self.mean_ is None else f"fitted on samples {self.mean_.shape}"
        return f"Standardizer({fitted})"


def one_hot(y, num_classes: int, dtype=np.float32):
    """Class indices ``(N,)`` to one-hot rows ``(N, num_classes)``.

    ``one_hot([2, 0], 3)`` is ``[[0, 0, 1], [1, 0, 0]]``. Works on NumPy and CuPy
    arrays (the result lives where ``y`` lives).
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) \
            or num_classes < 1:
        raise ValueError(f"one_hot(num_classes=...) must be a positive int, got {num_classes!r}.")
    xp = get_array_module(y)
    y = xp.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"one_hot expects labels of shape (N,), got shape {y.shape}. "
                         f"If y is already one-hot, use y.argmax(axis=1) to get indices.")
    if y.dtype.kind not in "iu":
        raise TypeError(f"one_hot expects integer class indices, got dtype {y.dtype}. "
                        f"If the values are whole numbers, convert with y.astype(np.int64); "
                        f"if they are scores or probabilities, take y.argmax(axis=1) first.")
    N = y.shape[0]
    out = xp.zeros((N, num_classes), dtype=dtype)
    if N == 0:
        return out
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= num_classes:
        raise ValueError(f"one_hot(num_classes={num_classes}) needs labels in "
                         f"0..{num_classes - 1}, but found labels from {low} to {high}. Is "
                         f"num_classes right, or are the labels 1-based?")
    out[xp.arange(N), y] = 1
    return out


def batches(X, y, batch_size: int, shuffle: bool = True, seed: int | None = None,
            device: str | None = None, drop_last: bool = False, rank: int = 0,
            world_size: int = 1):
    """Mini-batches ``(xb, yb)`` for one epoch: each sample appears exactly once.

    Args:
        X: ``(N, ...)`` NumPy or CuPy array.
        y: ``(N, ...)`` array (labels, targets), same ``N``.
        batch_size: samples per batch ``B``; the last batch may be smaller.
        shuffle: visit the samples in a random order (drawn on the CPU).
        seed: fix that order (the same every call). ``None`` draws from the generator
            set by ``dl.manual_seed``, so each epoch gets a new order.
        device: ``"cpu"`` or ``"gpu"`` to copy each batch there; ``None`` (default)
            leaves batches where ``X`` and ``y`` already are.
        drop_last: skip a final batch smaller than ``batch_size``.
        rank, world_size: data parallel (lesson 13): every rank draws the same order (pass
            the same ``seed``), cuts it into global batches of ``batch_size * world_size``
            and yields its own part of each (see ``dl.distributed.shards``).

    Yields:
        ``xb`` ``(B, ...)`` and ``yb`` ``(B, ...)``.

    Example::

        for epoch in range(10):
            for xb, yb in dl.data.batches(X_train, y_train, 64, device="gpu"):
                ...
    """
    # Checked here, at the call, not at the first next(): the error points at your line.
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"batches(batch_size=...) must be a positive int, got {batch_size!r}.")
    if len(X) != len(y):
        raise ValueError(f"batches: X has {len(X)} samples but y has {len(y)}; they must "
                         f"match (X: {getattr(X, 'shape', '?')}, y: {getattr(y, 'shape', '?')}). "
                         f"Did you pair X_train with y_val?")
    N = len(X)
    order = rng(seed).permutation(N) if shuffle else None
    stop_at = N - N % batch_size if drop_last else N
    if world_size != 1 or rank != 0:           # data parallel: this rank's shard of each batch
        from .distributed import shards
        if shuffle and seed is None:
            raise ValueError("batches(rank=..., world_size=...) needs a seed when shuffling, "
                             "so that every rank draws the same order.")
        groups = shards(np.arange(N) if order is None else order, int(batch_size), rank,
                        world_size, drop_last)
        return ((_take(X, i), _take(y, i)) if device is None else
                (to_device(_take(X, i), device), to_device(_take(y, i), device)) for i in groups)
    return _batch_generator(X, y, int(batch_size), order, stop_at, device)


def _take(a, idx: np.ndarray):
    """``a[idx]`` with the index array on the same device as ``a``."""
    xp = get_array_module(a)
    return a[idx] if xp is np else a[xp.asarray(idx)]


def _batch_generator(X, y, B, order, stop_at, device):
    for start in range(0, stop_at, B):
        if order is None:                       # in order: a slice, no copy
            xb, yb = X[start:start + B], y[start:start + B]
        else:
            idx = order[start:start + B]
            xb, yb = _take(X, idx), _take(y, idx)
        if device is not None:
            xb, yb = to_device(xb, device), to_device(yb, device)
        yield xb, yb
