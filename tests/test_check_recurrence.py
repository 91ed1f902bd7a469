"""The lesson 14b exercise checks (dlcourse/check/recurrence.py): a right answer passes, a right
answer written differently passes, and each common wrong answer gets the message that names its
mistake. The checks' references (the library's RNN and LSTM) are held to finite differences here.

Each wrong answer is a small function named after its mistake, written as a learner would."""
import numpy as np
import pytest

import dlcourse as dl
import dlcourse.check as C
from dlcourse.check import recurrence as R
from support.expect import expect_fail, learner_copy


# ---- the references, gradient-checked in float64
@pytest.mark.parametrize("layer", [dl.RNN, dl.LSTM])
def test_the_references_agree_with_finite_differences(layer):
    x = np.random.default_rng(0).standard_normal((2, 4, 3))
    assert dl.gradcheck(layer(3, 5, dtype=np.float64, seed=1), x, verbose=False) < 1e-6


def test_the_window_by_window_reference_is_the_numpy_one_with_cuts_at_window_starts():
    for xs, h0, Wx, Wh, b, dhs, w in R._bptt_cases():
        hs, *expected = R._bptt_reference(dhs, xs, h0, Wx, Wh, b, w)
        mine = R._bptt_variant(dhs, xs, h0, hs, Wx, Wh, cut=lambda t: t % w == 0)
        assert all(np.allclose(a, e) for a, e in zip(mine, expected))


# ---- rnn_step_backward
def rnn_good(dh, cache):
    x, h_prev, Wx, Wh, h = cache
    da = dh * (1 - h ** 2)
    return da @ Wx.T, da @ Wh.T, x.T @ da, h_prev.T @ da, da.sum(axis=0)


def rnn_einsum_float64(dh, cache):               # right, written differently
    x, h_prev, Wx, Wh, h = (np.asarray(a, dtype=np.float64) for a in cache)
    da = np.einsum("nh,nh->nh", np.asarray(dh, dtype=np.float64), 1 - h * h)
    return (np.einsum("nh,dh->nd", da, Wx), np.einsum("nh,kh->nk", da, Wh),
            np.einsum("nd,nh->dh", x, da), np.einsum("nk,nh->kh", h_prev, da),
            np.einsum("nh->h", da))


def _rnn_with(tanh_prime):
    def rnn(dh, cache):
        x, h_prev, Wx, Wh, h = cache
        da = dh * tanh_prime(h)
        return da @ Wx.T, da @ Wh.T, x.T @ da, h_prev.T @ da, da.sum(axis=0)
    return rnn


rnn_tanh_twice = _rnn_with(lambda h: 1 - np.tanh(h) ** 2)
rnn_pre_activation = _rnn_with(lambda h: 1 - np.arctanh(h) ** 2)
rnn_no_tanh_prime = _rnn_with(lambda h: 1)


def rnn_wh_not_transposed(dh, cache):
    x, h_prev, Wx, Wh, h = cache
    da = dh * (1 - h * h)
    return da @ Wx.T, da @ Wh, x.T @ da, h_prev.T @ da, da.sum(axis=0)


def rnn_dwh_from_h(dh, cache):
    x, h_prev, Wx, Wh, h = cache
    da = dh * (1 - h * h)
    return da @ Wx.T, da @ Wh.T, x.T @ da, h.T @ da, da.sum(axis=0)


def rnn_db_mean(dh, cache):
    x, h_prev, Wx, Wh, h = cache
    da = dh * (1 - h * h)
    return da @ Wx.T, da @ Wh.T, x.T @ da, h_prev.T @ da, da.mean(axis=0)


def test_rnn_step_backward_accepts_right_answers(capsys):
    C.rnn_step_backward(rnn_good)
    C.rnn_step_backward(rnn_einsum_float64)
    assert capsys.readouterr().out.count("\u2713") == 2


@pytest.mark.parametrize("wrong, words", [
    (rnn_tanh_twice, ["tanh applied twice", "tanh's OUTPUT"]),
    (rnn_pre_activation, ["with the pre-activation"]),
    (rnn_no_tanh_prime, ["tanh's derivative is missing"]),
    (rnn_wh_not_transposed, ["dh_prev needs Wh transposed"]),
    (rnn_dwh_from_h, ["the PREVIOUS state h_prev"]),
    (rnn_db_mean, ["SUM over the batch"]),
])
def test_rnn_step_backward_names_each_mistake(wrong, words):
    expect_fail(C.rnn_step_backward, wrong, "case:", *words)


# ---- bptt
def _bptt_with(cut, replace=False, sum_weights=True):
    def bptt(dhs, cache, window, step_backward):
        xs, h0, hs, Wx, Wh = cache
        N, T, D = xs.shape
        dxs = np.zeros_like(xs)
        dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(Wh[0])
        carried = np.zeros_like(h0)
        for t in reversed(range(T)):
            h_prev = hs[:, t - 1] if t > 0 else h0
            dh = carried if replace and t < T - 1 and not cut(t + 1, window) else \
                dhs[:, t] + carried
            dxs[:, t], carried, gx, gh, gb = step_backward(dh, (xs[:, t], h_prev, Wx, Wh,
                                                               hs[:, t]))
            if sum_weights:
                dWx, dWh, db = dWx + gx, dWh + gh, db + gb
            elif t == T - 1:
                dWx, dWh, db = gx, gh, gb
            if cut(t, window):
                carried = np.zeros_like(h0)
        return dxs, dWx, dWh, db
    return bptt


bptt_good = _bptt_with(lambda t, w: t % w == 0)
bptt_cut_one_late = _bptt_with(lambda t, w: t % w == 1 or t == 0)
bptt_cut_one_early = _bptt_with(lambda t, w: (t + 1) % w == 0)
bptt_no_truncation = _bptt_with(lambda t, w: t == 0)
bptt_not_accumulated = _bptt_with(lambda t, w: True)
bptt_replaces = _bptt_with(lambda t, w: t % w == 0, replace=True)
bptt_one_step_weights = _bptt_with(lambda t, w: t % w == 0, sum_weights=False)


def bptt_windows_float64(dhs, cache, window, step_backward):   # right: window by window
    xs, h0, hs, Wx, Wh = (np.asarray(a, dtype=np.float64) for a in cache)
    T = xs.shape[1]
    dxs, grads = np.zeros_like(xs), [0, 0, 0]
    for start in range(0, T, window):
        carried = 0
        for t in range(min(start + window, T) - 1, start - 1, -1):
            h_prev = hs[:, t - 1] if t > 0 else h0
            dxs[:, t], carried, *g = step_backward(dhs[:, t] + carried,
                                                   (xs[:, t], h_prev, Wx, Wh, hs[:, t]))
            grads = [a + b for a, b in zip(grads, g)]
    return (dxs, *grads)


def test_bptt_accepts_right_answers(capsys):
    C.bptt(bptt_good)
    C.bptt(bptt_windows_float64)
    assert capsys.readouterr().out.count("\u2713") == 2


@pytest.mark.parametrize("wrong, words", [
    (bptt_cut_one_late, ["off by one", "one step late"]),
    (bptt_cut_one_early, ["off by one", "one step early"]),
    (bptt_no_truncation, ["there is no truncation"]),
    (bptt_not_accumulated, ["not accumulated across steps"]),
    (bptt_replaces, ["replaces dhs[:, t]"]),
    (bptt_one_step_weights, ["holds one step's gradient", "sums over the steps"]),
])
def test_bptt_names_each_mistake(wrong, words):
    expect_fail(C.bptt, wrong, "case:", *words)


# ---- lstm_step_backward
_lstm_variant = learner_copy(R._lstm_variant)     # the check's own variants, the learner's


def _lstm_with(**changed):
    def lstm_step_backward(dh, dc, cache):     # the right answer with one part changed
        return _lstm_variant(dh, dc, *cache, **changed)
    return lstm_step_backward


def lstm_good(dh, dc, cache):
    i, f, g, o, c_prev, c = cache
    tc = np.tanh(c)
    dct = dc + dh * o * (1 - tc ** 2)
    da = np.concatenate([dct * g * i * (1 - i), dct * c_prev * f * (1 - f),
                         dct * i * (1 - g ** 2), dh * tc * o * (1 - o)], axis=1)
    return da, dct * f


def lstm_einsum_float64(dh, dc, cache):           # right, written differently
    i, f, g, o, c_prev, c = (np.asarray(a, dtype=np.float64) for a in cache)
    tc = np.tanh(c)
    dct = dc + np.einsum("nh,nh->nh", dh, o * (1 - tc * tc))
    local = np.stack([g * i * (1 - i), c_prev * f * (1 - f), i * (1 - g * g)])   # (3, N, H)
    gates = np.einsum("knh,nh->nkh", local, dct)
    out = dh * tc * o * (1 - o)
    return np.concatenate([gates.reshape(len(dh), -1), out], axis=1), np.einsum("nh,nh->nh", dct, f)


def test_lstm_step_backward_accepts_right_answers(capsys):
    C.lstm_step_backward(lstm_good)
    C.lstm_step_backward(lstm_einsum_float64)
    assert capsys.readouterr().out.count("\u2713") == 2


@pytest.mark.parametrize("changed, words", [
    ({"keep": "none"}, ["the forget gate's path is missing"]),
    ({"forget": "zero"}, ["the forget gate's gradient is missing"]),
    ({"forget": "c"}, ["the PREVIOUS cell c_prev"]),
    ({"carry": False}, ["dc) is not carried"]),
    ({"keep": "zero"}, ["not carried back to c_prev"]),
    ({"keep": "incoming"}, ["only what came from the next step"]),
    ({"tanh_c": False}, ["1 - tanh(c)²"]),
    ({"local": False}, ["gates' outputs", "pre-activations"]),
    ({"out_tanh": False}, ["output gate multiplies tanh(c)"]),
    ({"order": "ifog"}, ["out of order", "i, f, g, o"]),
], ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else "")
def test_lstm_step_backward_names_each_mistake(changed, words):
    wrong = _lstm_with(**changed)
    expect_fail(C.lstm_step_backward, wrong, "case:", *words)


def test_the_checks_refuse_the_library_behind_the_answer():
    def rnn_step_backward(dh, cache):
        x, h_prev, Wx, Wh, h = cache
        layer = dl.RNN(x.shape[1], h.shape[1], dtype=np.float64)
        layer.params = {"Wx": Wx, "Wh": Wh, "b": np.zeros(h.shape[1])}
        layer.forward(x[:, None], h_prev)
        dx = layer.backward(dh[:, None])[:, 0]
        return dx, layer.dstate, layer.grads["Wx"], layer.grads["Wh"], layer.grads["b"]
    expect_fail(C.rnn_step_backward, rnn_step_backward, "library's own version")


def test_no_recurrence_check_message_holds_a_line_of_a_reference_solution():
    from test_hints import test_no_check_message_holds_a_line_of_a_reference_solution as held
    held("recurrence")


def test_the_checks_run_a_case_on_each_backend(device, capsys):
    """On the cupy backend (a GPU, or the CuPy stand-in) each check adds a case with CuPy arrays
    (bptt's handed-in step_backward too) and requires the results to stay there."""
    C.rnn_step_backward(rnn_good)
    C.bptt(bptt_good)
    C.lstm_step_backward(lstm_good)
    out = capsys.readouterr().out
    where = "(NumPy and CuPy)" if device == "gpu" else "(NumPy)"
    assert out.count(where) == 3, out


def test_a_result_sent_back_to_the_host_is_named_on_the_cupy_backend(device):
    if device != "gpu":
        pytest.skip("the host/device mix-up exists on the cupy backend only")
    from dlcourse import backend

    def rnn_on_the_host(dh, cache):
        return tuple(backend.to_numpy(a) if backend.device_of(a) == "gpu" else a
                     for a in rnn_good(dh, cache))
    expect_fail(C.rnn_step_backward, rnn_on_the_host, "on the GPU", "NumPy array")
