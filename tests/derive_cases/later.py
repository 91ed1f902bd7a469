"""Derivation and shortcut cases of lessons 10-16, dlcourse/check/compression.py, deploy.py, data_parallel.py, capstone.py, self_attention.py (see __init__.py).

Not in DERIVED (they ask for a rule or an algorithm the lesson states, not a formula or a
backward pass): loss_scale_step, magnitude_mask, validate_batch,
ring_all_reduce, topological_order, causal_mask (lesson 15 states the rule). Not in SHORTCUTS: fit_alpha_beta (the library has no fit of its own; NumPy's
polyfit is the tool the exercise asks for), two_time_pad (no library function recovers a
plaintext: the lesson only shows why dl.save never reuses a nonce).
"""

DERIVED: dict[str, list[str]] = {
    # lesson 10: round to nearest even on the bits (the bias, the lowest kept bit, the mask)
    "bf16_round": [r"(?i)0x7fff(?!f)", r"(?i)&0xffff0000", r">>16\)?&1", r"32767"],
    # lesson 11a: the scale of symmetric int8; M0 and the shift n of the fixed-point multiplier
    "quantize_symmetric": [r"max\|x\|/127", r"s=max", r"abs\(x\)\.max\(\)/127"],
    "requantize": [r"2\^\(31\+n\)", r"2\*\*\(31\+n\)", r"2\^\{31\+n\}", r"frexp",
                   r"M0=1690499128", r"n=6"],
    # lesson 11b: what goes with a pruned channel (conv2's input axis, the bias left whole)
    "prune_conv_pair": [r"W_?2\[:,kept\]", r"W_?2\[:,f\]", r"\[:,kept\]"],
    # lesson 12: the folded weights and bias
    "fold_batchnorm": [r"W'=s\\?,?W", r"W'=s\*W", r"\(b-\\mu\)\\?,?s\+\\beta", r"\(b-mean\)\*s",
                       r"b'=s\\?,?\(b-"],
    # lesson 12b: verify and load the same bytes; a crib gives the keystream, which gives both
    "load_signed": [r"readthebytesonce", r"verify\*?those\*?bytes\*?,build"],
    "two_time_pad": [r"c_1\\oplusc_2\\oplusp_1", r"c1\^c2\^p1", r"p_2=c_1\\oplus",
                     r"c_1\\oplusc_2=p_1\\oplusp_2", r"S_i=c_\{?m", r"p_\{2,i\}=c_\{2,i\}"],
    # lesson 13: the weights of the relative-error fit, and beta from the slope
    "fit_alpha_beta": [r"weights1/seconds", r"w=1/seconds", r"slope1/β", r"β=1/slope",
                       r"beta=1/slope"],
    # lesson 13b: the by-hand plan; the ring's chunk indices; the shard's start; the peak
    "bucket_plan": [r"\[\[4,2\],\[0\]\]", r"range\(len\(nbytes\)-1,-1,-1\)"],
    "reduce_scatter": [r"\(r[-−]s[-−]1\)", r"\(r[-−]s[-−]2\)", r"chunk\(r[-−]s"],
    "sharded_adam_step": [r"\(P//N\)\+min", r"min\(r(ank)?,P(%|mod)N\)"],
    "recompute_memory": [r"\(k\+⌈n/k⌉\)", r"k\+ceil\(n/k\)", r"\(k\+\\lceil", r"2√n"],
    # lesson 14: the backward pass of broadcasting, and of an elementwise product
    "unbroadcast": [r"summedoverexactlythoseaxes", r"db=dout\.sum\(axis=0\)",
                    r"sum\(axis=ones,keepdims=True\)"],
    "tensor_mul": [r"a\.grad\+=", r"b\.grad\+=", r"out\.grad\*b", r"unbroadcast\(out\.grad"],
    # lesson 15: softmax's Jacobian applied to dP, row by row
    "attention_backward": [r"diag\(p\)-pp", r"\\delta_\{?ij\}?-p_j", r"p_i\(\\delta",
                           r"dS=P\\odot\(", r"dS=P\*\(dP-", r"p\*\(dp-", r"\(dP-\\sum"],
    # lesson 16: the online softmax's merge; naive and tiled attention's traffic
    "merge_softmax": [r"e\^\{?m_?1-m", r"exp\(m_?1-m", r"l=e\^", r"\\alpha_1l_1",
                      r"a_1l_1o_1", r"l_1e\^"],
    "attention_bytes": [r"4T\^\{?2", r"4T²", r"4\*T\*\*2", r"4NHT", r"\(4T\^2\+4Td\)",
                        r"2T\^\{?2\}?d/B", r"\\lceilT/B_r", r"T\(T\+B_r\)/2", r"2nTd"],
}

SHORTCUTS: dict[str, tuple[str, str]] = {
    "load_signed": ("load_signed", '''
def load_signed(path, public_key_file):
    return dl.load(path, public_key=public_key_file)
'''),
    "loss_scale_step": ("loss_scale_step", '''
def loss_scale_step(scale, clean_steps, found_inf, growth_interval):
    scaler = dl.LossScaler(init_scale=scale, growth_interval=growth_interval)
    scaler.clean_steps = clean_steps
    take = scaler.update(found_inf)
    return scaler.scale, scaler.clean_steps, take
'''),
    "bf16_round": ("bf16_round", '''
def bf16_round(x):
    return dl.precision.round_to("bf16", x)
'''),
    "quantize_symmetric": ("quantize_symmetric", '''
def quantize_symmetric(x):
    from dlcourse.quantize import quantize_array, symmetric_scale
    s = symmetric_scale(x)
    return quantize_array(x, s), s
'''),
    "requantize": ("requantize", '''
def requantize(acc, M, z_y):
    from dlcourse.quantize import requantize as library
    return library(acc, M, z_y)
'''),
    "prune_conv_pair": ("prune_conv_pair", '''
def prune_conv_pair(conv1, bn, conv2, keep):
    F, C, KH, KW = conv1["W"].shape
    model = dl.Sequential(dl.Conv2d(C, F, (KH, KW)), dl.BatchNorm2d(F), dl.ReLU(),
                          dl.Conv2d(F, conv2["W"].shape[0], conv2["W"].shape[2:]))
    model.layers[0].load_state_dict(conv1)
    model.layers[1].load_state_dict(bn)
    model.layers[3].load_state_dict(conv2)
    small = dl.prune_channels(model, 0, keep).layers
    return small[0].state_dict(), small[1].state_dict(), small[3].state_dict()
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
    # lesson 13b (check/sharding.py)
    "bucket_plan": ("bucket_plan", '''
def bucket_plan(nbytes, bucket_bytes):
    return dl.overlap.bucket_plan(nbytes, bucket_bytes)
'''),
    "reduce_scatter": ("reduce_scatter", '''
def reduce_scatter(comm, x):
    return dl.distributed.ring_reduce_scatter(comm, x)
'''),
    "sharded_adam_step": ("sharded_adam_step", '''
def sharded_adam_step(p, g_shard, m, v, t, rank, world_size, lr):
    lo = sum(dl.distributed.chunk_sizes(p.size, world_size)[:rank])
    m = 0.9 * m + 0.1 * g_shard
    v = 0.999 * v + 0.001 * g_shard ** 2
    m_hat, v_hat = m / (1 - 0.9 ** t), v / (1 - 0.999 ** t)
    return p[lo:lo + g_shard.size] - lr * m_hat / (np.sqrt(v_hat) + 1e-8), m, v
'''),
    "recompute_memory": ("recompute_memory", '''
def recompute_memory(n, k, a):
    r = dl.recompute(dl.Sequential(*[dl.ReLU() for _ in range(n)]), segments=k)
    return (k + max(len(s) for s in r.segments)) * a
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
    "attention_backward": ("attention_backward", '''
def attention_backward(dout, cache):
    from dlcourse.attention import attention_backward as library
    return library(dout, cache)
'''),
    "causal_mask": ("causal_mask", '''
def causal_mask(Tq, Tk):
    from dlcourse.attention import causal_mask as library
    return library(Tq, Tk)
'''),
    "merge_softmax": ("merge_softmax", '''
def merge_softmax(m1, l1, o1, m2, l2, o2):
    # the merge is attention over two "keys", each block with its log-sum-exp as the score
    w = dl.softmax(np.concatenate([m1 + np.log(l1), m2 + np.log(l2)], axis=1))
    m = np.maximum(m1, m2)
    return m, np.exp(np.log(l1) + m1 - m) + np.exp(np.log(l2) + m2 - m), w[:, :1] * o1 + w[:, 1:] * o2
'''),
    "attention_bytes": ("attention_bytes", '''
def attention_bytes(N, H, T, d, itemsize, Br, causal):
    counts = dl.flash_attention.__globals__["attention_traffic"](N, H, T, d, itemsize,
                                                                 block=(Br, Br), causal=causal)
    return counts["naive"], counts["flash"]
'''),
}
