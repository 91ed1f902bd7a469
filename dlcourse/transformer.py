"""The pieces of a small transformer, and the character model built from them.

Introduced in notebook 15 (attention by hand; issue 31). The attention itself (the function
and :class:`~dlcourse.attention.MultiHeadAttention`) is in ``attention.py``; this module puts
it into a model:

* :class:`Embedding` ``(vocab, d)``: token ids (N, T) -> vectors (N, T, d), a row lookup;
  backward adds each dout row into the row it came from (a product with the one-hot matrix);
* :class:`PositionalEmbedding` ``(max_len, d)``: adds a learned vector per position;
* :class:`GELU`: the tanh form 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), with its backward;
* :class:`FeedForward` ``(d_model, hidden)``: Linear - GELU - Linear at every position;
* :class:`TransformerBlock` ``(d_model, heads, causal=True, mlp_ratio=4)``: pre-LayerNorm,
  two ``dl.Residual`` blocks: x + attention(LayerNorm(x)), then x + feedforward(LayerNorm(x));
* :class:`Transformer` ``(vocab, d_model, heads, layers, max_len)``: embedding + positions +
  blocks + final LayerNorm + Linear head; token ids (N, T) -> logits (N, T, vocab);
* ``norm="rms", pos="rope", mlp="swiglu"`` (on both): the block of today's open models, as
  Llama: :class:`~dlcourse.modern_block.RMSNorm`, rotary positions inside attention (no
  learned position vectors), :class:`~dlcourse.modern_block.SwiGLU` (``modern_block.py``);
* :class:`SequenceCrossEntropy`: ``dl.SoftmaxCrossEntropy`` over the (N·T, vocab) rows, so
  ``dl.fit(model, dl.SequenceCrossEntropy(), opt, X, Y)`` trains on X, Y: (N, T) token ids
  (Y is X shifted by one position: the next character).

Generation (with a key/value cache): :meth:`Transformer.step` ``(tokens, past=None) ->
(logits, past)`` runs only the new positions, each block's keys and values of the earlier
ones kept in ``past``; without a cache, call ``forward`` on the whole sequence each time.
:meth:`Transformer.generate` samples (``dlcourse/generate.py``).
"""
from __future__ import annotations

import math

import numpy as np

from ._validate import float_dtype, number, shape_str, whole_number
from .attention import MultiHeadAttention
from .backend import get_array_module, rng
from .layer_base import Container, Layer, checked
from .layers import Identity, LayerNorm, Linear, Residual, Sequential
from .losses import Loss, SoftmaxCrossEntropy
from .modern_block import RMSNorm, SwiGLU, swiglu_hidden
from .ops import matmul

__all__ = ["Embedding", "PositionalEmbedding", "GELU", "FeedForward", "TransformerBlock",
           "Transformer", "SequenceCrossEntropy", "gelu", "check_tokens"]


def check_tokens(owner: str, idx, vocab: int, max_len: int | None = None):
    """Token ids: an integer array (N, T) with values in [0, vocab) and T <= max_len."""
    if not hasattr(idx, "shape") or not hasattr(idx, "dtype"):
        raise TypeError(f"{owner} expects token ids as an integer array (N, T), got "
                        f"{type(idx).__name__}. Convert with np.asarray(ids, dtype=np.int64).")
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"{owner} expects integer token ids (N, T), got dtype {idx.dtype}: "
                        f"the ids index rows of the embedding table, so they must be whole "
                        f"numbers (astype(np.int64)), not the embedded vectors.")
    if idx.ndim != 2:
        hint = " One sequence needs a batch axis: ids[None]." if idx.ndim == 1 else ""
        raise ValueError(f"{owner} expects token ids of shape (N, T), got {shape_str(idx.shape)}.{hint}")
    if max_len is not None and idx.shape[1] > max_len:
        raise ValueError(f"{owner} was built for sequences of at most max_len={max_len} "
                         f"positions, got T={idx.shape[1]}: crop the context to the last "
                         f"{max_len} tokens, or build the model with a larger max_len.")
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= vocab:
            raise ValueError(f"{owner}: token ids must be in [0, {vocab - 1}] for a vocabulary of "
                             f"{vocab}, got values from {lo} to {hi}.")
    return idx


# ==== Embeddings ======================================================================
class Embedding(Layer):
    """A table of learned vectors, one row per token: ids (N, T) -> W[ids] (N, T, d).

    params["W"]: (vocab, d), normals of std 0.02 (as GPT-2). The lookup is the product of
    the one-hot matrix of the ids (N·T, vocab) with W, so dW = onehot^T @ dout: each dout row
    added into the row of its id, ids that occur twice getting both (``dW[ids] += dout`` would
    keep only one of them). Computed as that product: exact, the same on NumPy and CuPy (the
    CuPy stand-in of the tests included) and deterministic on a GPU, where a scatter-add
    (``xp.add.at``) adds with atomics in no fixed order. Its cost, N·T·vocab numbers, is
    nothing for characters (about 100); a vocabulary of 50,000 words would want the
    scatter-add instead. No input gradient (ids are not numbers to differentiate): backward
    returns None.
    """

    def __init__(self, vocab: int, d: int, dtype=np.float32, seed=None):
        super().__init__()
        self.vocab = whole_number(vocab, "Embedding(vocab=...)")
        self.d = whole_number(d, "Embedding(d=...)")
        W = rng(seed).standard_normal((self.vocab, self.d)) * 0.02
        self.params = {"W": W.astype(float_dtype(dtype))}

    @checked
    def forward(self, idx):
        self.cache = idx
        return self.params["W"][idx]

    @checked
    def backward(self, dout):
        idx = self.cache
        xp = get_array_module(dout)
        one_hot = (idx.reshape(-1, 1) == xp.arange(self.vocab)).astype(dout.dtype)   # (N·T, vocab)
        self.grads = {"W": matmul(one_hot.T, dout.reshape(-1, self.d))}
        return None

    def check(self, idx):
        check_tokens(f"Embedding(vocab={self.vocab})", idx, self.vocab)

    def get_config(self):
        return {"vocab": self.vocab, "d": self.d}


class PositionalEmbedding(Layer):
    """Learned positions: x (N, T, d) -> x + W[start : start + T], one vector per position.

    params["W"]: (max_len, d), normals of std 0.02. Backward: dx = dout; the rows used get
    dout summed over the batch, the others 0. ``start`` (default 0): the position of x's first
    row, for generation with a key/value cache."""

    input_shape, input_ndim = "(N, T, d)", 3

    def __init__(self, max_len: int, d: int, dtype=np.float32, seed=None):
        super().__init__()
        self.max_len = whole_number(max_len, "PositionalEmbedding(max_len=...)")
        self.d = whole_number(d, "PositionalEmbedding(d=...)")
        W = rng(seed).standard_normal((self.max_len, self.d)) * 0.02
        self.params = {"W": W.astype(float_dtype(dtype))}

    @checked
    def forward(self, x, start: int = 0):
        T = x.shape[1]
        if start + T > self.max_len:
            raise ValueError(f"PositionalEmbedding(max_len={self.max_len}) got positions "
                             f"{start} to {start + T - 1}: the model knows {self.max_len} "
                             f"positions. Crop the context to the last {self.max_len} tokens.")
        self.cache = (start, T)
        return x + self.params["W"][start:start + T]

    @checked
    def backward(self, dout):
        start, T = self.cache
        dW = get_array_module(dout).zeros_like(self.params["W"])
        dW[start:start + T] = dout.sum(axis=0)
        self.grads = {"W": dW}
        return dout

    def check(self, x):
        super().check(x)
        if x.shape[-1] != self.d:
            raise ValueError(f"PositionalEmbedding(d={self.d}) got x of shape "
                             f"{shape_str(x.shape)}: the last axis must be {self.d}.")

    def get_config(self):
        return {"max_len": self.max_len, "d": self.d}


# ==== GELU ============================================================================
GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715


def gelu(x):
    """The tanh form of GELU (Hendrycks & Gimpel, 2016), as GPT-2 and PyTorch's
    ``GELU(approximate="tanh")``: 0.5 x (1 + tanh(c (x + a x³))), c = sqrt(2/pi), a = 0.044715."""
    xp = get_array_module(x)
    return 0.5 * x * (1 + xp.tanh(GELU_C * (x + GELU_A * x * x * x)))


class GELU(Layer):
    """y = 0.5 x (1 + t), t = tanh(u), u = c (x + a x³). Any shape.

    dy/dx = 0.5 (1 + t) + 0.5 x (1 - t²) c (1 + 3 a x²): the product rule, tanh' = 1 - tanh²."""

    input_shape = "(N, ...)"

    @checked
    def forward(self, x):
        xp = get_array_module(x)
        t = xp.tanh(GELU_C * (x + GELU_A * x * x * x))   # x * x * x: NumPy's float32 x ** 3 is ~30x slower
        self.cache = (x, t)
        return 0.5 * x * (1 + t)

    @checked
    def backward(self, dout):
        # dx = dout * 0.5 (1 + t + x (1 - t²) du/dx), du/dx = c (1 + 3 a x²), computed in place
        # in two arrays the size of x (five alive at once if written as one expression).
        x, t = self.cache
        xp = get_array_module(x)
        du_dx = x * x
        du_dx *= 3 * GELU_A
        du_dx += 1
        du_dx *= GELU_C
        dx = t * t
        xp.subtract(1, dx, out=dx)              # 1 - t²
        dx *= x
        dx *= du_dx
        del du_dx
        dx += t
        dx += 1
        dx *= 0.5
        dx *= dout
        return dx


# ==== The feed-forward part and the block =============================================
class FeedForward(Container):
    """Linear(D, hidden) - GELU - Linear(hidden, D) at every position on its own.

    x: (N, T, D) -> (N, T, D): the N·T positions are rows of one (N·T, D) matrix for the
    Linear layers (a reshape, no copy). Keys ``fc1.W``, ``fc1.b``, ``fc2.W``, ``fc2.b``."""

    layer_names = ("fc1", "act", "fc2")
    input_shape, input_ndim = "(N, T, d_model)", 3

    def __init__(self, d_model: int, hidden: int, dtype=np.float32, seed=None):
        self.d_model = whole_number(d_model, "FeedForward(d_model=...)")
        self.hidden = whole_number(hidden, "FeedForward(hidden=...)")
        gen = rng(seed) if seed is not None else None
        self.fc1 = Linear(self.d_model, self.hidden, dtype=dtype, seed=_child_seed(gen))
        self.act = GELU()
        self.fc2 = Linear(self.hidden, self.d_model, dtype=dtype, seed=_child_seed(gen))
        super().__init__(self.fc1, self.act, self.fc2)

    @checked
    def forward(self, x):
        N, T, D = x.shape
        h = self.fc2.forward(self.act.forward(self.fc1.forward(x.reshape(N * T, D))))
        return h.reshape(N, T, D)

    @checked
    def backward(self, dout):
        N, T, D = dout.shape
        dh = self.fc1.backward(self.act.backward(self.fc2.backward(dout.reshape(N * T, D))))
        return dh.reshape(N, T, D)

    def check(self, x):
        Layer.check(self, x)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"FeedForward(d_model={self.d_model}) got x of shape "
                             f"{shape_str(x.shape)}: the last axis must be {self.d_model}.")

    def get_config(self):
        return {"d_model": self.d_model, "hidden": self.hidden}


class TransformerBlock(Sequential):
    """A pre-LayerNorm transformer block (as GPT-2), x: (N, T, D) -> (N, T, D)::

        x = x + MultiHeadAttention(LayerNorm(x))      Residual(Sequential(LayerNorm, MHA))
        x = x + FeedForward(LayerNorm(x))             Residual(Sequential(LayerNorm, FeedForward))

    The normalisation sits inside each branch, so the skip path from input to output is the
    identity all the way: the gradient reaches the first block undamped (lesson 07b). The
    feed-forward part is ``mlp_ratio`` times wider than D. Keys: ``0.block.0.*`` (the first
    LayerNorm), ``0.block.1.*`` (attention), ``1.block.0.*``, ``1.block.1.fc1.*``, ... .

    The modern block (as Llama): ``norm="rms"`` puts RMSNorm where LayerNorm was (key ``g``),
    ``pos="rope"`` turns q and k by their positions inside attention (``"learned"``, the
    default: the block adds no position, the model's PositionalEmbedding did), ``mlp="swiglu"``
    the gated SwiGLU feed-forward, 2/3 as wide so that it has the GELU one's parameters (keys
    ``1.block.1.W_gate``, ``W_up``, ``W_down``)."""

    def __init__(self, d_model: int, heads: int, causal: bool = True, mlp_ratio=4,
                 dtype=np.float32, seed=None, attention_bias: bool = True, norm: str = "layer",
                 pos: str = "learned", mlp: str = "gelu"):
        self.d_model = whole_number(d_model, "TransformerBlock(d_model=...)")
        self.mlp_ratio = number(mlp_ratio, "TransformerBlock(mlp_ratio=...)", "mlp_ratio=4", 0.0,
                                None, low_open=True)
        self.options = block_options("TransformerBlock", norm, pos, mlp)     # (norm, pos, mlp)
        gen = rng(seed) if seed is not None else None
        attn = MultiHeadAttention(self.d_model, heads, causal, dtype=dtype, seed=_child_seed(gen),
                                  bias=attention_bias, rope=pos == "rope")
        if mlp == "swiglu":
            ff = SwiGLU(self.d_model, swiglu_hidden(self.d_model, self.mlp_ratio), dtype=dtype,
                        seed=_child_seed(gen))
        else:
            ff = FeedForward(self.d_model, max(1, round(self.mlp_ratio * self.d_model)),
                             dtype=dtype, seed=_child_seed(gen))
        Norm = RMSNorm if norm == "rms" else LayerNorm
        super().__init__(Residual(Sequential(Norm(self.d_model, dtype=dtype), attn)),
                         Residual(Sequential(Norm(self.d_model, dtype=dtype), ff)))

    @property
    def attention(self) -> MultiHeadAttention:
        return self.layers[0].block.layers[1]

    def step(self, x, past=None):
        """Inference with a key/value cache: x (N, T_new, D) -> (out, (K, V)); see
        :meth:`MultiHeadAttention.step`."""
        norm1, attn = self.layers[0].block.layers
        a, present = attn.step(norm1.forward(x), past)
        x = x + a
        return self.layers[1].forward(x), present

    def get_config(self):
        return {"d_model": self.d_model, "heads": self.attention.heads,
                "causal": self.attention.causal, "mlp_ratio": self.mlp_ratio,
                **({} if self.attention.bias else {"attention_bias": False}),
                **block_config(*self.options)}


# ==== The model =======================================================================
class Transformer(Container):
    """A small decoder-only transformer for characters (or any tokens)::

        ids (N, T) -> Embedding(vocab, D) -> + PositionalEmbedding(max_len, D)
                   -> TransformerBlock × layers -> LayerNorm(D) -> Linear(D, vocab)
                   -> logits (N, T, vocab)

    Causal by default: the logits at position t depend on ids[:, :t+1] only, so each position
    predicts the next id. Train with :class:`SequenceCrossEntropy` (``dl.fit`` works: X and Y
    are (N, T) integer arrays, Y = X shifted by one). Keys: ``embedding.W``, ``position.W``,
    ``blocks.<i>.*``, ``norm.*``, ``head.*``. ``dl.save`` / ``dl.load`` rebuild it from its
    config. ``backward(dlogits)`` fills the grads and returns None (ids have no gradient).
    ``chars`` (optional): the characters the ids stand for, ``chars[i]`` being id i, kept in
    the config so that a saved character model can read a prompt (``dlcourse generate``).
    ``attention_bias=False``: the attention projections without biases (x @ W alone), the model
    lesson 15b's learner trains with their own functions.
    ``norm="rms", pos="rope", mlp="swiglu"``: the blocks as :class:`TransformerBlock`'s, the
    final norm an RMSNorm too, and with ``pos="rope"`` no learned positions (``position`` is
    an Identity; the positions enter inside each attention).
    """

    layer_names = ("embedding", "position", "blocks", "norm", "head")
    input_dtype = np.dtype(np.int64)     # token ids (dl.export_onnx writes an int64 input)

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, max_len: int,
                 causal: bool = True, mlp_ratio=4, dtype=np.float32, seed=None, chars=None,
                 attention_bias: bool = True, norm: str = "layer", pos: str = "learned",
                 mlp: str = "gelu"):
        self.vocab = whole_number(vocab, "Transformer(vocab=...)")
        if chars is not None and (not isinstance(chars, str) or len(chars) != self.vocab):
            raise ValueError(f"Transformer(chars=...) names the character of each of the "
                             f"{self.vocab} ids: a str of {self.vocab} characters, got "
                             f"{chars!r:.60}.")
        self.chars = chars
        self.d_model = whole_number(d_model, "Transformer(d_model=...)")
        self.n_layers = whole_number(layers, "Transformer(layers=...)")
        self.max_len = whole_number(max_len, "Transformer(max_len=...)")
        self.options = block_options("Transformer", norm, pos, mlp)
        gen = rng(seed) if seed is not None else None
        D = self.d_model
        self.embedding = Embedding(self.vocab, D, dtype=dtype, seed=_child_seed(gen))
        position_seed = _child_seed(gen)       # drawn either way: the other layers keep theirs
        self.position = Identity() if pos == "rope" else \
            PositionalEmbedding(self.max_len, D, dtype=dtype, seed=position_seed)
        self.blocks = Sequential(*[TransformerBlock(D, heads, causal, mlp_ratio, dtype=dtype,
                                                    seed=_child_seed(gen),
                                                    attention_bias=attention_bias, norm=norm,
                                                    pos=pos, mlp=mlp)
                                   for _ in range(self.n_layers)])
        self.norm = (RMSNorm if norm == "rms" else LayerNorm)(D, dtype=dtype)
        self.head = Linear(D, self.vocab, dtype=dtype, seed=_child_seed(gen), init="xavier")
        super().__init__(self.embedding, self.position, self.blocks, self.norm, self.head)

    @checked
    def forward(self, idx):
        N, T = idx.shape
        h = self.position.forward(self.embedding.forward(idx))
        h = self.norm.forward(self.blocks.forward(h))                  # (N, T, D)
        return self.head.forward(h.reshape(N * T, self.d_model)).reshape(N, T, self.vocab)

    @checked
    def backward(self, dlogits):
        N, T, V = dlogits.shape
        dh = self.head.backward(dlogits.reshape(N * T, V)).reshape(N, T, self.d_model)
        dh = self.blocks.backward(self.norm.backward(dh))
        self.embedding.backward(self.position.backward(dh))
        return None

    def step(self, idx, past=None):
        """Generation with a key/value cache: idx (N, T_new) holds the new token ids only,
        ``past`` what the previous call returned (None at the start). Returns (logits
        (N, T_new, vocab), past): ``past`` is one (K, V) pair per block, (N, H, T_seen, d)
        each. The positions go on from where ``past`` ends (at most max_len in all)."""
        self.check(idx)
        N, T = idx.shape
        start = 0 if past is None else past[0][0].shape[2]
        h = self.embedding.forward(idx)
        if isinstance(self.position, PositionalEmbedding):      # (rope: inside attention)
            h = self.position.forward(h, start)
        present = []
        for i, block in enumerate(self.blocks.layers):
            h, kv = block.step(h, None if past is None else past[i])
            present.append(kv)
        h = self.norm.forward(h)
        logits = self.head.forward(h.reshape(N * T, self.d_model)).reshape(N, T, self.vocab)
        return logits, present

    def generate(self, prompt, steps: int, *, temperature: float = 1.0, top_k=None, seed=None,
                 cache: bool = True, top_p=None):
        """Continue ``prompt`` (int ids (N, T0) or (T0,)) by ``steps`` sampled ids: see
        ``dlcourse.generate.generate`` (``cache=True`` runs :meth:`step` with a key/value
        cache, ``False`` the whole context through ``forward`` at every step)."""
        from .generate import generate
        return generate(self, prompt, steps, temperature=temperature, top_k=top_k, seed=seed,
                        cache=cache, top_p=top_p)

    def check(self, idx):
        check_tokens(f"Transformer(vocab={self.vocab}, max_len={self.max_len})", idx,
                     self.vocab, self.max_len)

    def get_config(self):
        block = self.blocks.layers[0] if self.blocks.layers else None
        return {"vocab": self.vocab, "d_model": self.d_model,
                "heads": block.attention.heads if block else 1, "layers": self.n_layers,
                "max_len": self.max_len, "causal": block.attention.causal if block else True,
                "mlp_ratio": block.mlp_ratio if block else 4,
                **({} if not block or block.attention.bias else {"attention_bias": False}),
                **block_config(*self.options),
                **({"chars": self.chars} if self.chars is not None else {})}


class SequenceCrossEntropy(Loss):
    """Softmax cross-entropy at every position: logits (N, T, V), labels (N, T) integers.

    The mean over all N·T positions of -log softmax(logits)[n, t, labels[n, t]], in nats: it
    is ``dl.SoftmaxCrossEntropy`` on the (N·T, V) rows (and on the GPU its fused kernel).
    ``backward()`` returns d(loss)/d(logits): (N, T, V)."""

    def __init__(self):
        self.rows = SoftmaxCrossEntropy()

    def forward(self, logits, labels):
        if getattr(logits, "ndim", None) != 3 or getattr(labels, "shape", None) != logits.shape[:2]:
            raise ValueError(f"SequenceCrossEntropy expects logits (N, T, V) and labels (N, T), "
                             f"got {shape_str(getattr(logits, 'shape', ()))} and "
                             f"{shape_str(getattr(labels, 'shape', ()))}. For (N, V) logits use "
                             f"dl.SoftmaxCrossEntropy.")
        N, T, V = logits.shape
        self.cache = logits.shape
        return self.rows.forward(logits.reshape(N * T, V), labels.reshape(N * T))

    def backward(self):
        self._need_forward()
        return self.rows.backward().reshape(self.cache)


BLOCK_OPTIONS = {"norm": ("layer", "rms"), "pos": ("learned", "rope"), "mlp": ("gelu", "swiglu")}


def block_options(owner: str, norm, pos, mlp) -> tuple:
    """(norm, pos, mlp) checked against :data:`BLOCK_OPTIONS` (the first of each: lesson 15's)."""
    for name, value in (("norm", norm), ("pos", pos), ("mlp", mlp)):
        if value not in BLOCK_OPTIONS[name]:
            choices = " or ".join(repr(c) for c in BLOCK_OPTIONS[name])
            raise ValueError(f"{owner}({name}={value!r}): {name} is {choices} (the first is "
                             f"lesson 15's block, the second Llama's).")
    return norm, pos, mlp


def block_config(norm, pos, mlp) -> dict:
    """The options that differ from lesson 15's block (a default block's config is unchanged)."""
    return {name: value for name, value in (("norm", norm), ("pos", pos), ("mlp", mlp))
            if value != BLOCK_OPTIONS[name][0]}


def _child_seed(gen):
    """A seed for one layer drawn from the model's own generator (None: the global one)."""
    return None if gen is None else int(gen.integers(2**31))
