"""The real data sets: the bundled 8x8 digits, MNIST-1D, MNIST, Fashion-MNIST and CIFAR-10.

Notebook ``04a_mlp_on_digits`` introduces :func:`load_digits` (bundled with scikit-learn, no
download). :func:`load_mnist1d` generates Greydanus's MNIST-1D from code with a seed (no
download either). :func:`load_mnist`, :func:`load_fashion_mnist` and :func:`load_cifar10`,
named in ``07_training_a_cnn``, download their files once (:mod:`dlcourse.data.download`) and
read them with the parsers of :mod:`dlcourse.data.formats`.

Every loader returns the same thing: with ``split=None`` a :class:`~dlcourse.data.splits.Dataset`
holding train / val / test, else one ``(X, y)`` pair; ``X`` float32, ``y`` int64 ``(N,)``;
every split fixed and seeded.
"""
from __future__ import annotations

import functools
import io
import tarfile
from pathlib import Path

import numpy as np

from .download import Remote, data_dir, fetch_remote
from .formats import (CIFAR10_BATCH_SIZE, CIFAR10_RECORD, DataFormatError, read_cifar10_bin,
                      read_idx)
from .splits import Dataset, check_split, check_val_size, finish_split, stratified_holdout

__all__ = ["load_digits", "load_mnist1d", "load_mnist", "load_fashion_mnist", "load_cifar10",
           "DIGITS_CLASSES", "MNIST_CLASSES", "FASHION_MNIST_CLASSES", "CIFAR10_CLASSES",
           "DIGITS_SIZES", "MNIST1D_SIZES", "MNIST1D_LENGTH", "MNIST_FILES", "FASHION_MNIST_FILES",
           "CIFAR10_FILE"]

DIGITS_CLASSES = tuple(str(d) for d in range(10))
MNIST_CLASSES = DIGITS_CLASSES
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")


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
        check_split(split)
    from sklearn.datasets import load_digits as sklearn_digits  # ships with sklearn
    raw = sklearn_digits()
    X = (raw.data / 16.0).astype(np.float32)           # (1797, 64), in [0, 1]
    y = raw.target.astype(np.int64)                     # (1797,)
    if not flat:
        X = X.reshape(-1, 1, 8, 8)                       # (N, C=1, H=8, W=8)

    rest, test = stratified_holdout(y, DIGITS_SIZES["test"])
    train, val = stratified_holdout(y[rest], DIGITS_SIZES["val"])
    train, val = rest[train], rest[val]                  # back to indices into X
    splits = {"train": train, "val": val, "test": test}
    if split is not None:
        return X[splits[split]], y[splits[split]]
    return Dataset(X[train], y[train], X[val], y[val], X[test], y[test],
                   DIGITS_CLASSES, "digits")


# ======================================================================================
# MNIST-1D: generated from code with a seed, no download.
# ======================================================================================
MNIST1D_SIZES = {"train": 3500, "val": 500, "test": 1000}
MNIST1D_LENGTH = 40   # samples in each signal


@functools.lru_cache(maxsize=2)
def _generate_mnist1d(seed):
    """MNIST-1D's own generator, with NumPy's and Python's global random state (which it
    reseeds) put back as they were afterwards. Nothing is downloaded or unpickled. Kept in
    memory for the next call (read-only arrays: the loader hands out copies)."""
    import random

    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args(as_dict=False)
    args.seed = seed
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        raw = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    arrays = (np.asarray(raw["x"], dtype=np.float32), np.asarray(raw["y"], dtype=np.int64),
              np.asarray(raw["x_test"], dtype=np.float32),
              np.asarray(raw["y_test"], dtype=np.int64))
    for a in arrays:
        a.flags.writeable = False
    return arrays


def load_mnist1d(split: str | None = None, *, flat: bool = True, seed: int = 42,
                 val_size: int = MNIST1D_SIZES["val"]):
    """MNIST-1D (Greydanus 2020, "Scaling down deep learning"): 3500 train / 500 val / 1000 test.

    Each sample is a 1-D signal of 40 values: one of ten digit-like templates, padded,
    translated, scaled, sheared and noised. Small enough to train on a CPU in seconds, hard
    enough that architecture and regularization matter (the paper reports about 32 % test
    accuracy for logistic regression, 68 % for an MLP and 94 % for a CNN).

    It is generated from code by the ``mnist1d`` package (Apache-2.0) with ``seed`` (42 by
    default, the package's own default), never downloaded and never unpickled: 5000 signals,
    500 per digit, of which the first 4000 are train and the last 1000 test (its own 80/20
    split); ``val_size`` of the train signals (500 by default) are moved to a validation
    split, stratified and seeded (``SPLIT_SEED = 0``) as in the other loaders. The generator
    reseeds NumPy's and Python's global random state; both are put back as they were.
    Nothing is written to disk; the last two sets generated are kept in memory, so a second
    call is instant (each call returns fresh copies).

    Args:
        split: ``None`` for a :class:`Dataset`, or ``"train"``, ``"val"``, ``"test"``.
        flat: ``True`` (default) gives ``X`` of shape ``(N, 40)`` for an MLP; ``False``
            gives ``(N, 1, 1, 40)``, the signal as a 1x40 image with one channel, for a
            CNN (the same numbers: ``X.reshape(N, 1, 1, 40)``).
        seed: the generator's seed (a non-negative int).
        val_size: signals moved from train to val (0 for none).

    Returns:
        ``X`` float32 (the generator centres the whole set and scales it to standard
        deviation 1), ``y`` int64 ``(N,)`` in 0..9.

    Example::

        (X_train, y_train), (X_val, y_val), (X_test, y_test) = dl.data.load_mnist1d()
        X_train.shape   # (3500, 40)
    """
    if split is not None:
        check_split(split)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"load_mnist1d(seed=...) must be an int >= 0, got {seed!r}.")
    X_train, y_train, X_test, y_test = (a.copy() for a in _generate_mnist1d(int(seed)))
    # X_train (4000, 40), y_train (4000,), X_test (1000, 40), y_test (1000,)
    val_size = check_val_size(val_size, len(y_train), "mnist1d")
    if not flat:
        X_train = X_train.reshape(len(X_train), 1, 1, -1)         # (N, C=1, H=1, W=40)
        X_test = X_test.reshape(len(X_test), 1, 1, -1)
    return finish_split(X_train, y_train, X_test, y_test, val_size, split, DIGITS_CLASSES,
                        "mnist1d")


# ======================================================================================
# MNIST and Fashion-MNIST.
# ======================================================================================
# SHA-256 values as published in tensorflow/datasets' url_checksums (and used by many other
# loaders); MD5 values as published by torchvision and the dataset authors. Sizes in bytes.
_MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/"


def _remote(base_url, filename, size, sha256, md5) -> Remote:
    return Remote(filename, base_url + filename, size, sha256, md5)


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


def _find_local(folder: Path, remote: Remote) -> Path:
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
        check_split(split)
    if path is None:
        folder = data_dir() / name
        locate = lambda key: fetch_remote(files[key], folder, progress,   # noqa: E731
                                           [r for k, r in files.items() if k != key])
    else:
        folder = Path(path).expanduser()
        locate = lambda key: _find_local(folder, files[key])               # noqa: E731

    X_train = y_train = X_test = y_test = None
    if split != "test":
        X_train, y_train = _load_idx_pair(locate("train_images"), locate("train_labels"), name)
        val_size = check_val_size(val_size, len(y_train), name)
    if split is None or split == "test":
        X_test, y_test = _load_idx_pair(locate("test_images"), locate("test_labels"), name)
    if flat:
        X_train = None if X_train is None else X_train.reshape(len(X_train), -1)
        X_test = None if X_test is None else X_test.reshape(len(X_test), -1)
    return finish_split(X_train, y_train, X_test, y_test, val_size, split, classes, name)


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
                if members[n].size > CIFAR10_BATCH_SIZE * CIFAR10_RECORD:
                    raise DataFormatError(
                        f"{source}: its member {n} declares {members[n].size} bytes, more "
                        f"than a CIFAR-10 batch ({CIFAR10_BATCH_SIZE} images of "
                        f"{CIFAR10_RECORD} bytes). The archive is damaged or not CIFAR-10.")
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
        check_split(split)
    if path is None:
        source = fetch_remote(CIFAR10_FILE, data_dir() / "cifar10", progress)
    else:
        source = _cifar_source(path)
    X_train = y_train = X_test = y_test = None
    if split != "test":
        X_train, y_train = _cifar_batches(source, _CIFAR_TRAIN)
        val_size = check_val_size(val_size, len(y_train), "cifar10")
    if split is None or split == "test":
        X_test, y_test = _cifar_batches(source, _CIFAR_TEST)
    if flat:
        X_train = None if X_train is None else X_train.reshape(len(X_train), -1)
        X_test = None if X_test is None else X_test.reshape(len(X_test), -1)
    return finish_split(X_train, y_train, X_test, y_test, val_size, split, CIFAR10_CLASSES,
                   "cifar10")
