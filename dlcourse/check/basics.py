"""Checks for lessons 00-01: arrays on NumPy and CuPy, timing on a GPU, the perceptron.

Used in notebooks ``00_setup_and_gpu_arrays`` and ``01_perceptron``: after you write a
function, a check cell runs it on a few small cases, for example::

    dl.check.perceptron_update(perceptron_update)

and either prints that every case passes or raises :class:`ExerciseError` saying which case
failed, what was expected, what your function gave and, where the mistake is a common one,
what the likely fix is. A function that still raises ``NotImplementedError`` gets
``"... is not implemented yet: <the hint>"``.

============================  ===============================  ===============================
lesson                        check                            your function
============================  ===============================  ===============================
00_setup_and_gpu_arrays       :func:`time_it`                  ``(f, repeat, warmup) -> s``
00_setup_and_gpu_arrays       :func:`normalize_rows`           ``(x) -> rows of length 1``
01_perceptron                 :func:`perceptron_predict`       ``(X, w, b) -> labels``
01_perceptron                 :func:`perceptron_update`        ``(w, b, x, y, lr) -> w, b``
============================  ===============================  ===============================

The checks of lessons 02a-02b (losses and their gradients) are in ``gradient_descent.py``, the
backpropagation lesson's (03) in ``backprop.py``; the shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_on_gpu, expect_shape, expect_tuple,
                      expect_unchanged, fail, gpu, passed, rng, shape_text, to_array, to_number)

__all__ = [
    "normalize_rows", "time_it",
    "perceptron_predict", "perceptron_update",
]

# While the learner's function runs the library is closed (harness.call; seal.py): an answer
# that calls into it, or into any package but NumPy and CuPy, fails, naming the call.


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
                            on_error="the row lengths should form an (N, 1) column: which "
                                     "axis do you sum over, and how do you keep it?"),
                       fn, case, "the result")
        expect_shape(got, x.shape, fn, case, "the result", "return an array shaped like x.")
        col = np.sqrt((x * x).sum(axis=1))
        tol = 1e-5 if x.dtype == np.float32 else 1e-10
        expect_close(got, expected, fn, case, "the result", rtol=tol, atol=tol, mistakes=[
            (x / np.sqrt((x * x).sum(axis=0, keepdims=True)),
             "you normalized the columns (axis=0); each ROW should get length 1: sum over axis=1."),
            (x / (x * x).sum(axis=1, keepdims=True),
             "you divided by the squared length: the length is the square root of the sum "
             "of squares."),
            (x / np.abs(x).sum(axis=1, keepdims=True),
             "you divided by the sum of absolute values; the Euclidean length is "
             "sqrt(sum of squares)."),
            (lambda: x / col[None, :],
             "without keepdims=True the norms have shape (N,) and divide the COLUMNS: keep "
             "the summed axis so they form an (N, 1) column."),
        ])
        if got.dtype != x.dtype:
            fail(fn, case, f"the result is {got.dtype} but x is {x.dtype}.",
                 "compute with x's own operations (its products and sums, xp's functions); "
                 "mixing in float64 constants or arrays promotes float32 to float64.")
        expect_unchanged(fn, case, [("x", x, given)],
                         "divide into a new array (an in-place division writes the result "
                         "over the caller's x).")
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
# Lesson 00: timing on a device that runs ahead of Python
# ======================================================================================
class _FakeDevice:
    """A device and a clock the check controls, for :func:`time_it`.

    Calling ``run`` costs ``queue`` seconds of the host's time and queues that call's work
    (``work[i]`` seconds for call i) on the device, which works through its queue on its own, as
    a GPU does; ``synchronize`` waits until the queue is empty; ``perf_counter`` reads the clock.
    """

    def __init__(self, work, queue=1e-5):
        __tracebackhide__ = True
        self.work, self.queue = list(work), queue
        self.clock = self.free_at = 0.0
        self.calls = self.reads = self.syncs = 0

    def run(self):
        __tracebackhide__ = True
        self.clock += self.queue
        work = self.work[min(self.calls, len(self.work) - 1)]
        self.calls += 1
        self.free_at = max(self.clock, self.free_at) + work

    def synchronize(self, *args, **kwargs):
        __tracebackhide__ = True
        self.syncs += 1
        self.clock = max(self.clock, self.free_at)

    def perf_counter(self):
        __tracebackhide__ = True
        self.reads += 1
        return self.clock


def _timed(work, queue, warmup, repeat, *, sync_each=True, sync_after_warmup=True,
           time_warmup=False, stat=np.median):
    """What a timer with (or without) each of the lesson's rules would report on a fake device
    with this work schedule: the right answer, and each typical mistake's."""
    __tracebackhide__ = True
    device = _FakeDevice(work, queue)
    times = []
    for _ in range(warmup):
        t0 = device.perf_counter()
        device.run()
        if time_warmup:
            device.synchronize()
            times.append(device.perf_counter() - t0)
    if sync_after_warmup:
        device.synchronize()
    if stat == "loop":        # the whole loop timed at once, then divided by repeat
        t0 = device.perf_counter()
        for _ in range(repeat):
            device.run()
        device.synchronize()
        return (device.perf_counter() - t0) / repeat
    for _ in range(repeat):
        t0 = device.perf_counter()
        device.run()
        if sync_each:
            device.synchronize()
        times.append(device.perf_counter() - t0)
    return float(stat(times))


def time_it(fn):
    """Check ``fn(f, repeat=..., warmup=..., clock=..., wait=...)`` -> the median seconds per
    call of ``f``: ``warmup`` calls not timed, then ``repeat`` calls, each timed with the
    ``clock`` it is given and ended by ``wait`` (waiting for the device). The check gives it a
    fake device and its clock: a first call that is slow (compiling), a disturbed run among the
    timed ones, and work that goes on after the call has returned, as on a GPU."""
    __tracebackhide__ = True
    ms = 1e-3
    cases = [
        ("repeat=5, warmup=2: the first call takes 50 ms (it compiles), then 4 ms each, but "
         "the 4th timed call is disturbed (30 ms)", [50 * ms, 4 * ms, 4 * ms, 4 * ms, 4 * ms,
                                                     30 * ms, 4 * ms], 2, 5),
        ("repeat=1, warmup=1: the first call takes 50 ms, the second 4 ms",
         [50 * ms, 4 * ms], 1, 1),
        ("repeat=3, warmup=2: 80 ms and 20 ms to warm up, then 3, 4 and 6 ms",
         [80 * ms, 20 * ms, 3 * ms, 4 * ms, 6 * ms], 2, 3),
        ("repeat=3, warmup=0: three calls of 7 ms, nothing to warm up",
         [7 * ms, 7 * ms, 7 * ms], 0, 3),
    ]
    queue = 10e-6     # the host's cost of one call: 10 µs to queue the work
    for case, work, warmup, repeat in cases:
        case = f"{case} (the call itself returns after {queue * 1e6:.0f} µs, as on a GPU)"
        device = _FakeDevice(work, queue)
        got = call(fn, device.run, repeat=repeat, warmup=warmup, clock=device.perf_counter,
                   wait=device.synchronize, case=case,
                   on_error="time_it gets f, a function of no arguments, and the keywords "
                            "repeat, warmup, clock (a function that reads the time) and wait "
                            "(one that waits for the device).")
        got = to_number(got, fn, case, "the time per call",
                        "return one number: the median of the timed calls, in seconds.")
        expected = _timed(work, queue, warmup, repeat)
        if np.isclose(got, expected, rtol=1e-6, atol=0) and device.calls == warmup + repeat:
            continue
        if device.reads == 0:
            fail(fn, case, "your function never read the clock it was given (its clock "
                           "argument, the check's clock; any other clock runs on the real time, "
                           "in which the fake device takes none).",
                 "read the time with the clock argument before and after each timed call.")
        if device.calls == repeat and warmup:
            fail(fn, case, f"f was called {repeat} times, so there is no warm-up: the first, "
                           f"slow call (compiling, allocating) is among the timed ones.",
                 "call f warmup times before the timed loop, without timing those calls.")
        if device.calls != warmup + repeat:
            fail(fn, case, f"f was called {device.calls} times; with warmup={warmup} and "
                           f"repeat={repeat} it should be called {warmup + repeat} times.",
                 "call f warmup times without timing it, then repeat times, timing each call.")
        mistakes = [
            (_timed(work, queue, warmup, repeat, sync_each=False),
             "that is only the time it took to QUEUE the work: the clock was read before the "
             "device had finished. Wait for the device (the wait argument) after calling f and "
             "before reading the clock." if device.syncs else
             "your function never calls its wait argument, which waits for the device: on a "
             "GPU a call returns once its work is queued, so the clock stops before the work "
             "is done."),
            (_timed(work, queue, warmup, repeat, time_warmup=True),
             "the warm-up calls are timed too: the warm-up runs f to compile and allocate, "
             "and its times are thrown away; the median is of the repeat timed calls only."),
            (_timed(work, queue, warmup, repeat, sync_after_warmup=False),
             "the first timed call also waited for the warm-up's work, still running on the "
             "device when the clock started: synchronize after the warm-up, before the first "
             "reading of the clock."),
            (_timed(work, queue, warmup, repeat, stat=np.mean),
             "that is the MEAN of the timed calls: one disturbed run pulls it up. Take the "
             "median."),
            (_timed(work, queue, warmup, repeat, stat="loop"),
             "that times the whole loop at once and divides by repeat: a mean per call, which "
             "one disturbed run pulls up. Time each call on its own (synchronizing before the "
             "clock stops) and take the median."),
            (_timed(work, queue, warmup, repeat, stat=np.min),
             "that is the fastest call (the minimum); the lesson's rule is the median of the "
             "timed calls."),
            (_timed(work, queue, warmup, repeat, stat=np.sum),
             "that is the total of the timed calls; return the time of one call (their median)."),
            (_timed(work, queue, warmup, repeat, stat=np.median) * 1e3,
             "that is in milliseconds; return seconds, as the clock gives them."),
        ]
        fix = next((why for wrong, why in mistakes
                    if np.isclose(got, wrong, rtol=1e-6, atol=0)), None)
        if device.syncs == 0 and fix is None:
            fix = mistakes[0][1]
        fail(fn, case, f"it returned {got:.6g} s per call; the median of the timed calls was "
                       f"{expected:.6g} s.", fix)
    passed(fn, len(cases))


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
                            on_error="X is (N, D) and w is (D,): one matrix-vector product gives "
                                     "the N weighted sums, then add the bias."),
                       fn, case, "the prediction")
        if got.ndim == 2 and got.shape == (len(X), 1):
            fail(fn, case, f"the prediction has shape {shape_text(got.shape)}; expected ({len(X)},).",
                 "return one label per sample, a flat array of shape (N,).")
        expect_shape(got, expected.shape, fn, case, "the prediction",
                     "one label per row of X: the weighted sums have shape (N,).")
        if not (np.issubdtype(got.dtype, np.number) or got.dtype == bool):
            fail(fn, case, f"the prediction has dtype {got.dtype}; expected 0/1 integers.")
        expect_close(got, expected, fn, case, "the prediction", mistakes=[
            ((s >= 0).astype(np.int64),
             "a weighted sum of exactly 0 should give class 0: the step is 1 only where "
             "x @ w + b > 0 (strictly), as in dl.Perceptron."),
            (np.sign(s),
             "np.sign gives -1, 0 or +1; this perceptron's classes are 0 and 1: the step is 1 "
             "where the sum is strictly positive (s > 0) and 0 elsewhere."),
            (np.where(s > 0, 1, -1),
             "you returned -1/+1; this perceptron's classes are 0 and 1 (0 where the sum is "
             "not positive)."),
            (s, "you returned the weighted sums themselves: apply the step, 1 where s > 0 else 0."),
            ((X @ w > 0).astype(np.int64),
             "you forgot the bias: it is added to every weighted sum."),
            ((X @ w - b > 0).astype(np.int64),
             "the bias has the wrong sign: it is added to the weighted sum, not X @ w - b."),
        ])
        if got.dtype.kind not in "iu":
            kind = "booleans (True/False)" if got.dtype == bool else f"{got.dtype} numbers"
            fail(fn, case, f"the labels are right but they are {kind}; the classes are the "
                           f"integers 0 and 1.",
                 "convert the comparison's booleans to integers (an integer dtype such as "
                 "int64).")
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
        ("w = [2, -1], b = 0.5, x = [1, 1], y = 0: predicted 1 (sum 1.5), a mistake with "
         "lr = 0.3 (the learning rate scales the bias's step too)",
         np.array([2.0, -1.0]), 0.5, np.array([1.0, 1.0]), 0, 0.3),
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
            w_mistakes.append((w + lr * y * x, "the rule moves w only on a mistake: the step "
                               "should scale with the error (the label minus the prediction), "
                               "which is 0 when the prediction is right."))
        w_mistakes += [
            (w - step * x, "w moved the wrong way: the error is the label minus the prediction, "
                           "not the prediction minus the label."),
            (w + (y - y_hat) * x, "lr was ignored: the step is the error scaled by the learning "
                                  "rate."),
            (w + step_ge * x, at_zero),
        ]
        if not right:
            w_mistakes.append((w, f"w did not change, but this sample is misclassified (predicted "
                                  f"{y_hat}, label {y}): the step (learning rate times error) is "
                                  f"{step:g}, not 0, so adding the step times x moves w "
                                  f"{'towards' if step > 0 else 'away from'} x."))
        expect_close(w_got, w_exp, fn, case, "the new w", rtol=1e-12, atol=1e-12,
                     mistakes=w_mistakes,
                     fix=("nothing should change when the prediction is right." if right else None))
        expect_close(b_got, b_exp, fn, case, "the new b", rtol=1e-12, atol=1e-12, mistakes=[
            (np.asarray(b), "b did not change: the bias learns too, by the same step as w "
                            "(without the factor x)."),
            (np.asarray(b - step), "b moved the wrong way: add the step (learning rate times "
                                   "the label minus the prediction), do not subtract it."),
            (np.asarray(b + (y - y_hat)), "lr was ignored in the bias update."),
            (np.asarray(b + step_ge), at_zero),
        ])
        # (w may be updated in place, w += ..., as the rule is written; x must stay as it was)
        expect_unchanged(fn, case, [("x", x, x_given)])
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'time_it': [
        ('three parts: the warm-up (calls that are not timed), one wait for the device before '
         'the first reading of the clock, then repeat timed calls; each timed call reads the '
         'clock, calls f, waits for the device, reads the clock again'),
        ('pseudo-code: call f ___ times; wait for the device; times = an empty list; repeat '
         '___ times: t0 = the time; call f; wait for the device; append (the time now minus '
         't0); return the ___ of times, as a float, in seconds. The three rules of section 3 '
         'are the whole exercise'),
    ],
    'normalize_rows': [
        ('sum the squares along the feature axis and keep that axis (keepdims), so the lengths '
         'broadcast against x (N, D)'),
        ('pseudo-code: lengths = square root of ( sum over axis ___ of x squared, keeping the axis '
         '), shape (N, 1); out = x divided by ___. The exercise text of section 5 defines the '
         "length; section 2 shows where xp (the array's own module) comes from"),
    ],
    'perceptron_predict': [
        ('one matrix-vector product gives all N sums at once; a comparison gives booleans, which '
         'you then convert to integers'),
        ('pseudo-code: s = (X times w) plus ___, shape (N,); labels = (s ___ 0) as integers. '
         'The first equation of section 1 is the rule; is a sum of exactly 0 class 0 or 1?'),
    ],
    'perceptron_update': [
        'the error is the label minus the prediction: what is it when the prediction is right?',
        ('pseudo-code: step = learning rate times ( ___ minus ___ ); new w = w plus step times '
         '___; new b = b plus ___. The update equations of section 3 say which is which'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'time_it': ['np.median', 'statistics.median', 'sorted(times)', 'perf_counter()'],
    'normalize_rows': ['keepdims=True', 'np.linalg.norm', 'xp.sqrt(', 'axis=1', 'axis=-1'],
    'perceptron_predict': ['X @ w', 'X.dot(w)', 'astype(', '> 0', '(s > 0)'],
    'perceptron_update': ['lr * (y - y_hat)', '(y - y_hat) * x', 'w + lr'],
}
