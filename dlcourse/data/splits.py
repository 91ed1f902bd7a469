"""The result of a loader: a :class:`Dataset` split into train / validation / test.

Introduced in notebook ``04a_mlp_on_digits`` with :func:`dlcourse.data.load_digits`. Every
split made here is fixed and seeded (``SPLIT_SEED``), so a number in a notebook can be
reproduced; the loaders of :mod:`dlcourse.data.datasets` all build their splits with it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Dataset", "SPLIT_SEED", "SPLITS", "check_split", "stratified_holdout",
           "check_val_size", "finish_split"]

SPLIT_SEED = 0   # the seed of every train/validation/test split made in dlcourse.data
SPLITS = ("train", "val", "test")


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
        name = check_split(name)
        return getattr(self, f"X_{name}"), getattr(self, f"y_{name}")

    def __iter__(self):
        yield self.split("train")
        yield self.split("val")
        yield self.split("test")

    def __repr__(self) -> str:  # the default repr would print every pixel
        parts = ", ".join(f"{s}={getattr(self, 'X_' + s).shape}" for s in ("train", "val", "test"))
        return f"Dataset({self.name!r}, {parts}, classes={self.num_classes})"


def check_split(split):
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} (or None for all three), "
                         f"got {split!r}.")
    return split


def stratified_holdout(y: np.ndarray, n_holdout: int, seed: int = SPLIT_SEED):
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


def check_val_size(val_size, n_train, name):
    if isinstance(val_size, bool) or not isinstance(val_size, (int, np.integer)):
        raise TypeError(f"val_size must be an int (a number of images), got {val_size!r}.")
    if not 0 <= val_size < n_train:
        raise ValueError(f"{name}: val_size={val_size} must be at least 0 and smaller than "
                         f"the {n_train} training images found. Pass a smaller val_size "
                         f"(0 for no validation split).")
    return int(val_size)


def finish_split(X_train, y_train, X_test, y_test, val_size, split, classes, name):
    """Carve the validation split out of train and return what `split` asks for."""
    if split == "test":
        return X_test, y_test
    keep, held = stratified_holdout(y_train, val_size)
    if split == "train":
        return X_train[keep], y_train[keep]
    if split == "val":
        return X_train[held], y_train[held]
    return Dataset(X_train[keep], y_train[keep], X_train[held], y_train[held],
                   X_test, y_test, classes, name)
