"""Post-training int8 quantization: :func:`quantize`, :class:`QuantLinear`, :class:`QuantConv2d`;
asymmetric (zero-point) int8 and integer-only requantization, :func:`requantize`.

Introduced in notebook ``11a_quantization``.

Symmetric int8: a float x is stored as ``q = clip(round(x / s), -127, 127)`` (int8) and read
back as ``q * s``; the zero point is 0, so a zero stays exactly zero (padding, ReLU outputs,
pruned weights). One scale per output channel (``per_channel=True``) or one per tensor::

    qmodel = dl.quantize(model, X_calibration)    # a new model; ``model`` is not changed
    qmodel.predict(X_test)
    dl.save(qmodel, "model_int8.npz")             # int8 weights, float32 scales, no pickle

A quantized Linear computes, with x_s the input's scale (calibrated: the largest |x| seen on
``X_calibration``, divided by 127) and w_s the weight's scales (F,)::

    x_q = clip(round(x / x_s), -127, 127)                  int8   (N, in)
    acc = x_q @ W_q                                        int32  (N, F)   exact: no rounding
    y   = acc * (x_s * w_s) + b                            float32 (N, F)

which is the float product of the dequantized numbers, ``(x_q x_s) @ (W_q w_s) + b``, up to the
float32 rounding of the last line (the tests compare the two). QuantConv2d is the same on the
im2col matrix. Everything between these layers (ReLU, pooling, BatchNorm) stays float32.

An accelerator without a float unit finishes the layer in integers too (Jacob et al. 2018, the
scheme TensorFlow Lite runs). The input is asymmetric, ``x_q = clip(round(x / s_x) + z_x,
-128, 127)`` (:func:`asymmetric_params`, :func:`quantize_affine`), the bias int32 at scale
``s_x * s_w``, and the output is quantized with its own (s_y, z_y)::

    acc = (x_q - z_x) @ W_q + b_q                      int32, exact
    y_q = requantize(acc, M, z_y)                      int8,  M = s_x * s_w / s_y

where :func:`requantize` multiplies by M in fixed point, ``M = M0 * 2**-31 * 2**-shift``
(:func:`fixed_point_multiplier`): an int64 product, a rounding high half, a rounding right
shift, the zero point, saturation.
"""
from __future__ import annotations

import numpy as np

from ._validate import whole_number
from .backend import get_array_module, to_numpy
from .conv import Conv2d, im2col, output_size
from .layer_base import build_layer
from .layers import Layer, Linear, Sequential, eval_mode, unfused_layers
from .shapes import as_pair

__all__ = ["QMAX", "symmetric_scale", "quantize_array", "dequantize_array", "QuantLinear",
           "QuantConv2d", "quantize", "asymmetric_params", "quantize_affine", "dequantize_affine",
           "fixed_point_multiplier", "requantize"]

QMAX = 127       # symmetric int8: -127..127 (-128 unused, so the range is symmetric)


def symmetric_scale(x, axis=None):
    """The scale that maps the largest |x| to 127: ``max|x| / 127`` over all of x
    (``axis=None``: one number) or over every axis but ``axis`` (one per entry of that axis).
    An all-zero slice gets scale 1 (anything works; its values quantize to 0). NaN or infinity
    in x is refused (the scale would be inf, or NaN taken for 0)."""
    xp = get_array_module(x)
    if axis is None:
        amax = xp.abs(x).max()
    else:
        others = tuple(a for a in range(x.ndim) if a != axis % x.ndim)
        amax = xp.abs(x).max(axis=others)
    amax = xp.asarray(amax, dtype=np.float32)
    if not bool(xp.isfinite(amax).all()):
        raise ValueError(f"symmetric_scale: {_not_finite(x)} of the {x.size} values of x are "
                         f"NaN or infinite, so no scale fits them (an inf scale quantizes "
                         f"everything to 0). Find where they come from (a diverged training "
                         f"run?) and quantize finite numbers only.")
    return xp.where(amax > 0, amax / np.float32(QMAX), np.float32(1.0)).astype(np.float32)


def quantize_array(x, scale):
    """``clip(round(x / scale), -127, 127)`` as int8 (round half to even, NumPy's rounding).
    ``scale`` broadcasts against x (one number, or one per channel shaped to broadcast)."""
    xp = get_array_module(x)
    return xp.clip(xp.rint(x / scale), -QMAX, QMAX).astype(np.int8)


def dequantize_array(q, scale):
    """``q * scale`` in float32: the number each int8 stands for."""
    return q.astype(np.float32) * scale


# ======================================================================================
# Asymmetric (zero-point) int8 and integer-only requantization (Jacob et al. 2018)
# ======================================================================================
def asymmetric_params(x, qmin: int = -128, qmax: int = 127):
    """``(scale, zero_point)`` that spread the range of x, widened to hold 0, over qmin..qmax:
    ``scale = (max - min) / (qmax - qmin)`` (a Python float) and the integer ``zero_point`` that
    stands for 0 (so 0 is exact). An all-zero x gets scale 1; NaN or infinity in x is
    refused (the range would be infinite or undefined)."""
    if getattr(x, "size", 1) == 0:
        raise ValueError("asymmetric_params needs at least one value to take the range of; x "
                         "is empty.")
    lo, hi = float(to_numpy(x.min())), float(to_numpy(x.max()))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        scale = "NaN" if np.isnan(hi - lo) else "inf"
        raise ValueError(f"asymmetric_params: the range of x is [{lo}, {hi}]: "
                         f"{_not_finite(x)} of its {x.size} values are NaN or infinite, and "
                         f"a scale from that range would be {scale} "
                         f"(everything would quantize to the zero point). Quantize finite "
                         f"numbers only: find where they come from, or drop them "
                         f"(x[np.isfinite(x)]).")
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / (qmax - qmin) if hi > lo else 1.0
    zero_point = int(np.clip(np.rint(qmin - lo / scale), qmin, qmax))
    return scale, zero_point


def _not_finite(x) -> int:
    """How many values of x are NaN or infinite."""
    xp = get_array_module(x)
    return int((~xp.isfinite(x)).sum())


def quantize_affine(x, scale, zero_point, qmin: int = -128, qmax: int = 127):
    """``clip(round(x / scale) + zero_point, qmin, qmax)`` as int8 (uint8 when qmin >= 0)."""
    xp = get_array_module(x)
    q = xp.clip(xp.rint(x / scale) + zero_point, qmin, qmax)
    return q.astype(np.uint8 if qmin >= 0 else np.int8)


def dequantize_affine(q, scale, zero_point):
    """``(q - zero_point) * scale`` in float32."""
    return (q.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)


def fixed_point_multiplier(M: float):
    """``(M0, shift)`` with ``M = M0 * 2**-31 * 2**-shift``, M0 an integer in [2**30, 2**31) and
    shift >= 0, for a real multiplier 0 < M < 1 (done once, offline, in floating point)."""
    M = float(M)
    if not 0.0 < M < 1.0:
        raise ValueError(f"the requantization multiplier M = s_x * s_w / s_y must be in (0, 1) "
                         f"here, got {M!r}.")
    mantissa, exponent = np.frexp(M)            # M = mantissa * 2**exponent, mantissa in [0.5, 1)
    M0 = int(np.rint(mantissa * 2.0 ** 31))
    if M0 == 2 ** 31:                           # rounded up to 1.0: one bit more, or, just
        M0, exponent = (M0 // 2, exponent + 1) if exponent < 0 else (M0 - 1, exponent)  # below 1
    return M0, int(-exponent)


def requantize(acc, M: float, zero_point: int, qmin: int = -128, qmax: int = 127):
    """The integer-only output of a layer: ``clip(round(M * acc) + zero_point, qmin, qmax)`` as
    int8, computed as gemmlowp does (Jacob et al. 2018, the paper's reference code): the int64
    product ``acc * M0``, its rounded high half (``SaturatingRoundingDoublingHighMul``), a
    rounding right shift (``RoundingDivideByPOT``), the zero point, saturation.

    acc: int32 array (any shape); M: the real multiplier s_x * s_w / s_y in (0, 1).
    """
    xp = get_array_module(acc)
    M0, shift = fixed_point_multiplier(M)
    ab = acc.astype(np.int64) * np.int64(M0)                     # up to 62 bits
    nudge = xp.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    total = ab + nudge
    high = xp.where(total >= 0, total >> 31, -((-total) >> 31))  # C's division: toward zero
    mask = np.int64((1 << shift) - 1)
    threshold = (mask >> 1) + (high < 0)
    out = (high >> shift) + ((high & mask) > threshold)          # round half away from zero
    return xp.clip(out + zero_point, qmin, qmax).astype(np.uint8 if qmin >= 0 else np.int8)


class _QuantLayer(Layer):
    """Shared by the int8 layers: arrays in ``buffers`` (nothing to train), inference only."""

    inference_only = True     # dl.load returns a model holding one in evaluation mode

    def __init__(self, per_channel: bool):
        super().__init__()
        self.per_channel = bool(per_channel)
        self.training = False

    def map_arrays(self, fn):
        # Moves (to "gpu") apply to every array; casts (astype(float64)) leave the int8 ones int8.
        return super().map_arrays(lambda a: fn(a).astype(a.dtype) if a.dtype.kind == "i" else fn(a))

    def backward(self, dout):
        raise RuntimeError(f"{type(self).__name__} is for inference: its weights are int8. "
                           f"Fine-tune the float model, then quantize it again with dl.quantize.")

    def _quantize_input(self, x):
        if not hasattr(x, "dtype") or x.dtype.kind != "f":
            raise TypeError(f"{type(self).__name__} takes float inputs (it quantizes them with "
                            f"its calibrated scale), got {getattr(x, 'dtype', type(x).__name__)}.")
        return quantize_array(x, self.buffers["x_scale"])

    def _fill(self, layer, x_scale, axis):
        """Quantize the float ``layer``'s W into this layer's buffers: one scale per entry of
        ``axis`` (its output channels) or one for all; b as it is; x_scale (1,)."""
        W = layer.params["W"]
        if self.per_channel:
            s = symmetric_scale(W, axis=axis)
            shape = [1] * W.ndim
            shape[axis] = -1
            W_q = quantize_array(W, s.reshape(shape))
        else:
            s = symmetric_scale(W).reshape(1)
            W_q = quantize_array(W, s)
        self.buffers = {"W_q": W_q, "W_scale": s, "b": layer.params["b"].astype(np.float32),
                        "x_scale": get_array_module(W).asarray(x_scale, dtype=np.float32).reshape(1)}
        return self


class QuantLinear(_QuantLayer):
    """int8 Linear: ``y = (x_q @ W_q) * (x_scale * W_scale) + b`` with the product in int32.

    x: (N, in_features) float -> y: (N, out_features) float32
    buffers: W_q int8 (in_features, out_features) (Linear's layout), W_scale float32
    (out_features,) per channel or (1,) per tensor, b float32 (out_features,), x_scale float32 (1,).
    """

    def __init__(self, in_features: int, out_features: int, per_channel: bool = True):
        super().__init__(per_channel)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.buffers = {"W_q": np.zeros((self.in_features, self.out_features), np.int8),
                        "W_scale": np.ones(self.out_features if self.per_channel else 1, np.float32),
                        "b": np.zeros(self.out_features, np.float32),
                        "x_scale": np.ones(1, np.float32)}

    @classmethod
    def from_float(cls, layer: Linear, x_scale, per_channel: bool = True):
        """Quantize a trained Linear; ``x_scale``: its input's calibrated scale."""
        return cls(layer.in_features, layer.out_features, per_channel)._fill(layer, x_scale, axis=1)

    def forward(self, x):
        if getattr(x, "ndim", None) != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"QuantLinear(in_features={self.in_features}) takes x of shape "
                             f"(N, {self.in_features}), got {getattr(x, 'shape', None)}.")
        B = self.buffers
        x_q = self._quantize_input(x)                                  # (N, in) int8
        acc = x_q.astype(np.int32) @ B["W_q"].astype(np.int32)         # (N, out) int32
        return acc.astype(np.float32) * (B["x_scale"] * B["W_scale"]) + B["b"]

    def get_config(self):
        return {"in_features": self.in_features, "out_features": self.out_features,
                "per_channel": self.per_channel}


class QuantConv2d(_QuantLayer):
    """int8 Conv2d on the im2col matrix: ``out = (cols_q @ W_q_mat.T) * (x_scale * W_scale) + b``.

    x: (N, C, H, W) float -> out: (N, F, OH, OW) float32
    buffers: W_q int8 (F, C, KH, KW), W_scale float32 (F,) or (1,), b float32 (F,), x_scale (1,).
    cols = im2col(x): (N*OH*OW, C*KH*KW), quantized elementwise (a zero pad stays 0).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride: int = 1,
                 padding: int = 0, per_channel: bool = True):
        super().__init__(per_channel)
        KH, KW = (kernel_size, kernel_size) if np.isscalar(kernel_size) else kernel_size
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = [int(KH), int(KW)]
        self.stride, self.padding = [int(v) for v in as_pair(stride)], [int(v) for v in as_pair(padding)]
        F = self.out_channels
        self.buffers = {"W_q": np.zeros((F, self.in_channels, int(KH), int(KW)), np.int8),
                        "W_scale": np.ones(F if self.per_channel else 1, np.float32),
                        "b": np.zeros(F, np.float32), "x_scale": np.ones(1, np.float32)}

    @classmethod
    def from_float(cls, layer: Conv2d, x_scale, per_channel: bool = True):
        """Quantize a trained Conv2d; ``x_scale``: its input's calibrated scale."""
        q = cls(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride,
                layer.padding, per_channel)
        return q._fill(layer, x_scale, axis=0)

    def forward(self, x):
        if getattr(x, "ndim", None) != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"QuantConv2d(in_channels={self.in_channels}) takes x of shape "
                             f"(N, {self.in_channels}, H, W), got {getattr(x, 'shape', None)}.")
        B = self.buffers
        N, C, H, W = x.shape
        F, _, KH, KW = B["W_q"].shape
        OH, OW = output_size(H, W, KH, KW, self.stride, self.padding)
        cols_q = self._quantize_input(im2col(x, KH, KW, self.stride, self.padding))  # (N*OH*OW, C*KH*KW)
        acc = cols_q.astype(np.int32) @ B["W_q"].reshape(F, -1).T.astype(np.int32)     # (N*OH*OW, F)
        out = acc.astype(np.float32) * (B["x_scale"] * B["W_scale"]) + B["b"]
        return out.reshape(N, OH, OW, F).transpose(0, 3, 1, 2)

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": self.stride,
                "padding": self.padding, "per_channel": self.per_channel}


_QUANTIZED = {Linear: QuantLinear, Conv2d: QuantConv2d}


def _calibration_data(model, X):
    """X checked before any work: a non-empty array of finite numbers that the model takes. A
    single NaN or infinity would set a layer's scale (the largest |input| / 127) and quietly
    cost accuracy, or all of it."""
    if not hasattr(X, "shape") or getattr(X, "ndim", 0) < 1 or len(X) == 0:
        raise ValueError(f"quantize needs calibration inputs X_calibration: a non-empty array "
                         f"shaped like the training inputs (e.g. a few hundred training "
                         f"samples); got {type(X).__name__}"
                         f"{' of shape ' + str(tuple(X.shape)) if hasattr(X, 'shape') else ''}.")
    kind = np.dtype(X.dtype).kind
    if kind not in "iuf":
        raise TypeError(f"quantize(X_calibration=...) must hold numbers, got dtype {X.dtype}.")
    if kind == "f":
        finite = to_numpy(get_array_module(X).isfinite(X).reshape(len(X), -1).all(axis=1))
        if not finite.all():
            rows = np.flatnonzero(~finite)
            raise ValueError(f"quantize(X_calibration=...) holds NaN or infinity in "
                             f"{rows.size} sample(s), the first at row {int(rows[0])}: every "
                             f"layer's scale comes from the largest value it sees, so one such "
                             f"value would ruin it. Remove those rows (X[np.isfinite(X).all("
                             f"axis=1)]) or fix the data.")
    from .inference import fits
    problem = fits(model, tuple(X.shape[1:]))
    if problem:
        raise ValueError(f"quantize(X_calibration=...) has samples of shape "
                         f"{tuple(X.shape[1:])}, which this model does not take: {problem}")
    return X


def quantize(model, X_calibration, per_channel: bool = True, batch_size: int = 256) -> Sequential:
    """A new model computing ``model`` with int8 Linear and Conv2d layers.

    Args:
        model: a trained Sequential (dl.MLP, dl.CNN, dl.Sequential); not changed.
        X_calibration: (N, ...) inputs like the training data (a few hundred suffice): each
            quantized layer's input scale is the largest |input| it sees on them, / 127.
        per_channel: one weight scale per output channel (True) or one per layer (False).

    Returns:
        A ``dl.Sequential`` in evaluation mode: QuantLinear / QuantConv2d in place of Linear /
        Conv2d, copies of the other layers. ``forward``, ``predict``, ``dl.evaluate``,
        ``dl.save`` and ``dl.load`` work on it; ``backward`` does not.
    """
    layers = unfused_layers(model, "quantize", "dl.MLP, dl.CNN, dl.Sequential")
    nested = [(i, type(l).__name__) for i, l in enumerate(layers) if hasattr(l, "named_layers")]
    if nested:
        raise TypeError(f"quantize takes a flat Sequential (dl.MLP, dl.CNN), but layer "
                        f"{nested[0][0]} is a {nested[0][1]}, a layer holding layers: its Linear "
                        f"and Conv2d layers would stay float32. A model with residual blocks "
                        f"(dl.ResNet) cannot be quantized here.")
    batch_size = whole_number(batch_size, "quantize(batch_size=...)")
    X_calibration = _calibration_data(model, X_calibration)
    amax = [0.0] * len(layers)
    dtype = model.dtype or np.float32
    with eval_mode(model):
        xp = get_array_module(next(iter(model.state_dict().values())))
        for start in range(0, len(X_calibration), batch_size):
            x = xp.asarray(X_calibration[start:start + batch_size], dtype=dtype)
            for i, layer in enumerate(layers):
                if type(layer) in _QUANTIZED:
                    amax[i] = max(amax[i], float(to_numpy(xp.abs(x).max())))
                x = layer.forward(x)
    new = []
    for i, layer in enumerate(layers):
        kind = _QUANTIZED.get(type(layer))
        if kind is not None:
            new.append(kind.from_float(layer, amax[i] / QMAX if amax[i] > 0 else 1.0, per_channel))
        else:                          # a copy, so the two models share no array
            copy = build_layer(type(layer).__name__, layer.get_config())
            if layer.dtype is not None:
                copy.astype(layer.dtype)
            copy.to(layer.device)
            copy.load_state_dict(layer.state_dict())
            new.append(copy)
    quantized = Sequential(*new).eval()
    quantized.sample_shape = tuple(int(s) for s in X_calibration.shape[1:])   # for serve/predict
    return quantized
