"""Activation recomputation (gradient checkpointing): keep a few activations, redo the rest.

Introduced in notebook ``13b_overlap_sharding_and_recomputation`` (Chen et al., "Training Deep
Nets with Sublinear Memory Cost", 2016). A training step keeps every layer's saved
activations from forward until its backward: memory grows with depth. Cut the layers into
k segments and keep only each segment's *input*; in backward, run the segment's forward
again from that input, then its backward::

    forward:   x0 -[seg 1]-> x1 -[seg 2]-> x2 ... -[seg k]-> out    kept: x0, x1, ..., x_{k-1}
    backward:  seg k: forward again from x_{k-1}, backward; ... seg 1: from x0

For n layers of a activations each: k·a (the inputs) + (n/k)·a (one segment's activations, in
backward), smallest at k = √n: 2√n·a instead of n·a, for one more forward pass.

``dl.recompute(model, segments=k)`` (a Sequential: its layers cut into k runs; any other
layer: one segment) returns a layer with the model's own ``params``, ``grads`` and
``state_dict`` (the same keys and arrays, so an optimizer built for the model trains it).
The second forward must equal the first: Dropout draws the same masks (the generator's state
is kept per segment and put back around the re-run: NumPy's generator; on a GPU a segment
holding an active Dropout is refused), and BatchNorm's running averages are put back after it.
"""
from __future__ import annotations

import numpy as np

from . import backend
from ._validate import whole_number
from .backend import device_of
from .layer_base import Layer, every_layer
from .layers import Dropout, Sequential

__all__ = ["recompute", "Recompute"]


def recompute(model, segments: int = 1):
    """``model`` run with activation recomputation, in ``segments`` segments (see the module)."""
    return Recompute(model, segments)


class Recompute(Layer):
    """``model``'s layers in ``segments`` runs; forward keeps each run's input only, backward
    runs each run's forward again, then its backward. ``params``, ``grads``, ``buffers``,
    modes and state dicts are the model's."""

    def __init__(self, model, segments: int = 1):
        if not isinstance(model, Layer):
            raise TypeError(f"dl.recompute takes a layer or a model (dl.Sequential, dl.MLP, "
                            f"dl.CNN), got {type(model).__name__}.")
        layers = list(model.layers) if isinstance(model, Sequential) else [model]
        k = whole_number(segments, "dl.recompute(segments=...)")
        if k > len(layers):
            raise ValueError(f"dl.recompute(segments={k}): {type(model).__name__} has "
                             f"{len(layers)} layer(s) to cut, so at most {len(layers)} "
                             f"segments. √{len(layers)} ≈ {max(1, round(len(layers) ** 0.5))} "
                             f"keeps the least memory.")
        self.model = model
        self.segments = [layers[int(a[0]):int(a[-1]) + 1]
                         for a in np.array_split(np.arange(len(layers)), k)]
        self.inputs = None           # [(x, the generator's state), ...] between forward and backward
        self.out_shape = None

    params = property(lambda self: self.model.params)
    grads = property(lambda self: self.model.grads)
    buffers = property(lambda self: self.model.buffers)
    training = property(lambda self: self.model.training)
    # what forward keeps for backward: the segments' inputs (memory_report counts it)
    cache = property(lambda self: None if self.inputs is None else [x for x, _ in self.inputs])

    def train(self, mode: bool = True):
        self.model.train(mode)
        return self

    def map_arrays(self, fn):
        self.model.map_arrays(fn)
        self.clear_cache()
        return self

    def clear_cache(self):
        self.inputs = None
        self.out_shape = None

    def state_dict(self) -> dict:
        return self.model.state_dict()

    def load_state_dict(self, state) -> None:
        self.model.load_state_dict(state)

    def forward(self, x):
        self.inputs = []
        for segment in self.segments:
            self._check_rng(segment, x)
            self.inputs.append((x, backend.rng().bit_generator.state))
            for layer in segment:
                x = layer.forward(x)
            _drop_caches(segment)            # the segment's activations go; x0..x_{k-1} stay
        self.out_shape = x.shape
        return x

    def backward(self, dout):
        if self.inputs is None:
            raise RuntimeError("Recompute.backward() needs forward() first: it re-runs the "
                               "segments from the inputs forward kept.")
        if tuple(dout.shape) != tuple(self.out_shape):
            raise ValueError(f"Recompute.backward got dout of shape {tuple(dout.shape)}; it "
                             f"must match the forward output, {tuple(self.out_shape)}.")
        for segment, (x, state) in zip(reversed(self.segments), reversed(self.inputs)):
            self._forward_again(segment, x, state)
            for layer in reversed(segment):
                dout = layer.backward(dout)
            _drop_caches(segment)
        self.inputs = None
        return dout

    def _forward_again(self, segment, x, state) -> None:
        """The segment's forward from its kept input, drawing the same random numbers and
        leaving BatchNorm's running averages as the first forward left them."""
        generator = backend.rng()
        now = generator.bit_generator.state
        generator.bit_generator.state = state
        kept = [(layer, k, a.copy()) for top in segment for layer in every_layer(top)
                if not hasattr(layer, "layers") for k, a in layer.buffers.items()]
        for layer in segment:
            x = layer.forward(x)
        for layer, k, before in kept:        # BatchNorm rebinds its buffers: put them back
            layer.buffers[k][...] = before
        generator.bit_generator.state = now

    def _check_rng(self, segment, x) -> None:
        if device_of(x) != "cpu" and any(isinstance(layer, Dropout) and layer.training
                                         and layer.p > 0 for s in segment
                                         for layer in every_layer(s)):
            raise NotImplementedError("dl.recompute: a segment with an active Dropout on the "
                                      "GPU: its second forward would draw other masks (CuPy's "
                                      "generator state is not kept here). Put the Dropout "
                                      "outside the recomputed model, or train on the CPU.")

    def __repr__(self):
        return f"Recompute({self.model!r}, segments={len(self.segments)})"


def _drop_caches(segment) -> None:
    for top in segment:
        for layer in every_layer(top):
            layer.clear_cache()
