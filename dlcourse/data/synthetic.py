"""Synthetic 2-D point sets for the perceptron and the first MLPs.

Introduced in notebook ``01_perceptron`` (:func:`make_blobs`, :func:`make_xor`,
:func:`make_circles`, :func:`make_spirals`) and drawn in the playground widget
(:data:`POINT_SETS`). Each returns ``X`` float32 ``(N, 2)`` and ``y`` int64 ``(N,)``, in
shuffled order, from a seeded generator; every argument is checked before anything is drawn.
"""
from __future__ import annotations

import numpy as np

from ..backend import rng

__all__ = ["make_blobs", "make_xor", "make_circles", "make_spirals", "POINT_SETS",
           "MAX_BLOB_MARGIN"]

#: The largest ``margin`` of :func:`make_blobs`: each centre lies 1.5 * sqrt(2) ~ 2.12 from
#: the separating line, so a wider margin would reject almost every point drawn (and one
#: beyond the reach of the blobs would reject them all, forever).
MAX_BLOB_MARGIN = 2.0


def _is_real(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating))


def _check_n(n, at_least, fn):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < at_least:
        raise ValueError(f"{fn}(n=...) needs an int n >= {at_least} (the number of points), "
                         f"got {n!r}.")
    return int(n)


def _check_noise(noise, fn):
    if not (_is_real(noise) and np.isfinite(noise) and noise >= 0):
        raise ValueError(f"{fn}(noise=...) must be a finite number >= 0 (a standard "
                         f"deviation), got {noise!r}.")
    return float(noise)


def _check_margin(margin):
    if not (_is_real(margin) and 0 <= margin <= MAX_BLOB_MARGIN):
        raise ValueError(f"make_blobs(margin=...) is the smallest distance of a point from the "
                         f"separating line and must be a number from 0 to {MAX_BLOB_MARGIN} "
                         f"(the blob centres lie 2.12 from the line), got {margin!r}.")
    return float(margin)


def _check_seed(seed, fn):
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or seed < 0):
        raise ValueError(f"{fn}(seed=...) must be None or an int >= 0, got {seed!r}.")
    return seed


def _check_turns(turns):
    ok = _is_real(turns) and np.isfinite(turns) and turns > 0
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
    (points closer than that are drawn again; ``margin`` is at most
    ``MAX_BLOB_MARGIN = 2``). So a perceptron always converges.
    With ``separable=False`` the blobs are wider and overlap: no line gets every point
    right, and the perceptron never stops updating.

    Returns ``X`` float32 ``(n, 2)``, ``y`` int64 ``(n,)`` in ``{0, 1}`` (use
    ``2 * y - 1`` for ``{-1, +1}`` labels). ``seed=None`` uses the generator set by
    ``dl.manual_seed``.
    """
    n = _check_n(n, 2, "make_blobs")
    if not isinstance(separable, (bool, np.bool_)):
        raise ValueError(f"make_blobs(separable=...) must be True or False, got {separable!r}.")
    margin = _check_margin(margin)
    gen = rng(_check_seed(seed, "make_blobs"))
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
    gen = rng(_check_seed(seed, "make_xor"))
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
    if not (_is_real(factor) and 0 < factor < 1):
        raise ValueError(f"make_circles(factor=...) is the inner radius and must be "
                         f"between 0 and 1, got {factor!r}.")
    gen = rng(_check_seed(seed, "make_circles"))
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
    gen = rng(_check_seed(seed, "make_spirals"))
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
