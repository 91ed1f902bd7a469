"""Derivation and shortcut cases of lesson 15c, dlcourse/check/tokens_and_block.py (see
__init__.py)."""

DERIVED: dict[str, list[str]] = {
    # the tie-break and the jump past a merged pair
    "bpe_merge_step": [r"\(-counts?\[p\],p\)", r"i\+=2", r"i\+2"],
    # RMSNorm's backward: the rms's path with its 1/D, and no mean's path
    "rmsnorm_backward": [r"\\hatg_j-\\hatx_j", r"r\(\\hat\{?g\}?-\\hatx", r"g_hat-x_hat\*",
                         r"\\frac\{r\}\{D\}", r"-\\frac\{?1\}?\{?D\}?\\sum_k\\hatg_k\\hatx_k"],
    # the rotation of one pair, written out
    "rope": [r"x_\{2i\}\\cos.*-x_\{2i\+1\}\\sin", r"x0\*cos-x1\*sin"],
}

SHORTCUTS: dict[str, tuple[str, str]] = {
    "bpe_merge_step": ("bpe_merge_step", '''
def bpe_merge_step(chunks, freqs, new):
    ids = [list(c.encode("utf-8")) if isinstance(c, str) else list(c) for c in chunks]
    pair = dl.data.bpe.learn_merges_naive(ids, freqs, 1)[0]
    return pair, [dl.data.bpe.merge_pair(c, pair, new) for c in ids]
'''),
    "rmsnorm_backward": ("rmsnorm_backward", '''
def rmsnorm_backward(dout, x, g, eps):
    layer = dl.RMSNorm(x.shape[-1], eps=eps, dtype=x.dtype)
    layer.params = {"g": g}
    layer.forward(x)
    return layer.backward(dout), layer.grads["g"]
'''),
    "rope": ("rope", '''
def rope(x, start):
    return dl.rope(x, start)
'''),
}
