"""Checks for lesson 03: backpropagation through the Linear layer and the ReLU.

Used in notebook ``03_backpropagation``: after you write a function, a check cell runs it on
a few small cases, for example::

    dl.check.linear_backward(linear_backward)

and either prints that every case passes or raises :class:`ExerciseError` saying which case
failed, what was expected, what your function gave and, where the mistake is a common one,
what the likely fix is. A function that still raises ``NotImplementedError`` gets
``"... is not implemented yet: <the hint>"``.

==================  ===============================  ========================================
lesson              check                            your function
==================  ===============================  ========================================
03_backpropagation  :func:`linear_forward`           ``(x, W, b) -> out, cache``
03_backpropagation  :func:`linear_backward`          ``(dout, cache) -> dx, dW, db``
03_backpropagation  :func:`relu_backward`            ``(dout, cache) -> dx``
==================  ===============================  ========================================

The checks of lessons 00-01 are in ``basics.py``, lessons 02a-02b's (losses and their gradients) in
``gradient_descent.py``; the shared machinery (``call``, ``fail``, ``expect_close``, ...) lives
in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_on_gpu, expect_shape, expect_tuple,
                      expect_unchanged, fail, gpu, passed, rng, shape_text, to_array)

__all__ = ["linear_forward", "linear_backward", "relu_backward"]

# While the learner's function runs the library is closed (harness.call; seal.py): an answer
# that calls into it, or into any package but NumPy and CuPy, fails, naming the call.


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
    """Check ``fn(x, W, b)`` -> ``(out, cache)``: the Linear layer's output (the batch times
    the weights, plus the bias) of shape (N, M), and the cache, the pair of the input and the
    weights, exactly what linear_backward needs."""
    __tracebackhide__ = True
    cases = _linear_cases()
    for case, x, W, b, _ in cases:
        given = {"x": x.copy(), "W": W.copy(), "b": b.copy()}
        out = call(fn, given["x"], given["W"], given["b"], case=case,
                   on_error="x is (N, D) and W is (D, M): which order of the matrix product "
                            "gives (N, M)?")
        out, cache = expect_tuple(out, 2, fn, case, "out, cache")
        got = to_array(out, fn, case, "out")
        expect_shape(got, (x.shape[0], W.shape[1]), fn, case, "out",
                     "the output has one row per sample and one column per output.")
        expect_close(got, x @ W + b, fn, case, "out", rtol=1e-10, atol=1e-10, mistakes=[
            (x @ W, "you forgot the bias: it is added to every row of the product."),
            (lambda: x @ W.T + b, "W is (D, M) already: it needs no transpose."),
        ])
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            fail(fn, case, f"cache is {type(cache).__name__}"
                           + (f" of {len(cache)} items" if isinstance(cache, (tuple, list)) else "")
                           + "; expected the pair (x, W).",
                 "the cache is the pair of the input and the weights, in that order: "
                 "linear_backward needs x for dW and W for dx.")
        for item, (name, ref) in zip(cache, (("x", x), ("W", W))):
            item = to_array(item, fn, case, f"cache's {name}")
            if item.shape != ref.shape or not np.allclose(item, ref):
                fail(fn, case, f"cache should be (x, W), but its {'first' if name == 'x' else 'second'} "
                               f"item is not {name} (shape {shape_text(item.shape)}).",
                     "the cache is the pair of the input and the weights, in that order.")
        expect_unchanged(fn, case, [(k, ref, given[k]) for k, ref in (("x", x), ("W", W), ("b", b))])
    passed(fn, len(cases))


def linear_backward(fn):
    """Check ``fn(dout, cache)`` with the cache the pair (x, W) -> ``(dx, dW, db)`` of the
    shapes of x (N, D), W (D, M) and b (M,), against the reference gradients."""
    __tracebackhide__ = True
    cases = _linear_cases()
    cp = gpu()
    for case, x, W, b, dout in cases:
        N, D = x.shape
        M = W.shape[1]
        dx, dW, db = dout @ W.T, x.T @ dout, dout.sum(axis=0)
        given = {"dout": dout.copy(), "x": x.copy(), "W": W.copy()}
        out = call(fn, given["dout"], (given["x"], given["W"]), case=case,
                   on_error="check each product's shapes: dx must come out (N, D) from dout "
                            "(N, M) and W (D, M); dW must come out (D, M) from x (N, D) and "
                            "dout (N, M). Which one is transposed, and on which side?")
        got = expect_tuple(out, 3, fn, case, "dx, dW, db")
        g_dx, g_dW, g_db = (to_array(g, fn, case, n) for g, n in zip(got, ("dx", "dW", "db")))
        # Shapes first: they name the mistake most clearly.
        expect_shape(g_dx, (N, D), fn, case, f"dx (x has shape {shape_text((N, D))})",
                     "dx has x's shape (N, D): it combines dout (N, M) with W (D, M); which "
                     "side does W go, and transposed how?")
        if g_dW.shape == (M, D) and M != D:
            fail(fn, case, f"dW has shape {shape_text(g_dW.shape)} but W has shape {shape_text((D, M))}.",
                 "did you multiply dout's transpose by x? That gives the transpose of dW: "
                 "swap the roles of the two factors.")
        expect_shape(g_dW, (D, M), fn, case, f"dW (W has shape {shape_text((D, M))})",
                     "dW has W's shape (D, M): it combines x (N, D) with dout (N, M), and the "
                     "batch axis N is the one summed over.")
        if g_db.shape != (M,):
            if g_db.shape == (N, M):
                fix = ("b is added to every row of the batch, so its gradient is the sum of dout "
                       "over the batch. (Did you forget the sum over the batch?)")
            elif g_db.shape == (1, M):
                fix = "the sum over the batch is right, but drop keepdims=True: db has b's shape (M,)."
            elif g_db.shape == ():
                fix = "you summed over every axis; sum over the batch axis (the first) only."
            elif g_db.shape == (N,):
                fix = "you summed over the outputs (axis=1); sum over the batch, axis=0."
            else:
                fix = "db is the sum of dout over the batch, one entry per output."
            fail(fn, case, f"db has shape {shape_text(g_db.shape)} but b has shape {shape_text((M,))}.", fix)
        # Then values.
        expect_close(g_dx, dx, fn, case, "dx", rtol=1e-10, atol=1e-10, mistakes=[
            (lambda: dout @ W, "W needs a transpose here: the gradient goes back through W, "
                               "from the M outputs to the D inputs."),
            (np.zeros_like(dx), "dx is all zeros: the gradient reaching x goes back through W; "
                                "every input touches every output."),
        ])
        dW_mistakes = [(x.T @ dout / N, "dW is divided by N: the loss's mean already sits in dout.")]
        if D == M:
            dW_mistakes.append((dout.T @ x, "dW is the transpose of the right answer: did you "
                                            "multiply dout's transpose by x? Swap the roles of the "
                                            "two factors."))
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
        got = to_array(call(fn, dout_given, x_given, case=case),
                       fn, case, "dx")
        expect_shape(got, x.shape, fn, case, "dx", "dx has the shape of x (and of dout).")
        expect_close(got, expected, fn, case, "dx", rtol=1e-12, atol=1e-12, mistakes=[
            (dout * (x >= 0), "at x == 0 the gradient should be 0 (we take ReLU's slope there "
                              "as 0, as dl.ReLU does): use x > 0, not x >= 0."),
            (dout * (dout > 0), "the mask must come from the INPUT x (where the ReLU let the "
                                "signal through), not from dout."),
            ((x > 0).astype(float), "you returned the mask alone: multiply it by dout."),
            (dout, "dout passed through everywhere: zero it where x <= 0."),
            (dout * np.maximum(x, 0), "you multiplied dout by the ReLU's output; the local "
                                      "derivative is 1 or 0, not the value max(x, 0)."),
        ])
        expect_unchanged(fn, case, [("dout", dout, dout_given)],
                         "return a new array: zeroing dout in place "
                         "(dout[x <= 0] = 0) also changes the gradient the next layer handed "
                         "back, wherever else it is used.")
        expect_unchanged(fn, case, [("x (the cache)", x, x_given)],
                         "read the cache, do not write into it: x is the ReLU's input, which "
                         "the layer before may still hold. Build the mask as a new array "
                         "from a comparison.")
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'linear_forward': [
        'the cache holds the input and the weights, in that order',
        ('one matrix product plus the bias (it broadcasts over the rows); the cache is the pair '
         'linear_backward needs. The sum in the first line of section 2 is the formula, entry '
         'by entry'),
    ],
    'linear_backward': [
        ('write the shapes under each other and let them tell you which matrix to transpose and in '
         'which order to multiply'),
        ('pseudo-code: dx (N, D) = dout (N, M) times ___ (M, D); dW (D, M) = ___ (D, N) times dout '
         '(N, M); db (M,) = dout summed over axis ___. The index sums above the exercise '
         '(local derivatives of out_nm) give each one'),
    ],
    'relu_backward': [
        'build a 0/1 mask from the cached input, not from dout, and multiply',
        ('the local derivative of max(x, 0) is 1 where x ___ 0 and 0 elsewhere (also at x == 0); '
         'dx = dout times that mask. The max node of section 1 routes its gradient the same way'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'linear_forward': ['x @ W', 'x.dot(W)', 'np.dot(x, W)'],
    'linear_backward': ['sums dout over the batch', 'sum over the batch', 'dout over the batch',
        'combines dout with the weights', 'combines the input with dout', 'dout @ W.T',
        'x.T @ dout', 'W.T', 'x.T', 'dout.sum(axis=0)', 'axis=0', 'axis 0', 'transpose'],
    'relu_backward': ['passes unchanged where', 'where the input was positive', 'x > 0',
        '(x > 0)', 'dout * ', '0 elsewhere'],
}
