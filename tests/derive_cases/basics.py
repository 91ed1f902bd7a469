"""Derivation and shortcut cases of lessons 00-03, dlcourse/check/basics.py (00-01),
gradient_descent.py (02) and backprop.py (03) (see __init__.py).

No shortcut case for normalize_rows: the library has no row normalizer to call. Not in DERIVED:
time_it (lesson 00: it asks for the three timing rules the lesson states, not a formula).
"""

DERIVED: dict[str, list[str]] = {
    # 02a_loss_and_softmax and 02b_gradient_descent
    "sigmoid_derivative": [r"s\(1-s\)", r"\\sigma\(z\)\(1-\\sigma\(z\)\)", r"\\sigma\(1-\\sigma\)",
                           r"\\sigma'\(z\)="],
    "sigmoid_ce_grad": [r"\\sigma\(z_?n?\)-y", r"\\sigma-y", r"s-y", r"sigmoid\(z\)-y",
                        r"predictionminustarget"],
    "cross_entropy": [r"\(z_k-m\)-\\log", r"z_k-m-\\log", r"shifted-log"],
    "softmax_ce_grad": [r"\[k=y_?n?\]-p", r"p_\{?n?,?k\}?-\[k=", r"softmax\(z\)-\\text\{one",
                        r"probabilitiesminustheone-hot", r"p-onehot|p-one_hot"],
    "hinge_grad": [r"\[s_\{?n?,?j\}?-s_\{?n?,?y_?n?\}?\+\\Delta>0\]",
                   r"-\\sum_\{?j\\neq?y_?n?\}?\[", r"minustheirnumber",
                   r"minusthenumberof(violat|the)"],
    # 03_backpropagation
    "linear_backward": [r"x\^\\top\\text\{dout\}", r"\\text\{dout\}\\?,?W\^\\top", r"dW=x",
                        r"dx=\\text\{dout\}|dx=dout", r"x\.T@dout", r"dout@W\.T"],
    "relu_backward": [r"\\text\{dout\}\\cdot\[x>0\]", r"dout\*\(x>0\)", r"dx=\\text\{dout\}\\cdot"],
}

SHORTCUTS: dict[str, tuple[str, str]] = {
    "time_it": ("time_it", '''
def time_it(fn, *, repeat=10, warmup=2, clock=None, wait=None):
    return dl.timeit(fn, repeat=repeat, warmup=warmup)
'''),
    "perceptron_predict": ("perceptron_predict", '''
def perceptron_predict(X, w, b):
    model = dl.Perceptron(n_features=X.shape[1])
    model.w, model.b = w, b
    return model.predict(X)
'''),
    "perceptron_update": ("perceptron_update", '''
def perceptron_update(w, b, x, y, lr=1.0):
    model = dl.Perceptron(n_features=len(w), lr=lr).fit(x[None, :], np.array([y]))
    return model.w, model.b
'''),
    "softmax": ("softmax", '''
def softmax(z):
    return dl.softmax(z)
'''),
    "cross_entropy": ("cross_entropy", '''
def cross_entropy(logits, labels):
    return dl.SoftmaxCrossEntropy().forward(logits, labels)
'''),
    "softmax_ce_grad": ("softmax_ce_grad", '''
def softmax_ce_grad(logits, labels):
    loss = dl.SoftmaxCrossEntropy()
    loss.forward(logits, labels)
    return loss.backward()
'''),
    "sigmoid_derivative": ("sigmoid_derivative", '''
def sigmoid_derivative(s):
    layer = dl.Sigmoid()
    layer.forward(np.log(s / (1 - s)))      # back to the logit z, then the layer's backward
    return layer.backward(np.ones_like(s))
'''),
    "sigmoid_ce_grad": ("sigmoid_ce_grad", '''
def sigmoid_ce_grad(z, y):
    loss = dl.SigmoidCrossEntropy()
    loss.forward(z, y)
    return loss.backward()
'''),
    "hinge_grad": ("hinge_grad", '''
def hinge_grad(scores, y, margin=1.0):
    loss = dl.MulticlassHingeLoss(margin)
    return loss.forward(scores, y), loss.backward()
'''),
    "linear_forward": ("linear_forward", '''
def linear_forward(x, W, b):
    layer = dl.Linear(W.shape[0], W.shape[1], dtype=x.dtype)
    layer.params = {"W": W, "b": b}
    return layer.forward(x), (x, W)
'''),
    "linear_backward": ("linear_backward", '''
def linear_backward(dout, cache):
    x, W = cache
    layer = dl.Linear(W.shape[0], W.shape[1], dtype=x.dtype)
    layer.params = {"W": W, "b": np.zeros(W.shape[1])}
    layer.forward(x)
    dx = layer.backward(dout)
    return dx, layer.grads["W"], layer.grads["b"]
'''),
    "relu_backward": ("relu_backward", '''
def relu_backward(dout, cache):
    layer = dl.ReLU()
    layer.forward(cache)
    return layer.backward(dout)
'''),
}
