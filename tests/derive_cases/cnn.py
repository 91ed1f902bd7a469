"""Derivation and shortcut cases of lessons 04-07b, dlcourse/check/training.py,
init_and_batching.py, convolution.py, cnn.py and residual.py (see __init__.py).

Not in DERIVED (they ask for a rule the lesson states, not a formula): dead_fraction (04c: the
definition of a dead unit) and batch_requests (05: micro-batching). No shortcut case for
batch_requests: the library has no batcher of requests to call."""

DERIVED: dict[str, list[str]] = {
    "dropout_forward": [r"1/\(1-p\)", r"\\frac\{1\}\{1-p\}", r"\\frac\{x\}\{1-p\}"],
    "dropout_backward": [r"\\frac\{\\partialL\}\{\\partialx\}=", r"\\partialL/\\partialx=",
                         r"dout\*mask", r"dout\\odot"],
    "init_std": [r"\\mathrm\{Var\}\(w\)=2/", r"\\mathrm\{Var\}\(w\)=1/\\text",
                 r"\\sqrt\{2/", r"sqrt\(2/", r"\\mathrm\{Var\}\(y_?j?\)=\\text\{fan"],
    "conv_output_size": [r"//stride\+1", r"H\+2\*padding-K\)"],
    "im2col_simple": [r"\(n·OH\+i\)·OW\+j", r"\(n\*OH\+i\)\*OW\+j"],
    "maxpool_backward": [r"entirelytothepositionofthatwindow'smaximum", r"receivesthe\*sum\*",
                         r"window\.argmax\(\)"],
    "conv2d_backward": [r"db\[f\]=dout\[:,f\]\.sum\(\)", r"dW\[f\]\+=window\*dout",
                        r"\+=W\[f\]\*dout"],
    "adam_step": [r"1-\\beta_1\^", r"1-\\beta_2\^", r"1-beta1\*\*t", r"\\hat\{?m\}?_t="],
    "conv_output_size_2d": [r"OW=\(W\+2\*pw-KW\)//sw\+1", r"OH=\(H\+2\*ph-KH\)"],
    "max_window_grad": [r"addupto1", r"addsupto1", r"sumto1"],
    "batchnorm_running": [r"\\frac\{M\}\{M-1\}", r"M/\(M-1\)", r"1\.1\b"],
    "batchnorm_backward": [r"\\frac\{\\partialL\}\{\\partialx_i\}=", r"d_i-\\overline\{d\}",
                           r"\\partialL/\\partial\\beta=\\sum", r"\\partialL/\\partial\\gamma=\\sum"],
    "layernorm_backward": [r"\\frac\{\\partialL\}\{\\partialx_\{nj\}\}=",
                           r"d_\{nj\}-\\overline\{d\}", r"\\partialL/\\partial\\beta_j=\\sum",
                           r"\\partialL/\\partial\\gamma_j=\\sum", r"\.mean\(axis=1"],
    "residual_backward": [r"\\frac\{\\partialL\}\{\\partialx\}=g\+", r"I\+\\partialF/\\partialx",
                          r"dx=dout\+", r"\\partialL/\\partialW_2=h\^\\top"],
}

SHORTCUTS: dict[str, tuple[str, str]] = {
    "dead_fraction": ("dead_fraction", '''
def dead_fraction(h):
    return dl.layer_stats(dl.Sequential(dl.ReLU()), h)[0]["dead"]
'''),
    "iterate_minibatches": ("iterate_minibatches", '''
def iterate_minibatches(X, y, batch_size, shuffle=True, seed=None):
    yield from dl.data.batches(X, y, batch_size, shuffle=shuffle, seed=seed)
'''),
    "accuracy": ("accuracy", '''
def accuracy(logits, y):
    cm = dl.confusion_matrix(y, logits.argmax(axis=1), num_classes=logits.shape[1])
    return float(np.trace(cm) / cm.sum())
'''),
    "sgd_momentum_step": ("sgd_momentum_step", '''
def sgd_momentum_step(params, grads, velocity, lr, momentum):
    class Model:
        pass
    model = Model()
    model.params, model.grads = params, grads
    opt = dl.SGD(model, lr=lr, momentum=momentum)
    opt.state = velocity
    opt.step()
'''),
    "dropout_forward": ("dropout_forward", '''
def dropout_forward(x, p, rng):
    layer = dl.Dropout(p)
    out = layer.forward(x)
    return out, layer.cache
'''),
    "dropout_backward": ("dropout_backward", '''
def dropout_backward(dout, mask):
    layer = dl.Dropout(0.5)
    layer.cache = mask
    return layer.backward(dout)
'''),
    "init_std": ("init_std", '''
def init_std(fan_in, fan_out, scheme):
    return float(dl.Linear(fan_in, fan_out, init=scheme, seed=0).params["W"].std())
'''),
    "mlp_forward_batched": ("mlp_forward_batched", '''
def mlp_forward_batched(X, W1, b1, W2, b2):
    l1, l2 = dl.Linear(*W1.shape), dl.Linear(*W2.shape)
    l1.params, l2.params = {"W": W1, "b": b1}, {"W": W2, "b": b2}
    return l2.forward(dl.ReLU().forward(l1.forward(X)))
'''),
    "conv_output_size": ("conv_output_size", '''
def conv_output_size(H, K, stride=1, padding=0):
    return dl.conv.output_size(H, H, K, K, stride, padding)[0]
'''),
    "conv2d_naive": ("conv2d_naive", '''
def conv2d_naive(x, W, b, stride=1, padding=0):
    layer = dl.Conv2d(W.shape[1], W.shape[0], W.shape[2:], stride=stride, padding=padding)
    layer.params = {"W": W, "b": b}
    return layer.forward(x)
'''),
    "im2col_simple": ("im2col_simple", '''
def im2col_simple(x, KH, KW):
    return dl.im2col(x, KH, KW)
'''),
    "conv2d_backward": ("conv2d_backward", '''
def conv2d_backward(dout, x, W, stride=1, padding=0):
    layer = dl.Conv2d(W.shape[1], W.shape[0], W.shape[2:], stride=stride, padding=padding)
    layer.params = {"W": W, "b": np.zeros(W.shape[0])}
    layer.forward(x)
    dx = layer.backward(dout)
    return dx, layer.grads["W"], layer.grads["b"]
'''),
    "maxpool_backward": ("maxpool_backward", '''
def maxpool_backward(dout, x, K, stride):
    pool = dl.MaxPool2d(K, stride)
    pool.forward(x)
    return pool.backward(dout)
'''),
    "conv_params": ("conv_params", '''
def conv_params(in_channels, out_channels, kernel_size):
    layer = dl.Conv2d(in_channels, out_channels, kernel_size)
    return sum(p.size for p in layer.params.values())
'''),
    "batchnorm_forward": ("batchnorm_forward", '''
def batchnorm_forward(x, gamma, beta, eps=1e-5):
    bn = dl.BatchNorm2d(x.shape[1], eps=eps, dtype=x.dtype)
    bn.params = {"gamma": gamma, "beta": beta}
    return bn.forward(x)
'''),
    "batchnorm_backward": ("batchnorm_backward", '''
def batchnorm_backward(dout, x, gamma, eps=1e-5):
    bn = dl.BatchNorm2d(x.shape[1], eps=eps, dtype=x.dtype)
    bn.params = {"gamma": gamma, "beta": np.zeros_like(gamma)}
    bn.forward(x)
    dx = bn.backward(dout)
    return dx, bn.grads["gamma"], bn.grads["beta"]
'''),
    "adam_step": ("adam_step", '''
def adam_step(params, grads, m, v, t, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    class Model:
        pass
    model = Model()
    model.params, model.grads = params, grads
    opt = dl.Adam(model, lr=lr, betas=(beta1, beta2), eps=eps)
    opt.steps = t - 1
    opt.state = {**{k + "/m": a for k, a in m.items()}, **{k + "/v": a for k, a in v.items()}}
    opt.step()
'''),
    "conv_output_size_2d": ("conv_output_size_2d", '''
def conv_output_size_2d(H, W, kernel_size, stride=1, padding=0):
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)
    return dl.conv.output_size(H, W, *pair(kernel_size), stride, padding)
'''),
    "max_window_grad": ("max_window_grad", '''
def max_window_grad(window):
    K1, K2 = window.shape
    x = window.reshape(1, 1, K1, K2).astype(float)
    return dl.conv.maxpool_backward_naive(np.ones((1, 1, 1, 1)), x, K1, K2, 1)[0, 0]
'''),
    "batchnorm_running": ("batchnorm_running", '''
def batchnorm_running(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5,
                      training=True):
    bn = dl.BatchNorm2d(x.shape[1], eps=eps, momentum=momentum, dtype=x.dtype)
    bn.params = {"gamma": gamma, "beta": beta}
    bn.buffers = {"running_mean": running_mean.copy(), "running_var": running_var.copy()}
    bn.train(training)
    out = bn.forward(x)
    running_mean[...] = bn.buffers["running_mean"]
    running_var[...] = bn.buffers["running_var"]
    return out
'''),
    "layernorm_backward": ("layernorm_backward", '''
def layernorm_backward(dout, cache, gamma):
    x_hat, std = cache
    ln = dl.LayerNorm(x_hat.shape[1], eps=1e-12, dtype=x_hat.dtype)
    ln.params = {"gamma": gamma, "beta": np.zeros_like(gamma)}
    ln.forward(x_hat)
    return ln.backward(dout) / std, ln.grads["gamma"], ln.grads["beta"]
'''),
    "residual_backward": ("residual_backward", '''
def residual_backward(dout, cache, params):
    x, h = cache
    D, H = params["W1"].shape
    first, second = dl.Linear(D, H, dtype=x.dtype), dl.Linear(H, D, dtype=x.dtype)
    first.params = {"W": params["W1"], "b": params["b1"]}
    second.params = {"W": params["W2"], "b": params["b2"]}
    block = dl.Residual(dl.Sequential(first, dl.ReLU(), second))
    block.forward(x)
    dx = block.backward(dout)
    return dx, {"W1": first.grads["W"], "b1": first.grads["b"], "W2": second.grads["W"],
                "b2": second.grads["b"]}
'''),
}
