"""Checks shared by layers, losses, optimizers and the training loop: errors that say what was
expected, what was given, and the likely fix.

Introduced with the layers in notebook ``03_backpropagation``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .backend import device_of, get_array_module
from .shapes import shape_str

__all__ = ["shape_str", "check_input", "check_labels", "check_same_device", "float_dtype",
           "whole_number", "number", "model_class_error"]


def float_dtype(dtype):
    """``dtype`` as a NumPy dtype, or a TypeError when it is not a floating-point type."""
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        raise TypeError(f"dtype must be a floating-point type such as np.float32, got {dtype}.")
    return dtype


def whole_number(value, what: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``: a size (layer, kernel, image) or a count. 2.7, NaN,
    True or "3" are refused, never truncated; 3.0 and np.int64(3) are 3. ``what`` names the
    argument in the error, e.g. ``"Linear(in_features=...)"``."""
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value != int(value)):
        raise TypeError(f"{what} must be a whole number >= {minimum}, got {value!r}"
                        f"{f' ({type(value).__name__})' if isinstance(value, (bool, str)) else ''}.")
    if int(value) < minimum:
        raise ValueError(f"{what} must be a whole number >= {minimum}, got {value!r}.")
    return int(value)


def number(value, what: str, example: str, low=None, high=None, *, low_open=False,
           high_open=True) -> float:
    """``value`` as a finite float in [low, high) (the bounds that are given; ``low_open`` /
    ``high_open`` exclude them), or an error saying what was expected: a TypeError for
    something that is not a number (a string, None, True), a ValueError for inf, NaN or a
    number out of range. ``what`` names the argument (``"SGD(lr=...)"``), ``example`` shows
    one (``"lr=0.01"``)."""
    result = None
    if value is not None and not isinstance(value, (bool, np.bool_, str, bytes)):
        try:                     # a Python or NumPy number, a 0-d array (NumPy or CuPy), ...
            result = float(value)
        except (TypeError, ValueError):
            pass
    if result is None:
        raise TypeError(f"{what} expects a number, e.g. {example}; got {value!r} "
                        f"({type(value).__name__}).")
    below = low is not None and (result <= low if low_open else result < low)
    above = high is not None and (result >= high if high_open else result > high)
    if not math.isfinite(result) or below or above:
        lo = "" if low is None else f"{'(' if low_open else '['}{low:g}, "
        hi = "inf)" if high is None else f"{high:g}{')' if high_open else ']'}"
        where = f" in {lo}{hi}" if low is not None else ""
        raise ValueError(f"{what} must be a finite number{where}, got {value!r}. E.g. {example}.")
    return result


# Examples the errors below give for building a model from its class.
MODEL_EXAMPLES = {"MLP": "dl.MLP([64, 128, 10])", "CNN": "dl.CNN(in_channels=1, image_size=28)",
                  "Sequential": "dl.Sequential(dl.Linear(64, 10))"}


def model_class_error(cls, where: str) -> TypeError:
    """The error for a model class given where a model is wanted: ``fit(dl.MLP, ...)``."""
    name = cls.__name__
    example = MODEL_EXAMPLES.get(name, f"{name}(...)")
    return TypeError(f"{where} got the class {name}, not a model: create the model first, "
                     f"e.g. model = {example}, and pass model.")


def check_input(layer, x, ndim=None, expected: str = "", params_like=None):
    """Check that ``x`` is an array the layer can take, and return it.

    ``ndim``: the rank the layer needs (an int or a tuple of ints); ``expected``: its shape in
    letters, e.g. ``"(N, C, H, W)"``; ``params_like``: one of the layer's parameters, to check
    that ``x`` has the same dtype and lives on the same device.
    """
    name = type(layer).__name__
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{name} expects an array, got {type(x).__name__}. "
                        f"Convert it with np.asarray(x, dtype=np.float32).")
    if ndim is not None:
        ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.ndim not in ranks:
            hint = ""
            if 4 in ranks and x.ndim == 2:
                hint = " Did you pass flat images? Reshape them to (N, C, H, W)."
            elif 4 in ranks and x.ndim == 3:
                hint = (" One image (C, H, W) needs a batch axis: x[None]; a batch of one-channel "
                        "images (N, H, W) needs a channel axis: x[:, None].")
            elif 2 in ranks and x.ndim == 4:
                hint = " Did you forget a Flatten layer before it?"
            elif x.ndim == 1:
                hint = " A single sample needs a batch axis: use x[None]."
            raise ValueError(f"{name} expects x of shape {expected} ({' or '.join(map(str, ranks))}-D), "
                             f"got shape {shape_str(x.shape)} ({x.ndim}-D).{hint}")
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} expects floating-point input, got dtype {x.dtype}. "
                        f"Convert it with x.astype(np.float32).")
    if params_like is not None:
        if device_of(x) != device_of(params_like):
            raise ValueError(f"{name}'s parameters are on the {device_of(params_like)} but x is on "
                             f"the {device_of(x)}. Move the model with model.to('{device_of(x)}') "
                             f"or the data with dl.to_device(x, '{device_of(params_like)}').")
        if x.dtype != params_like.dtype:
            raise TypeError(f"{name} has {params_like.dtype} parameters but got x of dtype {x.dtype}. "
                            f"Convert the data with x.astype(np.{params_like.dtype}) or the model "
                            f"with model.astype(np.{x.dtype}).")
    return x


def check_labels(owner: str, labels, n: int, num_classes: int, check_range: bool = True):
    """Integer class labels of shape (N,) with values in [0, num_classes).

    check_range=False skips the range check: it reads the labels' smallest and largest values,
    which on the GPU means waiting for it (a caller that learns of a bad label another way, as
    the fused loss kernel's NaN, checks the range then)."""
    xp = get_array_module(labels)
    labels = xp.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != n:
        hint = ""
        if labels.ndim == 2 and labels.shape[1] == 1:
            hint = " That is a column: flatten it with labels.ravel() (or labels[:, 0])."
        elif labels.ndim == 2:
            hint = " Use labels.argmax(axis=1) to turn one-hot rows into class indices."
        raise ValueError(f"{owner} expects labels of shape ({n},) to match {n} rows of logits, "
                         f"got shape {shape_str(labels.shape)}.{hint}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"{owner} expects integer class labels, got dtype {labels.dtype}. "
                        f"Convert them with labels.astype(np.int64).")
    if n and check_range:
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= num_classes:
            if num_classes == 1:   # one output: a binary model, which softmax cannot train
                raise ValueError(f"{owner}: the model has one output, so softmax sees one class "
                                 f"and labels must all be 0 (got values from {lo} to {hi}). For "
                                 f"two classes with one output use dl.SigmoidCrossEntropy(); for "
                                 f"softmax give the last layer one output per class.")
            raise ValueError(f"{owner}: labels must be in [0, {num_classes - 1}] for {num_classes} classes, "
                             f"got values from {lo} to {hi}. Does the last layer have as many outputs "
                             f"as there are classes?")
    return labels


def check_same_device(owner: str, a, b, a_name="logits", b_name="labels"):
    if device_of(a) != device_of(b):
        raise ValueError(f"{owner}: {a_name} are on the {device_of(a)} but {b_name} on the {device_of(b)}. "
                         f"Move them together with dl.to_device(..., '{device_of(a)}').")
