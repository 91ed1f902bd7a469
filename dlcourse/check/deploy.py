"""Checks for lesson 12 (from checkpoint to service).

==========================  ===============================================================
check                       your function
==========================  ===============================================================
:func:`fold_batchnorm`      ``(W, b, gamma, beta, mean, var, eps) -> (W_folded, b_folded)``
:func:`validate_batch`      ``(inputs, shape) -> float32 array (N, *shape)``, or ValueError
==========================  ===============================================================

Each check runs your function on several cases and prints one line when all pass, or raises
``ExerciseError`` saying which case failed, what was expected and the likely mistake (the
shared machinery is ``harness.py``).
"""
from __future__ import annotations

import numpy as np

from ..inference import InputError, as_batch
from .harness import (ExerciseError, call, expect_close, expect_shape, expect_tuple,
                     expect_unchanged, fail, passed, to_array)

__all__ = ["fold_batchnorm", "validate_batch", "ExerciseError"]


def fold_batchnorm(fn) -> None:
    """Check ``fn(W, b, gamma, beta, mean, var, eps)``: the Conv2d weights W (F, C, KH, KW) and
    bias b (F,) of a convolution followed by BatchNorm2d in evaluation mode, folded into ONE
    convolution: with s = gamma / sqrt(var + eps) (F,), W' = W * s per output channel and
    b' = (b - mean) * s + beta. The inputs must be left as they were."""
    __tracebackhide__ = True
    gen = np.random.default_rng(0)
    cases = [(2, 1, 1, 1e-5), (4, 3, 3, 1e-5), (3, 3, 1, 0.1), (5, 2, 3, 1e-3)]   # F, C, K, eps
    for F, C, K, eps in cases:
        case = f"W of shape ({F}, {C}, {K}, {K}), eps={eps}"
        W = gen.standard_normal((F, C, K, K))
        b, gamma, beta, mean = (gen.standard_normal(F) for _ in range(4))
        var = gen.uniform(0.05, 2.0, F)
        given = [a.copy() for a in (W, b, gamma, beta, mean, var)]
        got = call(fn, *given, eps, case=case)
        expect_unchanged(fn, case, list(zip(("W", "b", "gamma", "beta", "mean", "var"),
                                            (W, b, gamma, beta, mean, var), given)))
        W_got, b_got = expect_tuple(got, 2, fn, case, "(W_folded, b_folded)")
        W_got = to_array(W_got, fn, case, "W_folded")
        b_got = to_array(b_got, fn, case, "b_folded")
        s = gamma / np.sqrt(var + eps)
        expect_shape(W_got, W.shape, fn, case, "W_folded", "W_folded has W's shape (F, C, KH, "
                     "KW): give the (F,) factors three axes of size 1 so they scale axis 0.")
        expect_close(W_got, W * s[:, None, None, None], fn, case, "W_folded", mistakes=[
            (lambda: W * (gamma / np.sqrt(var))[:, None, None, None],
             "add eps inside the square root: sqrt(var + eps)."),
            (lambda: W * (gamma / (var + eps))[:, None, None, None],
             "divide by the standard deviation sqrt(var + eps), not by the variance."),
            (lambda: W * s[None, :, None, None],
             "s has one value per OUTPUT channel (axis 0 of W), not per input channel."),
        ], fix="each output channel's filter W[f] is scaled by its own factor, gamma[f] over "
               "the standard deviation sqrt(var[f] + eps).")
        expect_shape(b_got, b.shape, fn, case, "b_folded")
        expect_close(b_got, (b - mean) * s + beta, fn, case, "b_folded", mistakes=[
            (lambda: b * s + beta, "subtract the running mean from b before scaling it."),
            (lambda: (b - mean) * s, "add beta at the end, after scaling."),
            (lambda: b - mean * s + beta, "scale the bias b too, not only the mean: BatchNorm "
                                          "scales the whole convolution output."),
        ], fix="the folded bias is the old bias minus the running mean, scaled by the same "
               "factor as the filters, plus beta.")
    passed(fn, len(cases))


def validate_batch(fn) -> None:
    """Check ``fn(inputs, shape)``: ``inputs`` is what a client sent (nested lists, as JSON
    gives them), ``shape`` one sample's shape. It returns a float32 array (N, *shape), taking
    samples as they are or flat (N, prod(shape)); anything else raises ValueError: not numbers
    (strings, booleans), ragged rows, an empty batch, a wrong shape, NaN or infinity."""
    __tracebackhide__ = True
    good = [([[0.0, 1.0, 2.0]], (3,), "one sample of 3"),
            ([[1, 2, 3], [4, 5, 6]], (3,), "two samples of 3 whole numbers"),
            ([[[[0.5] * 2] * 2]], (1, 2, 2), "one 1x2x2 image"),
            ([[0.0, 0.25, 0.5, 0.75]] * 3, (1, 2, 2), "three flat 1x2x2 images")]
    bad = [([], (3,), "an empty batch"),
           ([0.0, 1.0, 2.0], (3,), "one sample without its batch (a 1-D list)"),
           ([[0.0, 1.0]], (3,), "samples of 2 numbers for a model of 3"),
           ([[0.0, 1.0, 2.0], [0.0]], (3,), "ragged rows"),
           ([["0", "1", "2"]], (3,), "strings"),
           ([[True, False, True]], (3,), "booleans"),
           ([[0.0, float("nan"), 1.0]], (3,), "a NaN"),
           ([[0.0, float("inf"), 1.0]], (3,), "an infinity"),
           ([[0.0] * 5], (1, 2, 2), "5 numbers for a 1x2x2 image")]
    for inputs, shape, what in good:
        case = f"{what}: inputs={inputs}, shape={shape}"
        got = to_array(call(fn, inputs, shape, case=case), fn, case, "the result")
        expected = as_batch(inputs, shape)
        expect_shape(got, expected.shape, fn, case, "the result",
                     "a flat sample of prod(shape) numbers is reshaped to shape: "
                     "x.reshape((N,) + shape).")
        if got.dtype != np.float32:
            fail(fn, case, f"the result has dtype {got.dtype}.", "convert it: x.astype(np.float32).")
        expect_close(got, expected, fn, case, "the result")
    for inputs, shape, what in bad:
        case = f"{what}: inputs={inputs}, shape={shape}"
        try:
            fn(inputs, shape)
        except (ValueError, InputError) as err:
            if not str(err).strip():
                fail(fn, case, "it raised ValueError with no message.",
                     "say what was expected and what was given: the client reads it.")
            continue
        except NotImplementedError:
            call(fn, inputs, shape, case=case)       # the usual "not implemented yet" message
        except Exception as err:  # noqa: BLE001 - the learner's function raised something else
            fail(fn, case, f"it raised {type(err).__name__}: {err}",
                 "turn every problem with the inputs into a ValueError with a message (a "
                 "service answers it with 422; any other exception would be a 500).")
        fail(fn, case, "it accepted these inputs; they must be refused with ValueError.",
             {"strings": "np.asarray keeps strings as strings: check x.dtype.kind is one "
                         "of 'i', 'u', 'f'.",
              "booleans": "booleans are not numbers here: check x.dtype.kind is one of 'i', "
                          "'u', 'f' ('b' is bool).",
              "a NaN": "check np.isfinite(x).all().", "an infinity": "check np.isfinite(x).all().",
              "an empty batch": "a batch needs at least one sample: check len(x) > 0."}.get(
                 what, "compare x.shape[1:] with shape (or with (prod(shape),) for flat samples)."))
    passed(fn, len(good) + len(bad))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'fold_batchnorm': [
        ('write BatchNorm of the convolution output y as s * (y - mean) + beta with '
         's = gamma / sqrt(var + eps); y = W * x + b is linear, so s can move into W and b'),
        ('s has shape (F,): give it three axes of size 1 (s[:, None, None, None]) to scale the '
         'filters of W along axis 0; the folded bias is (b - mean) times s, plus beta'),
    ],
    'validate_batch': [
        ('np.asarray raises ValueError on ragged rows; x.dtype.kind tells integers (i, u) and '
         'floats (f) from strings (U) and booleans (b); np.isfinite finds NaN and infinity'),
        ('in order: x = np.asarray(inputs) (turn its ValueError into yours); refuse a dtype kind '
         'outside "iuf"; if x is 2-D with int(np.prod(shape)) columns, reshape it to (N,) + shape; '
         'refuse x.ndim == 0, len(x) == 0 or x.shape[1:] != shape; refuse non-finite values; '
         'return x as float32'),
    ],
}
