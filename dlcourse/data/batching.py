"""Preprocessing and batching: :class:`Standardizer`, :func:`one_hot`, :func:`batches`.

Introduced in notebook ``04a_mlp_on_digits``. Everything here works on NumPy and CuPy arrays;
the GPU enters the data path in one place only: ``batches(..., device="gpu")`` copies each
batch there.
"""
from __future__ import annotations

import numpy as np

from ..backend import get_array_module, rng, to_device

__all__ = ["Standardizer", "one_hot", "batches"]


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

    Integer data (raw pixels 0..255, counts) is standardized in floating point and comes
    back float32; floating data keeps its dtype. A feature holding NaN or inf is refused
    by name at ``fit``: its mean and std would be NaN, and so would every output.
    """

    def __init__(self, eps: float = 1e-6):
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) \
                or not 0 <= eps < np.inf:
            raise ValueError(f"Standardizer(eps=...) must be a finite number >= 0, got {eps!r}.")
        self.eps = float(eps)
        self.mean_ = None   # (...) : the shape of one sample, X.shape[1:]
        self.std_ = None

    def fit(self, X) -> "Standardizer":
        """Learn per-feature mean and std from ``X`` ``(N, ...)``; returns ``self``."""
        X = _floating(_as_array(X, "Standardizer.fit"))
        if X.ndim < 2 or len(X) < 1:
            raise ValueError(f"Standardizer.fit expects X of shape (N, features...) with "
                             f"N >= 1, got shape {X.shape}. For a single feature use "
                             f"X.reshape(-1, 1).")
        xp = get_array_module(X)
        bad = ~xp.isfinite(X).all(axis=0)                 # (...): one flag per feature
        if bool(bad.any()):
            where = [tuple(int(i) for i in idx) if len(idx) > 1 else int(idx[0])
                     for idx in np.argwhere(to_device(bad, "cpu"))[:5]]
            raise ValueError(f"Standardizer.fit: {int(bad.sum())} feature(s) of X hold NaN or "
                             f"inf, first at feature index {where} (of samples of shape "
                             f"{X.shape[1:]}). Their mean and std would be NaN. Fill or drop "
                             f"them first (e.g. X[~np.isfinite(X)] = 0).")
        self.mean_ = X.mean(axis=0)
        std = X.std(axis=0)
        self.std_ = xp.where(std < self.eps, xp.ones_like(std), std)   # constant -> 1
        return self

    def _params_for(self, X, method):
        X = _as_array(X, f"Standardizer.{method}")
        if self.mean_ is None:
            raise RuntimeError(f"Standardizer.{method} was called before fit: call "
                               f"scaler.fit(X_train) first (on the training split only).")
        if X.shape[1:] != self.mean_.shape:
            raise ValueError(f"Standardizer was fit on samples of shape {self.mean_.shape}, "
                             f"but {method} got X of shape {X.shape} (samples "
                             f"{X.shape[1:]}). Was it fit on a different form of the data "
                             f"(flat vs image)?")
        X = _floating(X)
        if get_array_module(X) is get_array_module(self.mean_):
            return X, self.mean_, self.std_
        device = "gpu" if get_array_module(X) is not np else "cpu"
        return X, to_device(self.mean_, device), to_device(self.std_, device)

    def transform(self, X):
        """``(X - mean) / std``, same shape as ``X``; same dtype, or float32 for integers."""
        X, mean, std = self._params_for(X, "transform")
        return ((X - mean) / std).astype(X.dtype, copy=False)

    def fit_transform(self, X):
        """``fit(X)`` then ``transform(X)``: use it on the training split only."""
        return self.fit(X).transform(X)

    def inverse_transform(self, X):
        """Undo :meth:`transform`: ``X * std + mean``."""
        X, mean, std = self._params_for(X, "inverse_transform")
        return (X * std + mean).astype(X.dtype, copy=False)

    def __repr__(self) -> str:
        fitted = "not fitted" if self.mean_ is None else f"fitted on samples {self.mean_.shape}"
        return f"Standardizer({fitted})"


def _as_array(a, fn):
    """A NumPy or CuPy array as it is; a list or tuple as a NumPy array; else a clear error."""
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return a
    if isinstance(a, (list, tuple)):
        try:
            return np.asarray(a)
        except ValueError as err:   # ragged: rows of different lengths
            raise ValueError(f"{fn} got a list that is not rectangular ({err}). Every "
                             f"sample must have the same shape.") from None
    raise TypeError(f"{fn} needs a NumPy or CuPy array (or a list of samples), got "
                    f"{type(a).__name__}.")


def _floating(X):
    """X itself when it holds floats; integers and booleans as float32 (never truncated)."""
    if X.dtype.kind == "f":
        return X
    if X.dtype.kind not in "iub":
        raise TypeError(f"Standardizer expects numbers, got an array of dtype {X.dtype}.")
    return X.astype(np.float32)


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
        X: ``(N, ...)`` NumPy or CuPy array (a list of samples is turned into a NumPy array).
        y: ``(N, ...)`` array or list (labels, targets), same ``N``.
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
    X, y = _as_array(X, "batches(X=...)"), _as_array(y, "batches(y=...)")
    for name, a in (("X", X), ("y", y)):
        if a.ndim < 1:
            raise ValueError(f"batches needs {name} of shape (N, ...), one row per sample, "
                             f"got a single value of shape {a.shape}.")
    if len(X) != len(y):
        raise ValueError(f"batches: X has {len(X)} samples but y has {len(y)}; they must "
                         f"match (X: {getattr(X, 'shape', '?')}, y: {getattr(y, 'shape', '?')}). "
                         f"Did you pair X_train with y_val?")
    N = len(X)
    order = rng(seed).permutation(N) if shuffle else None
    stop_at = N - N % batch_size if drop_last else N
    if world_size != 1 or rank != 0:           # data parallel: this rank's shard of each batch
        from ..distributed import shards
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
