"""Checks for lesson 14b: sequences, recurrent networks and backpropagation through time.

Each check takes *your* function, runs it on several small cases in float64, compares it with
the library's reference (``dlcourse/recurrent.py``: ``RNN`` and ``LSTM``, whose backward passes
are gradient-checked against finite differences in tests/test_check_recurrence.py) and either
prints one line saying that every case passes, or raises :class:`ExerciseError` naming the case,
the problem and, for the common mistakes, the likely fix::

    dl.check.rnn_step_backward(rnn_step_backward)

========================  ============================  =========================================
lesson                    check                         your function
========================  ============================  =========================================
14b_recurrent_networks    :func:`rnn_step_backward`     ``(dh, cache) -> dx, dh_prev, dWx, dWh,
                                                        db``
14b_recurrent_networks    :func:`bptt`                  ``(dhs, cache, window, step_backward)
                                                        -> dxs, dWx, dWh, db``
14b_recurrent_networks    :func:`lstm_step_backward`    ``(dh, dc, cache) -> da, dc_prev``
========================  ============================  =========================================

(Named ``recurrence.py``, not ``recurrent.py``: the library's module has that name, and no two
modules of the package share one.) The shared machinery lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_gpu_close, expect_shape, expect_tuple,
                      expect_unchanged, gpu, passed, rng, shape_text, to_array, to_gpu)

__all__ = ["rnn_step_backward", "bptt", "lstm_step_backward"]

_RNN_FIX = ("follow the shapes: da (N, H) is the gradient at the pre-activation; x (N, D) met Wx "
            "(D, H) and h_prev (N, H) met Wh (H, H) on the way forward. Which factor is "
            "transposed going back?")


# ======================================================================================
# References: the library's layers, run in float64
# ======================================================================================
def _rnn_reference(x, h_prev, Wx, Wh, b, dh):
    """One step of dl.RNN (T = 1): (h, dx, dh_prev, dWx, dWh, db)."""
    __tracebackhide__ = True
    from ..recurrent import RNN
    N, D = x.shape
    layer = RNN(D, Wh.shape[0], dtype=np.float64)
    layer.params = {"Wx": Wx.copy(), "Wh": Wh.copy(), "b": b.copy()}
    h = layer.forward(x[:, None], h_prev.copy())[:, 0]
    dx = layer.backward(dh[:, None])[:, 0]
    return h, dx, layer.dstate, layer.grads["Wx"], layer.grads["Wh"], layer.grads["b"]


def _rnn_cases():
    """(x, h_prev, Wx, Wh, b, dh) of each case; one has D == H, where a transposed Wx keeps the
    shapes right, and the weights are large enough that tanh saturates in places."""
    __tracebackhide__ = True
    r = rng(141)
    cases = []
    for N, D, H in [(4, 3, 5), (3, 4, 4), (1, 2, 3), (5, 6, 2)]:
        cases.append((r.standard_normal((N, D)), np.tanh(r.standard_normal((N, H))),
                      r.standard_normal((D, H)), r.standard_normal((H, H)),
                      r.standard_normal(H) * 0.5, r.standard_normal((N, H))))
    return cases


def rnn_step_backward(fn) -> None:
    """Check ``fn(dh, cache)`` -> ``(dx, dh_prev, dWx, dWh, db)``: the backward pass of one step
    of the tanh RNN, ``h = tanh(x @ Wx + h_prev @ Wh + b)``, with ``cache = (x, h_prev, Wx, Wh,
    h)``: x (N, D), h_prev and h (N, H), Wx (D, H), Wh (H, H); dh (N, H) is the gradient reaching
    h. Compared with ``dl.RNN``'s backward over one step. The usual mistakes are named: tanh'
    taken as if h were the pre-activation (or the pre-activation squared), tanh' missing, a
    missing transpose, Wh's gradient from h instead of h_prev, a mean where a sum belongs."""
    __tracebackhide__ = True
    for x, h_prev, Wx, Wh, b, dh in _rnn_cases():
        N, D = x.shape
        H = Wh.shape[0]
        case = (f"x of shape {shape_text((N, D))}, h_prev and dh {shape_text((N, H))}, Wx "
                f"{shape_text((D, H))}, Wh {shape_text((H, H))}")
        h, e_dx, e_dhp, e_dWx, e_dWh, e_db = _rnn_reference(x, h_prev, Wx, Wh, b, dh)
        given = {"dh": dh.copy(), "x": x.copy(), "h_prev": h_prev.copy(), "Wx": Wx.copy(),
                 "Wh": Wh.copy(), "h": h.copy()}
        out = expect_tuple(call(fn, given["dh"], tuple(given[k] for k in
                                                       ("x", "h_prev", "Wx", "Wh", "h")),
                                case=case, on_error=_RNN_FIX),
                           5, fn, case, "dx, dh_prev, dWx, dWh, db")
        dx, dhp, dWx, dWh, db = (to_array(a, fn, case, n) for a, n in
                                 zip(out, ("dx", "dh_prev", "dWx", "dWh", "db")))
        with np.errstate(all="ignore"):
            pre = np.arctanh(np.clip(h, -1 + 1e-12, 1 - 1e-12))     # the pre-activation
        da = dh * (1 - h * h)
        expect_shape(db, (H,), fn, case, "db", "b has one entry per hidden unit: (H,).")
        expect_close(db, e_db, fn, case, "db", mistakes=[
            (dh.sum(axis=0), "tanh's derivative is missing: the gradient reaching h must pass "
                             "back through tanh before it reaches b, x and the weights."),
            ((dh * (1 - np.tanh(h) ** 2)).sum(axis=0),
             "tanh' is taken at h as if h were the pre-activation (tanh applied twice): the "
             "cache holds tanh's OUTPUT h; write tanh' in terms of it."),
            ((dh * (1 - pre ** 2)).sum(axis=0),
             "tanh' is written with the pre-activation where the formula takes tanh's output: "
             "1 - (x Wx + h_prev Wh + b)² is not tanh' at that point; use h."),
            ((dh * (1 - h)).sum(axis=0), "tanh' needs h squared."),
            (da.mean(axis=0), "db is a SUM over the batch, not a mean."),
        ], fix="db gathers, over the batch, the gradient at the pre-activation.")
        expect_shape(dWx, (D, H), fn, case, "dWx", "a gradient has its parameter's shape.")
        expect_close(dWx, e_dWx, fn, case, "dWx", mistakes=[
            (lambda: x.T @ dh, "tanh's derivative is missing in dWx."),
            (lambda: (da.T @ x).T if D == H else None, _RNN_FIX),
            (lambda: x.T @ da / N, "dWx is divided by N: the loss's mean already sits in dh."),
        ], fix="Wx multiplies x (N, D): its gradient combines x and da, summed over the batch.")
        expect_shape(dWh, (H, H), fn, case, "dWh", "a gradient has its parameter's shape.")
        expect_close(dWh, e_dWh, fn, case, "dWh", mistakes=[
            (lambda: h.T @ da, "Wh multiplies the PREVIOUS state h_prev, not this step's output "
                               "h: its gradient combines h_prev and da."),
            (lambda: da.T @ h_prev, "dWh is transposed: " + _RNN_FIX),
            (lambda: h_prev.T @ dh, "tanh's derivative is missing in dWh."),
        ])
        expect_shape(dx, (N, D), fn, case, "dx", "dx has x's shape (N, D).")
        expect_close(dx, e_dx, fn, case, "dx", mistakes=[
            (lambda: dh @ Wx.T, "tanh's derivative is missing in dx."),
            (lambda: da @ Wx if D == H else None, "dx needs Wx transposed: " + _RNN_FIX),
        ])
        expect_shape(dhp, (N, H), fn, case, "dh_prev", "dh_prev has h_prev's shape (N, H).")
        expect_close(dhp, e_dhp, fn, case, "dh_prev", mistakes=[
            (lambda: da @ Wh, "dh_prev needs Wh transposed: h_prev (N, H) was multiplied by Wh "
                              "on the right, so going back da meets Wh's transpose."),
            (lambda: dh @ Wh.T, "tanh's derivative is missing in dh_prev."),
            (lambda: dh, "dh_prev is not dh: h_prev reaches h through Wh and tanh."),
        ])
        expect_unchanged(fn, case, [(k, v, given[k]) for k, v in
                                    (("dh", dh), ("x", x), ("h_prev", h_prev), ("Wx", Wx),
                                     ("Wh", Wh), ("h", h))])
    on_gpu = _gpu_case(fn, "dx, dh_prev, dWx, dWh, db", _rnn_gpu_args)
    passed(fn, 4 + on_gpu, on_gpu)


def _rnn_gpu_args():
    __tracebackhide__ = True
    x, h_prev, Wx, Wh, b, dh = _rnn_cases()[0]
    h, *expected = _rnn_reference(x, h_prev, Wx, Wh, b, dh)
    return (dh, (x, h_prev, Wx, Wh, h)), expected


def _gpu_case(fn, names, make) -> bool:
    """One case with CuPy arrays where a GPU is usable: every result stays on the GPU and is
    right. Returns whether it ran."""
    __tracebackhide__ = True
    cp = gpu()
    if cp is None:
        return False
    args, expected = make()
    case = "the first case again, on the GPU (CuPy arrays)"
    out = expect_tuple(call(fn, *to_gpu(cp, tuple(args)), case=case), len(expected), fn, case,
                       names)
    for got, ref, name in zip(out, expected, names.split(", ")):
        expect_gpu_close(got, ref, fn, case, name)
    return True


# ======================================================================================
# bptt(dhs, cache, window, step_backward)
# ======================================================================================
def _step(dh, cache):
    """One tanh step's backward, as the check hands it in (dx, dh_prev, dWx, dWh, db)."""
    __tracebackhide__ = True
    x, h_prev, Wx, Wh, h = cache
    da = dh * (1 - h * h)
    return da @ Wx.T, da @ Wh.T, x.T @ da, h_prev.T @ da, da.sum(axis=0)


def _bptt_variant(dhs, xs, h0, hs, Wx, Wh, cut, replace=False):
    """Backpropagation through time with NumPy, cutting the gradient from step t back to step
    t-1 where ``cut(t)``; ``replace``: the carried gradient replaces dhs[:, t] instead of adding
    to it. For the mistakes (the right answer comes from the library)."""
    __tracebackhide__ = True
    T = xs.shape[1]
    dxs, dWx, dWh, db = np.zeros_like(xs), np.zeros_like(Wx), np.zeros_like(Wh), 0
    carried = None
    for t in reversed(range(T)):
        h_prev = hs[:, t - 1] if t > 0 else h0
        dh = dhs[:, t] if carried is None else (carried if replace else dhs[:, t] + carried)
        dx, dhp, gx, gh, gb = _step(dh, (xs[:, t], h_prev, Wx, Wh, hs[:, t]))
        dxs[:, t], dWx, dWh, db = dx, dWx + gx, dWh + gh, db + gb
        carried = None if cut(t) else dhp
    return dxs, dWx, dWh, db


def _bptt_reference(dhs, xs, h0, Wx, Wh, b, window):
    """dl.RNN run window by window, the state carried forward, the gradient cut at each
    window's start: (hs, dxs, dWx, dWh, db)."""
    __tracebackhide__ = True
    from ..recurrent import RNN
    N, T, D = xs.shape
    layer = RNN(D, Wh.shape[0], dtype=np.float64)
    layer.params = {"Wx": Wx.copy(), "Wh": Wh.copy(), "b": b.copy()}
    hs, dxs, grads, state = [], [], [], h0.copy()
    for s in range(0, T, window):
        hs.append(layer.forward(xs[:, s:s + window], state))
        state = layer.state
        dxs.append(layer.backward(dhs[:, s:s + window]))
        grads.append(layer.grads)
    sums = [sum(g[k] for g in grads) for k in ("Wx", "Wh", "b")]
    return (np.concatenate(hs, axis=1), np.concatenate(dxs, axis=1), *sums)


def _bptt_cases():
    """(xs, h0, Wx, Wh, b, dhs, window): T not a multiple of the window in most cases, so that
    a boundary one step off shows; one window as long as the sequence (no cut inside)."""
    __tracebackhide__ = True
    r = rng(142)
    cases = []
    for N, T, D, H, window in [(3, 7, 2, 4, 3), (2, 6, 3, 3, 2), (2, 5, 2, 3, 5), (2, 9, 3, 4, 4)]:
        cases.append((r.standard_normal((N, T, D)), np.tanh(r.standard_normal((N, H))),
                      r.standard_normal((D, H)), r.standard_normal((H, H)) / np.sqrt(H),
                      r.standard_normal(H) * 0.5, r.standard_normal((N, T, H)), window))
    return cases


def bptt(fn) -> None:
    """Check ``fn(dhs, cache, window, step_backward)`` -> ``(dxs, dWx, dWh, db)``: truncated
    backpropagation through time of the tanh RNN over T steps, ``cache = (xs, h0, hs, Wx, Wh)``
    with xs (N, T, D), h0 (N, H) the state before step 0, hs (N, T, H) every step's state; dhs
    (N, T, H) is the gradient reaching each h_t from that step's output. The sequence runs in
    windows of ``window`` steps, the state carried from one to the next, and no gradient goes
    back from a window into the one before. ``step_backward(dh, (x, h_prev, Wx, Wh, h))`` is
    one step's backward (``rnn_step_backward``'s signature; the check hands in one that is
    right). Compared with ``dl.RNN`` run window by window. The usual mistakes are named: the
    hidden state's gradient not carried from step to step, or replacing the step's own, no
    truncation, a window boundary one step off, the weights' gradients not summed over the
    steps."""
    __tracebackhide__ = True
    for xs, h0, Wx, Wh, b, dhs, window in _bptt_cases():
        N, T, D = xs.shape
        H = Wh.shape[0]
        case = (f"N = {N} sequences of T = {T} steps, D = {D}, H = {H}, window = {window} "
                f"(windows start at steps {list(range(0, T, window))})")
        hs, *expected = _bptt_reference(dhs, xs, h0, Wx, Wh, b, window)
        given = {"dhs": dhs.copy(), "xs": xs.copy(), "h0": h0.copy(), "hs": hs.copy(),
                 "Wx": Wx.copy(), "Wh": Wh.copy()}
        out = expect_tuple(call(fn, given["dhs"], tuple(given[k] for k in
                                                        ("xs", "h0", "hs", "Wx", "Wh")),
                                window, _step, case=case,
                                on_error="step t's cache is (xs[:, t], the state before step t "
                                         "(h0 at t = 0), Wx, Wh, hs[:, t]); what reaches h_t "
                                         "has shape (N, H)."),
                           4, fn, case, "dxs, dWx, dWh, db")
        got = [to_array(a, fn, case, n) for a, n in zip(out, ("dxs", "dWx", "dWh", "db"))]
        args = (dhs, xs, h0, hs, Wx, Wh)
        every = ("h_t feeds step t+1, so the gradient reaching it is dhs[:, t] PLUS what step "
                 "t+1 sends back")
        wrong = [
            (_bptt_variant(*args, cut=lambda t: t % window == 1 or t == 0) if window > 1 else
             None, "the truncation window is off by one: a window of steps s .. s+window-1 "
                   "sends no gradient back from its first step, s, to step s-1; here the cut "
                   "falls one step late."),
            (_bptt_variant(*args, cut=lambda t: (t + 1) % window == 0),
             "the truncation window is off by one: the cut falls one step early (windows start "
             "at steps 0, window, 2·window, ...)."),
            (_bptt_variant(*args, cut=lambda t: t % (window + 1) == 0),
             "the truncation window is off by one: your windows are window + 1 steps long."),
            (_bptt_variant(*args, cut=lambda t: t % (window - 1) == 0) if window > 2 else None,
             "the truncation window is off by one: your windows are window - 1 steps long."),
            (_bptt_variant(*args, cut=lambda t: t == 0) if window < T else None,
             "there is no truncation: the gradient crosses from each window into the one before "
             "(through the carried state); the exercise stops it at each window's start."),
            (_bptt_variant(*args, cut=lambda t: True),
             "the hidden state's gradient is not accumulated across steps: " + every + "."),
            (_bptt_variant(*args, cut=lambda t: t % window == 0, replace=True),
             "the gradient carried back from step t+1 replaces dhs[:, t]: " + every + "."),
        ]
        last = _step(dhs[:, -1], (xs[:, -1], hs[:, -2], Wx, Wh, hs[:, -1]))
        for j, name, shape in [(2, "dWh", (H, H)), (1, "dWx", (D, H)), (3, "db", (H,)),
                               (0, "dxs", (N, T, D))]:
            expect_shape(got[j], shape, fn, case, name, f"{name} has shape {shape_text(shape)}.")
            one_step = [] if j == 0 else [
                (last[j + 1], f"{name} holds one step's gradient: Wx, Wh and b are used at every "
                              f"step, so their gradients are sums over the steps.")]
            expect_close(got[j], expected[j], fn, case, name, mistakes=[
                (None if w is None else w[j], text) for w, text in wrong] + one_step,
                fix="run the steps backwards from T-1 to 0, carrying the gradient of the state "
                    "from one step to the one before, except across a window's start.")
        expect_unchanged(fn, case, [(k, v, given[k]) for k, v in
                                    (("dhs", dhs), ("xs", xs), ("h0", h0), ("hs", hs),
                                     ("Wx", Wx), ("Wh", Wh))])
    on_gpu = _gpu_case(fn, "dxs, dWx, dWh, db", _bptt_gpu_args)
    passed(fn, 4 + on_gpu, on_gpu)


def _bptt_gpu_args():
    __tracebackhide__ = True
    xs, h0, Wx, Wh, b, dhs, window = _bptt_cases()[0]
    hs, *expected = _bptt_reference(dhs, xs, h0, Wx, Wh, b, window)
    return (dhs, (xs, h0, hs, Wx, Wh), window, _step), expected


# ======================================================================================
# lstm_step_backward(dh, dc, cache)
# ======================================================================================
def _lstm_reference(x, h_prev, c_prev, Wx, Wh, b, dh, dc):
    """One step of dl.LSTM: (i, f, g, o, c, da (N, 4H), dc_prev). da is the gradient at the
    four pre-activations, read sample by sample as db of a one-sample backward."""
    __tracebackhide__ = True
    from ..recurrent import LSTM
    N, D = x.shape
    H = Wh.shape[0]
    layer = LSTM(D, H, dtype=np.float64)
    layer.params = {"Wx": Wx.copy(), "Wh": Wh.copy(), "b": b.copy()}
    layer.forward(x[:, None], (h_prev.copy(), c_prev.copy()))
    acts, c = layer.cache[3][:, 0], layer.cache[4][:, 0]
    da, dc_prev = np.empty((N, 4 * H)), np.empty((N, H))
    for n in range(N):
        layer.forward(x[n:n + 1, None], (h_prev[n:n + 1].copy(), c_prev[n:n + 1].copy()))
        layer.backward(dh[n:n + 1, None], dstate=(np.zeros((1, H)), dc[n:n + 1].copy()))
        da[n], dc_prev[n] = layer.grads["b"], layer.dstate[1][0]
    i, f, g, o = (acts[:, k * H:(k + 1) * H] for k in range(4))
    return i, f, g, o, c, da, dc_prev


def _lstm_variant(dh, dc, i, f, g, o, c_prev, c, carry=True, tanh_c=True, forget="c_prev",
                  local=True, out_tanh=True, order="ifgo", keep="f"):
    """The step's backward with NumPy, one part changed (for the mistakes)."""
    __tracebackhide__ = True
    tc = np.tanh(c)
    dct = (dc if carry else 0) + dh * o * ((1 - tc * tc) if tanh_c else (1 - c * c))
    grads = {"i": dct * g, "f": {"c_prev": dct * c_prev, "c": dct * c, "zero": 0 * c}[forget],
             "g": dct * i, "o": dh * (tc if out_tanh else c)}
    if local:
        grads = {"i": grads["i"] * i * (1 - i), "f": grads["f"] * f * (1 - f),
                 "g": grads["g"] * (1 - g * g), "o": grads["o"] * o * (1 - o)}
    da = np.concatenate([grads[k] for k in order], axis=1)
    return da, {"f": dct * f, "none": dct, "incoming": dc * f, "zero": 0 * c}[keep]


def _lstm_cases():
    """(x, h_prev, c_prev, Wx, Wh, b, dh, dc) of each case, with gates spread over (0, 1)."""
    __tracebackhide__ = True
    r = rng(143)
    cases = []
    for N, D, H in [(4, 3, 5), (3, 2, 2), (1, 3, 4), (5, 4, 3)]:
        cases.append((r.standard_normal((N, D)), np.tanh(r.standard_normal((N, H))),
                      r.standard_normal((N, H)), r.standard_normal((D, 4 * H)),
                      r.standard_normal((H, 4 * H)), r.standard_normal(4 * H) * 0.5,
                      r.standard_normal((N, H)), r.standard_normal((N, H))))
    return cases


def lstm_step_backward(fn) -> None:
    """Check ``fn(dh, dc, cache)`` -> ``(da, dc_prev)``: the backward pass of one LSTM step,
    ``c = f*c_prev + i*g``, ``h = o*tanh(c)``, with ``cache = (i, f, g, o, c_prev, c)``, each
    (N, H): the gates after their nonlinearities (σ for i, f, o; tanh for g), the previous and
    this step's cell. dh (N, H) is the gradient reaching h, dc (N, H) the one reaching c from the
    next step. da (N, 4H) is the gradient at the four pre-activations, in PyTorch's order i, f,
    g, o; dc_prev (N, H) the gradient sent to c_prev. Compared with ``dl.LSTM``'s backward over
    one step. The usual mistakes are named: the cell's gradient from the next step not carried,
    the forget gate's path (its own gradient, or the cell's way back through it) missing, tanh'
    of the cell, the gates' local derivatives left out, the gates out of order."""
    __tracebackhide__ = True
    for x, h_prev, c_prev, Wx, Wh, b, dh, dc in _lstm_cases():
        N, H = dh.shape
        case = f"N = {N} samples, H = {H} hidden units (da of shape {shape_text((N, 4 * H))})"
        i, f, g, o, c, e_da, e_dcp = _lstm_reference(x, h_prev, c_prev, Wx, Wh, b, dh, dc)
        given = {"dh": dh.copy(), "dc": dc.copy(), "i": i.copy(), "f": f.copy(), "g": g.copy(),
                 "o": o.copy(), "c_prev": c_prev.copy(), "c": c.copy()}
        out = expect_tuple(call(fn, given["dh"], given["dc"],
                                tuple(given[k] for k in ("i", "f", "g", "o", "c_prev", "c")),
                                case=case,
                                on_error="every array is (N, H); da puts the four gates' "
                                         "gradients side by side along axis 1."),
                           2, fn, case, "da, dc_prev")
        da, dcp = (to_array(a, fn, case, n) for a, n in zip(out, ("da", "dc_prev")))
        parts = (dh, dc, i, f, g, o, c_prev, c)

        def v(**changed):
            __tracebackhide__ = True
            return lambda: _lstm_variant(*parts, **changed)
        carried = ("the cell's gradient from the next step (dc) is not carried: c_t reaches the "
                   "loss through h_t and through c_{t+1}, and the two gradients add before they "
                   "go on into the gates and to c_prev.")
        expect_shape(dcp, (N, H), fn, case, "dc_prev", "dc_prev has c_prev's shape (N, H).")
        expect_close(dcp, e_dcp, fn, case, "dc_prev", mistakes=[
            (lambda: v(keep="none")()[1], "the forget gate's path is missing: c_prev reaches "
                                          "c_t multiplied by f, so its gradient is multiplied "
                                          "by f on the way back."),
            (lambda: v(carry=False)()[1], carried),
            (lambda: v(keep="incoming")()[1], "dc_prev holds only what came from the next "
                                              "step: h_t depends on c_t too (through tanh), and "
                                              "that gradient reaches c_prev as well."),
            (lambda: v(tanh_c=False)()[1], "tanh' of the cell is 1 - tanh(c)², not 1 - c²: h = "
                                           "o·tanh(c) takes tanh of c, and c is not a tanh's "
                                           "output."),
            (0 * c, "the cell state's gradient is not carried back to c_prev: it is the path "
                    "that lets the gradient live long."),
        ])
        expect_shape(da, (N, 4 * H), fn, case, "da", "da puts the four gates' (N, H) "
                                                     "gradients side by side: (N, 4H).")
        expect_close(da, e_da, fn, case, "da", mistakes=[
            (lambda: v(carry=False)()[0], carried),
            (lambda: v(forget="zero")()[0], "the forget gate's gradient is missing: f "
                                            "multiplies c_prev, so it has a gradient too."),
            (lambda: v(forget="c")()[0], "the forget gate multiplies the PREVIOUS cell c_prev, "
                                         "not c_t."),
            (lambda: v(tanh_c=False)()[0], "tanh' of the cell is 1 - tanh(c)², not 1 - c²."),
            (lambda: v(local=False)()[0], "those are the gradients at the gates' outputs; da is "
                                          "at their pre-activations: multiply each by its own "
                                          "local derivative (σ' for i, f, o; tanh' for g, both "
                                          "given above, in terms of the outputs)."),
            (lambda: v(out_tanh=False)()[0], "the output gate multiplies tanh(c), not c."),
            (lambda: v(order="ifog")()[0], "the gates are out of order: da's blocks go in "
                                           "PyTorch's order i, f, g, o."),
            (lambda: v(order="fiog")()[0], "the gates are out of order: da's blocks go in "
                                           "PyTorch's order i, f, g, o."),
        ], fix="take it gate by gate: what each gate multiplies on the way forward, then its "
               "local derivative; compare the blocks of da with dl.gradcheck(dl.LSTM(D, H), x).")
        expect_unchanged(fn, case, [(k, given_v, given[k]) for k, given_v in
                                    zip(given, (dh, dc, i, f, g, o, c_prev, c))])
    on_gpu = _gpu_case(fn, "da, dc_prev", _lstm_gpu_args)
    passed(fn, 4 + on_gpu, on_gpu)


def _lstm_gpu_args():
    __tracebackhide__ = True
    x, h_prev, c_prev, Wx, Wh, b, dh, dc = _lstm_cases()[0]
    i, f, g, o, c, da, dcp = _lstm_reference(x, h_prev, c_prev, Wx, Wh, b, dh, dc)
    return (dh, dc, (i, f, g, o, c_prev, c)), [da, dcp]


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'rnn_step_backward': [
        ("two stages, as for Linear then an activation in lesson 03, in the other order: "
         "first back through tanh to the pre-activation (N, H), written with the output h the "
         "cache holds; then back through the sum x Wx + h_prev Wh + b, where each term is a "
         "Linear's product."),
        ("da = dh times (1 - ___); then dWx from x and da, dWh from ___ and da, db = the sum "
         "of ___ over the batch, dx = da times Wx transposed, dh_prev = da times ___ "
         "transposed. Check the shapes against the cache's."),
    ],
    'bptt': [
        ("draw the unrolled graph: h_t feeds the output at t and step t+1. Going back from "
         "t = T-1 to 0, what reaches h_t is the sum of two gradients; step_backward turns it "
         "into what reaches h_{t-1}, x_t and the weights. Where does a window start, and what "
         "comes back across that start?"),
        ("carried = zeros; for t from T-1 down to 0: if step t is the ___ step of its window, "
         "start carried again from zeros; call step_backward on (step t's own output gradient "
         "+ ___) with step t's cache (its input, the state before it, Wx, Wh, its state); store "
         "dx at t, add the weights' gradients to ___, keep dh_prev as the new carried. The "
         "windows start at steps 0, window, 2·window, ..."),
    ],
    'lstm_step_backward': [
        ("c_t reaches the loss twice: through h_t = o·tanh(c_t) and through the next step's "
         "cell (dc). Sum them first. Then each gate: what did it multiply on the way forward? "
         "That product's other factor times the cell's gradient is the gate's output "
         "gradient; its local derivative (given, in terms of the gate) takes it to the "
         "pre-activation."),
        ("dc_total = dc + dh · o · (1 - ___); gate gradients before their nonlinearities: "
         "i gets dc_total · ___, f gets dc_total · ___, g gets dc_total · ___, o gets dh · ___; "
         "multiply i, f, o by σ' = s(1 - s) and g by 1 - g²; concatenate in the order i, f, g, "
         "o; dc_prev = dc_total · ___."),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'rnn_step_backward': ['1 - h', '1-h', 'h**2', 'h * h', 'h_prev.T', 'Wh.T', 'Wx.T',
                          'sum(axis=0)'],
    'bptt': ['% window', '(t + 1)', 't % ', 'dhs[:, t] +', '+ carried', 'reset', 'zeros'],
    'lstm_step_backward': ['dc +', '+ dc', '* f', '·f', 'c_prev', '(1 - i)', '1 - g',
                           'tanh(c)', 'o * (1'],
}
