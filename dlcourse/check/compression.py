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
def _ref_loss_scale_step(scale, clean_steps, found_inf, growth_interval):
    __tracebackhide__ = True
    if found_inf:
        return scale / 2, 0, False
    clean_steps += 1
    if clean_steps == growth_interval:
        return scale * 2, 0, True
    return scale, clean_steps, True


def loss_scale_step(fn):
    """``fn(scale, clean_steps, found_inf, growth_interval) -> (scale, clean_steps, take_step)``."""
    __tracebackhide__ = True
    cases = [(1024.0, 0, False, 3), (1024.0, 1, False, 3), (1024.0, 2, False, 3),
             (1024.0, 2, True, 3), (65536.0, 0, True, 2000), (8.0, 1999, False, 2000)]
    fixes = {
        "skip": "a step whose gradients hold inf or NaN must be skipped (take_step False): "
                "the update would write inf into the weights.",
        "halve": "after an overflow halve the scale (scale / 2), so the next step's gradients fit.",
        "reset": "after an overflow the count of clean steps starts again at 0.",
        "grow": "after growth_interval clean steps in a row, double the scale and set the count "
                "back to 0; count this step first (clean_steps + 1), then compare.",
        "count": "a clean step adds one to clean_steps (and leaves the scale alone until the "
                 "count reaches growth_interval).",
    }
    for scale, clean, inf, interval in cases:
        case = f"scale={scale:g}, clean_steps={clean}, found_inf={inf}, growth_interval={interval}"
        got = expect_tuple(call(fn, scale, clean, inf, interval, case=case), 3, fn, case,
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
def quantize_symmetric(fn):
    """``fn(x) -> (q, scale)``: scale = max|x| / 127, q = round(x / scale) as int8."""
    __tracebackhide__ = True
    gen = rng(11)
    cases = [("one row", np.array([-1.0, -0.5, 0.0, 0.26, 0.5], np.float32)),
             ("the largest magnitude is negative", np.array([0.3, -2.0, 0.7, 1.1], np.float32)),
             ("a (4, 6) weight", gen.standard_normal((4, 6)).astype(np.float32))]
    for name, x in cases:
        case = f"{name}, x of shape {x.shape}"
        given = x.copy()
        q, scale = expect_tuple(call(fn, given, case=case), 2, fn, case, "q, scale")
        expect_unchanged(fn, case, [("x", x, given)])
        s = to_number(scale, fn, case, "scale", "one scale for the whole tensor: a number.")
        amax = float(np.abs(x).max())
        if not np.isclose(s, amax / 127, rtol=1e-5):
            fix = ("the scale maps the largest MAGNITUDE to 127: use max(|x|), not max(x)."
                   if np.isclose(s, float(x.max()) / 127, rtol=1e-5) else
                   "int8 runs from -128 to 127; symmetric quantization uses -127..127, so the "
                   "scale is max|x| / 127 (not / 255, which is for 8 unsigned bits, or / 128)."
                   if any(np.isclose(s, amax / d, rtol=1e-5) for d in (255, 128, 256)) else
                   "one scale for the whole tensor: its largest magnitude maps onto 127.")
            fail(fn, case, f"scale is {s:.6g}, expected {amax / 127:.6g}.", fix)
        q_arr = to_array(q, fn, case, "q")
        expect_shape(q_arr, x.shape, fn, case, "q")
        want = np.clip(np.rint(x / np.float32(amax / 127)), -127, 127)
        expect_close(q_arr.astype(np.float64), want, fn, case, "q", atol=0.0, rtol=0.0, mistakes=[
            (lambda: np.trunc(x / np.float32(amax / 127)),
             "round to the NEAREST integer (np.round / xp.rint): .astype(np.int8) alone cuts "
             "the fraction off (0.9 becomes 0)."),
            (lambda: np.floor(x / np.float32(amax / 127)),
             "round to the nearest integer, not down (floor)."),
            (lambda: np.rint(x * np.float32(amax / 127)),
             "divide by the scale to quantize (x / scale); multiplying is dequantizing.")])
        if np.dtype(q_arr.dtype) != np.int8:
            fail(fn, case, f"q has dtype {q_arr.dtype}, expected int8.",
                 "the point is to store one byte per number: end with .astype(np.int8).")
    passed(fn, len(cases))


def magnitude_mask(fn):
    """``fn(w, sparsity) -> mask``: boolean, False for the ``sparsity`` fraction of entries of
    smallest |w| (ties do not occur in the cases)."""
    __tracebackhide__ = True
    gen = rng(12)
    cases = [(np.array([0.5, -3.0, 0.1, 2.0, -0.2, 1.0, -0.05, 0.7], np.float32), 0.5),
             (gen.standard_normal((6, 5)).astype(np.float32), 0.8),
             (gen.standard_normal((3, 4)).astype(np.float32), 0.25)]
    for w, sparsity in cases:
        case = f"w of shape {w.shape}, sparsity={sparsity}"
        given = w.copy()
        mask = to_array(call(fn, given, sparsity, case=case), fn, case, "mask")
        expect_unchanged(fn, case, [("w", w, given)])
        expect_shape(mask, w.shape, fn, case, "mask", "one True/False per weight: w's shape.")
        k = int(round(sparsity * w.size))
        want = _fraction_mask(w, sparsity) > 0
        signed = np.ones(w.size, bool)
        signed[np.argsort(w, axis=None)[:k]] = False
        expect_close(mask.astype(np.float64), want.astype(np.float64), fn, case, "mask",
                     atol=0, rtol=0, mistakes=[
            (~want, "the mask is True for weights to KEEP (the largest |w|) and False for the "
                    "pruned ones: yours is the other way round."),
            (signed.reshape(w.shape).astype(np.float64),
             "rank the weights by magnitude, |w|: a large negative weight matters as much as a "
             "large positive one."),
            (lambda: _fraction_mask(w, 1 - sparsity), "sparsity is the fraction to REMOVE: keep "
                                                     "the largest (1 - sparsity) of the weights.")])
    passed(fn, len(cases))


def _fraction_mask(w, sparsity):
    __tracebackhide__ = True
    k = int(round(sparsity * w.size))
    keep = np.ones(w.size, bool)
    keep[np.argsort(np.abs(w), axis=None)[:k]] = False
    return keep.reshape(w.shape).astype(np.float64)


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'loss_scale_step': [
        ('handle the overflow first and return at once; a clean step adds one to the count '
         'BEFORE it is compared with growth_interval'),
        ('with found_inf: the tuple (half the scale, 0, False); otherwise clean_steps + 1, and if '
         'that equals growth_interval: (twice the scale, 0, True), else (scale, the new count, '
         'True)'),
    ],
    'quantize_symmetric': [
        ('the scale is max(|x|) / 127, a number; int8 holds -128..127 but the symmetric range '
         'leaves -128 out, so that 0 stays exactly 0 and the range has no bias'),
        ('np.abs(x).max() gives the largest magnitude; round with np.rint (a cast to int8 alone '
         'cuts the fraction off), np.clip to -127..127, then .astype(np.int8)'),
    ],
    'magnitude_mask': [
        ('k = the sparsity fraction of w.size, rounded to an integer, is the number of weights to '
         'prune; np.argsort on the absolute values (flattened, axis=None) lists the smallest first'),
        ('start from a flat boolean array of w.size Trues, set the entries at the first k indices '
         'of the argsort of |w| to False, and reshape it to w.shape'),
    ],
}
