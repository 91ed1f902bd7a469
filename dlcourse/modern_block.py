"""The block of today's open models (Llama's): RMSNorm, rotary position embeddings, SwiGLU.

Introduced in notebook ``15c_tokens_and_the_modern_block`` beside lesson 15's block
(``transformer.py``); ``dl.TransformerBlock(norm="rms", pos="rope", mlp="swiglu")`` and
``dl.Transformer(...)`` with the same three arguments put them together.

* :class:`RMSNorm` ``(d)``: LayerNorm without the mean and without beta (Zhang & Sennrich,
  2019). Per row, over the last axis of size D::

      r = 1 / sqrt(mean(x²) + eps)          x_hat = x · r          y = g · x_hat

  Backward (dx_hat = dout · g): dx = r · (dx_hat - x_hat · mean(dx_hat · x_hat)), the
  LayerNorm formula less its ``- mean(dx_hat)`` term (no mean was taken off);
  dg = sum(dout · x_hat) over the rows.

* :func:`rope` ``(x, start=0)``: rotary position embeddings (Su et al., 2021). The last axis
  of x (..., T, d) is d/2 pairs (x[2i], x[2i+1]); the pair i at position t is turned by the
  angle t·θ_i, θ_i = base^(-2i/d)::

      y[2i]   = x[2i] cos(tθ_i) - x[2i+1] sin(tθ_i)
      y[2i+1] = x[2i] sin(tθ_i) + x[2i+1] cos(tθ_i)

  A rotation is orthogonal, so its backward is the rotation back, by -tθ_i
  (:func:`rope_backward`). Turning q at position m and k at position n gives
  q'·k' = q·R(nθ - mθ)k: the scores depend on the offset n - m only (the test checks it).
  Used by ``dl.MultiHeadAttention(rope=True)`` on q and k of each head (d = d_model / heads).

* :class:`SwiGLU` ``(d_model, hidden)``: the gated feed-forward (Shazeer, 2020), no biases::

      a = x @ W_gate     b = x @ W_up       (M, hidden)   M = N·T rows
      h = silu(a) · b    silu(a) = a · sigmoid(a)
      y = h @ W_down                        (M, D)

  Backward: dh = dy @ W_down^T; da = dh · b · silu'(a), silu'(a) = s (1 + a (1 - s)),
  s = sigmoid(a); db = dh · silu(a); dx = da @ W_gate^T + db @ W_up^T. Three matrices
  instead of two: ``TransformerBlock(mlp="swiglu")`` takes hidden = 2/3 of the GELU
  feed-forward's, so both have about the same number of parameters (as Llama).
"""
from __future__ import annotations

import math

import numpy as np

from ._validate import float_dtype, number, shape_str, whole_number
from .backend import get_array_module, rng
from .layer_base import Layer, checked
from .ops import matmul

__all__ = ["RMSNorm", "SwiGLU", "rope", "rope_backward", "rope_angles", "ROPE_BASE",
           "swiglu_hidden"]

ROPE_BASE = 10000.0


# ==== RMSNorm =========================================================================
class RMSNorm(Layer):
    """y = g · x / sqrt(mean(x²) + eps) over the last axis. x: (N, ..., D) -> the same shape.

    params["g"]: (D,), ones. No mean subtracted, no beta: one statistic per row, the root mean
    square. ``eps=1e-6`` (Llama's); ``torch.nn.RMSNorm(D, eps=1e-6)`` computes the same."""

    input_shape = "(N, ..., D)"

    def __init__(self, d: int, eps: float = 1e-6, dtype=np.float32):
        super().__init__()
        self.d = whole_number(d, "RMSNorm(d=...)")
        self.eps = number(eps, "RMSNorm(eps=...)", "eps=1e-6", 0.0, None, low_open=True)
        self.params = {"g": np.ones(self.d, float_dtype(dtype))}

    @checked
    def forward(self, x):
        xp = get_array_module(x)
        r = 1.0 / xp.sqrt((x * x).mean(axis=-1, keepdims=True) + x.dtype.type(self.eps))
        x_hat = x * r                                                   # (N, ..., D)
        self.cache = (x_hat, r)
        return self.params["g"] * x_hat

    @checked
    def backward(self, dout):
        x_hat, r = self.cache
        D = self.d
        self.grads = {"g": (dout * x_hat).reshape(-1, D).sum(axis=0)}
        dx_hat = dout * self.params["g"]
        return r * (dx_hat - x_hat * (dx_hat * x_hat).mean(axis=-1, keepdims=True))

    def check(self, x):
        super().check(x)
        if x.ndim < 2 or x.shape[-1] != self.d:
            raise ValueError(f"RMSNorm(d={self.d}) got x of shape {shape_str(x.shape)}: it "
                             f"normalizes the LAST axis, which must be {self.d}, after a batch "
                             f"axis (x[None] for one sample).")

    def get_config(self):
        return {"d": self.d, "eps": self.eps}


# ==== Rotary position embeddings ======================================================
def rope_angles(T: int, d: int, start: int = 0, base: float = ROPE_BASE, xp=np,
                dtype=np.float64):
    """(cos, sin), each (T, d/2): the angles t·θ_i for t = start ... start + T - 1."""
    theta = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)            # (d/2,)
    angles = np.arange(start, start + T, dtype=np.float64)[:, None] * theta  # (T, d/2)
    return xp.asarray(np.cos(angles), dtype=dtype), xp.asarray(np.sin(angles), dtype=dtype)


def rope(x, start: int = 0, base: float = ROPE_BASE, inverse: bool = False):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) of x (..., T, d) by t·θ_i, t = start + the
    position along axis -2. ``inverse=True`` rotates back (the backward). d must be even."""
    xp = get_array_module(x)
    _check_rope(x, start)
    *lead, T, d = x.shape
    cos, sin = rope_angles(T, d, start, base, xp, x.dtype)                 # (T, d/2)
    if inverse:
        sin = -sin
    pairs = x.reshape(*lead, T, d // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]                                   # (..., T, d/2)
    y = xp.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)
    return y.reshape(x.shape)


def rope_backward(dout, start: int = 0, base: float = ROPE_BASE):
    """dL/dx of :func:`rope` given dout (..., T, d): R^T dout, the rotation back."""
    return rope(dout, start, base, inverse=True)


def _check_rope(x, start):
    if not hasattr(x, "ndim") or x.ndim < 2 or not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"rope expects a float array (..., T, d), positions on axis -2 and "
                         f"features on axis -1; got {shape_str(getattr(x, 'shape', ()))} "
                         f"{getattr(x, 'dtype', type(x).__name__)}.")
    if x.shape[-1] % 2:
        raise ValueError(f"rope turns the features in pairs, so d (the last axis) must be even; "
                         f"got x of shape {shape_str(x.shape)}. In attention d = d_model / heads: "
                         f"pick heads so that it is even.")
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
        raise ValueError(f"rope(start=...) is the position of x's first row, a whole number "
                         f">= 0; got {start!r}.")


# ==== SwiGLU ==========================================================================
def swiglu_hidden(d_model: int, mlp_ratio=4) -> int:
    """2/3 of mlp_ratio · d_model (three matrices instead of two: the same parameter count)."""
    return max(1, round(2 * mlp_ratio * d_model / 3))


class SwiGLU(Layer):
    """y = (silu(x @ W_gate) · (x @ W_up)) @ W_down at every position. x: (N, T, D) -> (N, T, D).

    params: ``W_gate``, ``W_up`` (D, hidden), ``W_down`` (hidden, D), normals of std
    1/sqrt(fan_in); no biases (as Llama)."""

    input_shape, input_ndim = "(N, T, d_model)", 3

    def __init__(self, d_model: int, hidden: int, dtype=np.float32, seed=None):
        super().__init__()
        self.d_model = D = whole_number(d_model, "SwiGLU(d_model=...)")
        self.hidden = Hd = whole_number(hidden, "SwiGLU(hidden=...)")
        dtype, gen = float_dtype(dtype), rng(seed)
        self.params = {"W_gate": (gen.standard_normal((D, Hd)) / math.sqrt(D)).astype(dtype),
                       "W_up": (gen.standard_normal((D, Hd)) / math.sqrt(D)).astype(dtype),
                       "W_down": (gen.standard_normal((Hd, D)) / math.sqrt(Hd)).astype(dtype)}

    @checked
    def forward(self, x):
        xp = get_array_module(x)
        N, T, D = x.shape
        p = self.params
        x2 = x.reshape(N * T, D)
        a, b = matmul(x2, p["W_gate"]), matmul(x2, p["W_up"])               # (M, hidden)
        s = 1.0 / (1.0 + xp.exp(-a))                                        # sigmoid(a)
        h = a * s * b
        self.cache = (x2, a, b, s, h)
        return matmul(h, p["W_down"]).reshape(N, T, D)

    @checked
    def backward(self, dout):
        x2, a, b, s, h = self.cache
        N, T, D = dout.shape
        p = self.params
        dy = dout.reshape(N * T, D)
        dh = matmul(dy, p["W_down"].T)
        da = dh * b * s * (1 + a * (1 - s))                                 # silu'(a)
        db = dh * a * s                                                     # silu(a)
        self.grads = {"W_gate": matmul(x2.T, da), "W_up": matmul(x2.T, db),
                      "W_down": matmul(h.T, dy)}
        return (matmul(da, p["W_gate"].T) + matmul(db, p["W_up"].T)).reshape(N, T, D)

    def check(self, x):
        super().check(x)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"SwiGLU(d_model={self.d_model}) got x of shape "
                             f"{shape_str(x.shape)}: the last axis must be {self.d_model}.")

    def get_config(self):
        return {"d_model": self.d_model, "hidden": self.hidden}
