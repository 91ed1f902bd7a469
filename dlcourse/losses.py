"""Losses: ``forward(prediction, target)`` returns the mean loss as a Python float,
``backward()`` returns d(loss)/d(prediction).

Introduced in notebooks ``02a_loss_and_softmax`` (``MSELoss``, ``softmax``, ``log_softmax``,
``SoftmaxCrossEntropy``) and ``02b_gradient_descent`` (``SigmoidCrossEntropy``,
``MulticlassHingeLoss``).
"""
from __future__ import annotations

import math

import numpy as np

from . import kernels
from ._validate import check_labels, check_same_device, number, shape_str
from .backend import get_array_module


class Loss:
    def __call__(self, *args):
        return self.forward(*args)

    def _need_forward(self):
        if self.cache is None:
            raise RuntimeError(f"{type(self).__name__}.backward() needs forward() first.")

    cache = None


def _check_float(owner, x, name, expected):
    """x is a floating-point array with at least one row (a mean over no rows is NaN)."""
    if not hasattr(x, "dtype") or not np.issubdtype(x.dtype, np.floating):
        given = getattr(x, "dtype", type(x).__name__)
        raise TypeError(f"{owner} expects {name} as a floating-point array {expected}, got {given}.")
    if x.size == 0:
        raise ValueError(f"{owner} got {name} of shape {shape_str(x.shape)}: an empty batch has "
                         f"no mean loss. Is the data set (or the last batch) empty?")


def _check_real_targets(owner, targets, name="targets"):
    """Targets are real numbers (bool, int or float), not complex, strings or objects."""
    if targets.dtype.kind not in "biuf":
        raise TypeError(f"{owner} expects real-valued {name} (integers or floats), got dtype "
                        f"{targets.dtype}. Convert them, e.g. {name}.astype(np.float32).")


def _as_logits(logits, fn):
    """``logits`` as an array of real numbers with a non-empty last axis: an array as it is, a
    list or tuple (``[2.0, 1.0, 0.1]``) as a NumPy float64 array (as scipy.special.softmax
    takes one); anything else refused, saying what was given."""
    if not (hasattr(logits, "shape") and hasattr(logits, "dtype")):
        if not isinstance(logits, (list, tuple)):
            raise TypeError(f"{fn} expects an array of scores (logits), e.g. {fn}(np.array("
                            f"[2.0, 1.0, 0.1])), got {type(logits).__name__}: {logits!r}.")
        try:
            logits = np.asarray(logits, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{fn} expects numbers, one row of scores per sample, e.g. "
                            f"{fn}([2.0, 1.0, 0.1]); got {logits!r}: not a rectangular "
                            f"list of numbers (every row as long, every entry a number).") from None
    if logits.dtype.kind not in "iuf":
        raise TypeError(f"{fn} expects real-valued scores (logits), got dtype {logits.dtype}. "
                        f"Convert them, e.g. logits.astype(np.float32).")
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise ValueError(f"{fn} works over the last axis, one score per class, so it needs at "
                         f"least one class there; got shape {shape_str(logits.shape)}. For one "
                         f"sample pass its scores as a 1-D array, e.g. {fn}([2.0, 1.0, 0.1]).")
    return logits


def log_softmax(logits):
    """log softmax over the last axis, stable for logits of any size: subtract the row max
    first, so the largest exponent is exp(0) = 1 and nothing overflows. ``logits``: an array
    (..., K), or a list of numbers (taken as a NumPy float64 array)."""
    logits = _as_logits(logits, "log_softmax")
    xp = get_array_module(logits)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))


def softmax(logits):
    """Softmax over the last axis (stable: see :func:`log_softmax`): (..., K) -> (..., K)
    probabilities. A list of numbers is taken as a NumPy float64 array."""
    logits = _as_logits(logits, "softmax")
    xp = get_array_module(logits)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = xp.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


class SoftmaxCrossEntropy(Loss):
    """Softmax then cross-entropy, fused: the gradient is simply (softmax - one_hot) / N.

    logits: (N, K) floats; labels: (N,) integers in [0, K).
    loss = -mean_n log softmax(logits)[n, labels[n]]

    On the GPU, forward runs the fused CUDA kernel ``softmax_cross_entropy.cu`` (loss and
    gradient in one launch, instead of more than fifteen array operations) and backward returns
    the gradient it made; ``dl.use_kernels(loss, False)`` switches to the array code below.
    The cache is (log-probabilities, labels, the kernel's gradient): the array code fills the
    first two, the kernel the last.
    """

    use_kernels = True

    def forward(self, logits, labels):
        self._check(logits, labels)
        N, K = logits.shape
        k = kernels.kernels_for(logits, self.use_kernels)
        if k is not None:
            return self._forward_kernel(k, logits, labels)
        labels = check_labels("SoftmaxCrossEntropy", labels, N, K)
        xp = get_array_module(logits)
        logp = log_softmax(logits)
        self.cache = (logp, labels, None)
        return float(-logp[xp.arange(N), labels].mean())

    def backward(self):
        """d(loss)/d(logits) = (softmax(logits) - one_hot(labels)) / N: (N, K)."""
        self._need_forward()
        logp, labels, dlogits = self.cache
        if dlogits is not None:                # the fused kernel has made it already
            return dlogits
        xp = get_array_module(logp)
        N = logp.shape[0]
        dlogits = xp.exp(logp)                 # softmax
        dlogits[xp.arange(N), labels] -= 1     # minus the one-hot target
        dlogits /= N
        return dlogits

    def _check(self, logits, labels):
        owner = "SoftmaxCrossEntropy"
        _check_float(owner, logits, "logits", "of shape (N, K)")
        if logits.ndim != 2:
            raise ValueError(f"{owner} expects logits of shape (N, K), got {shape_str(logits.shape)}.")
        check_same_device(owner, logits, labels)

    def _forward_kernel(self, k, logits, labels):
        """The GPU path: one kernel makes the loss and the gradient (kept for backward)."""
        owner = "SoftmaxCrossEntropy"
        N, K = logits.shape
        labels = check_labels(owner, labels, N, K, check_range=False)
        xp = get_array_module(logits)
        if labels.dtype not in (np.int32, np.int64):      # the kernel reads int or long long
            labels = labels.astype(np.int64)
        loss, dlogits = k.softmax_cross_entropy(xp.ascontiguousarray(logits),
                                                xp.ascontiguousarray(labels))
        value = float(loss)              # the step's one wait for the GPU
        if math.isnan(value):            # a label out of range makes its row NaN: say so clearly
            check_labels(owner, labels, N, K)
        self.cache = (None, None, dlogits)
        return value


class MulticlassHingeLoss(Loss):
    """The multiclass SVM (hinge) loss of CS231n: each wrong class pays for every bit that its
    score comes within ``margin`` of the right class's score.

    scores s: (N, C) floats; labels y: (N,) integers in [0, C).
    loss = mean_n  sum_{j != y_n} max(0, s[n, j] - s[n, y_n] + margin)

    The gradient is sparse: a wrong class whose margin is met (its term is 0) gets 0, one that
    violates it gets 1/N, and the right class gets minus the number of violators, over N. At
    exactly the margin the term is 0 and counts as met (the subgradient 0, as in CS231n and
    ``torch.nn.MultiMarginLoss``, which also divides by C).
    """

    def __init__(self, margin: float = 1.0):
        self.margin = number(margin, "MulticlassHingeLoss(margin=...)", "margin=1.0", low=0)

    def forward(self, scores, labels):
        labels = self._check(scores, labels)
        xp = get_array_module(scores)
        N, C = scores.shape
        rows = xp.arange(N)
        correct = scores[rows, labels][:, None]                     # (N, 1): s[n, y_n]
        margins = xp.maximum(0, scores - correct + self.margin)     # (N, C)
        margins[rows, labels] = 0                                   # j != y_n only
        self.cache = (margins > 0, labels, scores.dtype)
        return float(margins.sum() / N)

    def backward(self):
        """d(loss)/d(scores): [margin violated] / N for a wrong class, minus the number of
        violators / N for the right one: (N, C)."""
        self._need_forward()
        violated, labels, dtype = self.cache
        xp = get_array_module(violated)
        N = violated.shape[0]
        dscores = violated.astype(dtype)                           # 1 where s_j - s_y + margin > 0
        dscores[xp.arange(N), labels] = -violated.sum(axis=1)       # the right class: -count
        dscores /= N
        return dscores

    def _check(self, scores, labels):
        owner = "MulticlassHingeLoss"
        _check_float(owner, scores, "scores", "of shape (N, C)")
        if scores.ndim != 2:
            raise ValueError(f"{owner} expects scores of shape (N, C), one score per class, got "
                             f"{shape_str(scores.shape)}.")
        if scores.shape[1] < 2:
            raise ValueError(f"{owner} needs at least two classes, scores of shape (N, C) with "
                             f"C >= 2, got {shape_str(scores.shape)}: with one class no wrong "
                             f"class is left to compare. For two classes and one output use "
                             f"dl.SigmoidCrossEntropy().")
        check_same_device(owner, scores, labels, "scores", "labels")
        return check_labels(owner, labels, *scores.shape)


class SigmoidCrossEntropy(Loss):
    """Binary cross-entropy on logits (the single logistic neuron).

    logits z: (N,) or (N, 1); targets y: same number of values in {0, 1} (floats allowed).
    loss = mean of  max(z, 0) - z*y + log(1 + exp(-|z|))   (= -y log σ(z) - (1-y) log(1-σ(z)),
    written so it never overflows). d(loss)/dz = (σ(z) - y) / N.
    """

    def forward(self, logits, targets):
        owner = "SigmoidCrossEntropy"
        _check_float(owner, logits, "logits", "of shape (N,) or (N, 1)")
        check_same_device(owner, logits, targets, "logits", "targets")
        xp = get_array_module(logits)
        targets = xp.asarray(targets)
        _check_real_targets(owner, targets)
        if logits.ndim > 2 or (logits.ndim == 2 and logits.shape[1] != 1):
            raise ValueError(f"{owner} expects logits of shape (N,) or (N, 1), got {shape_str(logits.shape)}.")
        if targets.size != logits.size:
            raise ValueError(f"{owner}: {logits.size} logits but {targets.size} targets; they must match.")
        y = targets.reshape(logits.shape).astype(logits.dtype)
        if not bool(xp.isfinite(y).all()):
            raise ValueError(f"{owner}: the targets contain NaN or inf; each must be 0 or 1 (or a "
                             f"probability in [0, 1]). ~np.isfinite(targets) finds them.")
        if float(y.min()) < 0 or float(y.max()) > 1:
            raise ValueError(f"{owner} expects targets in [0, 1] (class 0 or 1), got values from "
                             f"{float(y.min())} to {float(y.max())}. Map labels -1/+1 to 0/1 first.")
        z = logits
        losses = xp.maximum(z, 0) - z * y + xp.log1p(xp.exp(-xp.abs(z)))
        self.cache = (z, y)
        return float(losses.mean())

    def backward(self):
        self._need_forward()
        z, y = self.cache
        xp = get_array_module(z)
        sig = 0.5 * (1 + xp.tanh(0.5 * z))
        return (sig - y) / z.size


class MSELoss(Loss):
    """Mean squared error over every element: mean((pred - target)²); gradient 2 (pred - target) / size."""

    def forward(self, pred, target):
        owner = "MSELoss"
        _check_float(owner, pred, "predictions", "")
        check_same_device(owner, pred, target, "predictions", "targets")
        xp = get_array_module(pred)
        target = xp.asarray(target)
        _check_real_targets(owner, target)
        if target.shape != pred.shape:
            raise ValueError(f"MSELoss: predictions have shape {shape_str(pred.shape)} but targets "
                             f"{shape_str(target.shape)}; they must match (reshape the targets?).")
        diff = pred - target.astype(pred.dtype)
        self.cache = diff
        return float((diff * diff).mean())

    def backward(self):
        self._need_forward()
        diff = self.cache
        return diff * (2.0 / diff.size)
