"""Derivation and shortcut cases of lesson 14b, dlcourse/check/recurrence.py (see __init__.py)."""

DERIVED: dict[str, list[str]] = {
    # tanh' from the output, and the two Linear backward passes
    "rnn_step_backward": [r"=1-h\^2", r"\(1-h\\odoth\)", r"1-h\*h", r"\\deltaW_x\^\\top",
                          r"\\deltaW_h\^\\top"],
    # the sum reaching h_t, and where the carried gradient starts again from zero
    "bptt": [r"\(t\+1\)\\bmodk=0", r"\(t\+1\)%window==0", r"dhs\[:,t\]\+carried",
             r"g_t=dhs"],
    # the cell's two paths, and the way back to c_{t-1} through the forget gate
    "lstm_step_backward": [r"\\deltac=dc\+", r"\\deltac\\odotf", r"dct=dc\+", r"dc_prev=dct"],
}

SHORTCUTS: dict[str, tuple[str, str]] = {
    "rnn_step_backward": ("rnn_step_backward", '''
def rnn_step_backward(dh, cache):
    x, h_prev, Wx, Wh, h = cache
    layer = dl.RNN(x.shape[1], h.shape[1], dtype=x.dtype)
    layer.params = {"Wx": Wx, "Wh": Wh, "b": np.arctanh(h[0]) - x[0] @ Wx - h_prev[0] @ Wh}
    layer.forward(x[:, None], h_prev)
    dx = layer.backward(dh[:, None])[:, 0]
    return dx, layer.dstate, layer.grads["Wx"], layer.grads["Wh"], layer.grads["b"]
'''),
    "bptt": ("bptt", '''
def bptt(dhs, cache, window, step_backward):
    xs, h0, hs, Wx, Wh = cache
    layer = dl.RNN(xs.shape[2], h0.shape[1], dtype=xs.dtype)
    layer.params = {"Wx": Wx, "Wh": Wh, "b": np.zeros(h0.shape[1])}
    dxs, grads, state = [], [], h0
    for s in range(0, xs.shape[1], window):
        layer.forward(xs[:, s:s + window], state)
        state = layer.state
        dxs.append(layer.backward(dhs[:, s:s + window]))
        grads.append(layer.grads)
    return (np.concatenate(dxs, axis=1), *(sum(g[k] for g in grads) for k in ("Wx", "Wh", "b")))
'''),
    "lstm_step_backward": ("lstm_step_backward", '''
def lstm_step_backward(dh, dc, cache):
    i, f, g, o, c_prev, c = cache
    N, H = dh.shape
    logit = lambda p: np.log(p / (1 - p))
    layer = dl.LSTM(1, H, dtype=dh.dtype)
    da, dc_prev = np.empty((N, 4 * H)), np.empty((N, H))
    for n in range(N):
        layer.params = {"Wx": np.zeros((1, 4 * H)), "Wh": np.zeros((H, 4 * H)),
                        "b": np.concatenate([logit(i[n]), logit(f[n]), np.arctanh(g[n]),
                                             logit(o[n])])}
        layer.forward(np.zeros((1, 1, 1)), (np.zeros((1, H)), c_prev[n:n + 1]))
        layer.backward(dh[n:n + 1, None], dstate=(np.zeros((1, H)), dc[n:n + 1]))
        da[n], dc_prev[n] = layer.grads["b"], layer.dstate[1][0]
    return da, dc_prev
'''),
}
