"""Checks for lesson 15b: the transformer block and the language model, written by the learner.

Each check runs *your* function on several small cases, compares it with the library
(``dl.MultiHeadAttention(bias=False)``, ``dl.TransformerBlock(attention_bias=False)``,
``dl.SequenceCrossEntropy``, ``dl.clip_grad_norm`` and ``dl.AdamW``; the library's layers are
gradient-checked in float64 in tests/test_check_flagship.py) and names the usual mistakes.

=========================================  ============================================  ======
lesson                                     check                                         opens
=========================================  ============================================  ======
15b_transformer_block_and_language_model   :func:`mha_forward`                           attention
15b_transformer_block_and_language_model   :func:`transformer_block_backward`            attention
15b_transformer_block_and_language_model   :func:`lm_loss`                               --
15b_transformer_block_and_language_model   :func:`train_step`                            --
=========================================  ============================================  ======

"attention": ``dl.attention`` and ``dlcourse.attention``'s ``attention_forward``,
``attention_backward`` and ``causal_mask``, what lesson 15 built; ``gelu`` (the forward) too.

Where a GPU is usable each check runs its first case again with everything it hands in on the
GPU (CuPy arrays, the cache and the model included): the results must be right and stay there.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from .. import backend
from .harness import (GPU_FIX, call, expect_close, expect_finite, expect_gpu_close,
                      expect_on_gpu, expect_shape, expect_tuple, expect_unchanged, fail, gpu,
                      handed, passed, rng, shape_text, to_array, to_gpu, to_number)

__all__ = ["mha_forward", "transformer_block_backward", "lm_loss", "train_step"]

_ATTENTION = ["dlcourse.attention.attention", "dlcourse.attention.attention_forward",
              "dlcourse.attention.attention_backward", "dlcourse.attention.causal_mask"]
_ON_GPU = "on the GPU (CuPy arrays)"
# ======================================================================================
# mha_forward
# ======================================================================================
def _mha_layer(D, H, causal, dtype, weights):
    __tracebackhide__ = True
    from ..attention import MultiHeadAttention
    layer = MultiHeadAttention(D, H, causal, dtype=dtype, bias=False)
    for name, W in zip(("Wq", "Wk", "Wv", "Wo"), weights):
        layer.params[name][...] = W
    return layer


def _mha_variant(x, Wq, Wk, Wv, Wo, H, causal, split=True, merge=True, use_causal=True,
                 out_proj=True):
    """Multi-head attention with one step left out (a mistake the check names)."""
    __tracebackhide__ = True
    from ..attention import attention
    N, T, D = x.shape

    def heads(y):
        __tracebackhide__ = True
        return (y.reshape(N, T, H, D // H).transpose(0, 2, 1, 3) if split
                else y.reshape(N, H, T, D // H))
    a = attention(heads(x @ Wq), heads(x @ Wk), heads(x @ Wv),
                  causal=causal if use_causal else not causal)
    merged = a.transpose(0, 2, 1, 3).reshape(N, T, D) if merge else a.reshape(N, T, D)
    return merged @ Wo if out_proj else merged


def mha_forward(fn) -> None:
    """Check ``fn(x, Wq, Wk, Wv, Wo, n_heads, causal)`` -> out (N, T, D): multi-head
    self-attention without biases, x (N, T, D), each W (D, D) stored (in, out). Compared with
    ``dl.MultiHeadAttention(D, n_heads, causal, bias=False)`` for 1, 2 and 4 heads, T not a
    multiple of anything, causal and not, and float32 kept float32 (one case)."""
    __tracebackhide__ = True
    cases = [(2, 5, 8, 2, True, np.float64), (1, 7, 12, 4, False, np.float64),
             (3, 3, 6, 1, True, np.float64), (2, 6, 8, 4, True, np.float32)]
    cp = gpu()
    for N, T, D, H, causal, dtype in cases:
        x, *Ws = _mha_inputs(N, T, D, dtype)
        case = (f"x {shape_text(x.shape)} {np.dtype(dtype).name}, n_heads={H}, "
                f"causal={causal}")
        given = [a.copy() for a in (x, *Ws)]
        out = to_array(call(fn, *given, H, causal, case=case, opens=_ATTENTION,
                            on_error="follow the shapes: (N, T, D) -> (N, T, H, d) -> (N, H, T, "
                                     "d) for dl.attention, and back."), fn, case, "out")
        expect_shape(out, x.shape, fn, case, "out", "the output has x's shape (N, T, D).")
        if dtype == np.float32 and out.dtype != np.float32:
            fail(fn, case, f"float32 inputs gave a {out.dtype} output.",
                 "keep the input's dtype: a float64 constant or array mixed in promotes the "
                 "result (float64 inside is fine if you cast back at the end).")
        x64, W64 = x.astype(np.float64), [W.astype(np.float64) for W in Ws]
        expected = _mha_layer(D, H, causal, np.float64, W64).forward(x64)

        def variant(**kw):
            __tracebackhide__ = True
            return lambda: _mha_variant(x64, *W64, H, causal, **kw)
        tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else {}
        expect_close(out.astype(np.float64), expected, fn, case, "out", **tol, mistakes=[
            (variant(split=False) if H > 1 else None,
             "the heads' transpose is missing when splitting: reshape (N, T, D) to (N, T, H, d) "
             "first, then swap T and H; a reshape straight to (N, H, T, d) mixes positions "
             "into heads."),
            (variant(merge=False) if H > 1 else None,
             "the heads' transpose is missing when merging back: (N, H, T, d) must become "
             "(N, T, H, d) before the reshape to (N, T, D)."),
            (variant(split=False, merge=False) if H > 1 else None,
             "the heads' transpose is missing, splitting and merging: a reshape alone mixes "
             "positions into heads."),
            (variant(use_causal=False), "the causal argument is not passed on (or inverted): "
                                        "give attention causal=causal."),
            (variant(out_proj=False), "the output projection Wo is missing after the merge."),
        ], fix="project x with Wq, Wk, Wv; split each into heads; attention on all heads at "
               "once; merge; project with Wo.")
        expect_unchanged(fn, case, list(zip(("x", "Wq", "Wk", "Wv", "Wo"), (x, *Ws), given)))
    if cp is not None:
        N, T, D, H, causal, dtype = cases[0]
        x, *Ws = _mha_inputs(N, T, D, dtype)
        case = f"x {shape_text(x.shape)}, n_heads={H}, causal={causal}, {_ON_GPU}"
        out = call(fn, *to_gpu(cp, (x, *Ws)), H, causal, case=case, opens=_ATTENTION,
                   on_error=GPU_FIX)
        expect_gpu_close(out, _mha_layer(D, H, causal, np.float64, Ws).forward(x), fn, case,
                          "out")
    passed(fn, len(cases) + (cp is not None), cp is not None)


def _mha_inputs(N, T, D, dtype):
    """x (N, T, D), Wq, Wk, Wv, Wo (D, D) of one case."""
    __tracebackhide__ = True
    r = rng(N * 100 + T * 10 + D)
    x = r.standard_normal((N, T, D)).astype(dtype)
    return [x] + [(r.standard_normal((D, D)) / math.sqrt(D)).astype(dtype) for _ in range(4)]


# ======================================================================================
# transformer_block_backward
# ======================================================================================
def _block_cases():
    """(N, T, D, H, F, causal) of each case: two heads causal; three heads not causal, T = 4;
    one head; float64 throughout."""
    __tracebackhide__ = True
    return [(2, 5, 8, 2, 32, True), (1, 4, 6, 3, 12, False), (2, 3, 4, 1, 16, True)]


def _block_setup(N, T, D, H, F, causal):
    """(library block float64, params by short name, x, dout, cache)."""
    __tracebackhide__ = True
    from ..transformer import TransformerBlock
    from ..transformer_functions import block_forward, block_params
    block = TransformerBlock(D, H, causal, mlp_ratio=F / D, dtype=np.float64, seed=7,
                             attention_bias=False)
    r = rng(D * 10 + T)
    params = block_params(block)
    for k, a in params.items():
        if k.startswith("ln"):
            a[...] = r.standard_normal(a.shape) * 0.5 + (1.0 if k.endswith("gamma") else 0.0)
        elif k.startswith("b"):
            a[...] = r.standard_normal(a.shape) * 0.1
    x = r.standard_normal((N, T, D))
    dout = r.standard_normal((N, T, D))
    _, cache = block_forward(x, {k: a.copy() for k, a in params.items()}, H, causal)
    return block, params, x, dout, cache


def _ln_back(dy, gamma, xhat, inv_std, axis=-1, full=True):
    __tracebackhide__ = True
    dxh = dy * gamma
    if not full:
        return dxh * inv_std
    return (dxh - dxh.mean(axis=axis, keepdims=True)
            - xhat * (dxh * xhat).mean(axis=axis, keepdims=True)) * inv_std


def _block_variant(dout, c, skip_ff=True, skip_attn=True, ln_axis=-1, ln_full=True,
                   gelu="right", transpose=True):
    """(dx, grads) of the block with one mistake made (the check names each)."""
    __tracebackhide__ = True
    from ..attention import attention_backward, attention_forward
    from ..transformer import GELU_A, GELU_C
    p, H, causal = c["params"], c["heads"], c["causal"]
    N, T, D = dout.shape
    g = {"b2": dout.sum(axis=(0, 1)), "W2": np.einsum("ntf,ntd->fd", c["g"], dout)}
    dg = dout @ p["W2"].T
    u = c["u"]
    t = np.tanh(GELU_C * (u + GELU_A * u ** 3))
    slope = {"right": 0.5 * (1 + t) + 0.5 * u * (1 - t * t) * GELU_C * (1 + 3 * GELU_A * u * u),
             "half": 0.5 * (1 + t), "relu": (u > 0) * 1.0}[gelu]
    du = dg * slope
    g["b1"], g["W1"] = du.sum(axis=(0, 1)), np.einsum("ntd,ntf->df", c["f_in"], du)
    df_in = du @ p["W1"].T
    g["ln2.gamma"] = (df_in * c["xhat2"]).sum(axis=(0, 1))
    g["ln2.beta"] = df_in.sum(axis=(0, 1))
    dh = _ln_back(df_in, p["ln2.gamma"], c["xhat2"], c["inv_std2"], ln_axis, ln_full) \
        + (dout if skip_ff else 0)
    a_in = c["a_in"]
    d = D // H

    def split(y):
        __tracebackhide__ = True
        return (y.reshape(N, T, H, d).transpose(0, 2, 1, 3) if transpose in (True, "merge")
                else y.reshape(N, H, T, d))

    def merge(y):
        __tracebackhide__ = True
        return (y.transpose(0, 2, 1, 3).reshape(N, T, D) if transpose in (True, "split")
                else y.reshape(N, T, D))
    q, k, v = (split(a_in @ p[f"W{n}"]) for n in "qkv")
    a, att_cache = attention_forward(q, k, v, causal=causal)
    g["Wo"] = np.einsum("ntd,nte->de", merge(a), dh)
    dq, dk, dv = attention_backward(split(dh @ p["Wo"].T), att_cache)
    da_in = 0
    for n, dy in (("q", dq), ("k", dk), ("v", dv)):
        g[f"W{n}"] = np.einsum("ntd,nte->de", a_in, merge(dy))
        da_in = da_in + merge(dy) @ p[f"W{n}"].T
    g["ln1.gamma"] = (da_in * c["xhat1"]).sum(axis=(0, 1))
    g["ln1.beta"] = da_in.sum(axis=(0, 1))
    dx = _ln_back(da_in, p["ln1.gamma"], c["xhat1"], c["inv_std1"], ln_axis, ln_full) \
        + (dh if skip_attn else 0)
    return dx, g


_BLOCK_MISTAKES = [
    (dict(skip_ff=False), "the second skip path is missing: out = h + FF(LN(h)), so dh gets "
                          "dout itself besides what comes back through the feed-forward branch."),
    (dict(skip_attn=False), "the first skip path is missing: h = x + MHA(LN(x)), so dx gets dh "
                            "itself besides what comes back through the attention branch."),
    (dict(skip_ff=False, skip_attn=False), "both skip paths are missing: each residual adds "
                                           "the incoming gradient to what its branch returns."),
    (dict(ln_axis=1), "LayerNorm's means are taken over the wrong axis: each position is "
                      "normalised over its own D features, the LAST axis (keepdims=True)."),
    (dict(ln_full=False), "LayerNorm's backward treats the mean and the variance as constants: "
                          "both depend on x, which adds two terms (lesson 07b)."),
    (dict(gelu="half"), "GELU's derivative misses a term: the product rule on x times "
                        "(1 + tanh(...)) / 2 gives two, the second through tanh's derivative."),
    (dict(gelu="relu"), "GELU's derivative is not ReLU's step: GELU is smooth, and its slope "
                        "comes from the product rule and tanh' = 1 - tanh^2."),
    (dict(transpose=False), "the heads' transpose is missing: split the gradient into heads "
                            "and merge dq, dk, dv back exactly as the forward split and merged "
                            "(reshape, then swap T and H)."),
    (dict(transpose="merge"), "the heads' transpose is missing when merging back: (N, H, T, d) "
                              "becomes (N, T, H, d) before the reshape to (N, T, D), for the "
                              "attention output and for dq, dk, dv alike."),
    (dict(transpose="split"), "the heads' transpose is missing when splitting into heads: "
                              "reshape to (N, T, H, d), then swap T and H, for q, k, v and for "
                              "the incoming gradient alike."),
]
_KEYS = ("ln1.gamma", "ln1.beta", "Wq", "Wk", "Wv", "Wo", "ln2.gamma", "ln2.beta", "W1", "b1",
         "W2", "b2")


def transformer_block_backward(fn) -> None:
    """Check ``fn(dout, cache)`` -> ``(dx, grads)``: the backward pass of the pre-LayerNorm
    block (``dlcourse/transformer_functions.py`` describes the cache), ``grads`` a dict with
    the twelve keys ``ln1.gamma``, ``ln1.beta``, ``Wq``, ``Wk``, ``Wv``, ``Wo``,
    ``ln2.gamma``, ``ln2.beta``, ``W1``, ``b1``, ``W2``, ``b2``. Compared with
    ``dl.TransformerBlock(attention_bias=False)``'s backward in float64 (gradient-checked in
    the tests). Named: a skip path missing, LayerNorm's axis or its mean terms, GELU's
    derivative, the heads' transpose."""
    __tracebackhide__ = True
    cases = _block_cases()
    cp = gpu()
    for N, T, D, H, F, causal in cases:
        block, params, x, dout, cache = _block_setup(N, T, D, H, F, causal)
        case = (f"x {shape_text(x.shape)}, {H} head(s), hidden {F}, "
                f"{'causal' if causal else 'not causal'}, float64")
        given, given_dout = copy.deepcopy(cache), dout.copy()
        answer = call(fn, given_dout, given, case=case, opens=_ATTENTION + [
            "dlcourse.transformer.gelu"], on_error="the cache is a dict: cache['x'], "
            "cache['params']['Wq'], ... (see the cell above the exercise).")
        dx, grads = expect_tuple(answer, 2, fn, case, "dx, grads")
        if not isinstance(grads, dict):
            fail(fn, case, f"grads is a {type(grads).__name__}, not a dict.",
                 "return grads as a dict keyed like cache['params'].")
        missing = [k for k in _KEYS if k not in grads]
        if missing:
            fail(fn, case, f"grads has no {', '.join(missing)}.",
                 f"return a gradient for each of the twelve parameters: {', '.join(_KEYS)}.")
        block.forward(x)
        e_dx = block.backward(dout)
        lib = block_grads(block)
        wrong = {}

        def mistake(kw, what):
            __tracebackhide__ = True
            def compute():
                __tracebackhide__ = True
                key = tuple(sorted(kw.items()))
                if key not in wrong:
                    wrong[key] = _block_variant(dout, cache, **kw)
                got = wrong[key]
                return got[0] if what == "dx" else got[1][what]
            return compute
        for what in ("b2", "W2", "b1", "W1", "ln2.gamma", "ln2.beta", "Wo", "Wq", "Wk", "Wv",
                     "ln1.gamma", "ln1.beta", "dx"):
            got = to_array(dx if what == "dx" else grads[what], fn, case, what)
            ref = e_dx if what == "dx" else lib[what]
            expect_shape(got, ref.shape, fn, case, what,
                         "dx has x's shape; each gradient its parameter's.")
            expect_finite(got, fn, case, what)
            expect_close(got, ref, fn, case, what, rtol=1e-6, atol=1e-8,
                         mistakes=[(mistake(kw, what), why) for kw, why in _BLOCK_MISTAKES],
                         fix="go back through the block from the end: the second skip, the "
                             "feed-forward branch (W2, GELU, W1, LayerNorm 2), the first "
                             "skip, the attention branch (Wo, the heads, attention, Wq/Wk/Wv, "
                             "LayerNorm 1).")
        expect_unchanged(fn, case, [("dout", dout, given_dout)] + [
            (k, cache[k], given[k]) for k in ("x", "a_in", "h", "u", "g")])
    if cp is not None:
        N, T, D, H, F, causal = cases[0]
        block, params, x, dout, cache = _block_setup(N, T, D, H, F, causal)
        block.forward(x)
        refs = {"dx": block.backward(dout), **block_grads(block)}
        case = f"x {shape_text(x.shape)}, {H} head(s), hidden {F}, the cache {_ON_GPU}"
        dx, grads = expect_tuple(call(fn, cp.asarray(dout), to_gpu(cp, cache), case=case,
                                      opens=_ATTENTION + ["dlcourse.transformer.gelu"],
                                      on_error=GPU_FIX),
                                 2, fn, case, "dx, grads")
        got = {"dx": dx, **(grads if isinstance(grads, dict) else {})}
        for what, ref in refs.items():
            expect_gpu_close(got.get(what), ref, fn, case, what, rtol=1e-6, atol=1e-8)
    passed(fn, len(cases) + (cp is not None), cp is not None)


def block_grads(block) -> dict:
    """A library block's grads under the short names of ``block_params``."""
    __tracebackhide__ = True
    norm1, attn = block.layers[0].block.layers
    norm2, ff = block.layers[1].block.layers
    g = {"ln1.gamma": norm1.grads["gamma"], "ln1.beta": norm1.grads["beta"],
         "ln2.gamma": norm2.grads["gamma"], "ln2.beta": norm2.grads["beta"],
         "W1": ff.fc1.grads["W"], "b1": ff.fc1.grads["b"], "W2": ff.fc2.grads["W"],
         "b2": ff.fc2.grads["b"]}
    g.update({f"W{n}": attn.grads[f"W{n}"] for n in "qkvo"})
    return g


# ======================================================================================
# lm_loss
# ======================================================================================
def _lm_reference(logits, tokens, pad_id, shift=True, mask=True, mean_all=False):
    """(loss, dlogits), on the logits' backend (train_step's GPU case hands it in)."""
    __tracebackhide__ = True
    xp = backend.get_array_module(logits)
    B, T, V = logits.shape
    z = logits[:, :-1] if shift else logits
    y = tokens[:, 1:] if shift else tokens
    if shift == "same":                           # the last position dropped, but not shifted
        y = tokens[:, :-1]
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - xp.log(xp.exp(z).sum(axis=-1, keepdims=True))
    keep = (y != pad_id) if (pad_id is not None and mask) else xp.ones(y.shape, bool)
    count = y.size if mean_all else max(int(keep.sum()), 1)
    picked = xp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]
    loss = -(picked * keep).sum() / count
    d = xp.exp(logp) - (y[..., None] == xp.arange(V))        # softmax minus the one-hot target
    d = d * keep[..., None] / count
    dlogits = xp.zeros_like(logits)
    if shift:
        dlogits[:, :-1] = d
    else:
        dlogits[:] = d
    return loss, dlogits


def _backwards(logits, tokens, pad_id):
    """The shift the wrong way: logits[:, t] paired with tokens[:, t - 1]."""
    __tracebackhide__ = True
    loss, d = _lm_reference(logits[:, ::-1], tokens[:, ::-1], pad_id)
    return loss, d[:, ::-1]


def lm_loss(fn) -> None:
    """Check ``fn(logits, tokens, pad_id=None)`` -> ``(loss, dlogits)``: logits (B, T, V) the
    model's output on tokens (B, T); the logits at position t predict tokens[:, t + 1]; target
    positions holding ``pad_id`` are not counted; loss the mean cross-entropy (nats) over the
    counted targets, dlogits (B, T, V) its gradient. Compared with dl.SequenceCrossEntropy on
    the shifted sequences (no padding) and with the masked mean."""
    __tracebackhide__ = True
    from ..transformer import SequenceCrossEntropy
    cases = [(2, 6, 5, None, 0), (3, 7, 4, 0, 2), (2, 5, 6, 5, 4), (1, 2, 3, None, 0)]
    cp = gpu()
    for B, T, V, pad_id, n_pad in cases:
        logits, tokens = _lm_inputs(B, T, V, pad_id, n_pad)
        case = (f"logits {shape_text(logits.shape)}, tokens {shape_text(tokens.shape)}, "
                + (f"pad_id={pad_id} ({int((tokens[:, 1:] == pad_id).sum())} padded targets, "
                   f"rows of different lengths)" if pad_id is not None else "no padding"))
        given = (logits.copy(), tokens.copy())
        answer = call(fn, *given, pad_id, case=case,
                      on_error="logits[:, t] are scores for the token at t + 1.")
        loss, dlogits = expect_tuple(answer, 2, fn, case, "loss, dlogits")
        loss = to_number(loss, fn, case, "loss", "return the mean loss as one number.")
        dlogits = to_array(dlogits, fn, case, "dlogits")
        e_loss, e_d = _lm_reference(logits, tokens, pad_id)
        if pad_id is None:
            lib = SequenceCrossEntropy()
            e_loss = lib.forward(logits[:, :-1], tokens[:, 1:])
            e_d = np.concatenate([lib.backward(), np.zeros((B, 1, V))], axis=1)
        losses = [
            (lambda: _lm_reference(logits, tokens, pad_id, shift=False),
             "the shift by one is missing: the logits at position t predict the NEXT token, "
             "tokens[:, t + 1]; the last position has no target."),
            (lambda: _lm_reference(logits, tokens, pad_id, shift="same"),
             "the shift by one is missing: the last position is left out, but logits[:, t] "
             "must be paired with the NEXT token, tokens[:, t + 1]."),
            (lambda: _backwards(logits, tokens, pad_id),
             "the shift goes the wrong way: pair logits[:, t] with tokens[:, t + 1], not "
             "t - 1."),
            (lambda: _lm_reference(logits, tokens, pad_id, mask=False) if pad_id is not None
             else None, "padding is not masked: a target that is pad_id is not text; it must "
                        "add nothing to the loss nor to the count."),
            (lambda: _lm_reference(logits, tokens, pad_id, mean_all=True) if pad_id is not None
             else None, "the padded targets are left out of the sum but still counted in the "
                        "mean: divide by the number of real targets."),
        ]
        expect_close(np.asarray(loss), np.asarray(e_loss), fn, case, "loss",
                     mistakes=[((lambda f=f: f()[0]), why) for f, why in losses],
                     fix="the mean over the counted targets of -log softmax(logits)[target].")
        expect_shape(dlogits, logits.shape, fn, case, "dlogits",
                     "one gradient per logit, (B, T, V): zeros where nothing is predicted.")
        expect_close(dlogits, e_d, fn, case, "dlogits", mistakes=[
            ((lambda f=f: f()[1]), why) for f, why in losses] + [
            (lambda: e_d * max(int(((tokens[:, 1:] != pad_id) if pad_id is not None
                                     else np.ones((B, T - 1))).sum()), 1),
             "dlogits is not divided by the number of counted targets: the loss is a mean."),
        ], fix="softmax minus one-hot at each counted position, divided by the count; zero at "
               "the last position and at padded targets.")
        expect_unchanged(fn, case, [("logits", logits, given[0]), ("tokens", tokens, given[1])])
    if cp is not None:
        logits, tokens = _lm_inputs(*cases[0])
        case = f"logits {shape_text(logits.shape)}, tokens {shape_text(tokens.shape)}, {_ON_GPU}"
        loss, dlogits = expect_tuple(call(fn, *to_gpu(cp, (logits, tokens)), cases[0][3],
                                          case=case, on_error=GPU_FIX), 2, fn, case,
                                     "loss, dlogits")
        e_loss, e_d = _lm_reference(logits, tokens, cases[0][3])
        expect_close(np.asarray(to_number(loss, fn, case, "loss")), np.asarray(e_loss), fn,
                     case, "loss")
        expect_gpu_close(dlogits, e_d, fn, case, "dlogits")
    passed(fn, len(cases) + (cp is not None), cp is not None)


def _lm_inputs(B, T, V, pad_id, n_pad):
    """logits (B, T, V) and tokens (B, T) of one case, the rows padded to different lengths."""
    __tracebackhide__ = True
    r = rng(B * 31 + T * 7 + V)
    logits = r.standard_normal((B, T, V)) * 2
    tokens = r.integers(1 if pad_id == 0 else 0, V - (pad_id == V - 1), size=(B, T))
    for b in range(B):                              # ragged rows: padding at their ends
        n = min(n_pad * (b + 1) // B, T - 1)
        if n:
            tokens[b, T - n:] = pad_id
    return logits, tokens


# ======================================================================================
# train_step
# ======================================================================================
@handed
class TinyLanguageModel:
    """The model a train_step check hands in: ``forward(tokens) -> logits (B, T, V)``,
    ``backward(dlogits)`` fills ``grads``; ``params`` and ``grads`` dicts of arrays."""

    def __init__(self, seed):
        __tracebackhide__ = True
        from ..transformer import Transformer
        self.net = Transformer(7, 8, 2, 1, 6, dtype=np.float64, seed=seed, attention_bias=False)

    params = property(lambda self: self.net.params)
    grads = property(lambda self: self.net.grads)

    def forward(self, tokens):
        __tracebackhide__ = True
        return self.net.forward(tokens)

    def backward(self, dlogits):
        __tracebackhide__ = True
        self.net.backward(dlogits)


@handed
def reference_lm_loss(logits, tokens, pad_id=None):
    """The loss a train_step check hands in: (loss, dlogits), as lesson 15b's lm_loss."""
    __tracebackhide__ = True
    return _lm_reference(logits, tokens, pad_id)


def _reference_steps(seed, batches, lr, wd, max_norm, **flaw):
    """Params after each step and each loss, with dl.clip_grad_norm and dl.AdamW (or a
    mistake: flaw = no_correction, l2, per_param, always_clip, no_clip, reset)."""
    __tracebackhide__ = True
    from ..optim import AdamW, clip_grad_norm
    model = TinyLanguageModel(seed)
    opt = AdamW(model.net, lr=lr, weight_decay=wd)
    out = []
    state = {}
    for tokens in batches:
        logits = model.forward(tokens)
        loss, d = _lm_reference(logits, tokens, None)
        model.backward(d)
        if not flaw:
            clip_grad_norm(model.net, max_norm)
            opt.step()
        else:
            _flawed_adamw(model, state, lr, wd, max_norm, **flaw)
        out.append(({k: v.copy() for k, v in model.params.items()}, loss))
    return out


def _flawed_adamw(model, state, lr, wd, max_norm, no_correction=False, l2=False,
                  per_param=False, always_clip=False, no_clip=False, reset=False):
    __tracebackhide__ = True
    b1, b2, eps = 0.9, 0.999, 1e-8
    grads = model.grads
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    if reset:
        state.clear()
    state["t"] = t = state.get("t", 0) + 1
    for k, p in model.params.items():
        g = grads[k]
        if per_param:
            n = math.sqrt(float((g * g).sum()))
            g = g * (max_norm / n if n > max_norm else 1.0)
        elif not no_clip and (always_clip or norm > max_norm):
            g = g * (max_norm / norm)
        if l2:
            g = g + wd * p
        else:
            p *= 1 - lr * wd
        m = state.setdefault(k + "/m", np.zeros_like(p))
        v = state.setdefault(k + "/v", np.zeros_like(p))
        m[...] = b1 * m + (1 - b1) * g
        v[...] = b2 * v + (1 - b2) * g * g
        mh, vh = (m, v) if no_correction else (m / (1 - b1 ** t), v / (1 - b2 ** t))
        p -= lr * mh / (np.sqrt(vh) + eps)


_STEP_MISTAKES = [
    (dict(no_correction=True), "Adam's bias correction is missing: m and v start at 0, so "
                               "divide each by 1 - beta^t (t the step number, from 1)."),
    (dict(l2=True), "the weight decay went into the gradient (Adam's L2): AdamW shrinks each "
                    "parameter itself by the fraction lr times weight_decay, apart from the "
                    "moments."),
    (dict(per_param=True), "each parameter is clipped on its own: the norm to clip is ONE "
                           "number over all the gradients together, so the step keeps its "
                           "direction."),
    (dict(always_clip=True), "the gradients are rescaled even when their norm is below "
                             "max_norm: clip only when it is above."),
    (dict(no_clip=True), "the gradients are not clipped: when their global norm is above "
                         "max_norm, scale them all by the one factor that brings it down to "
                         "max_norm."),
    (dict(reset=True), "the state is not kept between steps: m, v and the step count live in "
                       "the state dict the caller passes each time."),
]


def train_step(fn) -> None:
    """Check ``fn(model, lm_loss, tokens, state, lr, weight_decay, max_norm)`` -> loss: one
    step on ``tokens`` (B, T): forward, ``lm_loss(logits, tokens) -> (loss, dlogits)``,
    ``model.backward(dlogits)``, clip every gradient together to a global norm of at most
    max_norm, then AdamW (betas 0.9, 0.999, eps 1e-8, decoupled weight decay) on
    ``model.params`` in place, keeping its moments and step count in ``state`` (a dict,
    empty at the first step). Compared with dl.clip_grad_norm and dl.AdamW over four steps."""
    __tracebackhide__ = True
    cases = [(0.01, 0.1, 0.5), (0.003, 0.0, 100.0)]
    cp = gpu()
    for lr, wd, max_norm in cases:
        _four_steps(fn, lr, wd, max_norm)
    if cp is not None:
        _four_steps(fn, *cases[0], cp=cp)
    passed(fn, len(cases) + (cp is not None), cp is not None)


def _four_steps(fn, lr, wd, max_norm, cp=None):
    """Four steps of ``fn`` on a fresh model, each compared with the library's; with ``cp``
    the model and the tokens are on the GPU, and the params must stay there."""
    __tracebackhide__ = True
    r = rng(int(lr * 1e4) + int(max_norm))
    batches = [r.integers(0, 7, size=(3, 6)) for _ in range(4)]
    case = (f"4 steps, lr={lr}, weight_decay={wd}, max_norm={max_norm} "
            + ("(the norm is above it: clipping acts)" if max_norm < 1 else
               "(the norm stays below it)") + (f", the model and tokens {_ON_GPU}" if cp else ""))
    expected = _reference_steps(5, batches, lr, wd, max_norm)
    model, state = TinyLanguageModel(5), {}
    if cp is not None:
        model.net.to("gpu")
    for i, tokens in enumerate(batches):
        step = f"{case}; step {i + 1}"
        loss = to_number(call(fn, model, reference_lm_loss,
                              tokens.copy() if cp is None else cp.asarray(tokens), state, lr, wd,
                              max_norm, case=step, on_error=GPU_FIX if cp is not None else
                              "the model's params and grads are two dicts with the same keys; "
                              "update the arrays in place."),
                         fn, step, "the returned loss", "return the loss (one number).")
        want_params, want_loss = expected[i]
        if not math.isclose(loss, want_loss, rel_tol=1e-6):
            fail(fn, step, f"returned loss {loss:.6g}, expected {want_loss:.6g}.",
                 "return the loss of this step's forward pass, before the update.")
        for k, want in want_params.items():
            got = to_array(model.params[k], fn, step, f"model.params[{k!r}]")
            if cp is not None:
                expect_on_gpu(model.params[k], fn, step, f"model.params[{k!r}]")
            expect_close(got, want, fn, step, f"model.params[{k!r}] after the step",
                         rtol=1e-6, atol=1e-9, mistakes=[] if cp is not None else [
                             (lambda kw=kw, k=k, i=i: _reference_steps(
                                 5, batches[:i + 1], lr, wd, max_norm, **kw)[i][0][k], why)
                             for kw, why in _STEP_MISTAKES],
                         fix="clip with the global norm, then for each parameter: decay "
                             "it, update m and v, correct them for the zero start, step.")


# Deeper hint levels (level 1 is the `# HINT:` line in the exercise's cell).
HINTS: dict[str, list[str]] = {
    "mha_forward": [
        ("three projections of x, each (N, T, D); each becomes (N, H, T, d) by a reshape that "
         "cuts the last axis into H pieces and a swap of two axes; attention runs on all heads "
         "at once; undo both steps in reverse order; one last projection."),
        ("Q = x @ ___; heads(Q) = Q.reshape(N, T, ___, ___).transpose(0, ___, ___, 3); A = "
         "attention(heads(Q), heads(K), heads(V), causal=___); merged = A.transpose(___)"
         ".reshape(N, T, D); out = merged @ ___."),
    ],
    "transformer_block_backward": [
        ("walk the block backwards: out = h + FF(LN2(h)) and h = x + MHA(LN1(x)). A sum sends "
         "its gradient down both of its paths. For the feed-forward branch, three local "
         "rules: a Linear, GELU (the product rule, tanh' = 1 - tanh^2), a Linear. For "
         "attention: undo Wo, split into heads, attention's backward (lesson 15), merge, "
         "three projections."),
        ("dg = dout @ W2^T; du = dg * GELU'(u), GELU'(u) = 0.5(1 + t) + 0.5 u (1 - t^2) c (1 + "
         "___ a u^2); dW1 = f_in^T du summed over (N, T); LayerNorm's dx = (dxhat - mean(dxhat) "
         "- xhat * mean(dxhat * xhat)) * ___ with means over the ___ axis; dh = that + ___; "
         "recompute q, k, v from a_in, then attention_forward for its cache; dx = LN1's "
         "backward + ___."),
    ],
    "lm_loss": [
        ("the logits at position t score the token at t + 1: which slices of logits and of "
         "tokens pair up? Then a mask of the targets that are not padding, a log-softmax, and "
         "a mean over the real targets only."),
        ("z = logits[:, ___], y = tokens[:, ___]; keep = y != ___; loss = -(log softmax of z at "
         "y, times keep).sum() / keep.___(); dlogits is zero everywhere, except at the counted "
         "positions: (softmax(z) - one_hot(y)) / ___."),
    ],
    "train_step": [
        ("four stages: the loss and its gradient (forward, lm_loss, backward); one norm over "
         "every gradient together; the clip (scale all when the norm is too big); AdamW per "
         "parameter, with m, v and the step count kept in state between calls."),
        ("the norm: the square root of the sum, over every key, of the sum of the squared "
         "gradient; above max_norm, every gradient times ___; the step count t in state goes "
         "up by one; per key: shrink p by the factor ___; m becomes beta1 m + (1 - beta1) g, v "
         "the same with beta2 and g squared; p goes down by lr times m corrected over (the "
         "square root of ___ corrected, plus eps). Lesson 04b's adam_step."),
    ],
}

# What would give each answer away in its first-level hint.
ANSWER_TOKENS: dict[str, list[str]] = {
    "mha_forward": ["transpose(0, 2, 1, 3)", "reshape(N, T, H", "(0,2,1,3)", "swapaxes(1, 2)"],
    "transformer_block_backward": ["dout + ", "dh + ", "1 - t * t", "1 - t**2", "1 - tanh",
                                   "0.5 * (1 + t)", "axis=-1", "xhat * mean"],
    "lm_loss": ["logits[:, :-1]", "tokens[:, 1:]", "[:, 1:]", "[:, :-1]", "keep.sum",
                "!= pad_id"],
    "train_step": ["1 - b1 ** t", "1 - beta1", "(1 - lr * weight_decay)", "max_norm / norm",
                   "lr * weight_decay"],
}
