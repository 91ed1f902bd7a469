"""The playground's five data sets (notebook ``04d_playground``): four sets of points in the
plane and the 8x8 digits, each split into training and validation samples."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import data as dldata

DATASETS = ("blobs", "xor", "circles", "spirals", "digits")
DATASET_LABELS = {"blobs": "blobs (2-D)", "xor": "XOR (2-D)", "circles": "circles (2-D)",
                  "spirals": "spirals (2-D, 3 classes)", "digits": "digits (8×8, 10 classes)"}


@dataclass(eq=False)
class PlaygroundData:
    """One data set of the playground. X_*: float32 (N, D); y_*: int64 (N,) in 0..K-1."""

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    classes: tuple

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def num_features(self) -> int:
        return self.X_train.shape[1]

    @property
    def is_2d(self) -> bool:
        """True for points in the plane (a decision boundary can be drawn)."""
        return self.num_features == 2

    def __repr__(self) -> str:
        return (f"PlaygroundData({self.name!r}, train={self.X_train.shape}, "
                f"val={self.X_val.shape}, classes={self.num_classes})")


_DATA_CACHE: dict = {}


def load_dataset(name: str, n: int = 400, seed: int = 0) -> PlaygroundData:
    """One of :data:`DATASETS`, split into training and validation sets.

    The 2-D sets (``"blobs"``, ``"xor"``, ``"circles"``, ``"spirals"`` -- three arms) are
    ``n`` points from :mod:`dlcourse.data` made with ``seed``; the first 75 % train, the rest
    validate.
    ``"digits"`` is :func:`dlcourse.data.load_digits` (1257 train, 270 validation, 64
    features, 10 classes). Results are cached: the same arguments give the same arrays.
    """
    if name not in DATASETS:
        raise ValueError(f"Unknown dataset {name!r}: the playground has {', '.join(DATASETS)}.")
    key = (name, n, seed)
    if key in _DATA_CACHE:
        return _DATA_CACHE[key]
    if name == "digits":
        d = dldata.load_digits()
        result = PlaygroundData(name, d.X_train, d.y_train, d.X_val, d.y_val, d.classes)
    else:
        maker = dldata.POINT_SETS[name]
        kwargs = {"classes": 3} if name == "spirals" else {}   # 3 arms: harder than 2
        X, y = maker(n, seed=seed, **kwargs)       # already shuffled
        X, y = X.astype(np.float32), y.astype(np.int64)
        cut = int(0.75 * n)
        K = int(y.max()) + 1
        result = PlaygroundData(name, X[:cut], y[:cut], X[cut:], y[cut:],
                                tuple(f"class {k}" for k in range(K)))
    _DATA_CACHE[key] = result
    return result
