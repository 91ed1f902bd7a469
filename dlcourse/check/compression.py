"""Checks for lessons 10-11: a loss-scaling step, symmetric int8 quantization, a pruning mask.

- ``loss_scale_step(fn)`` (lesson 10): ``fn(scale, clean_steps, found_inf, growth_interval)
  -> (scale, clean_steps, take_step)``, one step of dynamic loss scaling;
- ``quantize_symmetric(fn)`` (lesson 11): ``fn(x) -> (q, scale)``, q int8 of x's shape;
- ``magnitude_mask(fn)`` (lesson 11): ``fn(w, sparsity) -> mask``, boolean of w's shape.

Each check runs your function on several cases and prints one line when all pass, or raises
``ExerciseError`` naming the case, the problem and the likely mistake, e.g.
``dl.check.loss_scale_step(loss_scale_step)``. The shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_shape, expect_tuple, expect_unchanged, fail,
                      passed, rng, to_array, to_number)

__all__ = ["loss_scale_step", "quantize_symmetric", "magnitude_mask"]


# ======================================================================================
# Lesson 10: one step of dynamic loss scaling
# ======================================================================================
# The library's own loss scaler answers with an error while the learner's function runs.
_REFUSE_SCALE = ["dlcourse.precision.LossScaler.update", "dlcourse.precision.Policy.should_step"]


def _ref_loss_scale_step(scale, clean_steps, found_inf, growth_interval):
    __tracebackhide__ = True
    if found_inf:
        return scale * 0.5, 0, False
    count = clean_steps + 1
    if count == growth_interval:
        return scale * 2.0, 0, True
    return scale, count, True


def loss_scale_step(fn):
    """``fn(scale, clean_steps, found_inf, growth_interval) -> (scale, clean_steps, take_step)``."""
    __tracebackhide__ = True
    # Every argument varies: scales that are not powers of two, growth intervals of 1, 3, 5 and
    # 2000, counts at, below and one short of the interval, overflows at every count.
    cases = [(1024.0, 0, False, 3), (1024.0, 1, False, 3), (1024.0, 2, False, 3),
             (1024.0, 2, True, 3), (65536.0, 0, True, 2000), (8.0, 1999, False, 2000),
             (1.5, 0, False, 1), (0.75, 0, True, 1), (96.0, 3, False, 5), (96.0, 4, False, 5),
             (40.0, 1, False, 7)]
    fixes = {
        "skip": "a step whose gradients hold inf or NaN must be skipped (take_step False): "
                "the update would write inf into the weights.",
        "halve": "after an overflow the scale is halved, so that the next step's gradients fit.",
        "reset": "after an overflow the count of clean steps starts again at 0.",
        "grow": "after growth_interval clean steps in a row, double the scale and set the count "
                "back to 0; count this step first, then compare the new count with "
                "growth_interval (the one you are given: it changes from case to case).",
        "count": "a clean step adds one to clean_steps (and leaves the scale alone until the "
                 "count reaches growth_interval).",
    }
    for scale, clean, inf, interval in cases:
        case = f"scale={scale:g}, clean_steps={clean}, found_inf={inf}, growth_interval={interval}"
        got = expect_tuple(call(fn, scale, clean, inf, interval, case=case,
                                refuse=_REFUSE_SCALE), 3, fn, case,
                           "scale, clean_steps, take_step")
        new_scale = to_number(got[0], fn, case, "the new scale")
        new_clean = to_number(got[1], fn, case, "the new clean_steps")
        want = _ref_loss_scale_step(scale, clean, inf, interval)
        if bool(got[2]) != want[2]:
            fail(fn, case, f"take_step is {bool(got[2])}, expected {want[2]}.",
                 fixes["skip"] if inf else "a step with finite gradients is taken (take_step True).")
        if new_scale != want[0]:
            fix = fixes["halve"] if inf else fixes["grow"]
            fail(fn, case, f"the new scale is {new_scale:g}, expected {want[0]:g}.", fix)
        if new_clean != want[1]:
            fix = fixes["reset"] if inf else fixes["grow"] if want[1] == 0 else fixes["count"]
            fail(fn, case, f"clean_steps is {new_clean:g}, expected {want[1]}.", fix)
    passed(fn, len(cases))


# ======================================================================================
# Lesson 11: symmetric int8 quantization, and a magnitude-pruning mask
# ======================================================================================
_REFUSE_QUANT = ["dlcourse.quantize.symmetric_scale", "dlcourse.quantize.quantize_array",
                 "dlcourse.quantize.dequantize_array", "dlcourse.quantize.quantize"]
_REFUSE_PRUNE = ["dlcourse.prune.prune", "dlcourse.prune.prune_gradually",
                 "dlcourse.prune.sparsity"]


def _ref_scale(x):
    __tracebackhide__ = True
    return float(np.abs(x).max()) / 127


def quantize_symmetric(fn):
    """``fn(x) -> (q, scale)``: one scale for the whole tensor, q int8 of x's shape in the
    symmetric range; the check compares both with the library's rule."""
    __tracebackhide__ = True
    gen = rng(11)
    cases = [("one row", np.array([-1.0, -0.5, 0.0, 0.26, 0.5], np.float32)),
             ("the largest magnitude is negative", np.array([0.3, -2.0, 0.7, 1.1], np.float32)),
             ("a (4, 6) weight", gen.standard_normal((4, 6)).astype(np.float32)),
             ("all positive, like a ReLU output (3, 5)",
              np.abs(gen.standard_normal((3, 5))).astype(np.float32) * 7)]
    for name, x in cases:
        case = f"{name}, x of shape {x.shape}"
        given = x.copy()
        q, scale = expect_tuple(call(fn, given, case=case, refuse=_REFUSE_QUANT), 2, fn, case,
                                "q, scale")
        expect_unchanged(fn, case, [("x", x, given)])
        s = to_number(scale, fn, case, "scale", "one scale for the whole tensor: a number.")
        amax = float(np.abs(x).max())
        if not np.isclose(s, _ref_scale(x), rtol=1e-5):
            fix = ("the scale maps the largest MAGNITUDE onto the top of the range: take the "
                   "largest absolute value, not the largest value (here the largest magnitude "
                   "is a negative number)."
                   if np.isclose(s, float(x.max()) / 127, rtol=1e-5) else
                   "int8 runs from -128 to 127; the symmetric range leaves -128 out, so the "
                   "largest magnitude lands on 127 (255 levels in all, not 256: dividing by 255 "
                   "or 256 is for 8 unsigned bits, and 128 would clip the top value)."
                   if any(np.isclose(s, amax / d, rtol=1e-5) for d in (255, 128, 256)) else
                   "the scale is a number in x's units per integer step; divide x by it and the "
                   "largest magnitude should land exactly on the edge of the symmetric range.")
            fail(fn, case, f"scale is {s:.6g}, expected {_ref_scale(x):.6g}.", fix)
        q_arr = to_array(q, fn, case, "q")
        expect_shape(q_arr, x.shape, fn, case, "q")
        step = np.float32(_ref_scale(x))
        want = np.clip(np.rint(x / step), -127, 127)
        expect_close(q_arr.astype(np.float64), want, fn, case, "q", atol=0.0, rtol=0.0, mistakes=[
            (lambda: np.trunc(x / step),
             "round to the NEAREST integer: converting to int8 alone cuts the fraction off "
             "(0.9 becomes 0), an error of up to a whole step instead of half of one."),
            (lambda: np.floor(x / step),
             "round to the nearest integer, not down (floor)."),
            (lambda: np.rint(x * step),
             "quantizing divides by the scale (how many steps of size scale fit in x); "
             "multiplying by it is the way back, dequantizing.")])
        if np.dtype(q_arr.dtype) != np.int8:
            fail(fn, case, f"q has dtype {q_arr.dtype}, expected int8.",
                 "the point is to store one byte per number: convert the rounded values to "
                 "8-bit integers (NumPy's int8) at the end.")
    passed(fn, len(cases))


def magnitude_mask(fn):
    """``fn(w, sparsity) -> mask``: boolean, False for the ``sparsity`` fraction of entries of
    smallest |w| (ties do not occur in the cases; a fractional count is rounded to the
    nearest whole number)."""
    __tracebackhide__ = True
    gen = rng(12)
    cases = [(np.array([0.5, -3.0, 0.1, 2.0, -0.2, 1.0, -0.05, 0.7], np.float32), 0.5),
             (gen.standard_normal((6, 5)).astype(np.float32), 0.8),
             (gen.standard_normal((3, 4)).astype(np.float32), 0.25),
             (gen.standard_normal((4, 5)).astype(np.float32), 0.33),    # 6.6 weights: 7
             (gen.standard_normal((10, 10)).astype(np.float32), 0.57),  # 56.99999999999999: 57
             (gen.standard_normal((2, 5)).astype(np.float32), 0.42)]    # 4.2 weights: 4
    for w, sparsity in cases:
        case = f"w of shape {w.shape}, sparsity={sparsity}"
        given = w.copy()
        mask = to_array(call(fn, given, sparsity, case=case, refuse=_REFUSE_PRUNE), fn, case,
                        "mask")
        expect_unchanged(fn, case, [("w", w, given)])
        expect_shape(mask, w.shape, fn, case, "mask", "one True/False per weight: w's shape.")
        exact = sparsity * w.size
        want = _count_mask(w, int(round(exact))) > 0
        signed = np.ones(w.size, bool)
        signed[np.argsort(w, axis=None)[:int(round(exact))]] = False
        counting = (f"sparsity x size is {exact:.15g} here, not a whole number of weights: round "
                    f"it to the NEAREST whole number ({int(round(exact))}); converting it to an "
                    f"integer directly cuts the fraction off, and rounding up overshoots.")
        expect_close(mask.astype(np.float64), want.astype(np.float64), fn, case, "mask",
                     atol=0, rtol=0, mistakes=[
            (~want, "the mask is True for weights to KEEP (the largest |w|) and False for the "
                    "pruned ones: yours is the other way round."),
            (signed.reshape(w.shape).astype(np.float64),
             "rank the weights by magnitude, |w|: a large negative weight matters as much as a "
             "large positive one."),
            (lambda: _count_mask(w, int(round((1 - sparsity) * w.size))),
             "sparsity is the fraction to REMOVE: keep the largest (1 - sparsity) of the weights."),
            (lambda: _count_mask(w, int(exact)) if int(exact) != int(round(exact)) else None,
             counting),
            (lambda: _count_mask(w, int(np.ceil(exact)))
             if int(np.ceil(exact)) != int(round(exact)) else None, counting)])
    passed(fn, len(cases))


def _count_mask(w, k):
    """False for the k entries of smallest |w|."""
    __tracebackhide__ = True
    keep = np.ones(w.size, bool)
    keep[np.argsort(np.abs(w), axis=None)[:k]] = False
    return keep.reshape(w.shape).astype(np.float64)


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'loss_scale_step': [
        ('two branches. Overflow: what happens to the scale, the count, the step? No overflow: '
         'the count grows by one first; only then ask whether it has reached growth_interval'),
        ('write the timeline for growth_interval = 3 from a count of 0: clean, clean, clean '
         '(which of these doubles the scale, and what is the count after it?), then an overflow. '
         'The rules are the two bullet points of section 4 of this lesson'),
    ],
    'quantize_symmetric': [
        ('with the zero point 0, q = round(x / s) must stay inside plus or minus 127 for every '
         'entry, and the largest magnitude should use the whole range: which value of x decides '
         's, and what must x / s be there?'),
        ('pseudo-code: s = ___ / 127 (one number for the whole tensor, whatever the sign of its '
         'largest entry); q = round x / s to the nearest integer, clip it to the symmetric range, '
         'store it as int8. The affine form is in the first cell of section 1; the asymmetric '
         'example there chooses its scale the same way for another range'),
    ],
    'magnitude_mask': [
        ('how many weights are pruned? the sparsity fraction of all of them, rounded to the '
         'nearest whole number (not cut down). Which weights? the ones whose absolute values come '
         'first when sorted in increasing order'),
        ('pseudo-code: k = nearest whole number to ___ x ___; keep = a flat boolean array of Trues, '
         'one per weight; the indices of the k smallest |w| (an argsort over the flattened '
         'magnitudes) become False; give keep the shape of w. Section 4 describes the rule'),
    ],
}
