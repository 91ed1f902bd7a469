"""The data sets ``dlcourse train`` knows by name, and how it loads each one (``predict
--samples`` reads the test split of the same sets)."""
from __future__ import annotations

from ..data import POINT_SETS as _POINT_MAKERS
from .common import CLIError

IMAGE_SETS = ("digits", "mnist", "fashion-mnist", "cifar10")
POINT_SETS = tuple(_POINT_MAKERS)          # the 2-D sets: "blobs", "xor", "circles", "spirals"
SIGNAL_SETS = ("mnist1d",)                 # 1-D signals: a 1xL image for the CNN
TEXT_SETS = ("text",)                      # characters, for the transformer (lesson 15)
DATASETS = IMAGE_SETS + SIGNAL_SETS + POINT_SETS + TEXT_SETS

POINTS_N = 1000          # size of a synthetic 2-D set: 600 train / 200 val / 200 test
POINTS_SEED = 0          # the 2-D sets and their split are the same on every run


def load_data(name: str, flat: bool, progress: bool, path=None):
    """((X_train, y_train), (X_val, y_val), (X_test, y_test)) as float32 / int64 NumPy."""
    from .. import data
    if path is not None and name not in ("mnist", "fashion-mnist", "cifar10"):
        raise CLIError(f"--data-path is for mnist, fashion-mnist and cifar10; {name} needs no files.")
    if name == "digits":
        return tuple(data.load_digits(flat=flat))
    if name == "mnist1d":
        return tuple(data.load_mnist1d(flat=flat))
    if name in POINT_SETS:
        X, y = data.POINT_SETS[name](POINTS_N, seed=POINTS_SEED)          # already in shuffled order
        a, b = int(0.6 * POINTS_N), int(0.8 * POINTS_N)
        return (X[:a], y[:a]), (X[a:b], y[a:b]), (X[b:], y[b:])
    load = {"mnist": data.load_mnist, "fashion-mnist": data.load_fashion_mnist,
            "cifar10": data.load_cifar10}[name]
    try:
        return tuple(load(flat=flat, progress=progress, path=path))
    except data.DownloadError as err:      # its advice, in the command line's words, once
        from ..data.download import OFFLINE_HINT
        message = str(err).replace(OFFLINE_HINT, "--dataset digits needs no download (it "
                                                 "ships with scikit-learn).")
        if "--data-path" not in message:
            message += " On the command line: --data-path FOLDER."
        raise CLIError(message) from None
    except (FileNotFoundError, data.DataFormatError) as err:
        if path is None:
            raise
        message = str(err).replace("leave path=None", "leave out --data-path")
        raise CLIError(f"--data-path {path}: {message}") from None


def binary_subset(split):
    """Keep classes 0 and 1 only (the perceptron's two-class task on a 10-class set)."""
    X, y = split
    keep = y <= 1
    return X[keep].reshape(int(keep.sum()), -1), y[keep]
