"""Per-layer statistics of a model's activations and gradients: is the signal healthy?

Introduced with initialization (notebook ``04c_initialization``: vanishing and exploding
signals, dead ReLUs). Through a deep network with a bad initialization the activations'
standard deviation shrinks or grows layer after layer (so do the gradients, on the way back),
and ReLU units that are negative for every input are "dead": they pass no gradient and never
learn again.

    rows = dl.layer_stats(dl.MLP([40, 256, 256, 256, 10], init=0.01), X, y)
    for r in rows:
        print(r["layer"], r["std"], r["grad_std"], r["dead"])
"""
from __future__ import annotations

from .backend import get_array_module
from .losses import SoftmaxCrossEntropy

__all__ = ["layer_stats"]


def layer_stats(model, X, y=None, loss=None) -> list[dict]:
    """One forward (and, with ``y``, one backward) pass of ``model`` (a Sequential: dl.MLP,
    dl.CNN) on the batch ``X``, and for every layer a dict of plain floats:

    * ``"layer"``: its index and type, e.g. ``"1 ReLU"``;
    * ``"mean"``, ``"std"``: of the layer's output over the batch;
    * ``"dead"``: the fraction of its output units (features, or channels x positions) that
      are 0 for every sample of the batch: after a ReLU, the dead units;
    * ``"grad_mean"``, ``"grad_std"``: of d(loss)/d(output), when ``y`` is given (else None).

    ``loss``: default ``dl.SoftmaxCrossEntropy()``. The model's mode (train/eval) is used as it
    is; the gradients left in ``model.grads`` are this batch's.
    """
    layers = getattr(model, "layers", None)
    if layers is None:
        raise TypeError(f"layer_stats takes a Sequential model (dl.MLP, dl.CNN, dl.Sequential), "
                        f"got {type(model).__name__}.")
    outputs, h = [], X
    for layer in layers:
        h = layer.forward(h)
        outputs.append(h)
    grads = [None] * len(layers)
    if y is not None:
        loss = SoftmaxCrossEntropy() if loss is None else loss
        loss.forward(h, y)
        dout = loss.backward()
        for i in range(len(layers) - 1, -1, -1):
            grads[i] = dout
            dout = layers[i].backward(dout)
    rows = []
    for i, (layer, out, g) in enumerate(zip(layers, outputs, grads)):
        xp = get_array_module(out)
        alive = (out != 0).reshape(out.shape[0], -1).any(axis=0)     # (units,)
        rows.append({"layer": f"{i} {type(layer).__name__}", "mean": float(out.mean()),
                     "std": float(out.std()), "dead": float(1 - xp.mean(alive)),
                     "grad_mean": None if g is None else float(g.mean()),
                     "grad_std": None if g is None else float(g.std())})
    return rows
