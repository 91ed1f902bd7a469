"""Checks for lesson 07b: LayerNorm and residual networks.

Each check takes *your* function, runs it on several small cases, compares it with the
library's reference (``dlcourse/layers.py``: ``LayerNorm``, ``Residual``) and either prints one
line saying that every case passes, or raises :class:`ExerciseError` naming the case, the
problem and, for the common mistakes, the likely fix::

    dl.check.layernorm_backward(layernorm_backward)

====================================  ===========================  =================================
lesson                                check                        your function
====================================  ===========================  =================================
07b_layernorm_and_residual_networks   :func:`layernorm_backward`   ``(dout, cache, gamma) -> dx,
                                                                   dgamma, dbeta``
07b_layernorm_and_residual_networks   :func:`residual_backward`    ``(dout, cache, params) -> dx,
                                                                   grads``
====================================  ===========================  =================================

BatchNorm's checks (lesson 07) are in ``cnn.py``; the shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_on_gpu, expect_shape, expect_tuple,
                      expect_unchanged, fail, gpu, lines_run, passed, rng, shape_text, to_array)

__all__ = ["layernorm_backward", "residual_backward"]


# While the learner's function runs the library is closed (harness.call; seal.py): an answer
# that calls into it, or into any package but NumPy and CuPy, fails, naming the call.
_NORMS = ["dlcourse.layers.LayerNorm.forward", "dlcourse.layers.LayerNorm.backward",
          "dlcourse.layers.BatchNorm2d.forward", "dlcourse.layers.BatchNorm2d.backward"]


# ======================================================================================
# 07b_layernorm_and_residual_networks
# ======================================================================================
def _layernorm_reference(x, gamma, dout, eps):
    """(x_hat, std, dx, dgamma, dbeta) from the library's LayerNorm, in float64."""
    __tracebackhide__ = True
    from ..layers import LayerNorm
    N, D = x.shape
    ln = LayerNorm((D,), eps=eps).astype(np.float64)
    ln.params = {"gamma": gamma.copy(), "beta": np.zeros(D)}
    ln.forward(x)
    dx = ln.backward(dout)
    mean = x.mean(axis=1, keepdims=True)
    std = np.sqrt(x.var(axis=1, keepdims=True) + eps)
    return (x - mean) / std, std, dx, ln.grads["gamma"], ln.grads["beta"]


def _layernorm_cases():
    """(x, gamma, dout, eps) of each case; the second has N == D, where a sum over the wrong
    axis has the right shape and only its values tell."""
    __tracebackhide__ = True
    r = rng(71)
    cases = []
    for (N, D), eps in [((4, 6), 1e-5), ((5, 5), 1e-3), ((1, 8), 1e-5), ((7, 3), 0.1)]:
        x = r.standard_normal((N, D)) * r.uniform(0.5, 3.0, (N, 1)) + r.standard_normal((N, 1)) * 2
        cases.append((x, r.uniform(0.5, 2.0, D), r.standard_normal((N, D)), eps))
    return cases


def layernorm_backward(fn) -> None:
    """Check ``fn(dout, cache, gamma)`` -> ``(dx, dgamma, dbeta)``: the backward pass of layer
    normalization over the last axis of x (N, D), with ``cache = (x_hat, std)``, x_hat (N, D)
    the normalized input and std (N, 1) each sample's ``sqrt(var + eps)``; gamma (D,).
    Compared with ``dl.LayerNorm``'s backward (gradient-checked against finite differences in
    tests/test_check_residual.py). The usual mistakes are named: BatchNorm's axis, the mean's or
    the variance's path forgotten, sums where the derivation has means (a missing 1/D), dgamma
    summed over the wrong axis. One case has N == D, one a batch of one sample; one runs it on
    8 and 80 samples: vectorized, as the lesson asks, it runs the same lines for both."""
    __tracebackhide__ = True
    cases = _layernorm_cases()
    cp = gpu()
    for x, gamma, dout, eps in cases:
        N, D = x.shape
        case = (f"dout and x_hat of shape {shape_text((N, D))}, std of shape "
                f"{shape_text((N, 1))}, gamma of shape {shape_text((D,))}")
        x_hat, std, e_dx, e_dgamma, e_dbeta = _layernorm_reference(x, gamma, dout, eps)
        given = {"dout": dout.copy(), "x_hat": x_hat.copy(), "std": std.copy(),
                 "gamma": gamma.copy()}
        out = expect_tuple(call(fn, given["dout"], (given["x_hat"], given["std"]), given["gamma"],
                                case=case,
                                on_error="std has shape (N, 1) and gamma (D,): both broadcast "
                                         "over dout (N, D) as they are; a mean over the features "
                                         "needs keepdims=True to broadcast back."),
                           3, fn, case, "dx, dgamma, dbeta")
        dx, dgamma, dbeta = (to_array(a, fn, case, n)
                             for a, n in zip(out, ("dx", "dgamma", "dbeta")))
        per_sample = ("gamma and beta have one entry per FEATURE and are shared by every sample: "
                      "their gradients gather dout over the batch, axis 0 (LayerNorm's statistics "
                      "run over the features, its parameters do not).")
        expect_shape(dbeta, (D,), fn, case, "dbeta", per_sample)
        expect_close(dbeta, e_dbeta, fn, case, "dbeta", mistakes=[
            (dout.mean(axis=0), "dbeta is a SUM over the batch, not a mean."),
            (dout.sum(axis=1) if N == D else None, per_sample),
        ], fix="beta[j] is added to feature j of every sample: sum dout over the batch.")
        expect_shape(dgamma, (D,), fn, case, "dgamma", per_sample)
        expect_close(dgamma, e_dgamma, fn, case, "dgamma", mistakes=[
            ((dout * x_hat).sum(axis=1) if N == D else None,
             "dgamma is summed over the wrong axis: " + per_sample),
            (dout.sum(axis=0), "gamma multiplies x_hat, so each dout value reaches gamma "
                               "multiplied by its x_hat; summing dout alone is dbeta."),
            ((dout * x_hat).mean(axis=0), "dgamma is a SUM over the batch, not a mean."),
            ((dout * x_hat * gamma).sum(axis=0), "gamma does not scale its own gradient: the "
                                                 "local derivative of gamma times x_hat with "
                                                 "respect to gamma is x_hat."),
        ])
        expect_shape(dx, (N, D), fn, case, "dx", "dx has x's shape (N, D).")
        d = dout * gamma

        def paths(mean_path=True, var_path=True, axis=1, reduce=np.mean, g=gamma):
            __tracebackhide__ = True
            def f():
                __tracebackhide__ = True
                dd = dout * g
                out = dd
                if mean_path:
                    out = out - reduce(dd, axis=axis, keepdims=True)
                if var_path:
                    out = out - x_hat * reduce(dd * x_hat, axis=axis, keepdims=True)
                return out / std
            return f
        expect_close(dx, e_dx, fn, case, "dx", mistakes=[
            (lambda: d / std, "that is only the direct path through x_hat: each sample's mean "
                              "and variance depend on its x too. Add their two paths (each a "
                              "mean over the features)."),
            (paths(axis=0), "the means run over the batch, axis 0, as in BatchNorm; LayerNorm's "
                            "statistics, and so their paths, run over the features of ONE "
                            "sample: axis 1."),
            (paths(mean_path=False), "the mean's path is missing: each sample's mean depends on "
                                     "all of its features, and its path adds a term of its own."),
            (paths(var_path=False), "the variance's path is missing: each sample's variance "
                                    "depends on all of its features too, and its path adds a "
                                    "term of its own (one with x_hat)."),
            (paths(reduce=np.sum), "the two statistics' paths are D times too large: a sample's "
                                   "mean and variance divide by D, so their paths carry a 1/D "
                                   "(a mean over the features, not a sum)."),
            (paths(g=np.ones(D)), "gamma is missing: the gradient reaching x_hat is dout times "
                                  "gamma, and the three paths start from it."),
            (lambda: paths()() * std * std, "dx is multiplied by the std where it should be "
                                            "divided: x_hat is x minus the mean, DIVIDED by std."),
        ], fix="derive it path by path as the lesson sets it up (the graph of one sample), and "
               "compare with dl.gradcheck(dl.LayerNorm((D,)), x) on a small x.")
        expect_unchanged(fn, case, [(k, ref, given[k]) for k, ref in
                                    (("dout", dout), ("x_hat", x_hat), ("std", std),
                                     ("gamma", gamma))])
    _expect_vectorized(fn)
    if cp is not None:
        x, gamma, dout, eps = cases[0]
        x_hat, std, e_dx, e_dgamma, e_dbeta = _layernorm_reference(x, gamma, dout, eps)
        case = f"dout and x_hat of shape {shape_text(x.shape)}, on the GPU (CuPy arrays)"
        out = expect_tuple(call(fn, cp.asarray(dout), (cp.asarray(x_hat), cp.asarray(std)),
                                cp.asarray(gamma), case=case), 3, fn, case,
                           "dx, dgamma, dbeta")
        for g, name, ref in zip(out, ("dx", "dgamma", "dbeta"), (e_dx, e_dgamma, e_dbeta)):
            expect_on_gpu(g, fn, case, name)
            expect_close(to_array(g, fn, case, name), ref, fn, case, name)
    passed(fn, len(cases) + 1 + (cp is not None), cp is not None)


def _expect_vectorized(fn):
    """The lesson's rule, "vectorized, over the whole batch at once": the lines of Python the
    function runs must not grow with the batch (a loop over the D features may stay)."""
    __tracebackhide__ = True
    small, large, D = 8, 80, 4
    case = (f"the same function on batches of {small} and {large} samples, D = {D} (a vectorized "
            f"answer runs the same lines of Python for both)")
    lines = {}
    for N in (small, large):
        x = rng(N).standard_normal((N, D))
        x_hat, std, *_ = _layernorm_reference(x, np.ones(D), np.ones((N, D)), 1e-5)
        _, lines[N] = lines_run(fn, rng(N + 1).standard_normal((N, D)), (x_hat, std),
                                np.ones(D), case=case)
    if lines[large] - lines[small] >= (large - small) // 2:
        fail(fn, case, f"your function ran {lines[small]} lines of Python for {small} samples and "
                       f"{lines[large]} for {large}: it loops over the samples in Python. The "
                       f"lesson asks for it vectorized, over the whole batch at once.",
             "work on whole (N, D) arrays: a reduction over each sample's features is one call "
             "for the whole batch (axis=1, keepdims=True to broadcast it back).")


def _residual_cases():
    """(x, params, dout) of each case: x (N, D), W1 (D, H), b1 (H,), W2 (H, D), b2 (D,). The
    biases leave some hidden units off and some on; the first case has H == D, where a
    mistake of order or of a transpose keeps the shapes right and only the values tell."""
    __tracebackhide__ = True
    r = rng(72)
    cases = []
    for N, D, H in [(6, 4, 4), (4, 3, 5), (1, 2, 3), (5, 6, 2)]:
        x = r.standard_normal((N, D))
        params = {"W1": r.standard_normal((D, H)) / np.sqrt(D), "b1": r.standard_normal(H) * 0.5,
                  "W2": r.standard_normal((H, D)) / np.sqrt(H), "b2": r.standard_normal(D)}
        cases.append((x, params, r.standard_normal((N, D))))
    return cases


def _residual_forward(x, p):
    __tracebackhide__ = True
    z = x @ p["W1"] + p["b1"]
    h = z * (z > 0)
    return x + h @ p["W2"] + p["b2"], h


def residual_backward(fn) -> None:
    """Check ``fn(dout, cache, params)`` -> ``(dx, grads)``: the backward pass of the residual
    block ``out = x + relu(x @ W1 + b1) @ W2 + b2`` for x (N, D), with ``cache = (x, h)``, h
    (N, H) the ReLU's output, and ``params`` the dict of W1 (D, H), b1 (H,), W2 (H, D), b2 (D,);
    ``grads`` is a dict with the same keys and shapes. Compared with the gradients of
    ``dl.Residual(dl.Sequential(Linear, ReLU, Linear))`` (whose backward, and the layers', are
    refused while your function runs). The usual mistakes are named: the skip path forgotten,
    the skip path only, the ReLU's mask missing or in the wrong place, a missing transpose."""
    __tracebackhide__ = True
    cases = _residual_cases()
    cp = gpu()
    for x, p, dout in cases:
        N, D = x.shape
        H = p["W1"].shape[1]
        case = (f"x and dout of shape {shape_text((N, D))}, W1 {shape_text((D, H))}, W2 "
                f"{shape_text((H, D))} (H = {H} hidden units)")
        _, h = _residual_forward(x, p)
        e = _residual_reference(x, p, dout)
        given = {"dout": dout.copy(), "x": x.copy(), "h": h.copy(),
                 **{k: v.copy() for k, v in p.items()}}
        out = expect_tuple(call(fn, given["dout"], (given["x"], given["h"]),
                                {k: given[k] for k in p}, case=case,
                                on_error="follow the shapes: dout (N, D) goes back through W2 "
                                         "(H, D) to the hidden units (N, H), then through W1 "
                                         "(D, H) to x (N, D). Which factor is transposed?"),
                           2, fn, case, "dx, grads")
        g_dx, grads = out
        if not isinstance(grads, dict) or set(grads) != set(p):
            got = sorted(grads) if isinstance(grads, dict) else type(grads).__name__
            fail(fn, case, f"grads should be a dict with the keys of params {sorted(p)}; got "
                           f"{got}.", "return one gradient per parameter, under the same key.")
        got = {k: to_array(v, fn, case, f"grads[{k!r}]") for k, v in grads.items()}
        g_dx = to_array(g_dx, fn, case, "dx")
        for k in ("b2", "W2", "b1", "W1"):
            expect_shape(got[k], p[k].shape, fn, case, f"grads[{k!r}]",
                         f"a gradient has the shape of its parameter, {shape_text(p[k].shape)}.")
        expect_shape(g_dx, (N, D), fn, case, "dx", "dx has x's shape (N, D).")
        mask = h > 0
        dh = dout @ p["W2"].T
        expect_close(got["b2"], e["b2"], fn, case, "db2, the gradient of b2", mistakes=[
            (dout.mean(axis=0), "db2 is a SUM of dout over the batch, not a mean."),
        ], fix="b2 is added to every sample's output: sum dout over the batch.")
        expect_close(got["W2"], e["W2"], fn, case, "dW2, the gradient of W2", mistakes=[
            (lambda: x.T @ dout, "W2's input is h, the ReLU's output, not the block's input x."),
            (lambda: h.T @ dout / N, "dW2 is divided by N: the loss's mean already sits in dout."),
            (lambda: (dout.T @ h), "dW2 is transposed: it has W2's shape (H, D), the hidden "
                                   "units on the rows."),
        ], fix="W2 multiplies h (N, H) to give (N, D): its gradient combines h and dout, summed "
               "over the batch, as in Linear's backward (lesson 03).")
        branch = (dh * mask) @ p["W1"].T
        expect_close(g_dx, e["x"], fn, case, "dx", mistakes=[
            (branch, "the skip path is missing: x reaches the output twice, through the block "
                     "and directly (out = x + ...), and the gradients of the two paths add up."),
            (dout, "that is the skip path only: x also reaches the output through the block "
                   "(Linear, ReLU, Linear), whose gradient adds to it."),
            (lambda: dout + dh @ p["W1"].T, "the ReLU's mask is missing: the gradient passes "
                                            "only where the ReLU passed its input (h > 0)."),
            (lambda: dout + (dh @ p["W1"].T) * mask, "the mask is applied in the wrong place: "
             "the ReLU sits between the two Linears, so its mask multiplies the gradient of the "
             "hidden units (N, H), after going back through W2 and before W1."),
            (lambda: dout + (((dout + dout @ p["W2"].T) * mask) @ p["W1"].T) if H == D else None,
             "the skip is added in the wrong place: it jumps over the whole block, so dout goes "
             "straight to dx, and only the block's own gradient goes through its layers."),
            (lambda: dout + ((dout @ p["W2"]) * mask) @ p["W1"], "the products need transposes: "
             "going back, dout (N, D) meets W2 (H, D) transposed, then W1 (D, H) transposed."),
            (lambda: 2 * dout + branch, "the skip is counted twice: dout reaches x once directly."),
        ], fix="two paths from x to the output: the skip (its local derivative is the identity) "
               "and the block (back through W2, the ReLU's mask, W1); their gradients add.")
        dz = dh * mask
        expect_close(got["b1"], e["b1"], fn, case, "db1, the gradient of b1", mistakes=[
            (lambda: dh.sum(axis=0), "db1 misses the ReLU's mask: b1 sits before the ReLU, so its "
                                     "gradient passes only where h > 0."),
            (lambda: (dh + dout).sum(axis=0) * mask.any(axis=0) if H == D else None,
             "the skip's dout leaks into the block's gradients: the skip carries no parameters."),
            (lambda: dz.mean(axis=0), "db1 is a SUM over the batch, not a mean."),
        ])
        expect_close(got["W1"], e["W1"], fn, case, "dW1, the gradient of W1", mistakes=[
            (lambda: x.T @ dh, "dW1 misses the ReLU's mask: W1 sits before the ReLU, so its "
                               "gradient passes only where h > 0."),
            (lambda: x.T @ ((dh + dout) * mask) if H == D else None,
             "the skip's dout leaks into the block's gradients: the skip carries no parameters."),
            (lambda: x.T @ dz / N, "dW1 is divided by N: the loss's mean already sits in dout."),
            (lambda: h.T @ dz if H == D else None, "W1's input is x, the block's input, not h."),
        ])
        expect_unchanged(fn, case, [(k, ref, given[k]) for k, ref in
                                    (("dout", dout), ("x", x), ("h", h),
                                     *((k, v) for k, v in p.items()))])
    if cp is not None:
        x, p, dout = cases[0]
        _, h = _residual_forward(x, p)
        e = _residual_reference(x, p, dout)
        case = f"x and dout of shape {shape_text(x.shape)}, on the GPU (CuPy arrays)"
        g_dx, grads = expect_tuple(call(fn, cp.asarray(dout), (cp.asarray(x), cp.asarray(h)),
                                        {k: cp.asarray(v) for k, v in p.items()}, case=case),
                                   2, fn, case,
                                   "dx, grads")
        for name, g, ref in [("dx", g_dx, e["x"])] + [(f"grads[{k!r}]", grads[k], e[k])
                                                     for k in p]:
            expect_on_gpu(g, fn, case, name)
            expect_close(to_array(g, fn, case, name), ref, fn, case, name)
    passed(fn, len(cases) + (cp is not None), cp is not None)


def _residual_reference(x, p, dout):
    """{"x": dx, "W1": ..., "b1": ..., "W2": ..., "b2": ...} from the library's layers."""
    __tracebackhide__ = True
    from ..layers import Linear, ReLU, Residual, Sequential
    D, H = p["W1"].shape
    first, second = Linear(D, H, dtype=np.float64), Linear(H, D, dtype=np.float64)
    first.params = {"W": p["W1"].copy(), "b": p["b1"].copy()}
    second.params = {"W": p["W2"].copy(), "b": p["b2"].copy()}
    block = Residual(Sequential(first, ReLU(), second))
    block.forward(x)
    dx = block.backward(dout)
    return {"x": dx, "W1": first.grads["W"], "b1": first.grads["b"],
            "W2": second.grads["W"], "b2": second.grads["b"]}


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'layernorm_backward': [
        ("draw ONE sample's graph: its D values -> (its mean, its variance) -> x_hat -> out. Each "
         "x reaches the loss directly, through the sample's mean and through its variance; the "
         "two statistics' paths each bring a mean over that sample's features (axis 1, "
         "keepdims=True). dgamma and dbeta still gather over the batch, axis 0."),
        ("with d = dout times gamma: dx = (d - the per-sample mean of ___ - x_hat times the "
         "per-sample mean of ___) / std, both means over axis 1 with keepdims; dbeta = the sum "
         "of ___ over axis 0; dgamma = the sum of ___ over axis 0. Lesson 07's BatchNorm "
         "derivation is the same reasoning over another axis; compare with dl.gradcheck."),
    ],
    'residual_backward': [
        ("x reaches the output along two paths, the skip and the block: what is the local "
         "derivative of the skip? Go back through the block layer by layer (second Linear, "
         "ReLU, first Linear), as lesson 03 did, then add the two paths' gradients at x."),
        ("dh = dout times W2 transposed (N, H); dW2 from h and dout; db2 = the sum of ___ over "
         "the batch; dz = dh where ___ > 0, else 0; dW1 from x and dz; db1 = the sum of ___; "
         "dx = ___ + dz times W1 transposed. The skip adds no parameter gradients. Lesson 03's "
         "Linear and ReLU backward are the pieces."),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'layernorm_backward': ['gather over the batch', "its own sample's",
        "over that sample's features", 'average over that sample', 'axis 1', 'axis=1', 'axis 0',
        'axis=0', 'sum over the batch', 'mean of d', '(d - '],
    'residual_backward': ['meet at x', 'dout +', '+ dout', 'plus dout', 'add the two',
        "the two paths' gradients", 'skip passes', 'identity'],
}
