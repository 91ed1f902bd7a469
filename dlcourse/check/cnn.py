"""Checks for lessons 04-07: the MLP on digits, GPU batching, convolution, training a CNN.

Each check takes *your* function, runs it on several small cases, compares it with the
library's reference (``dlcourse/optim.py``, ``conv.py``, ``layers.py``) and either prints
one line saying that every case passes, or raises :class:`ExerciseError` naming the case,
the problem and, for the common mistakes, the likely fix::

    dl.check.conv2d_naive(conv2d_naive)

=====================  ===============================  =========================================
lesson                 check                            your function
=====================  ===============================  =========================================
04_mlp_on_digits       :func:`iterate_minibatches`      ``(X, y, batch_size, shuffle, seed)``
04_mlp_on_digits       :func:`accuracy`                 ``(logits, y) -> float``
04_mlp_on_digits       :func:`sgd_momentum_step`        ``(params, grads, velocity, lr, momentum)``
04b_initialization     :func:`init_std`                 ``(fan_in, fan_out, scheme) -> float``
05_gpu_batching        :func:`mlp_forward_batched`      ``(X, W1, b1, W2, b2) -> logits``
06_convolution         :func:`conv_output_size`         ``(H, K, stride, padding) -> int``
06_convolution         :func:`conv2d_naive`             ``(x, W, b, stride, padding) -> out``
06_convolution         :func:`im2col_simple`            ``(x, KH, KW) -> cols``
06_convolution         :func:`conv2d_backward`          ``(dout, x, W, stride, padding)``
06_convolution         :func:`maxpool_backward`         ``(dout, x, K, stride) -> dx``
07_training_a_cnn      :func:`conv_params`              ``(in_channels, out_channels, K) -> int``
07_training_a_cnn      :func:`batchnorm_forward`        ``(x, gamma, beta, eps) -> out``
=====================  ===============================  =========================================

The shared machinery (``call``, ``fail``, ``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .. import backend
from .harness import (call, expect_close, expect_shape, expect_tuple, expect_unchanged,
                     fail, passed, rng, to_array, to_number)

__all__ = [
    "iterate_minibatches", "accuracy", "sgd_momentum_step", "dropout_forward", "dropout_backward",
    "init_std", "mlp_forward_batched",
    "conv_output_size", "conv2d_naive", "im2col_simple", "conv2d_backward", "maxpool_backward",
    "conv_params", "batchnorm_forward", "batchnorm_backward",
]


# ======================================================================================
# 04_mlp_on_digits
# ======================================================================================
def iterate_minibatches(fn) -> None:
    """Check ``fn(X, y, batch_size, shuffle=True, seed=None)``, which yields (or returns a
    list of) mini-batches ``(xb, yb)``: ``xb`` (B, D), ``yb`` (B,).

    In one call every sample must appear exactly once, ``xb`` and ``yb`` must stay paired,
    batches are ``batch_size`` long except possibly the last, ``shuffle=False`` keeps the
    order, ``shuffle=True`` changes it, and the same ``seed`` gives the same order. Each call
    gets copies of X and y, which must come back unchanged (shuffle an index array, not the
    data).

    Any permutation made from the seed passes: the lesson says another correct shuffle than
    ``default_rng(seed).permutation(N)`` is equally good, so the order itself is not compared.
    """
    __tracebackhide__ = True
    N = 50
    # Row i of X is (i, 1000 + i) and y[i] = i: every row names its sample.
    X = np.stack([np.arange(N), 1000 + np.arange(N)], axis=1).astype(np.float32)   # (N, 2)
    y = np.arange(N)

    def epoch(B, shuffle, seed):
        __tracebackhide__ = True
        case = f"X of shape {X.shape}, batch_size={B}, shuffle={shuffle}, seed={seed}"
        X_given, y_given = X.copy(), y.copy()     # the check's own X and y stay as they are
        out = call(fn, X_given, y_given, B, shuffle=shuffle, seed=seed, case=case)
        if out is None:
            fail(fn, case, "it returned None.", "`yield xb, yb` inside the loop (or return a list "
                 "of (xb, yb) pairs).")
        try:
            items = list(out)
        except TypeError:
            fail(fn, case, f"it returned a {type(out).__name__}, not a sequence of batches.",
                 "`yield xb, yb` inside the loop.")
        pairs = []
        for k, item in enumerate(items):
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                fail(fn, case, f"batch {k} is a {type(item).__name__}, not a pair (xb, yb).",
                     "`yield xb, yb`.")
            pairs.append((to_array(item[0], fn, case, f"xb of batch {k}"),
                          to_array(item[1], fn, case, f"yb of batch {k}")))
        shuffled_in_place = ("shuffle an index array, not the data: order = "
                             "np.random.default_rng(seed).permutation(N); idx = "
                             "order[start:start + batch_size]; yield X[idx], y[idx]. "
                             "(rng.shuffle(X) reorders the caller's own arrays.)")
        expect_unchanged(fn, case, [("X", X, X_given), ("y", y, y_given)], shuffled_in_place)
        sizes = [B] * (N // B) + ([N % B] if N % B else [])
        got_sizes = [len(yb) for _, yb in pairs]
        if got_sizes != sizes:
            fix = None
            if sum(got_sizes) < N and got_sizes == sizes[:len(got_sizes)]:
                fix = ("the last, smaller batch is missing: range(0, N, batch_size) gives every "
                       "start, and X[start:start + batch_size] stops at N by itself.")
            elif sum(got_sizes) > N:
                fix = "there are more samples than in X: do the batches overlap?"
            fail(fn, case, f"the batch sizes are {got_sizes}; expected {sizes}.", fix)
        for k, (xb, yb) in enumerate(pairs):
            expect_shape(xb, (len(yb), 2), fn, case, f"xb of batch {k}",
                         "xb holds whole rows of X: X[idx] with idx the batch's indices.")
            if not np.array_equal(xb[:, 0].astype(np.int64), yb.astype(np.int64)):
                fail(fn, case, f"in batch {k} the rows of xb and the labels in yb no longer belong "
                               f"together: xb holds samples {xb[:5, 0].astype(int).tolist()}..., "
                               f"yb the labels of {yb[:5].astype(int).tolist()}....",
                     "index X and y with the SAME indices: idx = order[start:start + batch_size]; "
                     "yield X[idx], y[idx].")
        order = np.concatenate([yb for _, yb in pairs]).astype(np.int64)
        seen = np.sort(order)
        if not np.array_equal(seen, np.arange(N)):
            twice = np.unique(seen[1:][seen[1:] == seen[:-1]]).tolist()
            fail(fn, case, f"every sample must appear exactly once, but samples {twice[:8]} appear "
                           f"more than once (and others not at all).",
                 "shuffle with one permutation of range(N) (rng.permutation(N)), not with "
                 "independent random indices.")
        return order, case

    checks = 0
    for B in (16, 10, 64):
        order, case = epoch(B, False, None)
        if not np.array_equal(order, np.arange(N)):
            fail(fn, case, f"with shuffle=False the samples came as {order[:8].tolist()}...",
                 "without shuffling, keep the order 0, 1, 2, ...")
        checks += 1
    first, case = epoch(16, True, 0)
    if np.array_equal(first, np.arange(N)):
        fail(fn, case, "with shuffle=True the samples still came in order 0, 1, 2, ....",
             "visit them in a random order: order = np.random.default_rng(seed).permutation(N).")
    again, _ = epoch(16, True, 0)
    if not np.array_equal(first, again):
        fail(fn, case, f"two calls with seed=0 gave different orders ({first[:6].tolist()}... and "
                       f"{again[:6].tolist()}...).",
             "make the generator from the seed: np.random.default_rng(seed).")
    other, case1 = epoch(16, True, 1)
    if np.array_equal(first, other):
        fail(fn, case1, "seed=0 and seed=1 gave the same order.",
             "pass the seed to the generator: np.random.default_rng(seed).")
    checks += 3
    passed(fn, checks)


def accuracy(fn) -> None:
    """Check ``fn(logits, y)``: the fraction (a float in [0, 1]) of rows of ``logits``
    (N, K) whose largest entry is at the class index ``y`` (N,) names."""
    __tracebackhide__ = True
    r = rng(4)
    cases = [(np.array([[2.0, 1.0, 0.1], [0.1, 0.2, 3.0], [1.0, 5.0, 0.0], [0.3, 0.2, 0.1]]),
              np.array([0, 2, 0, 0]))]
    for N, K in ((10, 10), (7, 3), (1, 5)):
        lg = r.standard_normal((N, K))
        yy = r.integers(0, K, N)
        yy[: N // 2] = lg[: N // 2].argmax(axis=1)   # about half of them right
        cases.append((lg, yy))
    square = r.standard_normal((4, 4))
    cases.append((square, np.array([0, 1, 2, 3])))
    for lg, yy in cases:
        N, K = lg.shape
        case = f"logits of shape ({N}, {K}), y = {yy.tolist()}"
        expected = float((lg.argmax(axis=1) == yy).mean())
        logits_given, y_given = lg.astype(np.float32), yy.copy()
        got = to_number(call(fn, logits_given, y_given, case=case,
                             on_error="the classes are along axis 1: logits.argmax(axis=1) gives "
                                      "one prediction per row, shape (N,), to compare with y."),
                        fn, case, "the accuracy",
                        "take the mean over the batch: (predictions == y).mean().")
        expect_unchanged(fn, case, [("logits", lg.astype(np.float32), logits_given),
                                    ("y", yy, y_given)])
        if np.isclose(got, expected):
            continue
        n_right = int(round(expected * N))
        fix = None
        if np.isclose(got, n_right):
            fix = "that is the COUNT of right answers: divide by N (or take .mean()) for the fraction."
        elif N == K and np.isclose(got, float((lg.argmax(axis=0) == yy).mean())):
            fix = "the classes are along axis 1: logits.argmax(axis=1)."
        fail(fn, case, f"the accuracy is {got:.4f}; expected {expected:.4f} ({n_right} of {N} right).",
             fix)
    passed(fn, len(cases))


def sgd_momentum_step(fn) -> None:
    """Check ``fn(params, grads, velocity, lr, momentum)``, which updates ``params`` and
    ``velocity`` (dicts of arrays with the same keys) **in place**, as ``dl.SGD`` does::

        v = momentum * v + g;   p -= lr * v

    Three steps from the same start are compared with that rule. The function gets a copy of
    each step's ``grads``, so an update that reuses the gradient's memory (``g += ...``) is
    fine, as long as ``params`` and ``velocity`` come out right.
    """
    __tracebackhide__ = True
    r = rng(5)
    shapes = {"W": (4, 3), "b": (3,)}
    start = {k: r.standard_normal(s) for k, s in shapes.items()}
    grads_seq = [{k: r.standard_normal(s) for k, s in shapes.items()} for _ in range(3)]
    checks = 0
    for lr, momentum in ((0.1, 0.9), (0.5, 0.0), (0.01, 0.5)):
        params = {k: v.copy() for k, v in start.items()}
        originals = dict(params)                      # the arrays a model would hold
        velocity = {k: np.zeros_like(v) for k, v in start.items()}
        ref_p = {k: v.copy() for k, v in start.items()}
        ref_v = {k: np.zeros_like(v) for k, v in start.items()}
        plain = {k: v.copy() for k, v in start.items()}
        ema_p = {k: v.copy() for k, v in start.items()}
        ema_v = {k: np.zeros_like(v) for k, v in start.items()}
        for t, grads in enumerate(grads_seq, start=1):
            case = f"lr={lr}, momentum={momentum}, step {t} of 3 (velocity starts at zero)"
            # a copy: the reference below, and the next settings, use the untouched gradients
            call(fn, params, {k: g.copy() for k, g in grads.items()}, velocity, lr, momentum,
                 case=case)
            for k in shapes:
                ref_v[k] = momentum * ref_v[k] + grads[k]
                ref_p[k] = ref_p[k] - lr * ref_v[k]
                plain[k] = plain[k] - lr * grads[k]
                ema_v[k] = momentum * ema_v[k] + (1 - momentum) * grads[k]
                ema_p[k] = ema_p[k] - lr * ema_v[k]
            for k in shapes:
                if params[k] is not originals[k]:
                    fail(fn, case, f"params[{k!r}] is now a NEW array. A model keeps its own "
                                   f"reference to the old one and would never see the update.",
                         f"update in place: params[{k!r}] -= lr * velocity[{k!r}] "
                         f"(not params[{k!r}] = params[{k!r}] - ...).")
                expect_close(to_array(params[k], fn, case, f"params[{k!r}]"), ref_p[k], fn, case,
                             f"params[{k!r}] after the step", mistakes=[
                                 (start[k], "the parameters did not change at all."),
                                 (plain[k], "that is plain SGD (p -= lr * g): the velocity must "
                                            "carry the past steps, v = momentum * v + g; p -= lr * v."),
                                 (ema_p[k], "you averaged, v = momentum * v + (1 - momentum) * g; "
                                            "dl.SGD (like PyTorch) does not scale g: v = momentum * v + g."),
                             ])
            for k in shapes:
                v_got = to_array(velocity[k], fn, case, f"velocity[{k!r}]")
                if v_got.shape == ref_v[k].shape and np.allclose(v_got, -lr * ref_v[k]):
                    continue   # v = momentum*v - lr*g; p += v: the same parameters (the lesson)
                expect_close(v_got, ref_v[k], fn, case,
                             f"velocity[{k!r}] (the parameters are right)", mistakes=[
                                 (np.zeros_like(ref_v[k]),
                                  f"velocity[{k!r}] is still zero, so the next step cannot use it "
                                  f"(that is plain SGD): store v = momentum * v + g in velocity[{k!r}]."),
                             ], fix=f"store v = momentum * v + g in velocity[{k!r}].")
        checks += 1
    passed(fn, checks)


def dropout_forward(fn) -> None:
    """Check ``fn(x, p, rng)`` -> ``(out, mask)``, inverted dropout in training mode: each entry
    is kept with probability ``1 - p`` (``p`` is the probability to DROP) and scaled by
    ``1 / (1 - p)``, so that the output's expected value is ``x``; ``mask`` holds 0 or
    ``1 / (1 - p)`` and ``out = x * mask``. Any random draw from ``rng`` passes: the check
    looks at what the mask holds and at how many entries it keeps, not at which."""
    __tracebackhide__ = True
    cases = [((400, 50), 0.5), ((200, 100), 0.2), ((100, 100), 0.8), ((10, 7), 0.0)]
    for shape, p in cases:
        case = f"x of shape {shape}, all ones, p={p}"
        x = np.ones(shape)
        x_given = x.copy()
        out = expect_tuple(call(fn, x_given, p, np.random.default_rng(0), case=case),
                           2, fn, case, "out, mask")
        got, mask = (to_array(a, fn, case, n) for a, n in zip(out, ("out", "mask")))
        expect_shape(got, shape, fn, case, "out", "out has x's shape.")
        expect_shape(mask, shape, fn, case, "mask", "one mask entry per entry of x.")
        expect_unchanged(fn, case, [("x", x, x_given)])
        kept = float((mask != 0).mean())
        scale = 1.0 / (1.0 - p)
        values = np.unique(np.round(mask[mask != 0], 9))
        if p > 0 and abs(kept - p) < 0.05 and abs(kept - (1 - p)) > 0.1:
            fail(fn, case, f"the mask keeps {kept:.0%} of the entries; with p={p} it should keep "
                           f"about {1 - p:.0%}.",
                 "p is the probability to DROP an entry: keep it where the uniform number is >= p "
                 "(or < 1 - p).")
        if abs(kept - (1 - p)) > 0.05:
            fail(fn, case, f"the mask keeps {kept:.0%} of the entries; expected about {1 - p:.0%}.",
                 "draw one uniform number per entry (rng.random(x.shape)) and keep where it is >= p.")
        if values.size and np.allclose(values, 1.0) and p > 0:
            fail(fn, case, "the kept entries are not scaled: the mask holds 0 and 1.",
                 f"divide the mask by (1 - p) = {1 - p}, so that the expected value of the output "
                 f"is x itself and nothing has to change at test time (that is what makes the "
                 f"dropout 'inverted').")
        if values.size and np.allclose(values, 1 - p) and p > 0:
            fail(fn, case, f"the kept entries are scaled by (1 - p) = {1 - p}; they must be "
                           f"scaled UP, by 1 / (1 - p) = {scale:.4g}.",
                 "divide by (1 - p), don't multiply: the survivors stand in for the dropped ones.")
        if not (values.size == 1 and np.isclose(values[0], scale)):
            fail(fn, case, f"the mask's nonzero values are {values[:5].tolist()}; expected only "
                           f"1 / (1 - p) = {scale:.4g}.",
                 "mask = (rng.random(x.shape) >= p) / (1 - p).")
        expect_close(got, x * mask, fn, case, "out", fix="out = x * mask.")
    passed(fn, len(cases))


def dropout_backward(fn) -> None:
    """Check ``fn(dout, mask)`` -> ``dx``: the forward multiplied x by the (scaled) mask, so
    ``dx = dout * mask``."""
    __tracebackhide__ = True
    r = rng(12)
    cases = []
    for shape, p in (((4, 5), 0.5), ((3, 6), 0.25), ((2, 3, 4), 0.8)):
        mask = (r.random(shape) >= p) / (1 - p)
        cases.append((f"dout of shape {shape}, a mask with p={p}", r.standard_normal(shape), mask, p))
    for case, dout, mask, p in cases:
        given = {"dout": dout.copy(), "mask": mask.copy()}
        got = to_array(call(fn, given["dout"], given["mask"], case=case), fn, case, "dx")
        expect_shape(got, dout.shape, fn, case, "dx", "dx has dout's shape.")
        expect_close(got, dout * mask, fn, case, "dx", mistakes=[
            (dout, "dout passed through everywhere: the dropped entries had no effect on the "
                   "output, so their gradient is 0; multiply by the mask."),
            (dout * (mask != 0), "the kept entries were multiplied by 1 / (1 - p) in the forward "
                                 "pass, so their gradient is too: dx = dout * mask (the scaled "
                                 "mask), not dout * (mask != 0)."),
            (dout * (mask != 0) * (1 - p), "scale by 1 / (1 - p), as the forward did, not by "
                                           "(1 - p): dx = dout * mask."),
        ])
        expect_unchanged(fn, case, [("dout", dout, given["dout"]), ("mask", mask, given["mask"])])
    passed(fn, len(cases))


# ======================================================================================
# 04b_initialization
# ======================================================================================
def _init_std_mistakes(fan_in, fan_out, scheme):
    """(a wrong std, what it is) for the usual mistakes; the first match names the fix."""
    __tracebackhide__ = True
    he = scheme == "he"
    fans = fan_in if he else (fan_in + fan_out) / 2
    return [
        (2.0 / fan_in if he else 2.0 / (fan_in + fan_out),
         "that is the VARIANCE; the weights are drawn with a standard deviation, its square root."),
        (np.sqrt(2.0 / fan_out), "that uses fan_out, the layer's outputs; He's argument keeps the "
                                 "forward signal steady, and each output sums fan_in products."
         if he else "Xavier averages the two fans: it uses fan_in AND fan_out."),
        (np.sqrt(1.0 / fan_in), "that is LeCun's 1 / fan_in, right for a linear or tanh layer; "
                                "ReLU zeroes half of its input, which halves E[x²]: He doubles "
                                "the variance to make up for it." if he else
         "that keeps only the forward signal steady; Xavier averages fan_in and fan_out."),
        (np.sqrt(6.0 / (fan_in + fan_out)), "that is the bound a of Glorot's UNIFORM(-a, a) "
                                            "distribution (its variance is a² / 3), not the "
                                            "standard deviation of a normal."),
        (1.0 / fans, "the variance is 1 / (the fans' average) here but the std is its square "
                     "root." if not he else "the standard deviation is a square root."),
    ]


def init_std(fn) -> None:
    """Check ``fn(fan_in, fan_out, scheme)`` -> the standard deviation of the normal
    distribution a ``Linear(fan_in, fan_out)`` layer's weights are drawn from, for ``scheme``
    ``"he"`` (keeps the signal's size through ReLU layers) or ``"xavier"`` (the compromise
    between the forward and the backward signal, for tanh or sigmoid). Layers with
    fan_in != fan_out tell which fan was used; the reference value is never printed."""
    __tracebackhide__ = True
    cases = [(256, 256, "he"), (40, 256, "he"), (256, 10, "he"),
             (256, 256, "xavier"), (40, 256, "xavier"), (300, 100, "xavier")]
    for fan_in, fan_out, scheme in cases:
        case = f"init_std({fan_in}, {fan_out}, {scheme!r})"
        got = to_number(call(fn, fan_in, fan_out, scheme, case=case), fn, case, "the std",
                        "return one positive number, the standard deviation.")
        expected = (np.sqrt(2.0 / fan_in) if scheme == "he"
                    else np.sqrt(2.0 / (fan_in + fan_out)))
        if np.isclose(got, expected, rtol=1e-6, atol=0):
            continue
        fix = next((why for wrong, why in _init_std_mistakes(fan_in, fan_out, scheme)
                    if np.isclose(got, wrong, rtol=1e-6, atol=0)),
                   "redo the variance argument: each output sums fan_in products w·x, so "
                   "Var(out) = fan_in · Var(w) · E[x²]; choose Var(w) to keep that steady, "
                   "then take the square root.")
        fail(fn, case, f"it returned {got:.6g}, which is not the standard deviation that keeps "
                       f"the signal's size steady for a {scheme!r} layer with fan_in={fan_in} "
                       f"and fan_out={fan_out}.", fix)
    passed(fn, len(cases))


# ======================================================================================
# 05_gpu_batching
# ======================================================================================
class _Spy(np.ndarray):
    """An input array that records how the learner's function uses it.

    Each spy has a ``role`` (``"X"``, ``"W1"``, ...), passed on to its views (``X.T``,
    ``X.reshape(...)``, ``X[i]``). What it records goes to the shared :class:`_SpyLog`:
    every indexing of X (whatever the index: ``X[i]``, ``X[i, :]``, ``X[i:i + 1]``),
    ``X.take``, ``X.tolist()``, ``for x in X``, NumPy functions that hand out rows
    (``np.apply_along_axis``, ``np.split``), and how many operations each weight array takes
    part in. A per-sample loop shows up as N of something; a batched forward pass indexes X
    at most once or twice and uses each weight once. Results of arithmetic (``X @ W1``, ...)
    come back as plain arrays, so only the inputs themselves are watched.
    """

    role = None
    log = None          # the _SpyLog of the case being run

    def __array_finalize__(self, obj):
        __tracebackhide__ = True
        self.role = getattr(obj, "role", None)

    def __getitem__(self, index):
        __tracebackhide__ = True
        if self.role == "X":
            _Spy.log.took(_index_text(index))
        return super().__getitem__(index)

    def __iter__(self):
        __tracebackhide__ = True
        if self.role == "X":
            _Spy.log.iterated = True
        return iter(self.view(np.ndarray))   # plain rows: the loop is recorded once, here

    def __repr__(self):                      # print(X) while debugging is not a loop
        __tracebackhide__ = True
        return repr(self.view(np.ndarray))

    def __str__(self):
        __tracebackhide__ = True
        return str(self.view(np.ndarray))

    def tolist(self):
        __tracebackhide__ = True
        if self.role == "X":
            _Spy.log.tolist = True
        return super().tolist()

    def take(self, indices, *args, **kwargs):
        __tracebackhide__ = True
        if self.role == "X":
            _Spy.log.took(f"X.take({indices!r:.20})")
        return super().take(indices, *args, **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        __tracebackhide__ = True
        _Spy.log.used(inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_plain(o) for o in kwargs["out"])
        return getattr(ufunc, method)(*(_plain(a) for a in inputs), **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        __tracebackhide__ = True
        name = func.__name__
        if name == "take" and args and getattr(args[0], "role", None) == "X":
            indices = args[1] if len(args) > 1 else kwargs.get("indices")
            _Spy.log.took(f"np.take(X, {indices!r:.20})")
        elif name in _ROW_FUNCTIONS and any(getattr(a, "role", None) == "X"
                                            for a in (*args, *kwargs.values())):
            _Spy.log.functions.append(name)
        _Spy.log.used([*args, *kwargs.values()])
        return func(*_plain(args), **_plain(kwargs))


# NumPy functions that hand the batch out in rows (a loop in disguise)
_ROW_FUNCTIONS = {"apply_along_axis", "split", "array_split", "vsplit", "unstack"}


def _plain(value):
    """``value`` with every spy (also inside lists, tuples and dicts) as a plain ndarray."""
    __tracebackhide__ = True
    if isinstance(value, _Spy):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _index_text(index) -> str:
    """``X[...]`` as the learner wrote it, roughly: ``X[3, :]``, ``X[3:4]``, ``X[[...]]``."""
    __tracebackhide__ = True
    def one(i):
        __tracebackhide__ = True
        if isinstance(i, slice):
            ends = ["" if e is None else str(e) for e in (i.start, i.stop)]
            return ":".join(ends + ([] if i.step is None else [str(i.step)]))
        if i is Ellipsis:
            return "..."
        if isinstance(i, (int, np.integer)) or i is None:
            return str(i)
        return "[...]"
    parts = index if isinstance(index, tuple) else (index,)
    return "X[" + ", ".join(one(i) for i in parts) + "]"


class _SpyLog:
    """What one call of the learner's function did with its spied inputs."""

    def __init__(self):
        __tracebackhide__ = True
        self.indexed = []        # "X[0, :]", "np.take(X, 1)", ..., in order
        self.iterated = self.tolist = False
        self.functions = []      # the _ROW_FUNCTIONS called on X
        self.uses = {}           # role -> number of operations it took part in

    def took(self, text):
        __tracebackhide__ = True
        self.indexed.append(text)

    def used(self, arrays):
        __tracebackhide__ = True
        for role in {getattr(a, "role", None) for a in arrays} - {None, "X"}:
            self.uses[role] = self.uses.get(role, 0) + 1

    def loops(self) -> list[str]:
        """How the function took the batch apart, in words (empty: it did not)."""
        __tracebackhide__ = True
        found = []
        if self.iterated:
            found.append("it loops over the samples (`for x in X`)")
        if self.tolist:
            found.append("it turns X into Python lists, one per sample (X.tolist())")
        found += [f"np.{name} hands it X one row at a time" for name in dict.fromkeys(self.functions)]
        if len(self.indexed) >= 3:   # a batched forward pass indexes X once or twice at most
            found.append(f"it takes X apart row by row: X is indexed {len(self.indexed)} times "
                         f"({', '.join(self.indexed[:2])}, ...)")
        busy = [(role, n) for role, n in self.uses.items() if n >= 3]
        if busy and not found:       # X @ W1 + b1 uses W1 and b1 once each
            (role, n), rest = busy[0], "".join(f", {r} in {k}" for r, k in busy[1:])
            found.append(f"{role} takes part in {n} separate operations{rest}: the forward pass "
                         f"runs in a loop, once per sample (or per unit)")
        return found


def mlp_forward_batched(fn) -> None:
    """Check ``fn(X, W1, b1, W2, b2)``: the logits ``relu(X @ W1 + b1) @ W2 + b2`` of a
    two-layer MLP for a whole batch X (N, D) at once, with W1 (D, H), b1 (H,), W2 (H, K),
    b2 (K,); returns (N, K). It must give the per-sample loop's numbers without looping
    over the samples. Where a GPU is usable, one more case runs on CuPy arrays and the
    result must stay on the GPU."""
    __tracebackhide__ = True
    r = rng(6)
    sizes = [(1, 4, 5, 3), (7, 4, 5, 3), (64, 64, 32, 10)]
    for N, D, H, K in sizes:
        case = f"X of shape ({N}, {D}), W1 ({D}, {H}), W2 ({H}, {K})"
        X = r.standard_normal((N, D))
        W1, b1 = r.standard_normal((D, H)), r.standard_normal(H)
        W2, b2 = r.standard_normal((H, K)), r.standard_normal(K)
        hidden = X @ W1 + b1
        expected = np.maximum(hidden, 0) @ W2 + b2
        _Spy.log = log = _SpyLog()
        originals = {"X": X.copy(), "W1": W1.copy(), "b1": b1.copy(), "W2": W2.copy(),
                     "b2": b2.copy()}
        spies = []
        for role, a in (("X", X), ("W1", W1), ("b1", b1), ("W2", W2), ("b2", b2)):
            spies.append(a.view(_Spy))
            spies[-1].role = role
        out = call(fn, *spies, case=case)
        loops = log.loops()
        got = to_array(out, fn, case, "the result")
        expect_shape(got, (N, K), fn, case, "the array of logits",
                     "one row of logits per sample: (N, D) @ (D, H) @ (H, K) gives (N, K).")
        expect_close(got, expected, fn, case, "the array of logits", mistakes=[
            (hidden @ W2 + b2, "the ReLU is missing: np.maximum(X @ W1 + b1, 0)."),
            (np.maximum(X @ W1, 0) @ W2 + b2, "b1 is missing."),
            (np.maximum(hidden, 0) @ W2, "b2 is missing."),
            (np.maximum(hidden @ W2 + b2, 0), "the ReLU belongs after the first layer only: "
                                              "the logits are not clipped."),
        ])
        if loops and N > 1:
            fail(fn, case, "the numbers are right, but the function does not compute the batch "
                           "at once: " + "; ".join(loops) + ".",
                 "write it for the whole batch, with no loop: X @ W1 + b1 multiplies every row "
                 "of X at once (b1 broadcasts over the rows), then np.maximum(..., 0) @ W2 + b2.")
        if got.dtype != np.float64:
            fail(fn, case, f"the logits are {got.dtype}, but X and the weights are float64.",
                 "do not cast the result (.astype(np.float32)): float64 in gives float64 out, "
                 "and the operators (@, +, xp.maximum) already keep the inputs' dtype.")
        expect_unchanged(fn, case, [(spy.role, originals[spy.role], spy.view(np.ndarray))
                                    for spy in spies])
    on_gpu = backend.gpu_available()
    if on_gpu:   # the same code on CuPy arrays: the result must stay on the GPU
        cp = backend.require_cupy()
        N, D, H, K = 32, 16, 8, 4
        case = f"CuPy arrays on the GPU, X of shape ({N}, {D})"
        arrays = [r.standard_normal(s) for s in ((N, D), (D, H), (H,), (H, K), (K,))]
        out = call(fn, *[cp.asarray(a) for a in arrays], case=case)
        if backend.device_of(out) != "gpu":
            fail(fn, case, "the logits came back as a NumPy array for CuPy (GPU) inputs.",
                 "use operators (@, +) or xp = dl.get_array_module(X); xp.maximum(...), "
                 "not np.maximum, so the result stays where X lives.")
        X, W1, b1, W2, b2 = arrays
        expect_close(to_array(out, fn, case, "the logits"), np.maximum(X @ W1 + b1, 0) @ W2 + b2,
                     fn, case, "the logits")
    passed(fn, len(sizes) + on_gpu, on_gpu)


# ======================================================================================
# 06_convolution
# ======================================================================================
def conv_output_size(fn) -> None:
    """Check ``fn(H, K, stride=1, padding=0)``: how many positions a K-wide window takes
    when slid with ``stride`` over H pixels padded by ``padding`` on each side,
    ``(H + 2 * padding - K) // stride + 1`` (an int)."""
    __tracebackhide__ = True
    cases = [(8, 3, 1, 0), (8, 3, 1, 1), (28, 5, 1, 2), (7, 3, 2, 0), (32, 3, 2, 1),
             (5, 2, 2, 0), (6, 3, 3, 0), (4, 4, 1, 0)]
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
            (H + p - K) // s + 1: "the padding goes on BOTH sides: H + 2 * padding.",
            (H - K) // s + 1: "the padding is missing: the padded input has H + 2 * padding pixels.",
            (H + 2 * p - K) + 1: "the stride is missing: divide the free space by the stride.",
            -(-(H + 2 * p - K) // s) + 1: "round DOWN (//): a window past the edge does not count.",
        }
        fail(fn, case, f"it returned {int(value)}; expected ({H} + 2*{p} - {K}) // {s} + 1 = {expected}.",
             known.get(int(value)))
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
                     f"(N, F, OH, OW) with OH = ({H} + 2*{p} - {KH}) // {s} + 1 = {expected.shape[2]} "
                     f"and OW = ({Wd} + 2*{p} - {KW}) // {s} + 1 = {expected.shape[3]}.")
        expect_close(got, expected, fn, case, "the output", mistakes=[
            (lambda: ref(x, W[:, :, ::-1, ::-1], b, s, p),
             "you flipped the kernel (the mathematician's convolution). Deep learning's "
             "'convolution' is cross-correlation: multiply each window by W[f] as it is."),
            (lambda: ref(x, W, 0 * b, s, p), "the bias b[f] is missing."),
            (lambda: ref(x, W, b * (C * KH * KW), s, p),
             "b[f] was added to every product: add it once, after the sum."),
            (lambda: ref(x[:, :1], W[:, :1], b, s, p),
             "only channel 0 is used: the window is x_pad[n, :, ...], all channels."),
        ], fix="compare your loops with out[n, f, i, j] = (x_pad[n, :, i*stride:i*stride+KH, "
               "j*stride:j*stride+KW] * W[f]).sum() + b[f].")
        expect_unchanged(fn, case, [(k, ref_, given[k]) for k, ref_ in (("x", x), ("W", W), ("b", b))])
    passed(fn, len(cases))


def im2col_simple(fn) -> None:
    """Check ``fn(x, KH, KW)`` (stride 1, no padding): x (N, C, H, W) unfolded into
    cols (N*OH*OW, C*KH*KW), one row per window, in the order of ``dl.im2col``:
    rows run over n, then i, then j; columns over c, then kh, then kw (the order of
    ``W[f].reshape(-1)``)."""
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
        got = to_array(call(fn, x_given, KH, KW, case=case), fn, case, "cols")
        expect_unchanged(fn, case, [("x", x, x_given)])
        if got.shape == expected.shape[::-1] != expected.shape:
            fail(fn, case, f"cols has shape {got.shape}: that is the transpose of the expected "
                           f"{expected.shape}.",
                 f"one ROW per window: (N*OH*OW, C*KH*KW) = ({N}*{OH}*{OW}, {C}*{KH}*{KW}).")
        expect_shape(got, expected.shape, fn, case, "cols",
                     f"one row per window: (N*OH*OW, C*KH*KW) = ({N}*{OH}*{OW}, {C}*{KH}*{KW}).")
        if np.array_equal(got, expected):
            continue
        fix = "row (n*OH + i)*OW + j must be x[n, :, i:i+KH, j:j+KW].reshape(-1)."
        if np.array_equal(np.sort(got, axis=1), np.sort(expected, axis=1)):
            fix = ("each row holds the right pixels in another order: columns run over c, then "
                   "kh, then kw, as x[n, :, i:i+KH, j:j+KW].reshape(-1) gives them.")
        elif sorted(map(tuple, got.tolist())) == sorted(map(tuple, expected.tolist())):
            fix = ("the rows are right but in another order: they run over n, then i, then j "
                   "(row index (n*OH + i)*OW + j).")
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
                                case=case), 3, fn, case, "dx, dW, db")
        dx, dW, db = (to_array(a, fn, case, n) for a, n in zip(out, ("dx", "dW", "db")))
        if dx.shape == W.shape and dW.shape == x.shape and x.shape != W.shape:
            fail(fn, case, "dx has W's shape and dW has x's shape.", "return dx, dW, db in that order.")
        expect_shape(db, (W.shape[0],), fn, case, "db",
                     "one number per filter: dout summed over N, OH and OW, dout.sum(axis=(0, 2, 3)).")
        expect_close(db, e_db, fn, case, "db",
                     fix="b[f] is added to every output pixel of filter f, so db[f] is dout[:, f] "
                         "summed over N, OH and OW.")
        expect_shape(dW, W.shape, fn, case, "dW", "dW has W's shape (F, C, KH, KW).")
        expect_close(dW, e_dW, fn, case, "dW",
                     fix="for every output pixel, dW[f] += (the window of the PADDED input it saw) "
                         "* dout[n, f, i, j].")
        fix = "dx has x's shape (N, C, H, W)."
        if p and dx.shape == (N, C, H + 2 * p, Wd + 2 * p):
            fix = f"that is the padded input's shape: crop the padding off, dx_pad[:, :, {p}:-{p}, {p}:-{p}]."
        expect_shape(dx, x.shape, fn, case, "dx", fix)
        expect_close(dx, e_dx, fn, case, "dx",
                     fix="every output pixel sends W[f] * dout[n, f, i, j] back to the window it came "
                         "from (at i*stride, j*stride in the padded input), and overlapping windows "
                         "ADD (+=).")
        expect_unchanged(fn, case, [(k, ref_, given[k])
                                    for k, ref_ in (("dout", dout), ("x", x), ("W", W))])
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
         "right), which is what window.argmax() finds and what dl.MaxPool2d does")


def maxpool_backward(fn) -> None:
    """Check ``fn(dout, x, K, stride)`` returning dx (N, C, H, W) for K×K max pooling: each
    window's gradient dout[n, c, i, j] goes to the position of that window's maximum, and
    where windows overlap (stride < K) the gradients add up. Where a window holds several
    equal maxima (after a ReLU many values are exactly 0), only the first in row-major order
    gets it, as with ``window.argmax()``. Compared with ``dlcourse.conv.maxpool_backward_naive``."""
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
                    f"several times over. Exactly one position gets it: {_TIES}. Use kh, kw = "
                    "np.unravel_index(window.argmax(), window.shape)."),
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
        got = int(to_number(call(fn, C_in, C_out, K, case=case), fn, case, "the count",
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
    shapes = [(4, 3, 5, 6), (2, 5, 3, 3), (8, 2, 1, 1), (4, 3, 5, 6)]
    for k, shape in enumerate(shapes):
        N, C, H, W = shape
        x = r.standard_normal(shape) * 3 + r.standard_normal((1, C, 1, 1)) * 2
        case = f"x of shape {shape}, gamma and beta of shape ({C},)"
        if k == 3:   # channel 1 scaled by 1e-3: its variance (about 1e-5) is as small as eps
            x[:, 1] *= 1e-3
            case += (f", channel 1 nearly constant (variance {x[:, 1].var():.2g}, as small as "
                     f"eps = 1e-5)")
        gamma, beta = r.uniform(0.5, 2.0, C), r.standard_normal(C)
        bn = BatchNorm2d(C, eps=1e-5, dtype=np.float64)
        bn.params = {"gamma": gamma.copy(), "beta": beta.copy()}
        expected = bn.forward(x)
        given = {"x": x.copy(), "gamma": gamma.copy(), "beta": beta.copy()}
        got = to_array(call(fn, given["x"], given["gamma"], given["beta"], eps=1e-5, case=case,
                            on_error="gamma and beta have shape (C,): reshape them to (1, C, 1, 1) "
                                     "so they broadcast over (N, C, H, W)."), fn, case, "the output")
        expect_shape(got, shape, fn, case, "the output",
                     "keep x's shape; reshape gamma and beta to (1, C, 1, 1) to broadcast.")
        g4, b4 = gamma.reshape(1, C, 1, 1), beta.reshape(1, C, 1, 1)

        def norm(axes, ddof=0, std=lambda v: np.sqrt(v + 1e-5)):
            __tracebackhide__ = True
            def f():
                __tracebackhide__ = True
                m = x.mean(axis=axes, keepdims=True)
                v = x.var(axis=axes, keepdims=True, ddof=ddof)
                return (x - m) / std(v)
            return f
        expect_close(got, expected, fn, case, "the output", rtol=1e-4, atol=1e-6, mistakes=[
            (norm((0, 2, 3)), "gamma and beta are missing: out = gamma * x_hat + beta."),
            (lambda: g4 * norm((0, 2, 3), ddof=1)() + b4,
             "use the biased variance (divide by N*H*W): x.var(axis=(0, 2, 3)), not ddof=1."),
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
             "eps is missing: x_hat = (x - mean) / sqrt(var + eps). It keeps a channel whose "
             "variance is tiny (or 0) from being blown up (or divided by 0)."),
            (lambda: g4 * norm((0, 2, 3), std=lambda v: np.sqrt(v) + 1e-5)() + b4,
             "eps belongs INSIDE the square root: sqrt(var + eps), not sqrt(var) + eps. The two "
             "differ when the variance is as small as eps, as in channel 1 here."),
        ])
        expect_unchanged(fn, case, [(name, ref_, given[name]) for name, ref_ in
                                    (("x", x), ("gamma", gamma), ("beta", beta))])
    passed(fn, len(shapes))


def batchnorm_backward(fn) -> None:
    """Check ``fn(dout, x, gamma, eps=1e-5)`` -> ``(dx, dgamma, dbeta)``: the backward pass of
    batch normalization in training mode for x (N, C, H, W), gamma (C,); compared with
    ``dl.BatchNorm2d``'s backward. The usual mistakes are named: the mean's or the variance's
    path forgotten, the wrong axes, dgamma without x_hat."""
    __tracebackhide__ = True
    from ..layers import BatchNorm2d
    r = rng(11)
    eps = 1e-5
    for shape in [(4, 3, 5, 6), (2, 5, 3, 3), (8, 2, 1, 1)]:
        N, C, H, W = shape
        x = r.standard_normal(shape) * 2 + r.standard_normal((1, C, 1, 1))
        gamma, beta = r.uniform(0.5, 2.0, C), r.standard_normal(C)
        dout = r.standard_normal(shape)
        case = f"x and dout of shape {shape}, gamma of shape ({C},)"
        bn = BatchNorm2d(C, eps=eps, dtype=np.float64)
        bn.params = {"gamma": gamma.copy(), "beta": beta.copy()}
        bn.forward(x)
        e_dx = bn.backward(dout)
        e_dgamma, e_dbeta = bn.grads["gamma"], bn.grads["beta"]
        given = {"dout": dout.copy(), "x": x.copy(), "gamma": gamma.copy()}
        out = expect_tuple(call(fn, given["dout"], given["x"], given["gamma"], eps=eps, case=case,
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
        ], fix="beta[c] is added to every value of channel c: dbeta = dout.sum(axis=(0, 2, 3)).")
        expect_shape(dgamma, (C,), fn, case, "dgamma", "one number per channel.")
        expect_close(dgamma, e_dgamma, fn, case, "dgamma", mistakes=[
            (dout.sum(axis=axes), "dgamma multiplies dout by x_hat (gamma scales x_hat): "
                                  "(dout * x_hat).sum(axis=(0, 2, 3))."),
            ((dout * x).sum(axis=axes), "gamma scales the NORMALIZED x: use x_hat, not x."),
            ((dout * x_hat).mean(axis=axes), "dgamma is a SUM over N, H and W, not a mean."),
        ])
        expect_shape(dx, shape, fn, case, "dx", "dx has x's shape (N, C, H, W).")
        dxh = dout * g4
        std = np.sqrt(var + eps)

        def paths(mean_path=True, var_path=True, ax=axes):
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
            (paths(var_path=False), "the variance's path is missing: subtract x_hat * mean(dxh * "
                                    "x_hat) as well (the variance depends on x)."),
            (paths(mean_path=False), "the mean's path is missing: subtract mean(dxh) as well (the "
                                     "mean depends on every x of the channel)."),
            (paths(ax=(2, 3)), "the means go over axes (2, 3) only; batch norm's statistics, and "
                               "so their gradients, run over the batch too: axes (0, 2, 3)."),
            (paths(ax=(0,)), "the means go over axis 0 only; a channel shares its statistics over "
                             "N, H and W: axes (0, 2, 3)."),
        ], fix="derive it path by path as in the lesson, and compare with dl.gradcheck on a "
               "small x.")
        expect_unchanged(fn, case, [(k, ref_, given[k]) for k, ref_ in
                                    (("dout", dout), ("x", x), ("gamma", gamma))])
    passed(fn, 3)


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'iterate_minibatches': [
        'shuffle an index array, never the data; the last batch may be shorter',
        ('order = a permutation of range(N) (or np.arange(N)); for start in range(0, N, '
         'batch_size): idx = order[start:start + batch_size]; yield X[idx], y[idx]'),
    ],
    'accuracy': [
        'compare the (N,) predictions with y and take the mean of the booleans',
        'predictions = logits.argmax(axis=1); return the mean of (predictions == y) as a float',
    ],
    'sgd_momentum_step': [
        ('use in-place operators on velocity[k] and params[k] (a model keeps references to those '
         'very arrays)'),
        ('velocity[k] = momentum * velocity[k] + grads[k]; then params[k] -= lr * velocity[k] (in '
         'place!)'),
    ],
    'dropout_forward': [
        "the mask holds 0 or 1/(1 - p); the output is x times the mask",
        "mask = a boolean array (uniform numbers >= p) divided by (1 - p)",
    ],
    'dropout_backward': [
        "dx is dout times the mask the forward returned (the scaled one)",
    ],
    'init_std': [
        ('write Var(out) = fan_in * Var(w) * E[x²] for one output; after a ReLU E[x²] is half the '
         'variance of its input, so He picks Var(w) = 2 / fan_in; Xavier asks the same of the '
         'backward pass (fan_out) and takes the harmonic compromise 2 / (fan_in + fan_out)'),
        ('the function returns a standard deviation: the square root of that variance, with '
         'np.sqrt, for the scheme asked'),
    ],
    'mlp_forward_batched': [
        "use xp's maximum against 0 for the ReLU, so the same code runs on NumPy and CuPy",
        'hidden = xp.maximum(X @ W1 + b1, 0) is (N, H); the logits are hidden @ W2 + b2 (N, K)',
    ],
    'conv_output_size': [
        'integer division counts the full strides that fit after the first window',
        ('the padded input has H + 2 * padding pixels; count the start positions 0, stride, '
         '2*stride, ... with // and do not forget the first one (+ 1)'),
    ],
    'conv2d_naive': [
        "the window spans all C channels and KH x KW pixels, exactly W[f]'s shape (C, KH, KW)",
        ('four loops over n, f, i, j; window = x_pad[n, :, i*stride:i*stride + KH, '
         'j*stride:j*stride + KW]; out[n, f, i, j] = (window * W[f]).sum() + b[f]'),
    ],
    'im2col_simple': [
        'the row index of window (n, i, j) is (n*OH + i)*OW + j',
        'loop over n, i, j: cols[(n * OH + i) * OW + j] = x[n, :, i:i + KH, j:j + KW].reshape(-1)',
    ],
    'maxpool_backward': [
        ('find the position of the maximum inside each window (argmax, then unravel it to a row '
         'and a column) and add dout there'),
        ('for each n, c, i, j: window = x[n, c, i*stride:i*stride + K, j*stride:j*stride + K]; kh, '
         'kw = np.unravel_index(window.argmax(), window.shape); dx[n, c, i*stride + kh, j*stride + '
         'kw] += dout[n, c, i, j]'),
    ],
    'conv2d_backward': [
        ('the same four loops as the forward pass; the window starts at (i*stride, j*stride); '
         'overlapping windows ADD into dx_pad'),
        ('db = dout.sum(axis=(0, 2, 3)); then loop over n, f, i, j with hs, ws = i*stride, '
         'j*stride: dW[f] += x_pad[n, :, hs:hs+KH, ws:ws+KW] * dout[n, f, i, j] and dx_pad[n, :, '
         'hs:hs+KH, ws:ws+KW] += W[f] * dout[n, f, i, j]'),
    ],
    'conv_params': [
        'count the weights of the (out_channels, in_channels, K, K) array and add the biases',
        ('weights W have shape (out_channels, in_channels, kernel_size, kernel_size); add one bias '
         'per output channel'),
    ],
    'batchnorm_forward': [
        'x_hat = (x - mean) / sqrt(var + eps), then gamma * x_hat + beta',
        ('mean = x.mean(axis=(0, 2, 3), keepdims=True) and var = x.var(axis=(0, 2, 3), '
         'keepdims=True) have shape (1, C, 1, 1); x_hat = (x - mean) / sqrt(var + eps); out = '
         'gamma.reshape(1, C, 1, 1) * x_hat + beta.reshape(1, C, 1, 1)'),
    ],
    'batchnorm_backward': [
        ("with d = dout * gamma (as (1, C, 1, 1)): dx = (d - mean(d) - x_hat * mean(d * x_hat)) / "
         "sqrt(var + eps), every mean over axes (0, 2, 3) with keepdims"),
        ("dbeta is the sum of dout and dgamma the sum of dout * x_hat over axes (0, 2, 3); check "
         "your dx against dl.gradcheck on a small input if the check's case is hard to read"),
    ],
}
