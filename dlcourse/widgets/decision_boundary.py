"""The decision boundary of a classifier of points in the plane (notebook ``04d_playground``):
its class probabilities on a grid, and those probabilities as a picture."""
from __future__ import annotations

import numpy as np

from ..backend import to_numpy
from ..layers import eval_mode
from ..losses import softmax
from ._common import class_colors, model_input


def grid_extent(X, pad: float = 0.5) -> tuple:
    """``(x0, x1, y0, y1)``: the bounding box of the points X (N, 2), widened by ``pad``."""
    X = to_numpy(X)
    (x0, y0), (x1, y1) = X.min(axis=0) - pad, X.max(axis=0) + pad
    return float(x0), float(x1), float(y0), float(y1)


def decision_grid(model, X, resolution: int = 80, pad: float = 0.5):
    """The model's class probabilities on a ``resolution × resolution`` grid covering X.

    model: maps (N, 2) -> logits (N, K) (K = 1: one logit of a sigmoid classifier).
    X: (N, 2) points; the grid spans their bounding box widened by ``pad``.

    Returns ``(probs, extent)``: ``probs`` is a NumPy array (R, R, K) with
    ``probs[i, j]`` the probabilities at the point ``(xs[j], ys[i])`` -- row ``i`` is the
    ``i``-th y value from the bottom, as ``imshow(..., origin="lower", extent=extent)`` wants;
    ``extent = (x0, x1, y0, y1)``. The model runs in evaluation mode (its mode is restored),
    on its own device.
    """
    X = to_numpy(X)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"decision_grid needs points in the plane, X of shape (N, 2); got "
                         f"{X.shape}. A decision boundary can only be drawn for 2-D inputs.")
    R = int(resolution)
    x0, x1, y0, y1 = extent = grid_extent(X, pad)
    gx, gy = np.meshgrid(np.linspace(x0, x1, R), np.linspace(y0, y1, R))   # (R, R) each
    points = np.stack([gx.ravel(), gy.ravel()], axis=1)                    # (R*R, 2)
    with eval_mode(model):
        logits = to_numpy(model.forward(model_input(model, points)))
    logits = logits.astype(np.float64).reshape(len(points), -1)            # (R*R, K)
    if logits.shape[1] == 1:                                               # sigmoid: p(class 1)
        p1 = 1.0 / (1.0 + np.exp(-logits))
        probs = np.concatenate([1.0 - p1, p1], axis=1)
    else:
        probs = softmax(logits)
    return probs.reshape(R, R, -1), extent


def probability_image(probs, colors=None, strength: float = 0.65):
    """An RGB picture (R, R, 3) in [0, 1] of class probabilities probs (R, R, K).

    Each pixel is the probability-weighted mix of the class colours, faded towards white
    where the model is unsure: white on the decision boundary, coloured where it is sure.
    """
    probs = np.asarray(probs, dtype=np.float64)
    K = probs.shape[-1]
    colors = class_colors(K) if colors is None else np.asarray(colors, dtype=np.float64)
    mix = probs @ colors                                                   # (R, R, 3)
    sure = (probs.max(axis=-1, keepdims=True) - 1.0 / K) / (1.0 - 1.0 / K)  # 0 unsure .. 1 sure
    sure = np.nan_to_num(sure, nan=0.0).clip(0.0, 1.0)
    alpha = strength * sure
    return np.clip((1.0 - alpha) * 1.0 + alpha * mix, 0.0, 1.0)
