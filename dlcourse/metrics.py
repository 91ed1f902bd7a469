"""What a trained classifier gets wrong: :func:`confusion_matrix`.

Introduced in notebook ``04a_mlp_on_digits`` (section "What does the network get wrong?"), drawn
by ``dl.plots.plot_confusion_matrix``. Labels may be NumPy or CuPy arrays; the table is NumPy.
"""
from __future__ import annotations

import numpy as np

from ._validate import whole_number
from .backend import to_numpy

__all__ = ["confusion_matrix", "MAX_CONFUSION_CLASSES"]

MAX_CONFUSION_CLASSES = 10_000     # a 10,000×10,000 table of int64 counts is 800 MB


def confusion_matrix(y_true, y_pred, num_classes: int | None = None) -> np.ndarray:
    """Counts of (true class, predicted class) pairs: ``cm[i, j]`` is how many samples of
    class ``i`` were predicted as class ``j``. Rows are true classes, columns predictions;
    the diagonal holds the right answers.

    y_true, y_pred: (N,) integer labels (NumPy or CuPy; the result is NumPy).
    num_classes: ``K``; by default one more than the largest label seen.
    Returns an int64 array (K, K).
    """
    t, p = to_numpy(y_true), to_numpy(y_pred)
    for name, a in (("y_true", t), ("y_pred", p)):
        if a.ndim != 1:
            hint = " Use .argmax(axis=1) to turn scores or one-hot rows into labels." if a.ndim == 2 else ""
            raise ValueError(f"confusion_matrix expects {name} of shape (N,), got {a.shape}.{hint}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"confusion_matrix expects integer labels, but {name} has dtype "
                            f"{a.dtype}. Convert with {name}.astype(np.int64), or take "
                            f".argmax(axis=1) of scores.")
    if len(t) != len(p):
        raise ValueError(f"confusion_matrix: y_true has {len(t)} labels but y_pred has {len(p)}.")
    t, p = t.astype(np.int64), p.astype(np.int64)
    seen = int(max(t.max(initial=-1), p.max(initial=-1))) + 1
    K = seen if num_classes is None else whole_number(num_classes, "confusion_matrix(num_classes=...)")
    if min(t.min(initial=0), p.min(initial=0)) < 0 or seen > K:
        raise ValueError(f"confusion_matrix(num_classes={K}) needs labels in 0..{K - 1}, got "
                         f"values from {min(t.min(initial=0), p.min(initial=0))} to {seen - 1}.")
    if K > MAX_CONFUSION_CLASSES:      # K*K int64 counts: 10**6 classes would be 8 TB
        size = f"a {K}×{K} table of counts, {8 * K * K / 1e9:.3g} GB"
        if num_classes is not None:
            raise ValueError(f"confusion_matrix(num_classes={K}) would be {size}; it takes at "
                             f"most {MAX_CONFUSION_CLASSES} classes.")
        which = "y_true" if int(t.max(initial=-1)) == seen - 1 else "y_pred"
        raise ValueError(f"confusion_matrix: {which} holds the label {seen - 1}, so the table "
                         f"would have {seen} classes ({size}; at most {MAX_CONFUSION_CLASSES}). "
                         f"Labels are class indices 0..K-1: is that one an id or a score? Map "
                         f"labels to 0..K-1 first, e.g. np.unique(y, return_inverse=True).")
    return np.bincount(K * t + p, minlength=K * K).reshape(K, K)
