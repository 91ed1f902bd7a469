"""Checks for lesson 11a: symmetric int8 quantization and integer-only requantization.

- ``quantize_symmetric(fn)``: ``fn(x) -> (q, scale)``, q int8 of x's shape;
- ``requantize(fn)``: ``fn(acc, M, z_y) -> y_q``, int8 of acc's shape, the integer-only
  rescaling of int32 accumulators (a fixed-point multiplier and a shift).

Each check runs your function on several cases and prints one line when all pass, or raises
``ExerciseError`` naming the case, the problem and the likely mistake, e.g.
``dl.check.requantize(requantize)``. The shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``; lesson 10's and 11b's checks are in
``compression.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_on_gpu, expect_shape, expect_tuple,
                      expect_unchanged, fail, gpu, passed, rng, shape_text, to_array, to_number)

__all__ = ["quantize_symmetric", "requantize"]


# ======================================================================================
# Lesson 11a: symmetric int8 quantization
# ======================================================================================
def _ref_scale(x):
    __tracebackhide__ = True
    return float(np.abs(x).max()) / 127


def quantize_symmetric(fn):
    """``fn(x) -> (q, scale)``: one scale for the whole tensor, q int8 of x's shape in the
    symmetric range; the check compares both with the library's rule."""
    __tracebackhide__ = True
    gen = rng(11)
    cases = [("the lesson's by-hand example", np.array([-1.0, -0.5, 0.0, 0.26, 0.5], np.float32)),
             ("the largest magnitude is negative", np.array([0.3, -2.0, 0.7, 1.1], np.float32)),
             ("a (4, 6) weight", gen.standard_normal((4, 6)).astype(np.float32)),
             ("all positive, like a ReLU output (3, 5)",
              np.abs(gen.standard_normal((3, 5))).astype(np.float32) * 7)]
    for name, x in cases:
        case = f"{name}, x of shape {x.shape}"
        by_hand = name == cases[0][0]
        given = x.copy()
        q, scale = expect_tuple(call(fn, given, case=case), 2, fn, case,
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
            fail(fn, case, f"scale is {s:.6g}" + (
                ", not the scale that the lesson's by-hand example needs." if by_hand else
                f", expected {_ref_scale(x):.6g}."), fix)
        q_arr = to_array(q, fn, case, "q")
        expect_shape(q_arr, x.shape, fn, case, "q")
        step = np.float32(_ref_scale(x))
        want = np.clip(np.rint(x / step), -127, 127)
        expect_close(q_arr.astype(np.float64), want, fn, case, "q", atol=0.0, rtol=0.0,
                     by_hand=by_hand, mistakes=[
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


# ======================================================================================
# Lesson 11a: integer-only requantization (Jacob et al. 2018)
# ======================================================================================
def _requantize_cases():
    __tracebackhide__ = True
    gen = rng(111)
    return [
        ("a hand case, M=0.0123, z_y=5", np.array([[1000, -1000, 0, 40, 41],
                                                    [-41, 12000, -12000, 9000, 7]], np.int32),
         0.0123, 5),
        ("a (64, 32) layer, M=0.00731, z_y=-7",
         np.rint(gen.standard_normal((64, 32)) * 4000).astype(np.int32), 0.00731, -7),
        ("M=0.75, already in [0.5, 1), z_y=3",
         gen.integers(-150, 151, (20, 10)).astype(np.int32), 0.75, 3),
        ("a small M=3.1e-06 and accumulators up to 2**28, z_y=0",
         gen.integers(-2 ** 28, 2 ** 28, 500).astype(np.int32), 3.1e-6, 0),
        ("a ReLU-like output range, M=0.02, z_y=-128 (many values saturate at both ends)",
         gen.integers(-2000, 20000, (30, 20)).astype(np.int32), 0.02, -128),
    ]


def _requantize_integer_case():
    """A case only integer arithmetic gets right: M (in [0.5, 1), so n = 0) lies just above
    M0 / 2**31, and 34 M, 102 M and 170 M just above the ties 20.5, 61.5 and 102.5, while
    34 M0 / 2**31 (and so on) lie just below them: floats round up, M0 rounds down."""
    __tracebackhide__ = True
    M0 = 41 * 2 ** 30 // 34                      # 34 M0 = 41 * 2**30 - 6
    M = (M0 + 0.34) / 2 ** 31                    # round(M 2**31) = M0; 34 M = 20.5 + 2.6e-9
    acc = np.array([34, -34, 102, -102, 170, -170, 68, 7, -150, 0], np.int32)
    return (f"M={M!r}, z_y=0 (accumulators where M's 31-bit fixed point, not M itself, "
            f"decides the rounding)", acc, M, 0)


def _requantize_integer_path(acc, M):
    """M acc rounded the integer way, each way the lesson allows (M0 rounded or cut, one
    rounding or the paper's two, ties away from zero or up): (their common answer, where they
    all agree)."""
    __tracebackhide__ = True
    n = max(0, -int(np.frexp(M)[1]))
    p0 = acc.astype(np.int64)

    def away(a, s):                     # a / 2**s to nearest, ties away from zero
        __tracebackhide__ = True
        return a if s == 0 else np.sign(a) * ((np.abs(a) + (1 << (s - 1))) >> s)

    def up(a, s):                       # ties up
        __tracebackhide__ = True
        return a if s == 0 else (a + (1 << (s - 1))) >> s

    answers = []
    for M0 in {int(round(M * 2 ** (31 + n))), int(M * 2 ** (31 + n))}:
        shift = 31 + n
        if M0 >= 2 ** 31:
            M0, shift = M0 // 2, shift - 1
        p = p0 * M0
        for rounded in (away, up):
            answers += [rounded(p, shift), rounded(rounded(p, 31), shift - 31)]
    agree = np.all([a == answers[0] for a in answers], axis=0)
    return answers[0], agree


class _Accumulators(np.ndarray):
    """The ``acc`` a NumPy case of the requantize check passes: int32 accumulators (and every
    integer array computed from them) that refuse floating-point arithmetic, the rule the
    lesson states, and note where an integer operation wraps around (an overflow)."""

    watch = None        # (fn, case, the overflows noted) while the learner's function runs

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        __tracebackhide__ = True
        plain = [np.asarray(a) if isinstance(a, _Accumulators) else a for a in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(o) if isinstance(o, _Accumulators) else o
                                  for o in kwargs["out"])
        result = getattr(ufunc, method)(*plain, **kwargs)
        if _Accumulators.watch is not None:
            _Accumulators._inspect(f"np.{ufunc.__name__}", result)
            if method == "__call__" and ufunc.__name__ in _WRAPPING:
                _Accumulators._overflow(ufunc, plain, result)
        return _Accumulators._track(result)

    def __array_function__(self, func, types, args, kwargs):
        __tracebackhide__ = True
        result = super().__array_function__(func, types, args, kwargs)
        if _Accumulators.watch is not None:
            _Accumulators._inspect(f"np.{func.__name__}", result)
        return _Accumulators._track(result)

    def astype(self, dtype, *args, **kwargs):
        __tracebackhide__ = True
        if _Accumulators.watch is not None and np.dtype(dtype).kind in "fc":
            _Accumulators._refuse(f"it converts acc to {np.dtype(dtype).name}")
        return super().astype(dtype, *args, **kwargs)

    @staticmethod
    def _track(result):
        __tracebackhide__ = True
        if isinstance(result, np.ndarray) and not isinstance(result, _Accumulators) \
                and result.dtype.kind in "iu":
            return result.view(_Accumulators)
        if isinstance(result, tuple):
            return tuple(_Accumulators._track(r) for r in result)
        return result

    @staticmethod
    def _inspect(what, result):
        __tracebackhide__ = True
        for r in result if isinstance(result, tuple) else (result,):
            if np.asarray(r).dtype.kind in "fc":
                _Accumulators._refuse(f"{what} on acc (or an array computed from it) gives "
                                      f"{np.asarray(r).dtype.name} numbers")

    @staticmethod
    def _refuse(problem):
        __tracebackhide__ = True
        fn, case, _ = _Accumulators.watch
        _Accumulators.watch = None
        fail(fn, case, f"{problem}: floating-point arithmetic, and the lesson asks for integer "
                       f"arithmetic only on acc (the accelerator it is written for has no float "
                       f"unit).",
             "floats may find n and M0, once, from M; what is applied to acc must stay in "
             "integers: integer products, sums, shifts and comparisons.")

    @staticmethod
    def _overflow(ufunc, inputs, result):
        __tracebackhide__ = True
        if not isinstance(result, np.ndarray) or result.dtype.kind != "i":
            return
        if result.dtype.itemsize < 8:
            wide = ufunc(*[a.astype(np.int64) if isinstance(a, np.ndarray) else a
                           for a in inputs])
            wrapped = not np.array_equal(result.astype(np.int64), wide)
        else:
            with np.errstate(all="ignore"):
                wide = ufunc(*[a.astype(np.float64) if isinstance(a, np.ndarray) else a
                               for a in inputs])
            wrapped = bool((np.abs(wide) > 2.0 ** 63 * (1 - 2 ** -20)).any())
        if wrapped:
            _Accumulators.watch[2].append(f"np.{ufunc.__name__} on {result.dtype.name} values")


_WRAPPING = {"add", "subtract", "multiply", "left_shift", "negative", "absolute", "square",
             "power"}


def _requantize_reference(acc, M, z):
    """(reference, mask of the entries that must match exactly): M * acc rounded, plus z, clipped.
    Within half a step of the shift's grid of a tie, the paper's two roundings may land either
    way (one step apart): those entries may differ by 1."""
    __tracebackhide__ = True
    exact = M * acc.astype(np.float64)
    ref = np.clip(np.floor(exact + 0.5) + z, -128, 127)
    shift = max(0, -int(np.frexp(M)[1]))
    window = (0.5 * 2.0 ** -shift if shift else 0.0) + 1e-6
    strict = np.abs(exact - np.floor(exact) - 0.5) > window
    return ref, strict


def requantize(fn):
    """``fn(acc, M, z_y) -> y_q``: int8 of acc's shape, ``clip(round(M acc) + z_y, -128, 127)``
    computed in integers; equal to the float reference but where the paper's two roundings
    meet a near-tie (then within one step). The rule "integer arithmetic only" is checked: a
    NumPy case's acc refuses floating-point arithmetic (and notes an integer overflow, which is
    named), and one case has entries where M's 31-bit fixed point and M itself round M acc
    differently: the integer answer is wanted there."""
    __tracebackhide__ = True
    cases = _requantize_cases() + [_requantize_integer_case()]
    cp = gpu()
    if cp is not None:
        name, acc, M, z = cases[1]
        cases.append((name + ", on the GPU (CuPy)", cp.asarray(acc), M, z))
    for name, acc, M, z in cases:
        case = f"{name}, acc {shape_text(acc.shape)} int32"
        given = acc.copy()
        overflows = []
        if isinstance(acc, np.ndarray):      # integer arithmetic only, overflows noted
            given = given.view(_Accumulators)
            _Accumulators.watch = (fn, case, overflows)
        try:
            got = call(fn, given, M, z, case=case)
        finally:
            _Accumulators.watch = None
        if cp is not None and isinstance(acc, cp.ndarray):
            expect_on_gpu(got, fn, case, "y_q")
        acc_np = np.asarray(to_array(acc, fn, case, "acc"))
        expect_unchanged(fn, case, [("acc", acc_np, given)])
        y = to_array(got, fn, case, "y_q")
        expect_shape(y, acc_np.shape, fn, case, "y_q", "one output per accumulator: acc's shape.")
        _expect_requantized(fn, case, acc_np, M, z, overflows, y.astype(np.float64))
        if np.dtype(y.dtype) != np.int8:
            fail(fn, case, f"y_q has dtype {y.dtype}, expected int8.",
                 "the output is the next layer's int8 input: clip to -128..127, then convert to "
                 "8-bit integers (int8).")
    passed(fn, len(cases))


def _expect_requantized(fn, case, acc, M, z, overflows, y):
    __tracebackhide__ = True
    ref, strict = _requantize_reference(acc, M, z)
    diff = y - ref
    wrong = (strict & (diff != 0)) | (np.abs(diff) > 1)
    if not wrong.any():
        _expect_integer_rounding(fn, case, acc, M, z, y)
        return
    saturated = (ref == -128) | (ref == 127)
    inside = strict & ~saturated
    no_zero = np.clip(np.floor(M * acc.astype(np.float64) + 0.5), -128, 127)
    if overflows:
        fix = (f"overflow: {overflows[0]} wrapped around (the exact result needs more bits, and "
               f"integer arithmetic drops them without a word). acc times the 31-bit multiplier "
               f"needs up to 62 bits: keep the product and what follows in int64 (the paper's "
               f"C code does the product in a 64-bit integer).")
    elif z != 0 and inside.any() and np.array_equal(y[inside], no_zero[inside]):
        fix = ("add the output's zero point z_y after the rescaling: y_q = z_y + (M acc, "
               "rounded). Without it every output is off by z_y.")
    elif not (wrong & ~saturated).any():
        fix = ("saturate: clip to the int8 range -128..127 before converting to int8. A plain "
               "conversion wraps around (200 becomes -56), and a value past the range must stay "
               "at its edge.")
    elif _fixed_by_int64(fn, acc, M, z, case, ref, strict):
        fix = ("overflow: acc times the 31-bit multiplier needs up to 62 bits, and int32 "
               "arithmetic silently wraps around. Convert acc to int64 before multiplying (the "
               "paper's C code does the product in a 64-bit integer).")
    elif np.abs(diff[inside]).max(initial=0) <= 1:
        fix = ("round, do not truncate: a plain right shift (>>) or integer division drops the "
               "bits it shifts out, so results fall up to one step low. Add half of the divisor "
               "before shifting (its sign matters for negative values), and the same in the high "
               "multiply.")
    else:
        fix = ("compare with the float reference round(M * acc) + z_y on a few entries: is M0 in "
               "[2**30, 2**31), and does M0 * 2**-31 * 2**-n give back M? Is the shift to the "
               "right, by n?")
    i = tuple(int(k) for k in np.argwhere(wrong)[0])
    fail(fn, case, f"{int(wrong.sum())} of {y.size} outputs are wrong; at index {i} (acc = "
                   f"{int(acc[i])}, M acc = {M * float(acc[i]):.4f}) expected {int(ref[i])}, got "
                   f"{int(y[i])}.", fix)


def _expect_integer_rounding(fn, case, acc, M, z, y):
    """Where M0's 31 bits and M itself round M acc to different integers, the answer must be
    the integer one: the rule "integer arithmetic only" decides these entries."""
    __tracebackhide__ = True
    exact = M * acc.astype(np.float64)
    by_float = np.clip(np.floor(exact + 0.5) + z, -128, 127)
    by_ints, agree = _requantize_integer_path(acc, M)
    by_ints = np.clip(by_ints + z, -128, 127)
    decides = agree & (by_ints != by_float) & (by_ints != np.clip(np.rint(exact) + z, -128, 127))
    wrong = decides & (y != by_ints)
    if not wrong.any():
        return
    i = tuple(int(k) for k in np.argwhere(wrong)[0])
    fail(fn, case, f"at index {i} (acc = {int(acc[i])}, M acc = {exact[i]:.10f}) the output is "
                   f"{int(y[i])}, which is M acc rounded in floating point; the integer path "
                   f"gives {int(by_ints[i])}. The lesson asks for integer arithmetic only on acc, "
                   f"and here the two differ: M0 keeps 31 bits of M, and that decides the "
                   f"rounding.",
         "floats may find n and M0, once, from M; M acc itself must be computed from M0 and acc "
         "in integers (no float product, no conversion of acc to float).")


def _fixed_by_int64(fn, acc, M, z, case, ref, strict):
    """Whether the same function is right when acc comes as int64 (then int32 overflowed)."""
    __tracebackhide__ = True
    try:
        again = np.asarray(to_array(call(fn, acc.astype(np.int64), M, z, case=case), fn, case,
                                    "y_q"), np.float64)
    except Exception:  # noqa: BLE001 - it fails another way: not an overflow
        return False
    return again.shape == ref.shape and not ((strict & (again != ref)) |
                                             (np.abs(again - ref) > 1)).any()


# Deeper hints (level 1 is the `# HINT:` line in the exercise's cell): name -> [level 2, ...];
# dl.check.hint(name) shows them one at a time. Words, shapes, questions, pseudo-code with
# blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'quantize_symmetric': [
        ('with the zero point 0, q = round(x / s) must stay inside plus or minus 127 for every '
         'entry, and the largest magnitude should use the whole range: which value of x decides '
         's, and what must x / s be there?'),
        ('pseudo-code: s = ___ / 127 (one number for the whole tensor, whatever the sign of its '
         'largest entry); q = round x / s to the nearest integer, clip it to the symmetric range, '
         'store it as int8. The affine form is in the first cell of section 1; the asymmetric '
         'example there chooses its scale the same way for another range'),
    ],
    'requantize': [
        ('two parts. Once, with floats: which power of two brings M into [0.5, 1)? Scaled by '
         'how many more powers of two is that an integer with 31 significant bits? Then, in '
         'integers only: a product, a rounded division by a power of two, a rounding shift, the '
         'zero point, the int8 range'),
        ('pseudo-code: n = how many times M must be doubled to reach at least 0.5; M0 = the '
         'nearest integer to M doubled ___ times (if it comes out as two to the thirty-first, '
         'halve it and take one from n); p = acc as ___ (64 bits) times M0; high = p divided by '
         'two to the thirty-first, rounded to nearest; out = high divided by two to the n-th, '
         'rounded to nearest (add half the divisor first, minding the sign); add ___; clip to '
         '___; convert to ___'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'quantize_symmetric': ['127', 'largest magnitude', 'max(abs', 'abs(x).max',
        'maximum absolute', 'largest absolute'],
    'requantize': ['31 more', 'count the doublings', '2**31', '1 << 31', 'int64', '64 bits',
        'frexp', 'thirty-first', 'half the divisor', 'add half'],
}
