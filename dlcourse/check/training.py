"""Checks for lessons 04a and 04b: training an MLP on digits; optimizers and regularization.

Each check takes *your* function, runs it on several small cases, compares it with the
library's rule (``dlcourse/optim.py``, ``layers.py``, ``data/batching.py``) and either prints
one line saying that every case passes, or raises :class:`ExerciseError` naming the case, the
problem and, for the common mistakes, the likely fix::

    dl.check.sgd_momentum_step(sgd_momentum_step)

======  ===============================  ==============================================
lesson  check                            your function
======  ===============================  ==============================================
04a     :func:`iterate_minibatches`      ``(X, y, batch_size, shuffle, seed)``
04a     :func:`accuracy`                 ``(logits, y) -> float``
04b     :func:`sgd_momentum_step`        ``(params, grads, velocity, lr, momentum)``
04b     :func:`adam_step`                ``(params, grads, m, v, t, lr, ...)``
04b     :func:`dropout_forward`          ``(x, p, rng) -> out, mask``
04b     :func:`dropout_backward`         ``(dout, mask) -> dx``
======  ===============================  ==============================================

(04a: ``04a_mlp_on_digits``; 04b: ``04b_optimizers_and_regularization``.)

The checks of lessons 04c and 05 (initialization, GPU batching) are in ``init_and_batching.py``,
the convolution lessons' (06-07) in ``convolution.py`` and ``cnn.py``; the shared machinery
(``call``, ``fail``, ``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, check_wrapper, expect_close, expect_shape, expect_tuple,
                      expect_unchanged, fail, passed, rng, to_array, to_number)

__all__ = [
    "iterate_minibatches", "accuracy", "sgd_momentum_step", "dropout_forward", "dropout_backward",
    "adam_step",
]


def _all_batches(fn):
    """``fn`` (a generator function, or one that returns a list), run to the end inside the
    call, so that the library stays closed while it yields too; the same name in messages."""
    __tracebackhide__ = True

    @check_wrapper(fn)
    def run(*args, **kwargs):
        __tracebackhide__ = True
        out = fn(*args, **kwargs)
        try:
            return out if out is None or isinstance(out, (list, tuple)) else list(out)
        except TypeError:
            return out
    run.__name__ = getattr(fn, "__name__", "iterate_minibatches")
    return run


# ======================================================================================
# 04a_mlp_on_digits
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
        out = call(_all_batches(fn), X_given, y_given, B, shuffle=shuffle, seed=seed, case=case)
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
        shuffled_in_place = ("shuffle an index array, not the data: draw one permutation of the "
                             "N indices from the seeded generator and take each batch's rows of "
                             "X and y at a slice of it. (Shuffling X itself reorders the "
                             "caller's own arrays.)")
        expect_unchanged(fn, case, [("X", X, X_given), ("y", y, y_given)], shuffled_in_place)
        sizes = [B] * (N // B) + ([N % B] if N % B else [])
        got_sizes = [len(yb) for _, yb in pairs]
        if got_sizes != sizes:
            fix = None
            if sum(got_sizes) < N and got_sizes == sizes[:len(got_sizes)]:
                fix = ("the last, smaller batch is missing: let the batch starts run all the way "
                       "up to N (a start past N - batch_size is still a start), and a slice that "
                       "runs past the end stops at N by itself.")
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
                     "index X and y with the SAME indices: one slice of one order, used for "
                     "both.")
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
             "visit them in a random order: a permutation of the N indices, drawn from a "
             "generator made from seed.")
    again, _ = epoch(16, True, 0)
    if not np.array_equal(first, again):
        fail(fn, case, f"two calls with seed=0 gave different orders ({first[:6].tolist()}... and "
                       f"{again[:6].tolist()}...).",
             "make the generator from the seed you are given (NumPy's default generator, "
             "seeded with it), anew in every call.")
    other, case1 = epoch(16, True, 1)
    if np.array_equal(first, other):
        fail(fn, case1, "seed=0 and seed=1 gave the same order.",
             "pass the seed to the generator you make.")
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
                             on_error="the classes are along axis 1: the index of each ROW's "
                                      "largest entry is one prediction per sample, shape (N,), to "
                                      "compare with y."),
                        fn, case, "the accuracy",
                        "return one float: the fraction of the batch predicted right.")
        expect_unchanged(fn, case, [("logits", lg.astype(np.float32), logits_given),
                                    ("y", yy, y_given)])
        if np.isclose(got, expected):
            continue
        n_right = int(round(expected * N))
        fix = None
        if np.isclose(got, n_right):
            fix = "that is the COUNT of right answers: divide by N (or take .mean()) for the fraction."
        elif N == K and np.isclose(got, float((lg.argmax(axis=0) == yy).mean())):
            fix = ("the classes are along axis 1: take the largest entry of each ROW, not of "
                   "each column.")
        fail(fn, case, f"the accuracy is {got:.4f}; expected {expected:.4f} ({n_right} of {N} right).",
             fix)
    passed(fn, len(cases))


# ======================================================================================
# 04b_optimizers_and_regularization
# ======================================================================================
def sgd_momentum_step(fn) -> None:
    """Check ``fn(params, grads, velocity, lr, momentum)``, which updates ``params`` and
    ``velocity`` (dicts of arrays with the same keys) **in place**, as ``dl.SGD`` does.

    Three steps from the same start, with a learning rate that changes from step to step,
    are compared with the rule, parameters AND stored velocity, in either convention the
    lesson names: PyTorch's (the velocity gathers the raw gradients and the step scales it by
    lr) or the other one (the velocity already holds the lr-scaled, negated step). The first
    step's velocity says which one the function follows; every later step must follow the
    same one (with a changing lr the two give different parameters). ``dl.SGD.step`` is
    refused while the function runs. The function gets a copy of each step's ``grads``.
    """
    __tracebackhide__ = True
    r = rng(5)
    shapes = {"W": (4, 3), "b": (3,)}
    start = {k: r.standard_normal(s) for k, s in shapes.items()}
    grads_seq = [{k: r.standard_normal(s) for k, s in shapes.items()} for _ in range(3)]
    checks = 0
    other_way = ("the velocity you store follows one convention and the parameters the other: "
                 "either the velocity gathers the raw gradients and the parameters move by lr "
                 "times it, or the velocity already holds the lr-scaled, negated step and the "
                 "parameters move by the velocity itself. Pick one for both lines.")
    for momentum, lrs in ((0.9, (0.1, 0.05, 0.2)), (0.0, (0.5, 0.3, 0.1)),
                          (0.5, (0.01, 0.03, 0.02))):
        params = {k: v.copy() for k, v in start.items()}
        originals = dict(params)                      # the arrays a model would hold
        velocity = {k: np.zeros_like(v) for k, v in start.items()}
        # the two conventions: "torch" v = m v + g, p -= lr v; "neg" v = m v - lr g, p += v
        ref = {c: ({k: v.copy() for k, v in start.items()},
                   {k: np.zeros_like(v) for k, v in start.items()}) for c in ("torch", "neg")}
        plain = {k: v.copy() for k, v in start.items()}
        ema_p = {k: v.copy() for k, v in start.items()}
        ema_v = {k: np.zeros_like(v) for k, v in start.items()}
        convention = None
        for t, (grads, lr) in enumerate(zip(grads_seq, lrs), start=1):
            case = (f"momentum={momentum}, step {t} of 3 with lr={lr} (the learning rate changes "
                    f"between steps: {', '.join(map(str, lrs))}; the velocity starts at zero)")
            # a copy: the reference below, and the next settings, use the untouched gradients
            call(fn, params, {k: g.copy() for k, g in grads.items()}, velocity, lr, momentum,
                 case=case)
            for k in shapes:
                tp, tv = ref["torch"]
                tv[k] = momentum * tv[k] + grads[k]
                tp[k] = tp[k] - lr * tv[k]
                np_, nv = ref["neg"]
                nv[k] = momentum * nv[k] - lr * grads[k]
                np_[k] = np_[k] + nv[k]
                plain[k] = plain[k] - lr * grads[k]
                ema_v[k] = momentum * ema_v[k] + (1 - momentum) * grads[k]
                ema_p[k] = ema_p[k] - lr * ema_v[k]
            got_v = {k: to_array(velocity[k], fn, case, f"velocity[{k!r}]") for k in shapes}
            if convention is None:     # the first step's velocity says which convention
                for c in ("torch", "neg"):
                    if all(got_v[k].shape == ref[c][1][k].shape and
                           np.allclose(got_v[k], ref[c][1][k]) for k in shapes):
                        convention = c
                        break
            c = convention or "torch"
            ref_p, ref_v = ref[c]
            other = ref["neg" if c == "torch" else "torch"][0]
            for k in shapes:
                if params[k] is not originals[k]:
                    fail(fn, case, f"params[{k!r}] is now a NEW array. A model keeps its own "
                                   f"reference to the old one and would never see the update.",
                         "update the array in place, with an augmented assignment on the array "
                         "stored in the dict, not by building a new array and storing it under "
                         "the key.")
                expect_close(to_array(params[k], fn, case, f"params[{k!r}]"), ref_p[k], fn, case,
                             f"params[{k!r}] after the step", mistakes=[
                                 (start[k], "the parameters did not change at all."),
                                 (plain[k], "that is plain SGD: the parameters moved by lr times "
                                            "this step's gradient only. The velocity must carry "
                                            "the past steps (it decays by momentum and takes in "
                                            "the new gradient), and the parameters move by it."),
                                 (ema_p[k], "you averaged: the new gradient was scaled by "
                                            "(1 - momentum) before joining the velocity. dl.SGD "
                                            "(like PyTorch) adds the gradient unscaled."),
                                 (other[k], other_way),
                             ])
            for k in shapes:
                expect_close(got_v[k], ref_v[k], fn, case,
                             f"velocity[{k!r}] (the parameters are right)", mistakes=[
                                 (np.zeros_like(ref_v[k]),
                                  f"velocity[{k!r}] is still zero, so the next step cannot use it "
                                  f"(that is plain SGD): store the new velocity in it."),
                             ], fix=other_way if t > 1 else
                             f"store the new velocity in velocity[{k!r}], in one of the lesson's "
                             f"two conventions.")
        checks += 1
    passed(fn, checks)


def dropout_forward(fn) -> None:
    """Check ``fn(x, p, rng)`` -> ``(out, mask)``, inverted dropout in training mode: each entry
    is kept with probability ``1 - p`` (``p`` is the probability to DROP) and scaled by
    ``1 / (1 - p)``, so that the output's expected value is ``x``; ``mask`` holds 0 or
    ``1 / (1 - p)`` and the output is x times the mask, entry by entry. The mask must come
    from the generator ``rng`` it is given, one uniform number per entry (the generator's ``random``),
    the entry kept where its number is at least ``p`` (or, equally good, below ``1 - p``): the
    same generator state must give the reference's mask. ``dl.Dropout`` is refused."""
    __tracebackhide__ = True
    r = rng(13)
    cases = [((400, 50), 0.5), ((200, 100), 0.2), ((100, 100), 0.8), ((10, 7), 0.0),
             ((3, 20, 30), 0.35)]
    for k, (shape, p) in enumerate(cases):
        seed = 100 + k
        case = f"x of shape {shape}, p={p}, rng = a NumPy Generator seeded with {seed}"
        x = r.standard_normal(shape)
        x_given = x.copy()
        gen = np.random.default_rng(seed)
        out = expect_tuple(call(fn, x_given, p, gen, case=case),
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
                 "p is the probability to DROP an entry; keep an entry where its uniform number "
                 "is at least p (or below 1 - p).")
        if abs(kept - (1 - p)) > 0.05:
            fail(fn, case, f"the mask keeps {kept:.0%} of the entries; expected about {1 - p:.0%}.",
                 "draw one uniform number per entry of x from rng, and keep the entry where it "
                 "is at least p.")
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
                 "the mask holds only two values: 0 for a dropped entry and 1 / (1 - p) for "
                 "a kept one.")
        u = np.random.default_rng(seed).random(shape)
        if not any(np.array_equal(mask != 0, keep) for keep in (u >= p, u < 1 - p)):
            untouched = (gen.bit_generator.state ==
                         np.random.default_rng(seed).bit_generator.state)
            fail(fn, case, "the mask keeps the right share of entries, but not the entries that "
                           "the generator rng it was given picks"
                           + (" (rng was not used at all)." if untouched else "."),
                 "draw the randomness from the rng argument, not from np.random or a generator "
                 "of your own: one uniform number per entry of x (rng's random method, in x's shape), "
                 "kept where it is at least p. Then the same rng gives the same mask, and a "
                 "training run can be repeated." if untouched else
                 "draw exactly one uniform number per entry of x from rng (its random method, in "
                 "x's shape), and keep the entry where it is at least p: the same rng must give the "
                 "same mask as the reference.")
        expect_close(got, x * mask, fn, case, "out", mistakes=[
            (mask, "out is the mask itself: multiply x by it."),
        ], fix="out is x multiplied, entry by entry, by the mask you return.")
    passed(fn, len(cases))


def dropout_backward(fn) -> None:
    """Check ``fn(dout, mask)`` -> ``dx``: the forward multiplied x by the (scaled) mask, a
    constant for the backward pass, so the gradient goes back through the same entries with
    the same scale."""
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
                                 "pass, so their gradient is too: use the scaled mask itself, "
                                 "not only where it is nonzero."),
            (dout * (mask != 0) * (1 - p), "scale by 1 / (1 - p), as the forward did, not by "
                                           "(1 - p)."),
        ])
        expect_unchanged(fn, case, [("dout", dout, given["dout"]), ("mask", mask, given["mask"])])
    passed(fn, len(cases))


def adam_step(fn) -> None:
    """Check ``fn(params, grads, m, v, t, lr, beta1, beta2, eps)``: one Adam step, updating
    ``params``, ``m`` and ``v`` (dicts of arrays with the same keys; m and v start at zeros)
    **in place**, ``t`` the number of the step (1 for the first). The running averages of the
    gradient and of its square are stored uncorrected; their bias-corrected versions move the
    parameters. Three steps each for three settings of (lr, beta1, beta2, eps), with gradients
    whose size makes eps matter; compared with ``dl.Adam``'s rule, whose ``step`` is refused."""
    __tracebackhide__ = True
    r = rng(14)
    shapes = {"W": (3, 4), "b": (4,)}
    settings = [(1e-3, 0.9, 0.999, 1e-8, 1.0), (0.05, 0.8, 0.99, 1e-3, 0.01),
                (0.1, 0.5, 0.9, 0.1, 0.3)]
    for lr, b1, b2, eps, scale in settings:
        start = {k: r.standard_normal(s) for k, s in shapes.items()}
        grads_seq = [{k: r.standard_normal(s) * scale for k, s in shapes.items()}
                     for _ in range(3)]
        params = {k: p.copy() for k, p in start.items()}
        m = {k: np.zeros_like(p) for k, p in start.items()}
        v = {k: np.zeros_like(p) for k, p in start.items()}
        held = (dict(params), dict(m), dict(v))        # the arrays an optimizer would hold
        ref_p = {k: p.copy() for k, p in start.items()}
        ref_m = {k: np.zeros_like(p) for k, p in start.items()}
        ref_v = {k: np.zeros_like(p) for k, p in start.items()}
        wrong = {name: {} for name in ("raw", "m_only", "v_only", "eps_in", "t_minus",
                                       "eps_fixed")}
        for t, grads in enumerate(grads_seq, start=1):
            case = (f"lr={lr}, beta1={b1}, beta2={b2}, eps={eps}, step t={t} of 3 (m and v start "
                    f"at zero; gradients of size about {scale})")
            before = tuple({k: a.copy() for k, a in d.items()} for d in (params, m, v))
            call(fn, params, {k: g.copy() for k, g in grads.items()}, m, v, t, lr, b1, b2, eps,
                 case=case)
            for k in shapes:
                g, prev = grads[k], ref_p[k]     # each mistake: one step from the right start
                ref_m[k] = b1 * ref_m[k] + (1 - b1) * g
                ref_v[k] = b2 * ref_v[k] + (1 - b2) * g * g
                mh, vh = ref_m[k] / (1 - b1 ** t), ref_v[k] / (1 - b2 ** t)
                ref_p[k] = prev - lr * mh / (np.sqrt(vh) + eps)
                wrong["raw"][k] = prev - lr * ref_m[k] / (np.sqrt(ref_v[k]) + eps)
                wrong["m_only"][k] = prev - lr * mh / (np.sqrt(ref_v[k]) + eps)
                wrong["v_only"][k] = prev - lr * ref_m[k] / (np.sqrt(vh) + eps)
                wrong["eps_in"][k] = prev - lr * mh / np.sqrt(vh + eps)
                wrong["eps_fixed"][k] = prev - lr * mh / (np.sqrt(vh) + 1e-8)
                with np.errstate(divide="ignore", invalid="ignore"):
                    wrong["t_minus"][k] = prev - lr * (ref_m[k] / (1 - b1 ** (t - 1))) / (
                        np.sqrt(ref_v[k] / (1 - b2 ** (t - 1))) + eps)
            if t == 1 and not all(np.isfinite(to_array(params[k], fn, case, f"params[{k!r}]")).all()
                                  for k in shapes):
                fail(fn, case, "after the first step the parameters hold nan or inf.",
                     "a bias-correction factor is 0 at the first step if it uses t - 1: t is the "
                     "number of the step being taken, 1 for the first.")
            for name, (dct, was) in zip(("params", "m", "v"), zip((params, m, v), held)):
                for k in shapes:
                    if dct[k] is not was[k]:
                        fail(fn, case, f"{name}[{k!r}] is now a NEW array; the optimizer (and the "
                                       f"model) keep the old one and would never see the update.",
                             "change the arrays stored in the dicts in place (augmented "
                             "assignments), do not store new arrays under the keys.")
            for k in shapes:
                got_m = to_array(m[k], fn, case, f"m[{k!r}]")
                expect_close(got_m, ref_m[k], fn, case, f"m[{k!r}], the running average of the "
                             f"gradient", mistakes=[
                                 (ref_m[k] / (1 - b1 ** t),
                                  "m holds the bias-CORRECTED average; store the raw running "
                                  "average in m and correct a copy of it for the step (the next "
                                  "step must go on from the raw one)."),
                                 (np.zeros_like(g), "m is still zero: update it in place."),
                             ], fix="m is a running average of the gradient: the old m weighted "
                                    "by beta1, plus the new gradient weighted by what is left "
                                    "(1 minus beta1).")
                got_v = to_array(v[k], fn, case, f"v[{k!r}]")
                g = grads[k]
                expect_close(got_v, ref_v[k], fn, case, f"v[{k!r}], the running average of the "
                             f"squared gradient", mistakes=[
                                 (ref_v[k] / (1 - b2 ** t),
                                  "v holds the bias-CORRECTED average; store the raw running "
                                  "average in v and correct a copy of it for the step."),
                                 ((1 - b2) * g if t == 1 else None,
                                  "v averages the SQUARED gradient, entry by entry."),
                                 (np.zeros_like(g), "v is still zero: update it in place."),
                             ], fix="v is a running average of the squared gradient: the old v "
                                    "weighted by beta2, plus the new squared gradient weighted "
                                    "by 1 minus beta2.")
                expect_close(to_array(params[k], fn, case, f"params[{k!r}]"), ref_p[k], fn, case,
                             f"params[{k!r}] after the step (m and v are right)", mistakes=[
                                 (start[k], "the parameters did not change at all."),
                                 (wrong["raw"][k], "no bias correction: early on m and v are "
                                  "too small because they started at zero; divide each by the "
                                  "factor that the derivation gives for step t."),
                                 (lambda: params[k] if _ignores_t(fn, before, grads, t, lr, b1,
                                                                  b2, eps, case) else None,
                                  "no bias correction: your step is the same whatever t is, "
                                  "but early on m and v are too small because they started at "
                                  "zero, and the correction that undoes it depends on the "
                                  "step's number t; divide each by the factor that the "
                                  "derivation gives for step t."),
                                 (wrong["m_only"][k], "only m is corrected: v started at zero "
                                  "too, and needs its own factor (with beta2)."),
                                 (wrong["v_only"][k], "only v is corrected: m started at zero "
                                  "too, and needs its own factor (with beta1)."),
                                 (wrong["eps_in"][k], "eps goes outside the square root: it is "
                                  "added to the root of the corrected v."),
                                 (wrong["t_minus"][k], "the correction uses t - 1: t is the "
                                  "number of the step being taken, 1 for the first, and the "
                                  "factor comes from the averages after t updates."),
                                 (wrong["eps_fixed"][k], f"that is the step for eps = 1e-8, but "
                                  f"this case passes eps={eps}: use the eps argument."),
                             ], fix="the step is lr times the corrected m divided by (the "
                                    "square root of the corrected v, plus eps).")
    passed(fn, 3 * len(settings))


def _ignores_t(fn, before, grads, t, lr, b1, b2, eps, case) -> bool:
    """Whether ``fn`` takes the same step from the same state at step t and at step t + 50 (then
    it has no bias correction: t enters Adam's step only there)."""
    __tracebackhide__ = True
    steps = []
    for when in (t, t + 50):
        state = tuple({k: a.copy() for k, a in d.items()} for d in before)
        try:
            call(fn, *state[:1], {k: g.copy() for k, g in grads.items()}, *state[1:], when, lr,
                 b1, b2, eps, case=case)
        except Exception:  # noqa: BLE001 - it fails another way: say nothing about t
            return False
        steps.append(state[0])
    return all(np.array_equal(np.asarray(steps[0][k]), np.asarray(steps[1][k])) for k in steps[0])


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'iterate_minibatches': [
        'shuffle an index array, never the data; the last batch may be shorter',
        ('pseudo-code: order = ___ (a permutation of the N indices from a generator seeded with '
         'seed, or the indices in order); for each start from 0 in steps of batch_size: idx = '
         'the next ___ entries of order; yield the rows of X and of y at idx. Section 2 of the '
         'lesson says why both details matter.'),
    ],
    'accuracy': [
        'compare the (N,) predictions with y and take the mean of the booleans',
        ('predictions = the index of the largest entry along axis ___ (one per row); accuracy = '
         'the fraction of positions where the prediction equals ___, as a Python float. Section '
         '3 defines it.'),
    ],
    'sgd_momentum_step': [
        ('use in-place operators on the arrays stored in the dicts (a model keeps references to '
         'those very arrays)'),
        ('per key: velocity <- momentum times (the old velocity) plus ___; parameter <- parameter '
         'minus ___ times velocity, both written into the existing arrays (*=, +=, -=). The two '
         'update rules are in the markdown cell above the exercise (section 6).'),
    ],
    'dropout_forward': [
        ("at one entry, E[out] = (the probability it is kept) times c times x, plus (the "
         "probability it is dropped) times 0: set that equal to x and solve for c. The mask "
         "holds 0 or c; the output is x times the mask, entry by entry"),
        ("mask = (one uniform number from rng per entry of x, compared with ___) scaled by ___; "
         "out = ___. The markdown cell above the exercise says which entries are kept, and the "
         "expected value you want, E[out] = x, fixes the scale."),
    ],
    'dropout_backward': [
        "the mask is a constant for the backward pass: which entries of dout reach x, and scaled "
        "by how much?",
        ("dx = ___ (dout and the mask the forward returned, entry by entry). Look at how out was "
         "made from x in dropout_forward: out at each entry is a constant times x there."),
    ],
    'adam_step': [
        ('m and v are running averages that start at zero, so after t steps they hold only a '
         'fraction of a constant gradient (of its square): unroll the recursion, sum the '
         'geometric series, and divide by that fraction'),
        ('pseudo-code per key: m <- ___ * m + ___ * g; v <- ___ * v + ___ * g²; '
         'm_hat = m / (1 - ___); v_hat = v / (1 - ___); parameter <- parameter minus lr times '
         'm_hat over (___ + eps), the first three in place. The averages are in the markdown cell above '
         'the exercise.'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'iterate_minibatches': ['rng.permutation', 'np.random.default_rng(seed)',
        'range(0, N, batch_size)', 'order[start'],
    'accuracy': ['argmax', '.mean()', 'np.mean('],
    'sgd_momentum_step': ['v *= momentum', 'p -= lr * v', 'velocity[k] *=', 'params[k] -='],
    'dropout_forward': ['1/(1-p)', '1 / (1 - p)', '1-p', '/ (1 - p)', 'divided by (1',
        'inverse of the keep'],
    'dropout_backward': ['same scale', 'same entries', 'dout * mask', 'times the mask',
        'multiply dout by the mask', 'by the mask'],
    'adam_step': ['1 - beta1**t', '1 - beta1 ** t', 'beta1**t', 'beta1 ** t', 'beta1^t',
        'beta1 to the power', 'to the power t', 'power of t', '1 - beta2'],
}
