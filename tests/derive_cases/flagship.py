"""Derivation and shortcut cases of lessons 15b and 16b (issue 38),
dlcourse/check/transformer_block.py and flash_tiled.py (see __init__.py).

Not in DERIVED: mha_forward and train_step (the lesson states the algorithm: the heads as a
reshape and a transpose; clip, then AdamW, both from lesson 04b)."""

DERIVED: dict[str, list[str]] = {
    # 15b: GELU's derivative, LayerNorm's backward inside the block, the skips' sums
    "transformer_block_backward": [r"0\.5\(1\+t\)\+0\.5", r"dh=dout\+", r"dx=dh\+",
                                   r"\\tfrac12\(1\+t\)\+"],
    # 15b: the shifted, masked mean and its gradient
    "lm_loss": [r"logits\[:,:-1\]", r"tokens\[:,1:\]", r"\(p-\\mathbf\{?1", r"softmax-one-hot"],
    # 16b: the online softmax's state, and lse
    "flash_forward_tiled": [r"\\alpha=e\^\{m-m", r"alpha=exp\(m-m_new", r"lse=m\+\\logl",
                            r"lse=m\+log\(l"],
    # 16b: P from lse, and D
    "flash_backward": [r"P=e\^\{S-\\mathrm\{lse", r"P=exp\(S-lse", r"D_i=\\sum_c",
                       r"D=rowsum\(dout\*out"],
}

SHORTCUTS: dict[str, tuple[str, str]] = {
    "mha_forward": ("mha_forward", '''
def mha_forward(x, Wq, Wk, Wv, Wo, n_heads, causal):
    from dlcourse.transformer_functions import mha_forward as library
    return library(x, Wq, Wk, Wv, Wo, n_heads, causal)
'''),
    "transformer_block_backward": ("transformer_block_backward", '''
def transformer_block_backward(dout, cache):
    layer = dl.TransformerBlock(dout.shape[-1], cache["heads"], cache["causal"],
                                attention_bias=False, dtype=np.float64)
    layer.forward(cache["x"])
    return layer.backward(dout), {}
'''),
    "lm_loss": ("lm_loss", '''
def lm_loss(logits, tokens, pad_id=None):
    loss = dl.SequenceCrossEntropy()
    return loss.forward(logits[:, :-1], tokens[:, 1:]), loss.backward()
'''),
    "train_step": ("train_step", '''
def train_step(model, lm_loss, tokens, state, lr, weight_decay, max_norm):
    logits = model.forward(tokens)
    loss, dlogits = lm_loss(logits, tokens)
    model.backward(dlogits)
    dl.clip_grad_norm(model.grads, max_norm)
    return loss
'''),
    "flash_forward_tiled": ("flash_forward_tiled", '''
def flash_forward_tiled(q, k, v, block_q, block_k, causal):
    out, cache = dl.flash_attention.__globals__["flash_attention_forward"](
        q, k, v, causal, block=(block_q, block_k))
    return out, cache[4]
'''),
    "flash_backward": ("flash_backward", '''
def flash_backward(dout, q, k, v, out, lse, block_q, block_k, causal):
    from dlcourse.flash_attention import flash_attention_backward
    return flash_attention_backward(dout, (q, k, v, out, lse, causal, (block_q, block_k)))
'''),
}
