"""Where a training step's memory goes: counted, predicted, then measured.

Introduced in notebook ``13b_overlap_sharding_and_recomputation``. One step of training
holds, at its peak (the end of backward, or the optimizer's update just after it):

    parameters  P·s    the model
    gradients   P·s    one per parameter (filled by backward)
    optimizer   k·P·s  SGD with momentum k = 1, Adam k = 2 (m and v)
    activations        what each layer's forward saved for its backward (its ``cache``)
    batch + output     the input batch, the model's output and the loss's saved arrays
    workspace          the largest set of temporaries alive at once: in backward a layer's
                       dout, its dx and its new gradients; in the update a few arrays the
                       size of the largest parameter

(s: bytes per number). ``memory_report`` counts each of these from the arrays themselves (an
array saved by two layers, the ReLU's output kept again as the next Linear's input, counts
once, for the first), adds them into a predicted peak, and measures the real peak of one
step on copies of the model and optimizer with ``tracemalloc`` (NumPy reports its arrays to
it). ZeRO-1 divides the optimizer's line by N (``zero.py``); recomputation turns the
activations' line into the segment inputs plus one segment's activations (``recompute.py``).
The measured peak is on the CPU only (on a GPU, CuPy's memory pool keeps freed blocks, so
``measured`` is None there and the prediction stands alone).
"""
from __future__ import annotations

import copy
import tracemalloc

from .backend import device_of
from .layer_base import every_layer

__all__ = ["memory_report", "saved_bytes"]


def _root(a):
    """The array that owns ``a``'s memory (a view's base, all the way down)."""
    while getattr(a, "base", None) is not None and hasattr(a.base, "nbytes"):
        a = a.base
    return a


def _arrays(value):
    """Every array inside a cache: an array, or tuples, lists and dicts of them."""
    if hasattr(value, "nbytes") and hasattr(value, "shape"):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _arrays(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _arrays(v)


def saved_bytes(caches, seen=None) -> list[int]:
    """Bytes of each cache's arrays, an array (or the array it is a view of) counted once,
    for the first cache that holds it; ``seen``: ids already counted, updated."""
    seen = set() if seen is None else seen
    out = []
    for cache in caches:
        total = 0
        for a in _arrays(cache):
            root = _root(a)
            if id(root) not in seen:
                seen.add(id(root))
                total += int(root.nbytes)
        out.append(total)
    return out


def _layers(model):
    """The layers whose caches hold the activations: the leaves of the model."""
    leaves = [layer for layer in every_layer(model) if not hasattr(layer, "layers")]
    return leaves or [model]


def _step(model, loss, optimizer, xb, yb) -> int:
    """One training step; returns the bytes of the model's output. The output and the loss's
    gradient of it stay alive through the whole backward pass (the caller holds both)."""
    out = model.forward(xb)
    loss.forward(out, yb)
    model.backward(loss.backward())
    optimizer.step()
    return int(out.nbytes)


def memory_report(model, batch, optimizer, loss=None) -> dict:
    """Bytes of one training step of ``model`` on ``batch`` = ``(xb, yb)`` with ``optimizer``
    (``loss``: default ``dl.SoftmaxCrossEntropy()``): counted by part, predicted, measured.

    Returns ``{"params", "grads", "optimizer", "activations", "layers": [(name, bytes)],
    "batch_and_output", "workspace", "predicted_peak", "measured_peak"}`` (bytes; measured
    None on a GPU). Model and optimizer are left as they were: the step runs on copies.
    """
    if loss is None:
        from .losses import SoftmaxCrossEntropy
        loss = SoftmaxCrossEntropy()
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise TypeError(f"memory_report(model, batch, optimizer): batch is a pair (xb, yb), "
                        f"got {type(batch).__name__}.")
    if getattr(optimizer, "model", None) is not model and getattr(optimizer, "inner", None) is None:
        raise ValueError("memory_report: the optimizer must be built for this model "
                         "(dl.Adam(model, ...)).")
    if getattr(optimizer, "inner", None) is not None:
        raise TypeError("memory_report takes the optimizer before sharding; a "
                        "ShardedOptimizer's own memory() gives its bytes per rank.")
    xb, yb = batch
    on_cpu = device_of(xb) == "cpu"
    if on_cpu:
        tracemalloc.start()
    try:
        m, opt, lo = copy.deepcopy((model, optimizer, loss))
        x, y = xb.copy(), yb.copy()
        m.train()
        _step(m, lo, opt, x, y)                 # warm: the gradients and the state exist now
        for layer in every_layer(m):
            layer.clear_cache()
        lo.cache = None
        if on_cpu:
            tracemalloc.reset_peak()
        out_bytes = _step(m, lo, opt, x, y)
        measured_peak = tracemalloc.get_traced_memory()[1] if on_cpu else None
    finally:
        if on_cpu:
            tracemalloc.stop()
    params = sum(int(p.nbytes) for p in m.params.values())
    grads = sum(int(g.nbytes) for g in m.grads.values())
    state = sum(int(v.nbytes) for v in opt.state.values())
    seen = {id(_root(a)) for group in (m.params, m.grads, opt.state) for a in group.values()}
    layers = _layers(m)
    per_layer = saved_bytes([layer.cache for layer in layers], seen)
    outputs = saved_bytes([x, y, lo.cache], seen) + [2 * out_bytes]   # + output and its grad
    workspace = _workspace(m, layers, x, opt)
    activations = sum(per_layer)
    predicted = params + grads + state + activations + sum(outputs) + workspace
    return {"params": params, "grads": grads, "optimizer": state, "activations": activations,
            "layers": [(type(layer).__name__, b) for layer, b in zip(layers, per_layer)],
            "batch_and_output": sum(outputs), "workspace": workspace,
            "predicted_peak": predicted, "measured_peak": measured_peak}


# Temporaries alive at once inside each kind of layer's backward, beyond what is kept, read
# off its code (bytes of dout, of dx, of its new gradients, of what its forward saved). The
# old gradients stay alive until the new ones replace them; dout is held by the caller.
def _linear(dout, dx, grads, saved, layer):    # dW = x.T @ dz; then dx = dz @ W.T
    return dout + max(grads, dx)


def _conv(dout, dx, grads, saved, layer):      # dout as (F, N*OH*OW): a copy; dcols, then fold
    return 2 * dout + max(grads, saved + dx)


def _elementwise(dout, dx, grads, saved, layer):   # dx = dout * mask, and the like
    return dout + dx


def _gelu(dout, dx, grads, saved, layer):      # du/dx and dx, each the size of x, in place
    return dout + 2 * dx


def _attention(dout, dx, grads, saved, layer):
    """MultiHeadAttention: inside attention_backward, dP and dS (each the size of the saved
    weights P, (N, H, T, T)) beside dout, the heads' da and dv; then, in the projections,
    da, dq, dk, dv, a merged copy, a product and the running dx, each (N, T, D)."""
    P = int(layer.cache[2][3].nbytes)
    return max(2 * P + 4 * dout, 8 * dout)


BACKWARD_TEMPORARIES = {"Linear": _linear, "LinearReLU": _linear, "Conv2d": _conv,
                        "Conv2dReLU": _conv, "GELU": _gelu, "MultiHeadAttention": _attention}
# Arrays the size of one parameter alive at once in each optimizer's update: SGD p -= lr * v
# (one); Adam g * g (one, scaled in place), then sqrt(v) and m / that (two, scaled in place).
UPDATE_TEMPORARIES = {"SGD": 1, "Adam": 2, "AdamW": 2, "RMSprop": 2, "Adagrad": 3}


def _workspace(model, layers, x, optimizer) -> int:
    """The most the step holds at once beyond what is kept: one layer's backward
    (:data:`BACKWARD_TEMPORARIES`) or the update of the largest parameter."""
    itemsize = next(iter(model.params.values())).itemsize
    most, dx = 0, int(x.nbytes)
    for layer in layers:
        out = getattr(layer, "out_shape", None)
        dout = _prod(out) * itemsize if out is not None else dx
        grads = sum(int(p.nbytes) for p in layer.params.values())
        saved = sum(int(a.nbytes) for a in _arrays(layer.cache))
        rule = BACKWARD_TEMPORARIES.get(type(layer).__name__, _elementwise)
        most = max(most, rule(dout, dx, grads, saved, layer))
        dx = dout                        # this layer's output is the next one's input
    largest = max(int(p.nbytes) for p in model.params.values())
    return max(most, UPDATE_TEMPORARIES.get(type(optimizer).__name__, 3) * largest)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
