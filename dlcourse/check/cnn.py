"""Checks for lesson 07: training a CNN (its parameters, batch normalization).

Each check takes *your* function, runs it on several small cases, compares it with the
library's reference (``dlcourse/conv.py``, ``layers.py``) and either prints one line saying
that every case passes, or raises :class:`ExerciseError` naming the case, the problem and,
for the common mistakes, the likely fix::

    dl.check.batchnorm_forward(batchnorm_forward)

=================  ===============================  =========================================
lesson             check                            your function
=================  ===============================  =========================================
07_training_a_cnn  :func:`conv_params`              ``(in_channels, out_channels, K) -> int``
07_training_a_cnn  :func:`batchnorm_forward`        ``(x, gamma, beta, eps) -> out``
07_training_a_cnn  :func:`batchnorm_running`        ``(x, gamma, beta, running_mean, ...)``
07_training_a_cnn  :func:`batchnorm_backward`       ``(dout, x, gamma, eps) -> dx, ...``
=================  ===============================  =========================================

The convolution lessons' checks (06a-06b) are in ``convolution.py``, the MLP lessons' (04a-05) in
``training.py`` and ``init_and_batching.py``; the shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_shape, expect_tuple, expect_unchanged, fail,
                      passed, rng, to_array, to_number)

__all__ = ["conv_params", "batchnorm_forward", "batchnorm_running", "batchnorm_backward"]


# While the learner's function runs the library is closed (harness.call; seal.py): an answer
# that calls into it, or into any package but NumPy and CuPy, fails, naming the call.
_BN = ["dlcourse.layers.BatchNorm2d.forward", "dlcourse.layers.BatchNorm2d.backward"]


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
        got = int(to_number(call(fn, C_in, C_out, K, case=case),
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
                                case=case), fn, case,
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

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'conv_params': ['out_channels * in_channels', 'in_channels * K * K', 'K * K', 'K*K',
        '+ out_channels', 'plus out_channels', 'times K squared'],
    'batchnorm_forward': ['x.mean(axis=(0, 2, 3)', 'np.sqrt(var + eps)', 'sqrt(var + eps)',
        '(x - mean)'],
    'batchnorm_running': ['unbiased', 'M/(M-1)', 'M / (M - 1)', 'm/(m-1)', 'ddof=1', 'ddof',
        '(N*H*W - 1)', 'M - 1'],
    'batchnorm_backward': ['mean of d', 'd - mean', 'd.mean(', 'x_hat * np.mean',
        'x_hat times the mean', '/ std', '(d - '],
}
