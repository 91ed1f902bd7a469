"""Checks for lessons 06a and 06b: convolution, im2col, max pooling and their backward passes.

Each check takes *your* function, runs it on several small cases, compares it with the
library's reference (``dlcourse/conv.py``, ``shapes.py``) and either prints one line saying
that every case passes, or raises :class:`ExerciseError` naming the case, the problem and,
for the common mistakes, the likely fix::

    dl.check.conv2d_naive(conv2d_naive)

====================================  ===============================  ========================================
lesson                                check                            your function
====================================  ===============================  ========================================
06a_convolution_and_im2col            :func:`conv_output_size`         ``(H, K, stride, padding) -> int``
06a_convolution_and_im2col            :func:`conv_output_size_2d`      ``(H, W, kernel_size, stride, padding)``
06a_convolution_and_im2col            :func:`conv2d_naive`             ``(x, W, b, stride, padding) -> out``
06a_convolution_and_im2col            :func:`im2col_simple`            ``(x, KH, KW) -> cols``
06b_pooling_and_convolution_backward  :func:`max_window_grad`          ``(window) -> gradient of its max``
06b_pooling_and_convolution_backward  :func:`maxpool_backward`         ``(dout, x, K, stride) -> dx``
06b_pooling_and_convolution_backward  :func:`conv2d_backward`          ``(dout, x, W, stride, padding)``
====================================  ===============================  ========================================

The checks of training a CNN (07) are in ``cnn.py``, the MLP lessons' (04a-05) in
``training.py`` and ``init_and_batching.py``; the shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_shape, expect_tuple, expect_unchanged, fail,
                      passed, rng, to_array, to_number)

__all__ = [
    "conv_output_size", "conv_output_size_2d", "conv2d_naive", "im2col_simple", "max_window_grad",
    "maxpool_backward", "conv2d_backward",
]


# The library is closed while the learner's function runs (harness.call). conv2d_backward opens
# dl.im2col and dl.col2im: the lesson hands them over (the learner has built im2col's simple
# form in im2col_simple), and a backward written with them is as right as one with loops.
_CONV_BACKWARD_OPENS = ["dlcourse.conv.im2col", "dlcourse.conv.col2im"]


# ======================================================================================
# 06a_convolution_and_im2col (max pooling and the backward passes: 06b, below)
# ======================================================================================
def conv_output_size(fn) -> None:
    """Check ``fn(H, K, stride=1, padding=0)``: how many positions a K-wide window takes
    when slid with ``stride`` over H pixels padded by ``padding`` on each side (an int); the
    cases include sizes where the stride does not divide the free space (a count that must be
    rounded down)."""
    __tracebackhide__ = True
    cases = [(8, 3, 1, 0), (8, 3, 1, 1), (28, 5, 1, 2), (7, 3, 2, 0), (32, 3, 2, 1),
             (5, 2, 2, 0), (6, 3, 3, 0), (4, 4, 1, 0), (2, 3, 2, 0)]   # the last: no room at all
    for H, K, s, p in cases:
        case = f"conv_output_size(H={H}, K={K}, stride={s}, padding={p})"
        expected = (H + 2 * p - K) // s + 1
        got = call(fn, H, K, stride=s, padding=p, case=case)
        if isinstance(got, (float, np.floating)) and not float(got).is_integer():
            fail(fn, case, f"it returned {got}, not a whole number of pixels.",
                 "use // (floor division): a window that would stick out past the edge does "
                 "not count.")
        value = to_number(got, fn, case, "the size", "return an int.")
        if int(value) == expected:
            continue
        known = {
            (H + 2 * p - K) // s: "you forgot the + 1: the window's first position counts too.",
            (H + p - K) // s + 1: "the padding goes on BOTH sides: count it twice.",
            (H - K) // s + 1: "the padding is missing: the padded input is wider than H, by the "
                              "padding on each side.",
            (H + 2 * p - K) + 1: "the stride is missing: divide the free space by the stride.",
            -(-(H + 2 * p - K) // s) + 1: "round DOWN (//): a window past the edge does not count.",
        }
        if H + 2 * p < K:
            known.setdefault(int((H + 2 * p - K) / s) + 1,
                             "the window does not fit at all here, so there is no position; "
                             "converting to int truncates towards 0 (-0.5 becomes 0), while "
                             "floor division rounds down (-0.5 becomes -1).")
        fail(fn, case, f"it returned {int(value)}; expected {expected} window positions.",
             known.get(int(value)))
    passed(fn, len(cases))


def conv_output_size_2d(fn) -> None:
    """Check ``fn(H, W, kernel_size, stride=1, padding=0)`` -> ``(OH, OW)``, where each of
    ``kernel_size``, ``stride`` and ``padding`` is an int (both axes) or a pair (h, w), the
    first for the height and the second for the width (as ``dl.Conv2d`` takes them). Cases
    mix ints and pairs, and differ between the axes, so a swapped or shared value shows."""
    __tracebackhide__ = True
    cases = [(8, 8, 3, 1, 1), (28, 20, (5, 3), 1, (2, 1)), (7, 9, (3, 2), (2, 3), 0),
             (32, 17, 3, (2, 1), (1, 0)), (10, 6, (4, 2), 2, (1, 2)), (5, 12, (2, 5), (1, 3), (0, 2))]

    def pair(v):
        __tracebackhide__ = True
        return (v, v) if isinstance(v, int) else tuple(v)

    for H, W, k, s, p in cases:
        case = f"conv_output_size_2d(H={H}, W={W}, kernel_size={k}, stride={s}, padding={p})"
        (kh, kw), (sh, sw), (ph, pw) = pair(k), pair(s), pair(p)
        expected = ((H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1)
        out = expect_tuple(call(fn, H, W, k, stride=s, padding=p, case=case,
                                on_error="an int stands for both axes; a pair is (height, "
                                         "width): turn each setting into a pair first."),
                           2, fn, case, "OH, OW")
        got = tuple(int(to_number(v, fn, case, n, "return ints.")) for v, n in
                    zip(out, ("OH", "OW")))
        if got == expected:
            continue
        known = {
            ((W + 2 * pw - kw) // sw + 1, (H + 2 * ph - kh) // sh + 1):
                "OH and OW are swapped: return (height, width).",
            ((H + 2 * pw - kw) // sw + 1, (W + 2 * ph - kh) // sh + 1):
                "the settings of the two axes are swapped: a pair is (height, width), its "
                "first entry for H.",
            ((H + 2 * ph - kh) // sh + 1, (W + 2 * ph - kh) // sh + 1):
                "the width used the height's settings: each axis has its own kernel size, "
                "stride and padding.",
        }
        fail(fn, case, f"it returned {got}; expected {expected}.", known.get(got))
    passed(fn, len(cases))


def _conv_cases():
    """(case, x, W, b, stride, padding): small enough for Python loops."""
    __tracebackhide__ = True
    r = rng(7)
    out = []
    for (N, C, H, Wd), (F, KH, KW), s, p in (
            ((1, 1, 4, 4), (1, 2, 2), 1, 0),
            ((2, 3, 5, 5), (4, 3, 3), 1, 0),
            ((2, 3, 5, 5), (4, 3, 3), 1, 1),
            ((1, 2, 7, 6), (3, 3, 2), 2, 0),
            ((2, 2, 6, 7), (3, 3, 3), 2, 1)):
        x = r.standard_normal((N, C, H, Wd))
        W = r.standard_normal((F, C, KH, KW))
        b = r.standard_normal(F)
        out.append((f"x of shape {x.shape}, W of shape {W.shape}, stride={s}, padding={p}",
                    x, W, b, s, p))
    return out


def conv2d_naive(fn) -> None:
    """Check ``fn(x, W, b, stride=1, padding=0)``: the convolution (cross-correlation) of
    x (N, C, H, W) with filters W (F, C, KH, KW) plus biases b (F,), returning
    (N, F, OH, OW); compared with ``dlcourse.conv.conv2d_forward_naive``."""
    __tracebackhide__ = True
    from ..conv import conv2d_forward_naive as ref
    cases = _conv_cases()
    for case, x, W, b, s, p in cases:
        N, C, H, Wd = x.shape
        F, _, KH, KW = W.shape
        expected = ref(x, W, b, s, p)
        given = {"x": x.copy(), "W": W.copy(), "b": b.copy()}
        got = to_array(call(fn, given["x"], given["W"], given["b"], stride=s, padding=p, case=case),
                       fn, case, "the output")
        expect_shape(got, expected.shape, fn, case, "the output",
                     f"(N, F, OH, OW) with OH = {expected.shape[2]} and OW = {expected.shape[3]} "
                     f"(exercise 1's count, per axis).")
        expect_close(got, expected, fn, case, "the output", mistakes=[
            (lambda: ref(x, W[:, :, ::-1, ::-1], b, s, p),
             "you flipped the kernel (the mathematician's convolution). Deep learning's "
             "'convolution' is cross-correlation: multiply each window by W[f] as it is."),
            (lambda: ref(x, W, 0 * b, s, p), "the bias b[f] is missing."),
            (lambda: ref(x, W, b * (C * KH * KW), s, p),
             "b[f] was added to every product: add it once, after the sum."),
            (lambda: ref(x[:, :1], W[:, :1], b, s, p),
             "only channel 0 is used: the window spans all C channels."),
        ], fix="each output pixel is the sum, over all channels and the KH×KW window of the "
               "PADDED input that starts at (i times stride, j times stride), of the window "
               "times filter f, plus filter f's bias once.")
        expect_unchanged(fn, case, [(k, ref_, given[k]) for k, ref_ in (("x", x), ("W", W), ("b", b))])
    passed(fn, len(cases))


def im2col_simple(fn) -> None:
    """Check ``fn(x, KH, KW)`` (stride 1, no padding): x (N, C, H, W) unfolded into
    cols (N*OH*OW, C*KH*KW), one row per window, in the order of ``dl.im2col``:
    rows run over n, then i, then j; columns over c, then kh, then kw (the order in which a
    filter's weights are flattened)."""
    __tracebackhide__ = True
    from ..conv import im2col
    cases = [((1, 1, 3, 3), 2, 2), ((1, 1, 4, 5), 3, 2), ((2, 3, 4, 4), 2, 2),
             ((2, 2, 5, 4), 3, 3)]
    for shape, KH, KW in cases:
        N, C, H, W = shape
        OH, OW = H - KH + 1, W - KW + 1
        x = np.arange(N * C * H * W, dtype=np.float64).reshape(shape)   # every pixel unique
        case = f"x = np.arange({N * C * H * W}).reshape{shape}, KH={KH}, KW={KW}"
        expected = im2col(x, KH, KW)
        x_given = x.copy()
        got = to_array(call(fn, x_given, KH, KW, case=case),
                       fn, case, "cols")
        expect_unchanged(fn, case, [("x", x, x_given)])
        if got.shape == expected.shape[::-1] != expected.shape:
            fail(fn, case, f"cols has shape {got.shape}: that is the transpose of the expected "
                           f"{expected.shape}.",
                 f"one ROW per window: (N*OH*OW, C*KH*KW) = ({N}*{OH}*{OW}, {C}*{KH}*{KW}).")
        expect_shape(got, expected.shape, fn, case, "cols",
                     f"one row per window: (N*OH*OW, C*KH*KW) = ({N}*{OH}*{OW}, {C}*{KH}*{KW}).")
        if np.array_equal(got, expected):
            continue
        fix = ("each row is one window, flattened channel by channel, and the rows run over "
               "n, then i, then j.")
        if np.array_equal(np.sort(got, axis=1), np.sort(expected, axis=1)):
            fix = ("each row holds the right pixels in another order: columns run over c, then "
                   "kh, then kw, as flattening the (C, KH, KW) window in C order gives them.")
        elif sorted(map(tuple, got.tolist())) == sorted(map(tuple, expected.tolist())):
            fix = ("the rows are right but in another order: they run over n, then i, then j "
                   "(count the windows that come before window (n, i, j)).")
        expect_close(got, expected, fn, case, "cols (x holds 0, 1, 2, ..., so each number names "
                     "its pixel)", fix=fix)
    passed(fn, len(cases))


def conv2d_backward(fn) -> None:
    """Check ``fn(dout, x, W, stride=1, padding=0)`` returning ``(dx, dW, db)``, compared with
    ``dlcourse.conv.conv2d_backward_naive``: dx (N, C, H, W), dW (F, C, KH, KW), db (F,)."""
    __tracebackhide__ = True
    from ..conv import conv2d_backward_naive, output_size
    r = rng(8)
    cases = _conv_cases()
    for case, x, W, b, s, p in cases:
        N, C, H, Wd = x.shape
        dout = r.standard_normal((N, W.shape[0], *output_size(H, Wd, W.shape[2], W.shape[3], s, p)))
        e_dx, e_dW, e_db = conv2d_backward_naive(dout, x, W, s, p)
        given = {"dout": dout.copy(), "x": x.copy(), "W": W.copy()}
        out = expect_tuple(call(fn, given["dout"], given["x"], given["W"], stride=s, padding=p,
                                case=case, opens=_CONV_BACKWARD_OPENS), 3, fn, case, "dx, dW, db")
        dx, dW, db = (to_array(a, fn, case, n) for a, n in zip(out, ("dx", "dW", "db")))
        if dx.shape == W.shape and dW.shape == x.shape and x.shape != W.shape:
            fail(fn, case, "dx has W's shape and dW has x's shape.", "return dx, dW, db in that order.")
        expect_shape(db, (W.shape[0],), fn, case, "db",
                     "one number per filter: dout summed over N, OH and OW.")
        expect_close(db, e_db, fn, case, "db",
                     fix="b[f] is added to every output pixel of filter f, so db[f] is dout[:, f] "
                         "summed over N, OH and OW.")
        expect_shape(dW, W.shape, fn, case, "dW", "dW has W's shape (F, C, KH, KW).")
        expect_close(dW, e_dW, fn, case, "dW",
                     fix="every output pixel adds (the window of the PADDED input it saw) times "
                         "its own dout value to its filter's gradient.")
        fix = "dx has x's shape (N, C, H, W)."
        if p and dx.shape == (N, C, H + 2 * p, Wd + 2 * p):
            fix = (f"that is the padded input's shape: crop the padding off ({p} pixel(s) on "
                   f"each side), since x itself was not padded.")
        expect_shape(dx, x.shape, fn, case, "dx", fix)
        expect_close(dx, e_dx, fn, case, "dx",
                     fix="every output pixel sends its filter times its own dout value back to the "
                         "window it came from (at i times stride, j times stride in the padded "
                         "input), and overlapping windows ADD (+=).")
        expect_unchanged(fn, case, [(k, ref_, given[k])
                                    for k, ref_ in (("dout", dout), ("x", x), ("W", W))])
    passed(fn, len(cases))


_BY_HAND_WINDOWS = ("no tie", "two 2s tie")    # the two windows the lesson works by hand


def max_window_grad(fn) -> None:
    """Check ``fn(window)`` -> the gradient of ``max(window)`` with respect to each entry of
    ``window`` (any 2-D shape), as max pooling's backward uses it: 1 at the maximum, 0 elsewhere;
    where several entries tie for the maximum, the whole 1 goes to the FIRST of them in
    row-major order (row by row, left to right), the convention of ``dl.MaxPool2d``."""
    __tracebackhide__ = True
    cases = [
        ("no tie", np.array([[1.0, 3.0], [2.0, 0.0]])),
        ("two 2s tie", np.array([[0.0, 2.0], [2.0, 1.0]])),
        ("all zeros (after a ReLU)", np.zeros((2, 2))),
        ("three tie, the first in row 1", np.array([[-1.0, 0.5, -2.0], [4.0, 4.0, 1.0],
                                                    [4.0, 0.0, 3.0]])),
        ("all negative", np.array([[-3.0, -1.0], [-1.0, -2.0]])),
        ("a 2x3 window, tie in one column", np.array([[0.0, 5.0, 1.0], [2.0, 5.0, 5.0]])),
    ]
    for what, window in cases:
        case = f"window = {window.tolist()} ({what})"
        given = window.copy()
        got = to_array(call(fn, given, case=case), fn, case,
                       "the gradient")
        expect_unchanged(fn, case, [("window", window, given)])
        expect_shape(got, window.shape, fn, case, "the gradient",
                     "one gradient entry per entry of the window: put the flat position of the "
                     "maximum back into the window's shape.")
        flat = window.ravel()
        is_max = (window == window.max()).astype(float)
        expected = np.zeros_like(window)
        expected.flat[int(np.argmax(flat))] = 1.0
        last = np.zeros_like(window)
        last.flat[flat.size - 1 - int(np.argmax(flat[::-1]))] = 1.0
        colmajor = np.zeros_like(window)
        ci = int(np.argmax(window.T.ravel()))
        colmajor.T.flat[ci] = 1.0
        expect_close(got, expected, fn, case, "the gradient", by_hand=what in _BY_HAND_WINDOWS,
                     mistakes=[
            (is_max, "every tied maximum got a whole 1, so the window passes on its gradient "
                     "several times over: the gradients of a max must add up to 1 (shift every "
                     "entry by c and the max shifts by c). Exactly one entry gets it, the first "
                     "in row-major order."),
            (is_max / is_max.sum(), "you split the 1 evenly between the tied entries: a valid "
                                    "subgradient (it is what a central difference measures), "
                                    "but the convention here, as in dl.MaxPool2d, gives all of "
                                    "it to the FIRST tied entry in row-major order."),
            (last, "the LAST tied entry got it; the convention is the FIRST in row-major order "
                   "(in a search loop, replace the best so far only when a value is strictly "
                   "larger)."),
            (colmajor, "you went column by column; row-major order goes row by row, left to "
                       "right within a row."),
            (window * is_max, "that is the window's values at the maximum, not the gradient: the "
                              "gradient there is 1."),
        ])
    passed(fn, len(cases))


def maxpool_mistakes(dout, x, K, s):
    """Five wrong dx: spread over the whole window, averaged, overwritten (= instead of +=);
    and, where a window has ties, dout to EVERY tied maximum (a mask ``window ==
    window.max()``) or to the LAST one (``>=`` in a search loop)."""
    __tracebackhide__ = True
    N, C, H, W = x.shape
    _, _, OH, OW = dout.shape
    spread, overwrite, every, last = (np.zeros_like(x) for _ in range(4))
    for n in range(N):
        for c in range(C):
            for i in range(OH):
                for j in range(OW):
                    win = x[n, c, i * s:i * s + K, j * s:j * s + K]
                    g = dout[n, c, i, j]
                    kh, kw = np.unravel_index(int(win.argmax()), win.shape)
                    overwrite[n, c, i * s + kh, j * s + kw] = g
                    spread[n, c, i * s:i * s + K, j * s:j * s + K] += g
                    every[n, c, i * s:i * s + K, j * s:j * s + K] += (win == win.max()) * g
                    kh, kw = np.unravel_index(win.size - 1 - int(win.ravel()[::-1].argmax()),
                                              win.shape)
                    last[n, c, i * s + kh, j * s + kw] += g
    return spread, spread / (K * K), overwrite, every, last


_TIES = ("ties go to the FIRST maximum in row-major order of the window (row by row, left to "
         "right), which is what NumPy's argmax of the window finds and what dl.MaxPool2d does")


def maxpool_backward(fn) -> None:
    """Check ``fn(dout, x, K, stride)`` returning dx (N, C, H, W) for K×K max pooling: each
    window's gradient (its dout value) goes to the position of that window's maximum, and
    where windows overlap (stride < K) the gradients add up. Where a window holds several
    equal maxima (after a ReLU many values are exactly 0), only the first in row-major order
    gets it, as with NumPy's argmax. Compared with ``dlcourse.conv.maxpool_backward_naive``."""
    __tracebackhide__ = True
    from ..conv import maxpool_backward_naive, output_size
    r = rng(9)
    cases = []
    for shape, K, s in [((1, 1, 4, 4), 2, 2), ((2, 3, 6, 6), 2, 2), ((1, 2, 5, 5), 2, 2),
                        ((2, 2, 5, 5), 3, 1), ((1, 1, 7, 7), 3, 2)]:
        x = r.permutation(int(np.prod(shape))).reshape(shape).astype(np.float64)   # no ties
        cases.append((f"x of shape {shape} (no ties), K={K}, stride={s}", x, K, s, False))
    # After a ReLU: channel 0 all zeros (every window a 4-way tie), channel 1 with a tie of two
    # 2s in its top-left window and zeros elsewhere.
    x = np.zeros((1, 2, 4, 4))
    x[0, 1] = np.maximum(r.standard_normal((4, 4)), 0)
    x[0, 1, :2, :2] = [[0.0, 2.0], [2.0, 1.0]]
    cases.append(("x after a ReLU, shape (1, 2, 4, 4), with tied maxima: channel 0 all zeros, "
                  "and two 2s in the first window of channel 1; K=2, stride=2", x, 2, 2, True))
    for case, x, K, s, ties in cases:
        OH, OW = output_size(x.shape[2], x.shape[3], K, K, s)
        dout = r.standard_normal((x.shape[0], x.shape[1], OH, OW))
        expected = maxpool_backward_naive(dout, x, K, K, s)
        dout_given, x_given = dout.copy(), x.copy()
        got = to_array(call(fn, dout_given, x_given, K, s, case=case), fn, case, "dx")
        expect_shape(got, x.shape, fn, case, "dx", "dx has x's shape (N, C, H, W).")
        spread, averaged, overwrite, every, last = maxpool_mistakes(dout, x, K, s)
        expect_close(got, expected, fn, case, "dx", mistakes=[
            (spread, "you sent the gradient to every pixel of the window; only the maximum "
                     "influenced the output, so only it gets the gradient."),
            (averaged, "that is average pooling's backward; max pooling sends it all to the maximum."),
            (overwrite, "with overlapping windows (stride < K) one pixel can be the maximum of "
                        "several windows: ADD their gradients (+=), don't overwrite (=)."),
            (np.zeros_like(x), "dx is all zeros."),
            (every, "where a window has several equal maxima you gave dout to EVERY one of them "
                    "(a mask window == window.max()), so that window passes on its gradient "
                    f"several times over. Exactly one position gets it: {_TIES}."),
            (last, f"where a window has several equal maxima you gave dout to the LAST one; {_TIES}. "
                   "In a search loop, replace the best so far only when a value is strictly "
                   "larger (>, not >=)."),
        ], fix=(f"x has ties here: {_TIES}." if ties else None))
        expect_unchanged(fn, case, [("dout", dout, dout_given), ("x", x, x_given)])
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'conv_output_size': [
        'integer division counts the full strides that fit after the first window',
        ('padded width = ___; free space after the first window = padded width minus ___; '
         'positions = (free space) floor-divided by ___, plus ___. Count by hand for H=5, K=3, '
         'stride=2, padding=1: 3 positions. The pictures above the exercise show the count.'),
    ],
    'conv_output_size_2d': [
        'an int stands for (that int, that int); a pair is (height, width)',
        ('pseudo-code: (KH, KW), (sh, sw), (ph, pw) = each setting as a pair; OH = exercise 1\'s '
         'count with (H, KH, sh, ph); OW = the same with ___. Your conv_output_size already does '
         'one axis.'),
    ],
    'conv2d_naive': [
        "the window spans all C channels and KH x KW pixels, exactly the shape (C, KH, KW) of one "
        "filter",
        ('four loops over n, f, i, j; the window of the padded input starts at row ___ and column '
         '___ and is KH by KW, all channels; the output at (n, f, i, j) = the sum of (window '
         'times filter f) plus ___. The definition is in the markdown cell above the exercise.'),
    ],
    'im2col_simple': [
        ('which row does window (n, i, j) go to? Count the windows before it: n whole images of '
         'OH·OW windows each, then i whole rows of OW, then j.'),
        ('loop over n, i, j: row ___ of cols = the window of x at (image n, all channels, rows i '
         'i onwards, KH of them, columns j onwards, KW of them), flattened. The im2col section above the exercise shows '
         'the order of rows and columns.'),
    ],
    'max_window_grad': [
        ('entries below the maximum get 0; the gradients of a window add up to 1; with a tie the '
         'convention gives the whole 1 to the first tied entry, row by row'),
        ('pseudo-code: flat = the index of the first largest entry (NumPy\'s argmax of the '
         'window); (row, column) = that flat index unravelled in the window\'s shape; the '
         'gradient is 0 everywhere except a 1 at ___. The markdown cell above the exercise '
         'works the two windows by hand.'),
    ],
    'maxpool_backward': [
        ('find the position of the maximum inside each window (the flat index of the largest '
         'entry, turned into a row and a column) and add dout there'),
        ('for each n, c, i, j: window = the K×K patch of x starting at (i·stride, j·stride); '
         '(kh, kw) = where its first maximum is; dx at (i·stride + kh, j·stride + kw) gets ___ '
         'added. The max-pooling section above the exercise gives the local derivative of a '
         'maximum.'),
    ],
    'conv2d_backward': [
        ("the same four loops as the forward pass; the window starts at the output pixel's "
         "position times the stride; overlapping windows ADD into dx_pad"),
        ('db = dout summed over every axis but ___; in the loops: filter f\'s gradient gets (the '
         'window of the padded input) times ___ added; the same window of dx_pad gets (filter f) '
         'times ___ added. The local derivatives are in the markdown cell above the exercise; '
         'check with dl.gradcheck on a tiny case.'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'conv_output_size': ['// stride', '//stride', '- K) //', 'floor-divid', 'floor divid', '+ 1',
        'plus one', '(H + 2 * padding - K)', 'H + 2*padding - K'],
    'conv_output_size_2d': ['isinstance(', 'conv_output_size(H', '(OH, OW) = '],
    'conv2d_naive': ['(H + 2 * padding - KH) // stride + 1', '// stride + 1', 'np.pad(',
        'x_pad[n, :, i * stride', 'np.sum(window * W[f])'],
    'im2col_simple': ['n * OH * OW', '(n * OH + i) * OW + j', 'n*OH*OW', 'n·OH·OW + i·OW + j'],
    'max_window_grad': ['argmax', 'unravel', 'put a 1', 'a 1 there', 'flat position',
        'flat index', 'gets the whole 1', 'first largest entry gets'],
    'maxpool_backward': ['overlapping windows add', 'windows add', 'it alone receives',
        'alone receives', '+=', 'add the gradients', 'gradients add'],
    'conv2d_backward': ['db sums dout', 'everything but the filter axis', 'times that window',
        'times filter f', 'axis=(0, 2, 3)', 'sum(axis=(0, 2, 3))', 'dout value times',
        'dout[n, f, i, j] * '],
}
