"""Checks for lessons 02a and 02b: losses and their gradients (softmax, cross-entropy, the sigmoid, the
multiclass hinge loss).

Used in notebooks ``02a_loss_and_softmax`` and ``02b_gradient_descent``: after you write a
function, a check cell
runs it on a few small cases, for example::

    dl.check.softmax_ce_grad(softmax_ce_grad)

and either prints that every case passes or raises :class:`ExerciseError` saying which case
failed, what was expected, what your function gave and, where the mistake is a common one,
what the likely fix is. A function that still raises ``NotImplementedError`` gets
``"... is not implemented yet: <the hint>"``.

============================  ===============================  ===============================
lesson                        check                            your function
============================  ===============================  ===============================
02a_loss_and_softmax          :func:`softmax`                  ``(z) -> probabilities``
02a_loss_and_softmax          :func:`cross_entropy`            ``(logits, labels) -> float``
02a_loss_and_softmax          :func:`softmax_ce_grad`          ``(logits, labels) -> dlogits``
02b_gradient_descent          :func:`sigmoid_derivative`       ``(s) -> ds/dz``
02b_gradient_descent          :func:`sigmoid_ce_grad`          ``(z, y) -> dL/dz``
02b_gradient_descent          :func:`hinge_grad`               ``(scores, y, margin) -> L, ds``
============================  ===============================  ===============================

The checks of lessons 00-01 (arrays, timing, the perceptron) are in ``basics.py``, the
backpropagation lesson's (03) in ``backprop.py``; the shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from ..losses import log_softmax as _ref_log_softmax  # the references are the library's
from ..losses import softmax as _ref_softmax
from .harness import (call, expect_close, expect_finite, expect_on_gpu, expect_shape,
                      expect_tuple, expect_unchanged, fail, gpu, lines_run, passed, rng,
                      shape_text, to_array, to_number)

__all__ = [
    "softmax", "cross_entropy", "softmax_ce_grad", "sigmoid_derivative", "sigmoid_ce_grad",
    "hinge_grad",
]

# While the learner's function runs the library is closed (harness.call; seal.py): an answer
# that calls into it, or into any package but NumPy and CuPy, fails, naming the call.


# ======================================================================================
# Lessons 02a-02b: losses and their gradients
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
                                on_error="reduce over the last axis (axis=-1) and keep it "
                                         "(keepdims), so any number of axes works."),
                           fn, case, "the result")
        expect_shape(got, z.shape, fn, case, "the result", "softmax keeps the shape of z.")
        if not np.isfinite(got).all():
            first_row_bad = not np.isfinite(got.reshape(-1, z.shape[-1])[0]).all()
            fix = ("exp(1000) overflows to inf and inf/inf is nan. Subtract each row's max "
                   "from that row first (a column of row maxima, kept as an axis so it "
                   "broadcasts); the result is mathematically the same."
                   if first_row_bad else
                   "subtract each ROW's own max (keepdims=True), not the max of the whole array: "
                   "a row far below the global max underflows to 0/0.")
            if case == SPREAD:
                fix = ("subtract each row's MAX from that row. Any other "
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
                         "compute the shifted logits into a new array (an in-place "
                         "subtraction, z -= ..., overwrites the caller's logits).")
    passed(fn, len(cases))


def cross_entropy(fn):
    """Check ``fn(logits, labels)``: the mean over the batch of minus the log-probability
    (softmax over each row of logits) of each sample's label, a single number, finite even for
    logits 1000 apart (use log-softmax, not log(softmax)) and
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
                       on_error="one entry per row needs two index arrays: the row numbers "
                                "0..N-1 and the labels.")
        got = to_array(out, fn, case, "the loss")
        if got.size != 1:
            fail(fn, case, f"the loss has shape {shape_text(got.shape)}; it should be one number.",
                 "average the picked log-probabilities over the batch (and negate): the "
                 "loss is one number.")
        got = got.reshape(())
        if not np.isfinite(got):
            expect_finite(got, fn, case, "the loss",
                          "subtract each ROW's own max (one per row, kept as a column), not "
                          "the max of the whole array: the second row lies 2000 below the "
                          "global max, so all its exps underflow to 0 and log(0) = -inf."
                          if case == ROWS_APART else
                          "softmax underflows to exactly 0 for a logit 1000 below the max, and "
                          "log(0) = -inf. Never take the log of a probability: simplify "
                          "log softmax on paper first (the log of a quotient, the log of an "
                          "exponential), so that only the log of the row's sum is left.")
        expect_close(got, expected, fn, case, "the loss", rtol=1e-6, atol=1e-9, mistakes=[
            (-picked.sum(), f"the loss is {N} times too large: take the mean over the batch "
                            "(.mean()), not the sum."),
            (picked.mean(), "the sign is flipped: the loss is MINUS the log-probability."),
            (-logp.mean(), "you averaged over every class; use only the log-probability of each "
                           "sample's label (one entry per row)."),
            (-logp[:, labels].mean(), "logp[:, labels] picks every label's column for EVERY row "
                                      "(an (N, N) array); one entry per row needs two index "
                                      "arrays, the row numbers and the labels, paired up."),
            (-_ref_log_softmax(logits.T).T[np.arange(N), labels].mean(),
             "softmax went over axis 0 (the batch); it must go over the classes, axis=1."),
        ])
        expect_unchanged(fn, case, [("logits", logits, logits_given),
                                    ("labels", labels, labels_given)])
    passed(fn, len(cases))


def softmax_ce_grad(fn):
    """Check ``fn(logits, labels)``: dL/dlogits of L = mean over the batch of the softmax
    cross-entropy, shaped like logits (N, K), against the reference gradient."""
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
                                on_error="reaching one entry per row needs two index arrays: "
                                         "the row numbers 0..N-1 and the labels."),
                       fn, case, "dL/dlogits")
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
            ((onehot - p) / N, "the sign is flipped: check the sign of the derivative of "
                               "-log p_y with respect to the logit of the label."),
            (p / N, "the label's own term is missing: differentiating log p_y gives an extra "
                    "term for the logit z_y itself (where k = y). Which entry does it touch in "
                    "each row?"),
            (every_label, "p[:, labels] -= 1 changes every row at EVERY label's column; "
                          "one entry per row needs two index arrays, the row numbers "
                          "0..N-1 paired with the labels."),
            ((_ref_softmax(logits.T).T - onehot) / N,
             "the softmax went over axis 0 (the batch); it must go over the classes, axis=1."),
            ((np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum() - onehot) / N,
             "the softmax is normalized over the whole array; each row is its own distribution."),
        ])
        expect_unchanged(fn, case, [("logits", logits, given["logits"]),
                                    ("labels", labels, given["labels"])],
                         "compute into a new array (the probabilities, then change those): do "
                         "not write into {name}.")
    passed(fn, len(cases))


def _sigmoid(z):
    __tracebackhide__ = True
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def sigmoid_derivative(fn):
    """Check ``fn(s)``: the sigmoid's derivative dσ/dz written in terms of its OUTPUT
    s = σ(z), any shape, against central finite differences of σ at the z that gave s."""
    __tracebackhide__ = True
    r = rng(8)
    h = 1e-5
    cases = [
        ("s = sigmoid([0, 2, -1]) = [0.5, 0.8808, 0.2689] (the slope at z = 0 is 0.25)",
         np.array([0.0, 2.0, -1.0])),
        ("s = sigmoid(z) for 12 random z, shape (3, 4)", r.standard_normal((3, 4)) * 3),
        ("s near 0 and near 1: s = sigmoid([-8, 8, 0.5]) (the sigmoid is almost flat there)",
         np.array([-8.0, 8.0, 0.5])),
    ]
    for case, z in cases:
        s = _sigmoid(z)
        numerical = (_sigmoid(z + h) - _sigmoid(z - h)) / (2 * h)    # dσ/dz, by finite differences
        given = s.copy()
        got = to_array(call(fn, given, case=case,
                            on_error="your function gets the sigmoid's output s (numbers in "
                                     "(0, 1)), not z; write the derivative with s alone."),
                       fn, case, "dσ/dz")
        expect_shape(got, s.shape, fn, case, "dσ/dz", "one derivative per entry of s: same shape.")
        expect_finite(got, fn, case, "dσ/dz")
        expect_close(got, numerical, fn, case, "dσ/dz (compared with the finite difference "
                     "(σ(z + h) - σ(z - h)) / 2h)", rtol=1e-6, atol=1e-9, mistakes=[
            (s * (1 + s), "s (1 + s) grows as s goes to 1, but the sigmoid flattens out there "
                          "(its slope goes to 0): check the sign inside the second factor."),
            (1 - s, "only one factor: 1 - s goes to 0 as s goes to 1, but near s = 0 the sigmoid "
                    "is flat too and 1 - s is close to 1 there. What other factor vanishes at "
                    "s = 0?"),
            (s, "only one factor: s goes to 0 where the sigmoid is flat on the left, but not on "
                "the right (s near 1). What other factor vanishes at s = 1?"),
            (-s * (1 - s), "the sign is flipped: the sigmoid only ever goes up, so its slope is "
                           "positive."),
            (_sigmoid(s) * (1 - _sigmoid(s)),
             "that is the derivative in terms of z, evaluated at s (as if s were the logit, "
             "the sigmoid applied to it again): the input is already the OUTPUT s = σ(z). "
             "Write e^(-z) in terms of s and simplify, so that the backward pass needs nothing "
             "but the s the forward pass kept."),
            (1 - s * s, "1 - s^2 is the derivative of tanh in terms of its output; the sigmoid's "
                        "is different: differentiate 1 / (1 + e^(-z)) once more."),
            (s * (1 - s) ** 2, "one factor too many: check the derivative of 1 / u again."),
        ])
        expect_unchanged(fn, case, [("s", s, given)])
    passed(fn, len(cases))


def sigmoid_ce_grad(fn):
    """Check ``fn(z, y)``: dL/dz of L = mean binary cross-entropy of sigmoid(z) and y,
    shaped like z, against the reference gradient."""
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
            got = to_array(call(fn, z_given, y_given, case=case),
                           fn, case, "dL/dz")
        expect_shape(got, z.shape, fn, case, "dL/dz", "the gradient has one entry per logit.")
        expect_finite(got, fn, case, "dL/dz",
                      "compute the sigmoid as the lesson writes it, 1 / (1 + exp(-z)) (or "
                      "through tanh): at z = 1000 that is 1 / (1 + 0) = 1 and at "
                      "z = -1000 it is 1 / (1 + inf) = 0, while exp(z) / (1 + exp(z)) is "
                      "inf / inf = nan at z = 1000.")
        expect_close(got, expected, fn, case, "dL/dz", rtol=1e-6, atol=1e-12, mistakes=[
            (sig - y, f"the gradient is {N} times too large: the loss is a mean over N samples, "
                      "so divide by N."),
            ((y - sig) / N, "the sign is flipped: the loss falls as sigmoid(z) approaches y, so "
                            "where sigmoid(z) > y the gradient is positive."),
            ((sig - y) * sig * (1 - sig) / N,
             "you multiplied by sigmoid'(z) once too often: the derivative of the loss with "
             "respect to the sigmoid's output already has it in its denominator, and they "
             "cancel. Multiply the two local derivatives out on paper."),
            (y - sig, "the sign is flipped and the mean's 1/N is missing."),
        ])
        if got.dtype != z.dtype:
            fail(fn, case, f"dL/dz is {got.dtype} but z is {z.dtype}.",
                 "keep z's dtype: compute with z's own operations and do not cast the result "
                 "(a cast to float32 throws away digits the gradient check needs).")
        expect_unchanged(fn, case, [("z", z, z_given), ("y", y, y_given)])
    passed(fn, len(cases))


def _hinge_parts(scores, y, margin):
    """The reference's pieces: the (N, C) terms (0 in the right class's column), the mask of
    violated margins (strictly inside: > 0) and the mask with ties (>= 0), both 0 at y."""
    __tracebackhide__ = True
    N = len(y)
    rows = np.arange(N)
    raw = scores - scores[rows, y][:, None] + margin
    terms = np.maximum(0, raw)
    terms[rows, y] = 0
    violated, touching = raw > 0, raw >= 0
    violated[rows, y] = touching[rows, y] = False
    return terms, violated.astype(scores.dtype), touching.astype(scores.dtype)


def _hinge_dscores(mask, y, right):
    """dscores from a mask of counted wrong classes and what the right class's column gets."""
    __tracebackhide__ = True
    out = mask.copy()
    out[np.arange(len(y)), y] = right
    return out / len(y)


def hinge_grad(fn):
    """Check ``fn(scores, y, margin)`` -> ``(loss, dscores)``: the mean over the batch of the
    multiclass hinge loss, sum over the wrong classes j of max(0, s_j - s_y + margin), and its
    gradient with respect to the scores (N, C). A term exactly at the margin (s_j - s_y +
    margin exactly 0) is 0 and met: its gradient is 0 (a strict >). Vectorized: the Python
    lines it runs must not grow with the batch."""
    __tracebackhide__ = True
    r = rng(9)
    TIES = ("margins met exactly: scores = [[2, 1, 0, 3], [0, 3, 2, 1]], y = [0, 1], margin = 1 "
            "(two wrong classes sit exactly at the margin, one is 2 inside it; loss 1)")
    cases = [
        ("the lesson's example: scores = [[3.2, 5.1, -1.7], [1.3, 4.9, 2.0], [2.2, 2.5, -3.1]], "
         "y = [0, 1, 2], margin = 1 (loss 5.2667)",
         np.array([[3.2, 5.1, -1.7], [1.3, 4.9, 2.0], [2.2, 2.5, -3.1]]), np.array([0, 1, 2]), 1.0),
        (TIES, np.array([[2.0, 1.0, 0.0, 3.0], [0.0, 3.0, 2.0, 1.0]]), np.array([0, 1]), 1.0),
        ("4 samples, 4 classes, margin 0.5 (square: only the values can show a wrong axis)",
         r.standard_normal((4, 4)), np.array([2, 0, 0, 3]), 0.5),
        ("6 samples, 5 classes, float32 scores, margin = 2",
         (r.standard_normal((6, 5)) * 2).astype(np.float32), r.integers(0, 5, 6), 2.0),
    ]
    for case, scores, y, margin in cases:
        N, C = scores.shape
        terms, violated, touching = _hinge_parts(scores, y, margin)
        count = violated.sum(axis=1)
        given = {"scores": scores.copy(), "y": y.copy()}
        out = call(fn, given["scores"], given["y"], margin, case=case,
                   on_error="picking each row's right-class score needs two index arrays, the "
                            "row numbers 0..N-1 and the labels; keep it as a column (N, 1) so it "
                            "broadcasts against scores (N, C).")
        loss, dscores = expect_tuple(out, 2, fn, case, "loss, dscores")
        loss = to_number(loss, fn, case, "the loss", "return the mean loss as one number.")
        tol = 1e-5 if scores.dtype == np.float32 else 1e-9
        expected = terms.sum() / N
        ones, ones_violated, _ = _hinge_parts(scores, y, 1.0)   # margin 1 where it is not 1
        other_margin = f"this case passes margin = {margin}: use the margin argument."
        loss_mistakes = [
            (terms.sum(), f"the loss is {N} times too large: it is a MEAN over the N samples "
                          "(of a sum over each sample's wrong classes), so divide by N."),
            (expected + margin, "every sample added the margin once more: that is the right "
                                "class's own term, max(0, s_y - s_y + margin) = margin. The sum "
                                "runs over the WRONG classes j != y only: zero that entry."),
            (terms.sum() + N * margin, "the right class's own term is counted (each sample adds "
                                       "the margin once more) and the mean's 1/N is missing."),
            (terms.sum() / (N * C), "you divided by N*C (a mean over every entry, as "
                                    "torch.nn.MultiMarginLoss does): this loss sums over the "
                                    "classes and averages over the N samples only."),
        ]
        if margin != 1.0:
            loss_mistakes.append((ones.sum() / N, f"that is the loss for margin 1; {other_margin}"))
        expect_close(np.asarray(loss), expected, fn, case, "the loss", rtol=tol, atol=tol,
                     mistakes=loss_mistakes,
                     fix="for each sample, add max(0, s_j - s_y + margin) over the wrong "
                         "classes j; then average over the samples.")

        dscores = to_array(dscores, fn, case, "dscores")
        expect_shape(dscores, scores.shape, fn, case, "dscores",
                     "the gradient has the scores' shape (N, C): one entry per score.")
        expect_finite(dscores, fn, case, "dscores")
        good = _hinge_dscores(violated, y, 0 - count)
        grad_mistakes = [
            (good * N, f"dscores is {N} times too large: the loss is a mean over N samples, so "
                       f"every entry of the gradient is divided by N."),
            (-good, "the sign is flipped: raising a violating wrong class's score raises the "
                    "loss (+), raising the right class's score lowers it (-)."),
            (_hinge_dscores(violated, y, 0), "the right class's column is 0: its score s_y "
             "appears, with a minus sign, in EVERY violated term of its row. What does that add "
             "up to?"),
            (_hinge_dscores(violated, y, 1), "the right class's column holds its own term: "
             "s_y - s_y + margin is always > 0, but j = y is not in the sum; and s_y appears "
             "(with a minus sign) in every violated term of its row."),
            (_hinge_dscores(violated, y, -count - 1), "the right class's column is one too "
             "negative: you counted its own term (s_y - s_y + margin = margin > 0) among the "
             "violated margins. Count the wrong classes j != y only."),
            (_hinge_dscores(violated, y, -np.sign(count)), "the right class's column is -1/N "
             "(a one-hot, as for softmax cross-entropy): here it is minus the NUMBER of "
             "violated margins in its row, over N."),
            (_hinge_dscores(touching, y, -touching.sum(axis=1)),
             "a wrong class exactly AT the margin (s_j - s_y + margin is exactly 0) was counted "
             "as violated. Its term max(0, 0) is 0 and stays 0 on the side where it is met: this "
             "course takes the gradient 0 there (a strict >, as CS231n and PyTorch do)."),
        ]
        if margin != 1.0:
            grad_mistakes.append((_hinge_dscores(ones_violated, y, -ones_violated.sum(axis=1)),
                                  f"that is the gradient for margin 1; {other_margin}"))
        expect_close(dscores, good, fn, case, "dscores", rtol=tol, atol=tol,
                     mistakes=grad_mistakes, by_hand=case.startswith("the lesson's example"),
                     fix="take one score of each kind in a row, a wrong class and the right "
                         "class: which terms of the row contain it, with which sign, and which "
                         "of those terms pass a gradient (a term that is 0 does not)? Then "
                         "remember the mean over the N samples.")
        if dscores.dtype != scores.dtype:
            fail(fn, case, f"dscores is {dscores.dtype} but the scores are {scores.dtype}: the "
                           f"gradient keeps the scores' dtype (float32 in, float32 out).",
                 "make the 0/1 mask in the scores' own dtype: a float64 array or constant "
                 "promotes float32 to float64.")
        expect_unchanged(fn, case, [("scores", scores, given["scores"]), ("y", y, given["y"])],
                         "compute the terms into a new array (scores - ..., not scores -= ...): "
                         "do not write into {name}.")
    small, large = 8, 80
    case = (f"the same function on batches of {small} and {large} samples, 3 classes (a "
            f"vectorized answer runs the same lines of Python for both)")
    lines = {}
    for N in (small, large):
        g = rng(N)
        _, lines[N] = lines_run(fn, g.standard_normal((N, 3)), g.integers(0, 3, N), 1.0,
                                case=case)
    if lines[large] - lines[small] >= (large - small) // 2:
        fail(fn, case, f"your function ran {lines[small]} lines of Python for {small} samples and "
                       f"{lines[large]} for {large}: it loops over the samples in Python, far "
                       f"slower on a real batch than array operations over the whole batch.",
             "vectorize: take every row's right-class score at once (two index arrays, kept as "
             "an (N, 1) column), compute all (N, C) terms with one expression, and build the "
             "gradient from the (N, C) mask of violated margins.")
    cp = gpu()
    if cp is not None:
        case = "the first case again, with the scores and labels on the GPU (CuPy arrays)"
        _, scores, y, margin = cases[0]
        terms, violated, _ = _hinge_parts(scores, y, margin)
        out = call(fn, cp.asarray(scores), cp.asarray(y), margin, case=case)
        loss, dscores = expect_tuple(out, 2, fn, case, "loss, dscores")
        expect_on_gpu(dscores, fn, case, "dscores")
        expect_close(np.asarray(to_number(loss, fn, case, "the loss")), terms.sum() / len(y), fn,
                     case, "the loss", rtol=1e-9, atol=1e-9)
        expect_close(to_array(dscores, fn, case, "dscores"),
                     _hinge_dscores(violated, y, -violated.sum(axis=1)), fn, case, "dscores",
                     rtol=1e-9, atol=1e-9)
    passed(fn, len(cases) + 1 + (cp is not None), cp is not None, name="hinge_grad")


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'sigmoid_derivative': [
        ('start from sigma(z) = 1 / (1 + e^(-z)) and differentiate it as 1 / u with '
         'u = 1 + e^(-z); then write e^(-z) in terms of s (solve s = 1 / (1 + e^(-z)) for it)'),
        ('the derivative is a product of two factors, each a simple function of s; check it on '
         'the numbers: at z = 0, s = 0.5 and the slope is 0.25. Where is the sigmoid flat? Your '
         'expression must vanish there (s near 0 and s near 1)'),
    ],
    'sigmoid_ce_grad': [
        ('chain rule through s = sigmoid(z): first the derivative of the loss of one sample with '
         'respect to s, then multiply by ds/dz from the exercise before, and simplify'),
        ('the two local derivatives have s (1 - s) in common: it cancels, leaving something '
         'simple in s and y; the mean over N samples divides each entry by ___. The binary '
         'cross-entropy equation of section 4 is where to start'),
    ],
    'softmax': [
        'the row maxima and row sums need keepdims so they broadcast against z (..., K)',
        ("pseudo-code: shifted = z minus ( the max of each row, kept as an axis ); e = exp of "
         "shifted; p = e divided by ( the sum of each row of e, kept as an axis ). The shift "
         "argument just above the exercise says why the max"),
    ],
    'cross_entropy': [
        ('picking one entry per row needs two index arrays: the row numbers 0..N-1 and the labels; '
         'slicing every row with all the labels picks N*N entries'),
        ('take the log of the shifted softmax and simplify on paper: the log of a quotient is a '
         'difference, the log of an exponential is its exponent, so only the log of the row sum '
         'is left. Then pick ___[rows, labels], average, negate'),
    ],
    'softmax_ce_grad': [
        ("write log p_y = z_y - log(sum_j e^(z_j)) and differentiate with respect to one logit "
         "z_k: the first term gives 1 only when k = y; the second is a probability"),
        ("in the array: start from a copy of the probabilities, change one entry per row (the "
         "label's column; index with the row numbers and the labels), then divide by ___. The "
         "one-sample setting above the exercise is the place to start"),
    ],
    'hinge_grad': [
        ("one sample first: which scores does the term of a wrong class j contain, and with which "
         "sign? A term that is 0 (its margin met) passes no gradient; the right class's score "
         "is in every term of its row"),
        ("pseudo-code: correct = each row's score at its label, as a column (N, 1); terms = the "
         "larger of 0 and (scores minus correct plus ___), then 0 in each row's label column; "
         "loss = sum of terms over ___. mask = where the terms are ___ 0, in the scores' dtype; "
         "the label column of each row = minus ___; dscores = mask over ___. The worked example "
         "above the exercise gives numbers to compare"),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'sigmoid_derivative': ['s * (1 - s)', 's(1 - s)', '1 - s', 's - s**2', 's - s^2',
        's minus s squared'],
    'sigmoid_ce_grad': ['s - y', '(s - y) / N', 'p - y', 'sigmoid(z) - y', 'minus the label',
        'minus y'],
    'softmax': ['np.exp(z - ', 'z.max(axis', 'keepdims=True', 'xp.exp('],
    'cross_entropy': ["log of the row's sum", 'logsumexp', 'log(sum(exp', 'subtract the log',
        'minus the log of'],
    'softmax_ce_grad': ['p - 1', 'subtract 1', 'subtract one', 'minus 1', 'minus one',
        'p - onehot', 'p - y', 'one-hot', 'divide by N'],
    'hinge_grad': ['appears with a minus sign in every term', 'minus the number',
        'minus the count', 'number of violated', 'count of the', 'sum(axis=1)'],
}
