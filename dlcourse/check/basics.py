"""Checks for lessons 00-03: arrays on NumPy and CuPy, the perceptron, losses, backpropagation.

Used in notebooks ``00_setup_and_gpu_arrays`` to ``03_backpropagation``: after you write a
function, a check cell runs it on a few small cases, for example::

    dl.check.linear_backward(linear_backward)

and either prints that every case passes or raises :class:`ExerciseError` saying which case
failed, what was expected, what your function gave and, where the mistake is a common one,
what the likely fix is. A function that still raises ``NotImplementedError`` gets
``"... is not implemented yet: <the hint>"``. The shared machinery lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from ..losses import log_softmax as _ref_log_softmax  # the references are the library's
from ..losses import softmax as _ref_softmax
from .harness import (call, expect_close, expect_finite, expect_on_gpu,
                      expect_shape, expect_tuple, expect_unchanged, fail, gpu, passed, rng,
                      shape_text, to_array)

__all__ = [
    "normalize_rows",
    "perceptron_predict", "perceptron_update",
    "softmax", "cross_entropy", "softmax_ce_grad", "sigmoid_ce_grad",
    "linear_forward", "linear_backward", "relu_backward",
]


# ======================================================================================
# Lesson 00: one code path for NumPy and CuPy
# ======================================================================================
def _ref_normalize_rows(x):
    __tracebackhide__ = True
    return x / np.sqrt((x * x).sum(axis=1, keepdims=True))


def normalize_rows(fn):
    """Check ``fn(x)``: each row of ``x`` (N, D) scaled to Euclidean length 1, same dtype,
    and (when a GPU is present) a CuPy input gives a CuPy output."""
    __tracebackhide__ = True
    r = rng(0)
    cases = [
        ("x = [[3, 4], [1, 0], [0, -2]] (rows of length 5, 1 and 2)",
         np.array([[3.0, 4.0], [1.0, 0.0], [0.0, -2.0]])),
        ("x of shape (4, 4), float64 (square: the axes cannot be told apart by shape)",
         r.standard_normal((4, 4))),
        ("x of shape (6, 3), float32", r.standard_normal((6, 3)).astype(np.float32)),
    ]
    for case, x in cases:
        expected = _ref_normalize_rows(x)
        given = x.copy()
        got = to_array(call(fn, given, case=case,
                            on_error="the row norms should form an (N, 1) column: sum with "
                                     "axis=1 and keepdims=True."), fn, case, "the result")
        expect_shape(got, x.shape, fn, case, "the result", "return an array shaped like x.")
        col = np.sqrt((x * x).sum(axis=1))
        tol = 1e-5 if x.dtype == np.float32 else 1e-10
        expect_close(got, expected, fn, case, "the result", rtol=tol, atol=tol, mistakes=[
            (x / np.sqrt((x * x).sum(axis=0, keepdims=True)),
             "you normalized the columns (axis=0); each ROW should get length 1: sum over axis=1."),
            (x / (x * x).sum(axis=1, keepdims=True),
             "you divided by the squared length: take xp.sqrt of the sum of squares."),
            (x / np.abs(x).sum(axis=1, keepdims=True),
             "you divided by the sum of absolute values; the Euclidean length is "
             "sqrt(sum of squares)."),
            (lambda: x / col[None, :],
             "without keepdims=True the norms have shape (N,) and divide the COLUMNS: keep "
             "the summed axis so they form an (N, 1) column."),
        ])
        if got.dtype != x.dtype:
            fail(fn, case, f"the result is {got.dtype} but x is {x.dtype}.",
                 "use x's own operations (x * x, .sum, xp.sqrt); mixing in np.float64 values "
                 "promotes float32 to float64.")
        expect_unchanged(fn, case, [("x", x, given)],
                         "divide into a new array, out = x / lengths: x /= lengths overwrites "
                         "the caller's x with the result.")
    cp = gpu()
    if cp is not None:
        case = "the first case again, with x on the GPU (a CuPy array)"
        x = cases[0][1]
        out = call(fn, cp.asarray(x), case=case)
        expect_on_gpu(out, fn, case, "the result")
        expect_close(to_array(out, fn, case, "the result"), _ref_normalize_rows(x), fn, case,
                     "the result", rtol=1e-10, atol=1e-10)
    passed(fn, len(cases) + (cp is not None), cp is not None)


# ======================================================================================
# Lesson 01: the perceptron
# ======================================================================================
def perceptron_predict(fn):
    """Check ``fn(X, w, b)``: class 1 where ``X @ w + b > 0`` (strictly), else 0; shape (N,)."""
    __tracebackhide__ = True
    r = rng(1)
    cases = [
        ("X = [[2, 1], [-1, -3], [0.5, 0.5], [1, -1]], w = [1, 1], b = 0 "
         "(weighted sums 3, -4, 1, 0)",
         np.array([[2.0, 1.0], [-1.0, -3.0], [0.5, 0.5], [1.0, -1.0]]), np.array([1.0, 1.0]), 0.0),
        ("X = [[1, 0], [0, 1], [2, 2], [0.4, 0], [0, 0.1]], w = [0.5, -1], b = -0.25 "
         "(a bias that matters: weighted sums 0.25, -1.25, -1.25, -0.05, -0.35)",
         np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [0.4, 0.0], [0.0, 0.1]]),
         np.array([0.5, -1.0]), -0.25),
        ("20 random samples with 5 features", r.standard_normal((20, 5)), r.standard_normal(5), 0.3),
    ]
    for case, X, w, b in cases:
        s = X @ w + b
        expected = (s > 0).astype(np.int64)
        X_given, w_given = X.copy(), w.copy()
        got = to_array(call(fn, X_given, w_given, b, case=case,
                            on_error="X is (N, D) and w is (D,): the weighted sums are X @ w + b."),
                       fn, case, "the prediction")
        if got.ndim == 2 and got.shape == (len(X), 1):
            fail(fn, case, f"the prediction has shape {shape_text(got.shape)}; expected ({len(X)},).",
                 "return one label per sample, a flat array of shape (N,).")
        expect_shape(got, expected.shape, fn, case, "the prediction",
                     "one label per row of X: (X @ w + b) has shape (N,).")
        if not (np.issubdtype(got.dtype, np.number) or got.dtype == bool):
            fail(fn, case, f"the prediction has dtype {got.dtype}; expected 0/1 integers.")
        expect_close(got, expected, fn, case, "the prediction", mistakes=[
            ((s >= 0).astype(np.int64),
             "a weighted sum of exactly 0 should give class 0: the step is 1 only where "
             "x @ w + b > 0 (strictly), as in dl.Perceptron."),
            (np.sign(s),
             "np.sign gives -1, 0 or +1; this perceptron's classes are 0 and 1: "
             "(s > 0).astype(np.int64)."),
            (np.where(s > 0, 1, -1),
             "you returned -1/+1; this perceptron's classes are 0 and 1: (s > 0).astype(int)."),
            (s, "you returned the weighted sums themselves: apply the step, 1 where s > 0 else 0."),
            ((X @ w > 0).astype(np.int64), "you forgot the bias: s = X @ w + b."),
            ((X @ w - b > 0).astype(np.int64),
             "the bias has the wrong sign: s = X @ w + b, not X @ w - b."),
        ])
        if got.dtype.kind not in "iu":
            kind = "booleans (True/False)" if got.dtype == bool else f"{got.dtype} numbers"
            fail(fn, case, f"the labels are right but they are {kind}; the classes are the "
                           f"integers 0 and 1.",
                 "turn the step's booleans into integers: (s > 0).astype(np.int64).")
        expect_unchanged(fn, case, [("X", X, X_given), ("w", w, w_given)])
    passed(fn, len(cases))


def perceptron_update(fn):
    """Check ``fn(w, b, x, y, lr)`` -> ``(w, b)``: Rosenblatt's rule for one sample
    (``w += lr * (y - ŷ) * x``, ``b += lr * (y - ŷ)``, with ``ŷ = 1 if x @ w + b > 0 else 0``)."""
    __tracebackhide__ = True
    cases = [
        ("w = [0, 0], b = 0, x = [1, 2], y = 1: predicted 0, so a mistake (lr = 1)",
         np.array([0.0, 0.0]), 0.0, np.array([1.0, 2.0]), 1, 1.0),
        ("w = [1, 1], b = 0.5, x = [2, 1], y = 0: predicted 1, a mistake the other way (lr = 1)",
         np.array([1.0, 1.0]), 0.5, np.array([2.0, 1.0]), 0, 1.0),
        ("w = [1, 1], b = 0, x = [1, 1], y = 1: already right, nothing should change",
         np.array([1.0, 1.0]), 0.0, np.array([1.0, 1.0]), 1, 1.0),
        ("w = [0.5, -1, 2], b = 0.1, x = [1, 2, -1], y = 1: a mistake with lr = 0.5",
         np.array([0.5, -1.0, 2.0]), 0.1, np.array([1.0, 2.0, -1.0]), 1, 0.5),
    ]
    for case, w, b, x, y, lr in cases:
        y_hat = 1 if x @ w + b > 0 else 0
        step = lr * (y - y_hat)
        w_exp, b_exp = w + step * x, b + step
        step_ge = lr * (y - (1 if x @ w + b >= 0 else 0))   # the step taken with ">= 0"
        at_zero = ("x @ w + b is exactly 0 here, which predicts class 0 (class 1 needs "
                   "x @ w + b > 0, strictly, not >= 0), so this is a mistake to learn from.")
        w_given, x_given = w.copy(), x.copy()
        out = call(fn, w_given, b, x_given, y, lr, case=case)
        w_got, b_got = expect_tuple(out, 2, fn, case, "w, b")
        w_got = to_array(w_got, fn, case, "the new w")
        b_got = to_array(b_got, fn, case, "the new b")
        expect_shape(w_got, w.shape, fn, case, "the new w")
        if b_got.size != 1:
            fail(fn, case, f"the new b has shape {shape_text(b_got.shape)}; it should be one number.")
        b_got = b_got.reshape(())
        right = y_hat == y
        w_mistakes = []
        if right and y == 1:   # (on a mistake, or with y = 0, lr * y * x is right or zero)
            w_mistakes.append((w + lr * y * x, "the rule moves w only on a mistake: use "
                               "lr * (y - y_hat) * x, which is 0 when the prediction is right."))
        w_mistakes += [
            (w - step * x, "w moved the wrong way: the step is lr * (y - y_hat), not (y_hat - y)."),
            (w + (y - y_hat) * x, "lr was ignored: multiply the step by lr."),
            (w + step_ge * x, at_zero),
        ]
        if not right:
            w_mistakes.append((w, f"w did not change, but this sample is misclassified (predicted "
                                  f"{y_hat}, label {y}): the step lr * (y - y_hat) = {step:g} is "
                                  f"not 0, so w + step * x moves w "
                                  f"{'towards' if step > 0 else 'away from'} x."))
        expect_close(w_got, w_exp, fn, case, "the new w", rtol=1e-12, atol=1e-12,
                     mistakes=w_mistakes,
                     fix=("nothing should change when the prediction is right." if right else None))
        expect_close(b_got, b_exp, fn, case, "the new b", rtol=1e-12, atol=1e-12, mistakes=[
            (np.asarray(b), "b did not change: the bias learns too, b + lr * (y - y_hat)."),
            (np.asarray(b - step), "b moved the wrong way: add lr * (y - y_hat)."),
            (np.asarray(b + (y - y_hat)), "lr was ignored in the bias update."),
            (np.asarray(b + step_ge), at_zero),
        ])
        # (w may be updated in place, w += ..., as the rule is written; x must stay as it was)
        expect_unchanged(fn, case, [("x", x, x_given)])
    passed(fn, len(cases))


# ======================================================================================
# Lesson 02: losses and their gradients
# ======================================================================================

def softmax(fn):
    """Check ``fn(z)``: softmax over the last axis, for any number of axes, finite for
    logits as large as 1000 and rows spread over 2000 (subtract each row's max), keeping
    float32 as float32 and leaving z as it was."""
    __tracebackhide__ = True
    r = rng(2)
    SPREAD = ("rows with a large spread: z = [[1000, 0, -1000], [-1000, 0, 1000]] (only "
              "subtracting each row's MAX keeps every exponent <= 0)")
    cases = [
        ("z = [[1, 2, 3], [1, 1, 1]]", np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])),
        ("z of shape (3, 3), random (square: rows and columns cannot be told apart by shape)",
         r.standard_normal((3, 3))),
        ("large logits: z = [[1000, 999, 998], [-1000, -1000, -1000]]",
         np.array([[1000.0, 999.0, 998.0], [-1000.0, -1000.0, -1000.0]])),
        (SPREAD, np.array([[1000.0, 0.0, -1000.0], [-1000.0, 0.0, 1000.0]])),
        ("a single row of 4 logits, z of shape (4,) (use the last axis, axis=-1)",
         np.array([0.5, -1.0, 2.0, 0.0])),
        ("z of shape (2, 3, 5), float32 (softmax over the last axis)",
         r.standard_normal((2, 3, 5)).astype(np.float32)),
    ]
    for case, z in cases:
        expected = _ref_softmax(z)
        given = z.copy()
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            got = to_array(call(fn, given, case=case,
                                on_error="reduce over the last axis with axis=-1 and "
                                         "keepdims=True, so any number of axes works."),
                           fn, case, "the result")
        expect_shape(got, z.shape, fn, case, "the result", "softmax keeps the shape of z.")
        if not np.isfinite(got).all():
            first_row_bad = not np.isfinite(got.reshape(-1, z.shape[-1])[0]).all()
            fix = ("exp(1000) overflows to inf and inf/inf is nan. Subtract each row's max "
                   "first: z - z.max(axis=-1, keepdims=True); the result is mathematically the same."
                   if first_row_bad else
                   "subtract each ROW's own max (keepdims=True), not the max of the whole array: "
                   "a row far below the global max underflows to 0/0.")
            if case == SPREAD:
                fix = ("subtract each row's MAX, z - z.max(axis=-1, keepdims=True). Any other "
                       "shift (the row's min, its mean, its first entry) leaves an exponent of "
                       "1000 or 2000 in one of these rows, and exp overflows to inf (inf/inf is "
                       "nan); only the max makes every exponent <= 0.")
            expect_finite(got, fn, case, "the result", fix)
        tol = 1e-5 if z.dtype == np.float32 else 1e-10
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            col = np.exp(z - z.max()) / np.exp(z - z.max()).sum(axis=0, keepdims=True)
            whole = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        expect_close(got, expected, fn, case, "the result", rtol=tol, atol=tol, mistakes=[
            (col, "the columns sum to 1 instead of the rows: reduce over the last axis (axis=-1)."),
            (whole, "the whole array sums to 1: you divided by the sum of EVERY exponential. "
                    "Each row is its own distribution: sum over the last axis only (axis=-1, "
                    "keepdims=True)."),
        ])
        if got.dtype != z.dtype:
            fail(fn, case, f"the result is {got.dtype} but z is {z.dtype}.",
                 "use z's own operations; float64 constants or arrays promote float32.")
        expect_unchanged(fn, case, [("z", z, given)],
                         "compute into a new array: shifted = z - z.max(axis=-1, keepdims=True) "
                         "(z -= ... overwrites the caller's logits).")
    passed(fn, len(cases))


def cross_entropy(fn):
    """Check ``fn(logits, labels)``: the mean over the batch of -log softmax(logits)[n, labels[n]],
    a single number, finite even for logits 1000 apart (use log-softmax, not log(softmax)) and
    for rows 1000 apart (subtract each row's own max)."""
    __tracebackhide__ = True
    r = rng(3)
    ROWS_APART = ("rows 1000 apart: logits = [[1000, 0], [-1000, -1001]], labels = [0, 1] "
                  "(loss 0.6566)")
    cases = [
        ("logits = [[2, 1, 0.1], [0.5, 2.5, 0.3]], labels = [0, 1]",
         np.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3]]), np.array([0, 1])),
        ("8 samples, 5 classes, random logits", r.standard_normal((8, 5)) * 2, r.integers(0, 5, 8)),
        ("logits 1000 apart: logits = [[1000, 0], [0, 1000]], labels = [1, 1] (loss 500)",
         np.array([[1000.0, 0.0], [0.0, 1000.0]]), np.array([1, 1])),
        (ROWS_APART, np.array([[1000.0, 0.0], [-1000.0, -1001.0]]), np.array([0, 1])),
    ]
    for case, logits, labels in cases:
        N = len(labels)
        logp = _ref_log_softmax(logits)
        picked = logp[np.arange(N), labels]
        expected = -picked.mean()
        logits_given, labels_given = logits.copy(), labels.copy()
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            out = call(fn, logits_given, labels_given, case=case,
                       on_error="index the log-probabilities with [xp.arange(N), labels].")
        got = to_array(out, fn, case, "the loss")
        if got.size != 1:
            fail(fn, case, f"the loss has shape {shape_text(got.shape)}; it should be one number.",
                 "average over the batch: -logp[xp.arange(N), labels].mean().")
        got = got.reshape(())
        if not np.isfinite(got):
            expect_finite(got, fn, case, "the loss",
                          "subtract each ROW's own max, logits.max(axis=1, keepdims=True), not "
                          "the max of the whole array: the second row lies 2000 below the "
                          "global max, so all its exps underflow to 0 and log(0) = -inf."
                          if case == ROWS_APART else
                          "softmax underflows to exactly 0 for a logit 1000 below the max, and "
                          "log(0) = -inf. Compute log-softmax directly: "
                          "shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True)).")
        expect_close(got, expected, fn, case, "the loss", rtol=1e-6, atol=1e-9, mistakes=[
            (-picked.sum(), f"the loss is {N} times too large: take the mean over the batch "
                            "(.mean()), not the sum."),
            (picked.mean(), "the sign is flipped: the loss is MINUS the log-probability."),
            (-logp.mean(), "you averaged over every class; use only the log-probability of each "
                           "sample's label: logp[xp.arange(N), labels]."),
            (-logp[:, labels].mean(), "logp[:, labels] picks every label's column for EVERY row "
                                      "(an (N, N) array); one entry per row needs two index "
                                      "arrays: logp[xp.arange(N), labels]."),
            (-_ref_log_softmax(logits.T).T[np.arange(N), labels].mean(),
             "softmax went over axis 0 (the batch); it must go over the classes, axis=1."),
        ])
        expect_unchanged(fn, case, [("logits", logits, logits_given),
                                    ("labels", labels, labels_given)])
    passed(fn, len(cases))


def softmax_ce_grad(fn):
    """Check ``fn(logits, labels)``: dL/dlogits of L = mean over the batch of the softmax
    cross-entropy, ``(softmax(logits) - onehot(labels)) / N``, shaped like logits (N, K)."""
    __tracebackhide__ = True
    r = rng(7)
    cases = [
        ("logits = [[2, 1, 0.1], [0.5, 2.5, 0.3]], labels = [0, 1]",
         np.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3]]), np.array([0, 1])),
        ("6 samples, 4 classes, random logits", r.standard_normal((6, 4)) * 2, r.integers(0, 4, 6)),
        ("4 samples, 4 classes (square: only the values can show a wrong axis)",
         r.standard_normal((4, 4)), np.array([3, 0, 0, 2])),
        ("logits 1000 apart: [[1000, 0], [0, 1000]], labels = [1, 1]",
         np.array([[1000.0, 0.0], [0.0, 1000.0]]), np.array([1, 1])),
    ]
    for case, logits, labels in cases:
        N, K = logits.shape
        p = _ref_softmax(logits)
        onehot = np.eye(K)[labels]
        expected = (p - onehot) / N
        given = {"logits": logits.copy(), "labels": labels.copy()}
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            got = to_array(call(fn, given["logits"], given["labels"], case=case,
                                on_error="subtract 1 at one entry per row: index with "
                                         "[xp.arange(N), labels]."), fn, case, "dL/dlogits")
        expect_shape(got, logits.shape, fn, case, "dL/dlogits",
                     "the gradient has the logits' shape (N, K): one entry per logit.")
        expect_finite(got, fn, case, "dL/dlogits",
                      "compute the softmax stably (subtract each row's max before exp).")

        def every_label():
            __tracebackhide__ = True
            wrong = p.copy()
            wrong[:, labels] -= 1
            return wrong / N
        expect_close(got, expected, fn, case, "dL/dlogits", rtol=1e-6, atol=1e-12, mistakes=[
            (p - onehot, f"the gradient is {N} times too large: the loss is a mean over N "
                         "samples, so divide by N."),
            ((onehot - p) / N, "the sign is flipped: the gradient is softmax MINUS the one-hot "
                               "target."),
            (p / N, "the target is missing: subtract 1 at each row's label (the one-hot "
                    "target) from the probabilities."),
            (every_label, "p[:, labels] -= 1 subtracts 1 in every row at EVERY label's column; "
                          "one entry per row: p[xp.arange(N), labels] -= 1."),
            ((_ref_softmax(logits.T).T - onehot) / N,
             "the softmax went over axis 0 (the batch); it must go over the classes, axis=1."),
            ((np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum() - onehot) / N,
             "the softmax is normalized over the whole array; each row is its own distribution."),
        ])
        expect_unchanged(fn, case, [("logits", logits, given["logits"]),
                                    ("labels", labels, given["labels"])],
                         "compute into a new array (p = softmax(logits), then change p): do not "
                         "write into {name}.")
    passed(fn, len(cases))


def sigmoid_ce_grad(fn):
    """Check ``fn(z, y)``: dL/dz of L = mean binary cross-entropy of sigmoid(z) and y,
    i.e. ``(sigmoid(z) - y) / N``, shaped like z."""
    __tracebackhide__ = True
    r = rng(4)
    cases = [
        ("z = [0, 2, -1], y = [1, 0, 1]", np.array([0.0, 2.0, -1.0]), np.array([1.0, 0.0, 1.0])),
        ("10 random logits and labels", r.standard_normal(10) * 3, r.integers(0, 2, 10).astype(float)),
        ("large logits: z = [30, -30, 50], y = [1, 1, 0]",
         np.array([30.0, -30.0, 50.0]), np.array([1.0, 1.0, 0.0])),
        ("logits far out: z = [1000, -1000, 0], y = [1, 0, 1] (sigmoid 1, 0 and 0.5)",
         np.array([1000.0, -1000.0, 0.0]), np.array([1.0, 0.0, 1.0])),
    ]
    for case, z, y in cases:
        N = z.size
        with np.errstate(over="ignore"):      # exp(1000) is inf, and 1 / (1 + inf) is 0: right
            sig = 1.0 / (1.0 + np.exp(-z))
        expected = (sig - y) / N
        z_given, y_given = z.copy(), y.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            got = to_array(call(fn, z_given, y_given, case=case), fn, case, "dL/dz")
        expect_shape(got, z.shape, fn, case, "dL/dz", "the gradient has one entry per logit.")
        expect_finite(got, fn, case, "dL/dz",
                      "compute the sigmoid as the lesson writes it, 1 / (1 + exp(-z)) (or as "
                      "0.5 * (1 + tanh(z / 2))): at z = 1000 that is 1 / (1 + 0) = 1 and at "
                      "z = -1000 it is 1 / (1 + inf) = 0, while exp(z) / (1 + exp(z)) is "
                      "inf / inf = nan at z = 1000.")
        expect_close(got, expected, fn, case, "dL/dz", rtol=1e-6, atol=1e-12, mistakes=[
            (sig - y, f"the gradient is {N} times too large: the loss is a mean over N samples, "
                      "so divide by N."),
            ((y - sig) / N, "the sign is flipped: dL/dz = (sigmoid(z) - y) / N."),
            ((sig - y) * sig * (1 - sig) / N,
             "you multiplied by sigmoid'(z): for cross-entropy on logits that factor cancels, "
             "leaving (sigmoid(z) - y) / N."),
            (y - sig, "the sign is flipped and the mean's 1/N is missing."),
        ])
        if got.dtype != z.dtype:
            fail(fn, case, f"dL/dz is {got.dtype} but z is {z.dtype}.",
                 "keep z's dtype: compute with z's own operations and do not cast the result "
                 "(.astype(np.float32) throws away digits the gradient check needs).")
        expect_unchanged(fn, case, [("z", z, z_given), ("y", y, y_given)])
    passed(fn, len(cases))


# ======================================================================================
# Lesson 03: backpropagation through Linear and ReLU
# ======================================================================================
def _linear_cases():
    __tracebackhide__ = True
    r = rng(5)

    def case(N, D, M, what):
        __tracebackhide__ = True
        return (f"{what}: x {shape_text((N, D))}, W {shape_text((D, M))}, b {shape_text((M,))}, "
                f"dout {shape_text((N, M))}",
                r.standard_normal((N, D)), r.standard_normal((D, M)), r.standard_normal(M),
                r.standard_normal((N, M)))
    return [case(4, 3, 2, "N=4 samples, D=3 inputs, M=2 outputs"),
            case(3, 3, 3, "N=D=M=3 (square: only the values can show a transpose)"),
            case(1, 5, 4, "a single sample, N=1")]


def linear_forward(fn):
    """Check ``fn(x, W, b)`` -> ``(out, cache)``: ``out = x @ W + b`` of shape (N, M) and
    ``cache = (x, W)``, exactly what linear_backward needs."""
    __tracebackhide__ = True
    cases = _linear_cases()
    for case, x, W, b, _ in cases:
        given = {"x": x.copy(), "W": W.copy(), "b": b.copy()}
        out = call(fn, given["x"], given["W"], given["b"], case=case,
                   on_error="x is (N, D) and W is (D, M): the product is x @ W, shape (N, M).")
        out, cache = expect_tuple(out, 2, fn, case, "out, cache")
        got = to_array(out, fn, case, "out")
        expect_shape(got, (x.shape[0], W.shape[1]), fn, case, "out",
                     "out = x @ W + b has one row per sample and one column per output.")
        expect_close(got, x @ W + b, fn, case, "out", rtol=1e-10, atol=1e-10, mistakes=[
            (x @ W, "you forgot the bias: out = x @ W + b."),
            (lambda: x @ W.T + b, "W is (D, M): use x @ W, not x @ W.T."),
        ])
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            fail(fn, case, f"cache is {type(cache).__name__}"
                           + (f" of {len(cache)} items" if isinstance(cache, (tuple, list)) else "")
                           + "; expected the pair (x, W).",
                 "cache = (x, W): linear_backward needs x for dW and W for dx.")
        for item, (name, ref) in zip(cache, (("x", x), ("W", W))):
            item = to_array(item, fn, case, f"cache's {name}")
            if item.shape != ref.shape or not np.allclose(item, ref):
                fail(fn, case, f"cache should be (x, W), but its {'first' if name == 'x' else 'second'} "
                               f"item is not {name} (shape {shape_text(item.shape)}).",
                     "cache = (x, W).")
        expect_unchanged(fn, case, [(k, ref, given[k]) for k, ref in (("x", x), ("W", W), ("b", b))])
    passed(fn, len(cases))


def linear_backward(fn):
    """Check ``fn(dout, cache)`` with ``cache = (x, W)`` -> ``(dx, dW, db)``:
    ``dx = dout @ W.T`` (N, D), ``dW = x.T @ dout`` (D, M), ``db = dout.sum(axis=0)`` (M,)."""
    __tracebackhide__ = True
    cases = _linear_cases()
    cp = gpu()
    for case, x, W, b, dout in cases:
        N, D = x.shape
        M = W.shape[1]
        dx, dW, db = dout @ W.T, x.T @ dout, dout.sum(axis=0)
        given = {"dout": dout.copy(), "x": x.copy(), "W": W.copy()}
        out = call(fn, given["dout"], (given["x"], given["W"]), case=case,
                   on_error="check each product's shapes: dx (N, D) = dout (N, M) @ W.T (M, D); "
                            "dW (D, M) = x.T (D, N) @ dout (N, M).")
        got = expect_tuple(out, 3, fn, case, "dx, dW, db")
        g_dx, g_dW, g_db = (to_array(g, fn, case, n) for g, n in zip(got, ("dx", "dW", "db")))
        # Shapes first: they name the mistake most clearly.
        expect_shape(g_dx, (N, D), fn, case, f"dx (x has shape {shape_text((N, D))})",
                     "dx has x's shape: dx = dout @ W.T, (N, M) @ (M, D).")
        if g_dW.shape == (M, D) and M != D:
            fail(fn, case, f"dW has shape {shape_text(g_dW.shape)} but W has shape {shape_text((D, M))}.",
                 "did you compute dout.T @ x instead of x.T @ dout?")
        expect_shape(g_dW, (D, M), fn, case, f"dW (W has shape {shape_text((D, M))})",
                     "dW has W's shape: dW = x.T @ dout, (D, N) @ (N, M).")
        if g_db.shape != (M,):
            if g_db.shape == (N, M):
                fix = ("b is added to every row of the batch, so its gradient is the sum of dout "
                       "over the batch: db = dout.sum(axis=0). (Did you forget the sum over the batch?)")
            elif g_db.shape == (1, M):
                fix = "the sum over the batch is right, but drop keepdims=True: db has b's shape (M,)."
            elif g_db.shape == ():
                fix = "you summed over every axis; sum over the batch axis only: dout.sum(axis=0)."
            elif g_db.shape == (N,):
                fix = "you summed over the outputs (axis=1); sum over the batch, axis=0."
            else:
                fix = "db = dout.sum(axis=0): the sum of dout over the batch."
            fail(fn, case, f"db has shape {shape_text(g_db.shape)} but b has shape {shape_text((M,))}.", fix)
        # Then values.
        expect_close(g_dx, dx, fn, case, "dx", rtol=1e-10, atol=1e-10, mistakes=[
            (lambda: dout @ W, "dx = dout @ W.T: transpose W."),
            (np.zeros_like(dx), "dx is all zeros: dx = dout @ W.T."),
        ])
        dW_mistakes = [(x.T @ dout / N, "dW is divided by N: the loss's mean already sits in dout.")]
        if D == M:
            dW_mistakes.append((dout.T @ x, "dW is the transpose of the right answer: "
                                            "dW = x.T @ dout, not dout.T @ x."))
        expect_close(g_dW, dW, fn, case, "dW", rtol=1e-10, atol=1e-10, mistakes=dW_mistakes)
        db_mistakes = [(dout.mean(axis=0), f"db is {N} times too small: SUM dout over the batch, "
                                           "don't average.")]
        if N == M:
            db_mistakes.append((dout.sum(axis=1), "you summed over the outputs (axis=1); sum over "
                                                  "the batch, axis=0."))
        expect_close(g_db, db, fn, case, "db", rtol=1e-10, atol=1e-10, mistakes=db_mistakes)
        expect_unchanged(fn, case, [(k, ref, given[k])
                                    for k, ref in (("dout", dout), ("x", x), ("W", W))])
    if cp is not None:
        case, x, W, b, dout = cases[0]
        case = f"{case}, on the GPU (CuPy arrays)"
        out = expect_tuple(call(fn, cp.asarray(dout), (cp.asarray(x), cp.asarray(W)), case=case),
                           3, fn, case, "dx, dW, db")
        for g, name, ref in zip(out, ("dx", "dW", "db"), (dout @ W.T, x.T @ dout, dout.sum(0))):
            expect_on_gpu(g, fn, case, name)
            expect_close(to_array(g, fn, case, name), ref, fn, case, name, rtol=1e-10, atol=1e-10)
    passed(fn, len(cases) + (cp is not None), cp is not None)


def relu_backward(fn):
    """Check ``fn(dout, cache)`` with ``cache = x`` (the ReLU's input) -> ``dx``: dout where
    x > 0, else 0 (also 0 exactly at x == 0, as dl.ReLU does); any shape."""
    __tracebackhide__ = True
    r = rng(6)
    cases = [
        ("x = [[-1, 0, 2], [3, -0.5, 0]], dout = [[1, 2, 3], [4, 5, 6]] (note the zeros in x)",
         np.array([[-1.0, 0.0, 2.0], [3.0, -0.5, 0.0]]), np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])),
        ("x and dout of shape (4, 5), random, dout with negative entries",
         r.standard_normal((4, 5)), r.standard_normal((4, 5))),
        ("x and dout of shape (2, 3, 4): ReLU works on any shape",
         r.standard_normal((2, 3, 4)), r.standard_normal((2, 3, 4))),
    ]
    for case, x, dout in cases:
        expected = dout * (x > 0)
        dout_given, x_given = dout.copy(), x.copy()
        got = to_array(call(fn, dout_given, x_given, case=case), fn, case, "dx")
        expect_shape(got, x.shape, fn, case, "dx", "dx has the shape of x (and of dout).")
        expect_close(got, expected, fn, case, "dx", rtol=1e-12, atol=1e-12, mistakes=[
            (dout * (x >= 0), "at x == 0 the gradient should be 0 (we take ReLU's slope there "
                              "as 0, as dl.ReLU does): use x > 0, not x >= 0."),
            (dout * (dout > 0), "the mask must come from the INPUT x (where the ReLU let the "
                                "signal through), not from dout."),
            ((x > 0).astype(float), "you returned the mask alone: multiply it by dout."),
            (dout, "dout passed through everywhere: zero it where x <= 0."),
            (dout * np.maximum(x, 0), "multiply dout by the 0/1 mask (x > 0), not by max(x, 0)."),
        ])
        expect_unchanged(fn, case, [("dout", dout, dout_given)],
                         "return a new array, dx = dout * (x > 0): zeroing dout in place "
                         "(dout[x <= 0] = 0) also changes the gradient the next layer handed "
                         "back, wherever else it is used.")
        expect_unchanged(fn, case, [("x (the cache)", x, x_given)],
                         "read the cache, do not write into it: x is the ReLU's input, which "
                         "the layer before may still hold. Build the mask as a new array: "
                         "(x > 0).")
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'normalize_rows': [
        ('sum the squares along the feature axis and keep that axis (keepdims), so the lengths '
         'broadcast against x (N, D)'),
        ('the row lengths should form an (N, 1) column: sum x * x over axis=1 with keepdims=True, '
         'take xp.sqrt, and divide x by them'),
    ],
    'perceptron_predict': [
        ('one matrix-vector product gives all N sums at once; a comparison gives booleans, which '
         'you then convert to integers'),
        ('the weighted sums X @ w + b have shape (N,); the step turns each into 1 where it is > 0 '
         'and 0 elsewhere (booleans to integers: .astype(np.int64))'),
    ],
    'perceptron_update': [
        'return new values rather than changing w in place: the caller still holds the old w',
        ('the step lr * (y - y_hat) is 0 when the prediction is right; move w by the step times x, '
         'and b by the step'),
    ],
    'sigmoid_ce_grad': [
        ('compute the sigmoid of z as the lesson writes it (it stays finite for large |z|), then '
         'subtract the labels'),
        ('prediction minus target: sigmoid(z) - y (the sigmoid is 1 / (1 + xp.exp(-z))), divided '
         'by N because the loss is a mean'),
    ],
    'softmax': [
        'the row maxima and row sums need keepdims so they broadcast against z (..., K)',
        ("subtract each row's max (z.max(axis=-1, keepdims=True)) before xp.exp, which changes "
         'nothing mathematically; then divide by the row sums'),
    ],
    'cross_entropy': [
        ('picking one entry per row needs two index arrays: the row numbers 0..N-1 and the labels; '
         'slicing every row with all the labels picks N*N entries'),
        ('log-softmax = shifted - log(sum of exp(shifted)) with shifted = logits minus the row '
         'max; then average -logp[xp.arange(N), labels]'),
    ],
    'softmax_ce_grad': [
        ("start from a copy of the probabilities and subtract 1 at each row's label only (one "
         "entry per row), then scale by 1/N"),
        ("index the copy with two arrays, the row numbers xp.arange(N) and the labels, to reach "
         "one entry per row"),
    ],
    'linear_forward': [
        'the cache holds the input and the weights, in that order',
        ('one matrix product plus the bias (it broadcasts over the rows); the cache is the pair '
         'linear_backward needs, (x, W)'),
    ],
    'linear_backward': [
        ('write the shapes under each other and let them tell you which matrix to transpose and in '
         'which order to multiply'),
        ('each gradient has the shape of its variable: combine dout with W for dx and with x for '
         'dW; b was added to every row, so db sums dout over the batch'),
    ],
    'relu_backward': [
        'build a 0/1 mask from the cached input, not from dout, and multiply',
        ('the gradient passes only where the input x was positive, and is 0 elsewhere (also where '
         'x == 0)'),
    ],
}
