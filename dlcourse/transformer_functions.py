"""The transformer block as plain functions, and the hook that trains ``dl.Transformer`` with
the learner's own attention, block backward, loss and training step.

Introduced in notebook 15b (the transformer block and the language model; issue 38), where the
learner writes ``mha_forward``, ``transformer_block_backward``, ``lm_loss`` and ``train_step``;
``transformer.py`` (notebook 15) holds the layers they must equal.

A block's arrays under short names (:func:`block_params`, the same arrays as the layers', so a
step on one is a step on the other), for a block built with ``attention_bias=False``::

    ln1.gamma, ln1.beta (D,)   Wq, Wk, Wv, Wo (D, D)   ln2.gamma, ln2.beta (D,)
    W1 (D, F), b1 (F,)         W2 (F, D), b2 (D,)       F = mlp_ratio * D

:func:`block_forward` ``(x, params, heads, causal=True, attention=mha_forward) -> (out,
cache)`` runs the pre-LayerNorm block (LN -> attention -> skip -> LN -> Linear, GELU, Linear
-> skip) on x (N, T, D), calling ``attention(x, Wq, Wk, Wv, Wo, heads, causal)`` for the
attention branch. Its ``cache`` is a dict: ``x``, ``xhat1``, ``inv_std1`` (LayerNorm 1's
normalised x and 1/std, (N, T, D) and (N, T, 1)), ``a_in`` (its output, attention's input),
``h`` (x after the first skip), ``xhat2``, ``inv_std2``, ``f_in`` (LayerNorm 2 on h), ``u``
(f_in @ W1 + b1, (N, T, F)), ``g`` (GELU(u)), ``params``, ``heads``, ``causal``. Attention's
own weights P are not kept: a backward pass recomputes them from ``a_in`` (as FlashAttention
does). A block backward takes ``(dout, cache)`` and returns ``(dx, grads)``, ``grads`` keyed
as :func:`block_params`.

:class:`PluggedTransformer` ``(model, attention=None, block_backward=None)`` runs a
``dl.Transformer(..., attention_bias=False)`` with its blocks computed by those functions;
its ``params`` and ``grads`` are the model's own (same keys, same arrays).
:func:`train_language_model` trains one on random windows of a text, either with the library
(``dl.SequenceCrossEntropy``, ``dl.clip_grad_norm``, ``dl.AdamW``) or with a
``train_step(model, lm_loss, tokens, state, lr, weight_decay, max_norm) -> loss`` of your own;
for the same seed both draw the same windows, so their loss curves can be compared.
"""
from __future__ import annotations

import math

import numpy as np

from .attention import attention
from .backend import device_of, get_array_module, to_device
from .optim import AdamW, clip_grad_norm
from .transformer import SequenceCrossEntropy, gelu

__all__ = ["block_params", "block_forward", "mha_forward", "PluggedTransformer",
           "train_language_model", "ADAMW_BETAS", "ADAMW_EPS"]

ADAMW_BETAS, ADAMW_EPS = (0.9, 0.999), 1e-8      # dl.AdamW's defaults, used by the loop


def block_params(block) -> dict:
    """The arrays of a ``dl.TransformerBlock(..., attention_bias=False)`` under short names
    (the same arrays, not copies)."""
    norm1, attn = block.layers[0].block.layers
    norm2, ff = block.layers[1].block.layers
    if attn.bias:
        raise ValueError("block_params takes a block built with attention_bias=False: "
                         "mha_forward(x, Wq, Wk, Wv, Wo, ...) has no biases.")
    p = {"ln1.gamma": norm1.params["gamma"], "ln1.beta": norm1.params["beta"]}
    p.update({f"W{n}": attn.params[f"W{n}"] for n in "qkvo"})
    p.update({"ln2.gamma": norm2.params["gamma"], "ln2.beta": norm2.params["beta"],
              "W1": ff.fc1.params["W"], "b1": ff.fc1.params["b"],
              "W2": ff.fc2.params["W"], "b2": ff.fc2.params["b"]})
    return p


def _set_block_grads(block, grads):
    """Put a block backward's grads where the block's layers keep theirs (so the model's
    ``grads`` view shows them under its own keys)."""
    norm1, attn = block.layers[0].block.layers
    norm2, ff = block.layers[1].block.layers
    norm1.grads = {"gamma": grads["ln1.gamma"], "beta": grads["ln1.beta"]}
    attn.grads = {f"W{n}": grads[f"W{n}"] for n in "qkvo"}
    norm2.grads = {"gamma": grads["ln2.gamma"], "beta": grads["ln2.beta"]}
    ff.fc1.grads = {"W": grads["W1"], "b": grads["b1"]}
    ff.fc2.grads = {"W": grads["W2"], "b": grads["b2"]}


def mha_forward(x, Wq, Wk, Wv, Wo, heads, causal):
    """Multi-head self-attention without biases: x (N, T, D) -> (N, T, D), as
    ``dl.MultiHeadAttention(D, heads, causal, bias=False)`` computes it."""
    N, T, D = x.shape
    q, k, v = ((x @ W).reshape(N, T, heads, D // heads).transpose(0, 2, 1, 3)
               for W in (Wq, Wk, Wv))
    a = attention(q, k, v, causal=causal)                        # (N, H, T, d)
    return a.transpose(0, 2, 1, 3).reshape(N, T, D) @ Wo


def _layernorm(x, gamma, beta, eps=1e-5):
    """(y, xhat, inv_std) over the last axis, as dl.LayerNorm(D)."""
    mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    inv_std = 1.0 / get_array_module(x).sqrt(var + x.dtype.type(eps))
    xhat = (x - mean) * inv_std
    return gamma * xhat + beta, xhat, inv_std


def block_forward(x, params, heads, causal=True, attention=mha_forward):
    """The pre-LayerNorm block on x (N, T, D) -> (out, cache): see the module."""
    p = params
    a_in, xhat1, inv_std1 = _layernorm(x, p["ln1.gamma"], p["ln1.beta"])
    h = x + attention(a_in, p["Wq"], p["Wk"], p["Wv"], p["Wo"], heads, causal)
    f_in, xhat2, inv_std2 = _layernorm(h, p["ln2.gamma"], p["ln2.beta"])
    u = f_in @ p["W1"] + p["b1"]
    g = gelu(u)
    out = h + (g @ p["W2"] + p["b2"])
    cache = {"x": x, "xhat1": xhat1, "inv_std1": inv_std1, "a_in": a_in, "h": h,
             "xhat2": xhat2, "inv_std2": inv_std2, "f_in": f_in, "u": u, "g": g,
             "params": p, "heads": heads, "causal": causal}
    return out, cache


class PluggedTransformer:
    """``model`` (a ``dl.Transformer(..., attention_bias=False)``) with each block run by
    :func:`block_forward` and ``block_backward(dout, cache) -> (dx, grads)``: the embedding,
    positions, final LayerNorm and head are the model's own layers. ``attention``: the
    attention branch (default :func:`mha_forward`); ``block_backward`` None: the blocks run
    as the library's layers (then ``attention`` must be None too). ``params``, ``grads``: the
    model's (same keys, same arrays), so an optimizer of either trains both."""

    def __init__(self, model, attention=None, block_backward=None):
        if block_backward is None and attention is not None:
            raise ValueError("PluggedTransformer(attention=...) needs block_backward=... too: "
                             "the library's block layers keep a cache of their own.")
        blocks = model.blocks.layers
        if blocks and blocks[0].attention.bias:
            raise ValueError("PluggedTransformer takes a dl.Transformer(..., "
                             "attention_bias=False): mha_forward has no biases.")
        self.model, self.block_backward = model, block_backward
        self.attention = attention or mha_forward
        self.caches: list = []

    params = property(lambda self: self.model.params)
    grads = property(lambda self: self.model.grads)

    def forward(self, idx):
        m = self.model
        m.check(idx)
        N, T = idx.shape
        h = m.position.forward(m.embedding.forward(idx))
        self.caches = []
        for block in m.blocks.layers:
            if self.block_backward is None:
                h = block.forward(h)
                continue
            att = block.attention
            h, cache = block_forward(h, block_params(block), att.heads, att.causal,
                                     attention=self.attention)
            self.caches.append(cache)
        h = m.norm.forward(h)
        return m.head.forward(h.reshape(N * T, m.d_model)).reshape(N, T, m.vocab)

    def backward(self, dlogits):
        m = self.model
        N, T, V = dlogits.shape
        dh = m.head.backward(dlogits.reshape(N * T, V)).reshape(N, T, m.d_model)
        dh = m.norm.backward(dh)
        for i in range(len(m.blocks.layers) - 1, -1, -1):
            block = m.blocks.layers[i]
            if self.block_backward is None:
                dh = block.backward(dh)
                continue
            dh, grads = self.block_backward(dh, self.caches[i])
            _set_block_grads(block, grads)
        m.embedding.backward(m.position.backward(dh))
        return None


def _windows(ids, gen, T, batch_size):
    """``batch_size`` random windows of T + 1 ids: (batch_size, T + 1) int64."""
    starts = gen.integers(0, len(ids) - T, size=batch_size)
    return np.asarray(ids, dtype=np.int64)[starts[:, None] + np.arange(T + 1)]


def train_language_model(model, ids, steps: int, *, T: int, batch_size: int, lr: float = 3e-3,
                         weight_decay: float = 0.01, max_norm: float = 1.0, seed: int = 0,
                         train_step=None, lm_loss=None) -> list:
    """Train a next-token model for ``steps`` steps on random windows of ``ids`` (a 1-D array
    of token ids); return the loss of each step (floats).

    Each step draws ``batch_size`` windows of T + 1 ids (from ``seed``'s generator). Without
    ``train_step``: logits = model.forward(window[:, :-1]), dl.SequenceCrossEntropy against
    window[:, 1:], backward, dl.clip_grad_norm(max_norm), dl.AdamW(lr, weight_decay) (betas
    ``ADAMW_BETAS``, eps ``ADAMW_EPS``). With it: ``loss = train_step(model, lm_loss, window,
    state, lr, weight_decay, max_norm)``, ``state`` a dict the step keeps (empty at first),
    ``lm_loss(logits, tokens) -> (loss, dlogits)`` shifting by one itself (model.max_len must
    hold T + 1 positions). The windows are drawn on the host and moved to the model's device.
    """
    gen = np.random.default_rng(seed)
    losses = []
    if train_step is None:
        optimizer = AdamW(model, lr=lr, betas=ADAMW_BETAS, eps=ADAMW_EPS,
                          weight_decay=weight_decay)
        loss_fn = SequenceCrossEntropy()
    state: dict = {}
    params = list(getattr(model, "params", {}).values())
    device = device_of(params[0]) if params else "cpu"     # the windows go where the model is
    for _ in range(steps):
        window = to_device(_windows(ids, gen, T, batch_size), device)
        if train_step is None:
            loss = loss_fn.forward(model.forward(window[:, :-1]), window[:, 1:])
            model.backward(loss_fn.backward())
            clip_grad_norm(model, max_norm)
            optimizer.step()
        else:
            loss = train_step(model, lm_loss, window, state, lr, weight_decay, max_norm)
        loss = float(loss)
        if not math.isfinite(loss):
            raise FloatingPointError(f"train_language_model: the loss is {loss} at step "
                                     f"{len(losses)}: lower lr or max_norm.")
        losses.append(loss)
    return losses
