"""Checks for lessons 06-07: convolution, and training a CNN.

Each check takes *your* function, runs it on several small cases, compares it with the
library's reference (``dlcourse/conv.py``, ``layers.py``) and either prints one line saying
that every case passes, or raises :class:`ExerciseError` naming the case, the problem and,
for the common mistakes, the likely fix::

    dl.check.conv2d_naive(conv2d_naive)

=================  ===============================  =========================================
lesson             check                            your function
=================  ===============================  =========================================
06_convolution     :func:`conv_output_size`         ``(H, K, stride, padding) -> int``
06_convolution     :func:`conv_output_size_2d`      ``(H, W, kernel_size, stride, padding)``
06_convolution     :func:`conv2d_naive`             ``(x, W, b, stride, padding) -> out``
06_convolution     :func:`im2col_simple`            ``(x, KH, KW) -> cols``
06_convolution     :func:`max_window_grad`          ``(window) -> gradient of its max``
06_convolution     :func:`maxpool_backward`         ``(dout, x, K, stride) -> dx``
06_convolution     :func:`conv2d_backward`          ``(dout, x, W, stride, padding)``
07_training_a_cnn  :func:`conv_params`              ``(in_channels, out_channels, K) -> int``
07_training_a_cnn  :func:`batchnorm_forward`        ``(x, gamma, beta, eps) -> out``
07_training_a_cnn  :func:`batchnorm_running`        ``(x, gamma, beta, running_mean, ...)``
07_training_a_cnn  :func:`batchnorm_backward`       ``(dout, x, gamma, eps) -> dx, ...``
=================  ===============================  =========================================

The MLP lessons' checks (04-05) are in ``training.py``; the shared machinery (``call``,
``fail``, ``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_shape, expect_tuple, expect_unchanged, fail,
                      passed, rng, to_array, to_number)

__all__ = [
    "conv_output_size", "conv_output_size_2d", "conv2d_naive", "im2col_simple", "max_window_grad",
    "maxpool_backward", "conv2d_backward", "conv_params", "batchnorm_forward", "batchnorm_running",
    "batchnorm_backward",
]


# The library's own versions of what each exercise builds: refused (an ExerciseError) while
# the learner's function runs, with every alias of them in a dlcourse module (dl.im2col, ...).
_CONV = ["dlcourse.conv.conv2d_forward_naive", "dlcourse.conv.Conv2d.forward",
         "dlcourse.conv.Conv2d.matrix_forward", "dlcourse.conv.unfold", "dlcourse.conv.im2col"]
_CONV_BACK = ["dlcourse.conv.conv2d_backward_naive", "dlcourse.conv.Conv2d.backward",
              "dlcourse.conv.Conv2d.matrix_backward", "dlcourse.conv.fold", "dlcourse.conv.col2im"]
_POOL = ["dlcourse.conv.maxpool_backward_naive", "dlcourse.conv.MaxPool2d.backward",
         "dlcourse.conv.MaxPool2d.forward", "dlcourse.conv.MaxPool2d._max_and_where"]
_BN = ["dlcourse.layers.BatchNorm2d.forward", "dlcourse.layers.BatchNorm2d.backward"]
REFUSE: dict[str, list[str]] = {
    "conv_output_size": ["dlcourse.shapes.output_size"],
    "conv_output_size_2d": ["dlcourse.shapes.output_size"],
    "conv2d_naive": _CONV,
    "im2col_simple": ["dlcourse.conv.im2col", "dlcourse.conv.unfold", "dlcourse.conv._windows"],
    "max_window_grad": _POOL + ["dlcourse.conv.maxpool_forward_naive"],
    "maxpool_backward": _POOL + ["dlcourse.conv.maxpool_forward_naive"],
    "conv2d_backward": _CONV_BACK + _CONV,
    "conv_params": ["dlcourse.conv.Conv2d.__init__"],
    "batchnorm_forward": _BN,
    "batchnorm_running": _BN + ["dlcourse.layers.BatchNorm2d._update_running_stats"],
    "batchnorm_backward": _BN,
}


# ======================================================================================
# 06_convolution
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
        got = call(fn, H, K, stride=s, padding=p, case=case, refuse=REFUSE["conv_output_size"])
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
                                refuse=REFUSE["conv_output_size_2d"],
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
        got = to_array(call(fn, given["x"], given["W"], given["b"], stride=s, padding=p, case=case,
                            refuse=REFUSE["conv2d_naive"]),
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
        got = to_array(call(fn, x_given, KH, KW, case=case, refuse=REFUSE["im2col_simple"]),
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
                                case=case, refuse=REFUSE["conv2d_backward"]), 3, fn, case, "dx, dW, db")
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
        got = to_array(call(fn, given, case=case, refuse=REFUSE["max_window_grad"]), fn, case,
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
        expect_close(got, expected, fn, case, "the gradient", mistakes=[
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
        got = to_array(call(fn, dout_given, x_given, K, s, case=case,
                            refuse=REFUSE["maxpool_backward"]), fn, case, "dx")
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


# ======================================================================================
# 07_training_a_cnn
# ======================================================================================
def conv_params(fn) -> None:
    """Check ``fn(in_channels, out_channels, kernel_size)``: how many numbers a
    ``Conv2d(in_channels, out_channels, kernel_size)`` learns: the weights
    (out_channels, in_channels, K, K) plus one bias per output channel."""
    __tracebackhide__ = True
    cases = [(1, 16, 3), (16, 32, 3), (3, 8, 5), (2, 1, 1), (4, 6, 2)]
    for C_in, C_out, K in cases:
        case = f"conv_params({C_in}, {C_out}, {K})"
        expected = C_out * C_in * K * K + C_out
        got = int(to_number(call(fn, C_in, C_out, K, case=case, refuse=REFUSE["conv_params"]),
                            fn, case, "the count",
                            "return an int."))
        if got == expected:
            continue
        known = {
            C_out * C_in * K * K: "the biases are missing: one per output channel.",
            C_out * K * K + C_out: "each filter spans ALL input channels: C_out * C_in * K * K weights.",
            C_out * C_in * K * K + C_in: "there is one bias per OUTPUT channel (filter), not per input.",
            C_out * C_in * K + C_out: "a kernel is K×K: K * K weights per (output, input) channel pair.",
        }
        fail(fn, case, f"it returned {got}; expected {C_out}*{C_in}*{K}*{K} weights + {C_out} "
                       f"biases = {expected}.", known.get(got))
    passed(fn, len(cases))


def batchnorm_forward(fn) -> None:
    """Check ``fn(x, gamma, beta, eps=1e-5)``: batch normalization in training mode for
    x (N, C, H, W) with gamma and beta (C,): each channel is normalized with the mean and
    the (biased) variance of its N*H*W values, then scaled by gamma[c] and shifted by
    beta[c]. Compared with ``dl.BatchNorm2d`` in training mode. One case has a channel that
    varies very little (a variance near eps), where eps's place, inside the square root,
    shows."""
    __tracebackhide__ = True
    from ..layers import BatchNorm2d
    r = rng(10)
    shapes = [(4, 3, 5, 6), (4, 3, 5, 6), (2, 5, 3, 3), (8, 2, 1, 1), (3, 2, 2, 2)]
    # eps varies, so a hard-coded 1e-5 shows; the nearly constant channel (case 1) comes
    # first, where a missing eps shows on its own
    epses = [1e-5, 1e-5, 1e-3, 0.5, 2.0]
    for k, (shape, eps) in enumerate(zip(shapes, epses)):
        N, C, H, W = shape
        x = r.standard_normal(shape) * 3 + r.standard_normal((1, C, 1, 1)) * 2
        if k == 4:   # small variances, so that eps = 2 matters
            x = x * 0.3
        case = f"x of shape {shape}, gamma and beta of shape ({C},), eps={eps}"
        if k == 1:   # channel 1 scaled by 1e-3: its variance (about 1e-5) is as small as eps
            x[:, 1] *= 1e-3
            case += (f", channel 1 nearly constant (variance {x[:, 1].var():.2g}, as small as "
                     f"eps = 1e-5)")
        gamma, beta = r.uniform(0.5, 2.0, C), r.standard_normal(C)
        bn = BatchNorm2d(C, eps=eps, dtype=np.float64)
        bn.params = {"gamma": gamma.copy(), "beta": beta.copy()}
        expected = bn.forward(x)
        given = {"x": x.copy(), "gamma": gamma.copy(), "beta": beta.copy()}
        got = to_array(call(fn, given["x"], given["gamma"], given["beta"], eps=eps, case=case,
                            refuse=REFUSE["batchnorm_forward"],
                            on_error="gamma and beta have shape (C,): reshape them to (1, C, 1, 1) "
                                     "so they broadcast over (N, C, H, W)."), fn, case, "the output")
        expect_shape(got, shape, fn, case, "the output",
                     "keep x's shape; reshape gamma and beta to (1, C, 1, 1) to broadcast.")
        g4, b4 = gamma.reshape(1, C, 1, 1), beta.reshape(1, C, 1, 1)

        def norm(axes, ddof=0, std=lambda v, eps=eps: np.sqrt(v + eps)):
            __tracebackhide__ = True
            def f():
                __tracebackhide__ = True
                m = x.mean(axis=axes, keepdims=True)
                v = x.var(axis=axes, keepdims=True, ddof=ddof)
                return (x - m) / std(v)
            return f
        expect_close(got, expected, fn, case, "the output", rtol=1e-4, atol=1e-6, mistakes=[
            (lambda: g4 * norm((0, 2, 3), std=lambda v: np.sqrt(v + 1e-5))() + b4 if eps != 1e-5
             else None,
             f"that is the output for eps = 1e-5, but this case passes eps={eps}: use the eps "
             f"argument, not a number of your own."),
            (norm((0, 2, 3)), "gamma and beta are missing: scale x_hat by gamma, then shift it "
                              "by beta."),
            (lambda: g4 * norm((0, 2, 3), ddof=1)() + b4,
             "use the biased variance (divide by N*H*W, not by N*H*W - 1)."),
            (lambda: g4 * norm((2, 3))() + b4,
             "you normalized each image separately (axes 2, 3): BATCH norm averages over the batch "
             "too, axes (0, 2, 3)."),
            (lambda: g4 * norm((0,))() + b4,
             "you normalized each pixel separately (axis 0 only): a channel shares one mean and "
             "variance over N, H and W, axes (0, 2, 3)."),
            (lambda: g4 * norm((1, 2, 3))() + b4,
             "that is layer norm (axes 1, 2, 3); batch norm uses axes (0, 2, 3)."),
            (lambda: g4 * norm(None)() + b4,
             "one mean for everything: each channel needs its own, axes (0, 2, 3)."),
            (lambda: g4 * norm((0, 2, 3), std=np.sqrt)() + b4,
             "eps is missing: it goes under the square root, with the variance. It keeps a "
             "channel whose variance is tiny (or 0) from being blown up (or divided by 0)."),
            (lambda: g4 * norm((0, 2, 3), std=lambda v: np.sqrt(v) + eps)() + b4,
             "eps belongs INSIDE the square root: sqrt(var + eps), not sqrt(var) + eps. The two "
             "differ when the variance is as small as eps, as in channel 1 here."),
        ])
        expect_unchanged(fn, case, [(name, ref_, given[name]) for name, ref_ in
                                    (("x", x), ("gamma", gamma), ("beta", beta))])
    passed(fn, len(shapes))


def batchnorm_running(fn) -> None:
    """Check ``fn(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5,
    training=True)`` -> out, batch normalization with running statistics (as
    ``dl.BatchNorm2d``). In training mode the output uses the batch's mean and biased variance,
    and ``running_mean`` and ``running_var`` (C,) are updated **in place**:
    ``running = (1 - momentum) * running + momentum * batch statistic``, the variance's batch
    statistic being the UNBIASED one (times M / (M - 1), M = N*H*W). In evaluation mode the
    output uses the running statistics, which stay as they are. A few training steps, then
    evaluation, for several momentum and eps values; ``dl.BatchNorm2d`` is refused."""
    __tracebackhide__ = True
    from ..layers import BatchNorm2d
    r = rng(15)
    settings = [((4, 3, 5, 5), 0.1, 1e-5), ((2, 2, 3, 4), 0.3, 1e-3), ((8, 4, 1, 1), 0.5, 0.1)]
    checks = 0
    for shape, momentum, eps in settings:
        N, C, H, W = shape
        M = N * H * W
        bn = BatchNorm2d(C, eps=eps, momentum=momentum, dtype=np.float64)
        gamma, beta = r.uniform(0.5, 2.0, C), r.standard_normal(C)
        bn.params = {"gamma": gamma.copy(), "beta": beta.copy()}
        running_mean, running_var = np.zeros(C), np.ones(C)
        held = (running_mean, running_var)
        biased = (np.zeros(C), np.ones(C))
        swapped = (np.zeros(C), np.ones(C))
        steps = [True, True, True, False, False]
        for t, training in enumerate(steps, start=1):
            x = r.standard_normal(shape) * r.uniform(0.5, 3.0, (1, C, 1, 1)) + r.standard_normal(
                (1, C, 1, 1)) * 2
            mode = "training" if training else "evaluation"
            case = (f"x of shape {shape}, momentum={momentum}, eps={eps}, call {t} of "
                    f"{len(steps)} ({mode} mode; the running statistics start at mean 0 and "
                    f"variance 1)")
            bn.train(training)
            before = (running_mean.copy(), running_var.copy())
            expected = bn.forward(x)
            given = {"x": x.copy(), "gamma": gamma.copy(), "beta": beta.copy()}
            got = to_array(call(fn, given["x"], given["gamma"], given["beta"], running_mean,
                                running_var, momentum=momentum, eps=eps, training=training,
                                case=case, refuse=REFUSE["batchnorm_running"]), fn, case,
                           "the output")
            expect_shape(got, shape, fn, case, "the output", "keep x's shape.")
            if training:
                mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
                biased = ((1 - momentum) * biased[0] + momentum * mean,
                          (1 - momentum) * biased[1] + momentum * var)
                swapped = (momentum * swapped[0] + (1 - momentum) * mean,
                           momentum * swapped[1] + (1 - momentum) * var * M / (M - 1))
            for name, arr, was in (("running_mean", running_mean, held[0]),
                                   ("running_var", running_var, held[1])):
                if arr is not was:   # (the learner cannot rebind our names; a safety net)
                    fail(fn, case, f"{name} is a new array.", f"update {name} in place.")
            g4, b4 = gamma.reshape(1, C, 1, 1), beta.reshape(1, C, 1, 1)

            def with_stats(mu, var):
                __tracebackhide__ = True
                return lambda: g4 * (x - mu.reshape(1, C, 1, 1)) / np.sqrt(
                    var.reshape(1, C, 1, 1) + eps) + b4
            batch_out = with_stats(x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3)))
            run_out = with_stats(*before)
            expect_close(got, expected, fn, case, "the output", rtol=1e-5, atol=1e-7, mistakes=[
                (run_out if training else batch_out,
                 "in training mode the output uses the BATCH's statistics (the running ones are "
                 "only updated)" if training else
                 "in evaluation mode the output uses the RUNNING statistics, not the batch's: "
                 "then a prediction does not depend on which other images share its batch."),
            ], fix="the output is gamma times the normalized x plus beta, with the statistics "
                   "the mode asks for.")
            if not training:
                if not (np.allclose(running_mean, before[0]) and np.allclose(running_var,
                                                                             before[1])):
                    fail(fn, case, "the running statistics changed in evaluation mode.",
                         "evaluation only reads them: update them in training mode only.")
                continue
            e_mean, e_var = bn.buffers["running_mean"], bn.buffers["running_var"]
            expect_close(to_array(running_mean, fn, case, "running_mean"), e_mean, fn, case,
                         "running_mean after the call", mistakes=[
                             (before[0], "running_mean did not change: update it in place."),
                             (swapped[0], "the weights are swapped: momentum is the weight of "
                                          "the NEW batch statistic, (1 - momentum) that of the "
                                          "old running value."),
                             (x.mean(axis=(0, 2, 3)), "running_mean was replaced by the batch "
                                                      "mean: it is a running AVERAGE."),
                         ])
            expect_close(to_array(running_var, fn, case, "running_var"), e_var, fn, case,
                         "running_var after the call (running_mean is right)", mistakes=[
                             (biased[1], "that averages the BIASED batch variance; the running "
                                         "variance estimates the variance of the whole data, "
                                         "so it takes the unbiased one (the derivation's "
                                         "factor, with M = N*H*W)."),
                             (before[1], "running_var did not change: update it in place."),
                             (swapped[1], "the weights are swapped: momentum is the weight of "
                                          "the NEW batch statistic."),
                         ])
            checks += 1
        checks += 1
    passed(fn, checks)


def batchnorm_backward(fn) -> None:
    """Check ``fn(dout, x, gamma, eps=1e-5)`` -> ``(dx, dgamma, dbeta)``: the backward pass of
    batch normalization in training mode for x (N, C, H, W), gamma (C,); compared with
    ``dl.BatchNorm2d``'s backward. The usual mistakes are named: the mean's or the variance's
    path forgotten, the wrong axes, dgamma without x_hat."""
    __tracebackhide__ = True
    from ..layers import BatchNorm2d
    r = rng(11)
    cases = [((4, 3, 5, 6), 1e-5), ((2, 5, 3, 3), 0.1), ((8, 2, 1, 1), 1e-5), ((3, 2, 2, 3), 1.0)]
    for shape, eps in cases:       # eps varies: a hard-coded 1e-5 shows
        N, C, H, W = shape
        x = r.standard_normal(shape) * 2 + r.standard_normal((1, C, 1, 1))
        gamma, beta = r.uniform(0.5, 2.0, C), r.standard_normal(C)
        dout = r.standard_normal(shape)
        case = f"x and dout of shape {shape}, gamma of shape ({C},), eps={eps}"
        bn = BatchNorm2d(C, eps=eps, dtype=np.float64)
        bn.params = {"gamma": gamma.copy(), "beta": beta.copy()}
        bn.forward(x)
        e_dx = bn.backward(dout)
        e_dgamma, e_dbeta = bn.grads["gamma"], bn.grads["beta"]
        given = {"dout": dout.copy(), "x": x.copy(), "gamma": gamma.copy()}
        out = expect_tuple(call(fn, given["dout"], given["x"], given["gamma"], eps=eps, case=case,
                                refuse=REFUSE["batchnorm_backward"],
                                on_error="reduce over axes (0, 2, 3) with keepdims=True and "
                                         "reshape gamma to (1, C, 1, 1)."),
                           3, fn, case, "dx, dgamma, dbeta")
        dx, dgamma, dbeta = (to_array(a, fn, case, n) for a, n in zip(out, ("dx", "dgamma", "dbeta")))
        axes = (0, 2, 3)
        mean = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)
        x_hat = (x - mean) / np.sqrt(var + eps)
        g4 = gamma.reshape(1, C, 1, 1)
        expect_shape(dbeta, (C,), fn, case, "dbeta", "one number per channel: sum dout over "
                                                     "axes (0, 2, 3).")
        expect_close(dbeta, e_dbeta, fn, case, "dbeta", mistakes=[
            (dout.mean(axis=axes), "dbeta is a SUM over N, H and W, not a mean."),
        ], fix="beta[c] is added to every value of channel c, so dbeta[c] gathers dout from all "
               "of them (axes 0, 2 and 3).")
        expect_shape(dgamma, (C,), fn, case, "dgamma", "one number per channel.")
        expect_close(dgamma, e_dgamma, fn, case, "dgamma", mistakes=[
            (dout.sum(axis=axes), "gamma scales x_hat, so each dout value reaches gamma "
                                  "multiplied by its x_hat; summing dout alone is dbeta."),
            ((dout * x).sum(axis=axes), "gamma scales the NORMALIZED x: use x_hat, not x."),
            ((dout * x_hat).mean(axis=axes), "dgamma is a SUM over N, H and W, not a mean."),
            ((dout * (x - mean) / np.sqrt(var + 1e-5)).sum(axis=axes),
             f"that is dgamma for eps = 1e-5, but this case passes eps={eps}: use the eps "
             f"argument, not a number of your own."),
        ])
        expect_shape(dx, shape, fn, case, "dx", "dx has x's shape (N, C, H, W).")
        dxh = dout * g4
        std = np.sqrt(var + eps)

        def paths(mean_path=True, var_path=True, ax=axes, eps=eps):
            __tracebackhide__ = True
            def f():
                __tracebackhide__ = True
                m = x.mean(axis=ax, keepdims=True)
                v = x.var(axis=ax, keepdims=True)
                xh = (x - m) / np.sqrt(v + eps)
                d = dxh
                if mean_path:
                    d = d - dxh.mean(axis=ax, keepdims=True)
                if var_path:
                    d = d - xh * (dxh * xh).mean(axis=ax, keepdims=True)
                return d / np.sqrt(v + eps)
            return f
        expect_close(dx, e_dx, fn, case, "dx", mistakes=[
            (dxh / std, "that is only the direct path through x_hat: the mean and the variance "
                        "depend on x too. Add their two paths, as the lesson derives them (each a "
                        "mean over axes (0, 2, 3))."),
            (dout / std, "gamma is missing: dx_hat = dout * gamma, and then the three paths."),
            (paths(var_path=False), "the variance's path is missing: the variance depends on "
                                    "every x of the channel too, and its path adds a term of "
                                    "its own (one that involves x_hat)."),
            (paths(mean_path=False), "the mean's path is missing: the mean depends on every x "
                                     "of the channel, and its path adds a term of its own."),
            (paths(ax=(2, 3)), "the means go over axes (2, 3) only; batch norm's statistics, and "
                               "so their gradients, run over the batch too: axes (0, 2, 3)."),
            (paths(ax=(0,)), "the means go over axis 0 only; a channel shares its statistics over "
                             "N, H and W: axes (0, 2, 3)."),
            (paths(eps=1e-5), f"that is dx for eps = 1e-5, but this case passes eps={eps}: use the "
                              f"eps argument, not a number of your own."),
        ], fix="derive it path by path as in the lesson, and compare with dl.gradcheck on a "
               "small x.")
        expect_unchanged(fn, case, [(k, ref_, given[k]) for k, ref_ in
                                    (("dout", dout), ("x", x), ("gamma", gamma))])
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
    'conv_params': [
        'count the weights of the (out_channels, in_channels, K, K) array and add the biases',
        ('weights W have shape (out_channels, in_channels, kernel_size, kernel_size); add one bias '
         'per output channel. The Conv2d section shows the shapes.'),
    ],
    'batchnorm_forward': [
        ('x_hat = (x minus the channel mean) divided by the square root of (the channel variance '
         'plus ___); then scale by gamma and shift by beta'),
        ('mean and variance over axes (0, 2, 3), kept as (1, C, 1, 1) (keepdims) so they '
         'broadcast; gamma and beta reshaped to (1, C, 1, 1). The formula is in the markdown '
         'cell above the exercise.'),
    ],
    'batchnorm_running': [
        ('training: the output uses the batch statistics, and each running statistic moves a '
         'fraction momentum towards the batch\'s; evaluation: the output uses the running '
         'statistics and nothing changes'),
        ('the running variance averages the UNBIASED batch variance: multiply the biased one by '
         '___ with M = N*H*W; update both running arrays in place (*=, +=), per channel. The '
         'expected value of the biased variance is in the markdown cell above the exercise.'),
    ],
    'batchnorm_backward': [
        ("draw the graph x -> (mean, var) -> x_hat -> out: x reaches x_hat directly, through the "
         "mean and through the variance; write the local derivative of each edge, then add the "
         "three paths (each path through a statistic brings a mean over axes (0, 2, 3))"),
        ("with d = dout times gamma (as (1, C, 1, 1)): dx = (d - the mean of ___ - x_hat times "
         "the mean of ___) / (the std), every mean over axes (0, 2, 3) with keepdims; dbeta and "
         "dgamma are sums over the same axes. The graph and its local derivatives are in the "
         "markdown cell above the exercise; compare with dl.gradcheck."),
    ],
}
