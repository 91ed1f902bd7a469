"""Derivation and shortcut cases of lessons 10-14, dlcourse/check/compression.py, deploy.py, data_parallel.py, capstone.py (see __init__.py).

Not in DERIVED (they ask for a rule or an algorithm the lesson states, not a formula or a
backward pass): loss_scale_step, magnitude_mask, validate_batch, ring_all_reduce,
topological_order. Not in SHORTCUTS: fit_alpha_beta (the library has no fit of its own; NumPy's
polyfit is the tool the exercise asks for).
"""

DERIVED: dict[str, list[str]] = {
    # lesson 11: the scale of symmetric int8
    "quantize_symmetric": [r"max\|x\|/127", r"s=max", r"abs\(x\)\.max\(\)/127"],
    # lesson 12: the folded weights and bias
    "fold_batchnorm": [r"W'=s\\?,?W", r"W'=s\*W", r"\(b-\\mu\)\\?,?s\+\\beta", r"\(b-mean\)\*s",
                       r"b'=s\\?,?\(b-"],
    # lesson 13: the weights of the relative-error fit, and beta from the slope
    "fit_alpha_beta": [r"weights1/seconds", r"w=1/seconds", r"slope1/β", r"β=1/slope",
                       r"beta=1/slope"],
    # lesson 14: the backward pass of broadcasting, and of an elementwise product
    "unbroadcast": [r"summedoverexactlythoseaxes", r"db=dout\.sum\(axis=0\)",
                    r"sum\(axis=ones,keepdims=True\)"],
    "tensor_mul": [r"a\.grad\+=", r"b\.grad\+=", r"out\.grad\*b", r"unbroadcast\(out\.grad"],
}

SHORTCUTS: dict[str, tuple[str, str]] = {
    "loss_scale_step": ("loss_scale_step", '''
def loss_scale_step(scale, clean_steps, found_inf, growth_interval):
    scaler = dl.LossScaler(init_scale=scale, growth_interval=growth_interval)
    scaler.clean_steps = clean_steps
    take = scaler.update(found_inf)
    return scaler.scale, scaler.clean_steps, take
'''),
    "quantize_symmetric": ("quantize_symmetric", '''
def quantize_symmetric(x):
    from dlcourse.quantize import quantize_array, symmetric_scale
    s = symmetric_scale(x)
    return quantize_array(x, s), s
'''),
    "magnitude_mask": ("magnitude_mask", '''
def magnitude_mask(w, sparsity):
    layer = dl.Linear(w.size, 1)
    layer.params["W"][...] = w.reshape(-1, 1)
    dl.prune(dl.Sequential(layer), sparsity, scope="layer")
    return layer.masks["W"].reshape(w.shape)
'''),
    "fold_batchnorm": ("fold_batchnorm", '''
def fold_batchnorm(W, b, gamma, beta, mean, var, eps):
    F, C, KH, KW = W.shape
    conv, bn = dl.Conv2d(C, F, (KH, KW)), dl.BatchNorm2d(F, eps=eps)
    conv.params["W"][...], conv.params["b"][...] = W, b
    bn.params["gamma"][...], bn.params["beta"][...] = gamma, beta
    bn.buffers["running_mean"][...], bn.buffers["running_var"][...] = mean, var
    return dl.fast_inference.fold_batchnorm(conv, bn)
'''),
    "validate_batch": ("validate_batch", '''
def validate_batch(inputs, shape):
    return dl.inference.as_batch(inputs, tuple(shape))
'''),
    "ring_all_reduce": ("ring_all_reduce", '''
def ring_all_reduce(comm, x):
    return dl.distributed.ring_all_reduce(comm, x)
'''),
    "unbroadcast": ("unbroadcast", '''
def unbroadcast(grad, shape):
    return dl.autograd.unbroadcast(grad, shape)
'''),
    "tensor_mul": ("tensor_mul", '''
def tensor_mul(a, b):
    return a * b
'''),
    "topological_order": ("topological_order", '''
def topological_order(root):
    return dl.autograd.topological_order(root)
'''),
}
