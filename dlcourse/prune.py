"""Magnitude pruning: :func:`prune`, :func:`sparsity`, :func:`keep_pruned`.

Introduced in notebook ``11_quantization_and_pruning``.

Pruning sets the weights of smallest magnitude to zero and keeps them there::

    dl.prune(model, 0.8)                 # 80 % of all Linear/Conv2d weights, smallest |w| first
    dl.fit(model, loss, opt, X, y)       # fine-tune: the pruned weights stay exactly zero
    dl.sparsity(model)                   # {"0.W": 0.71, "2.W": 0.93, ..., "total": 0.8}

``scope="global"`` ranks every weight of the model against one threshold (layers with many
small weights lose more); ``scope="layer"`` prunes each layer to the same fraction. Biases,
BatchNorm parameters and anything that is not a Linear or Conv2d weight are left alone.

The mask lives on the layer, ``layer.masks["W"]`` (True where a weight is kept). When the model
it trains holds a mask, ``dl.fit`` adds :class:`KeepPruned` to its loop: after every optimizer
step, :func:`keep_pruned` multiplies each weight by its mask. (Prune before calling ``fit``:
``fit`` looks for masks once, when it starts.)
The mask is not part of a checkpoint: a saved pruned model holds its zeros, and pruning the
loaded model again with the same sparsity finds them.

One cut of 80 % can cost a small model more than fine-tuning wins back. Practitioners prune
gradually (Zhu & Gupta 2017, "To prune, or not to prune"): a few cuts on the cubic schedule
``s_t = s (1 - (1 - t/n)^3)``, fine-tuning after each, so the network adapts as it thins::

    dl.prune_gradually(model, 0.8, fine_tune=lambda m, step: dl.fit(m, ...), steps=4)

Unstructured zeros make the file compressible and the model no faster on a dense matmul; see
the lesson for what does (structured 2:4 sparsity).
"""
from __future__ import annotations

import numpy as np

from .backend import device_of, get_array_module, to_device, to_numpy
from .layer_base import every_layer

__all__ = ["prune", "prune_gradually", "pruning_schedule", "sparsity", "keep_pruned",
           "KeepPruned", "prunable"]


def prunable(model) -> dict:
    """{name: layer} of the layers whose weight ``W`` is pruned (Linear and Conv2d, also inside
    fused layers); names as in ``model.params`` (``"0.W"``)."""
    from .conv import Conv2d
    from .layers import Linear
    out = {}
    sequential = hasattr(model, "layers")
    for i, layer in enumerate(model.layers if sequential else [model]):
        for part in (layer, getattr(layer, "layer", None)):
            if isinstance(part, (Linear, Conv2d)):
                out[f"{i}.W" if sequential else "W"] = part
    return out


def prune(model, sparsity: float, scope: str = "global"):
    """Zero the fraction ``sparsity`` (0 <= sparsity < 1) of the Linear and Conv2d weights with
    the smallest magnitude and keep a mask so that training leaves them at zero. ``scope``:
    ``"global"`` (one threshold for the whole model) or ``"layer"`` (each layer pruned to
    ``sparsity``). Weights already pruned stay pruned. Returns ``model`` (changed in place)."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float, np.floating)) \
            or not 0.0 <= float(sparsity) < 1.0:
        raise ValueError(f"prune(sparsity=...) is the fraction of weights to zero, in [0, 1); "
                         f"got {sparsity!r}. For 80 % use sparsity=0.8.")
    if scope not in ("global", "layer"):
        raise ValueError(f"prune(scope=...) is \"global\" or \"layer\", got {scope!r}.")
    layers = prunable(model)
    if not layers:
        raise ValueError(f"prune found no Linear or Conv2d weight in {type(model).__name__}.")
    magnitudes = {name: np.abs(to_numpy(layer.params["W"])).ravel() for name, layer in layers.items()}
    if scope == "global":
        everything = np.concatenate(list(magnitudes.values()))
        k = int(round(float(sparsity) * everything.size))
        order = np.argsort(everything, kind="stable")   # ties broken by position: exact counts
        keep_all = np.ones(everything.size, dtype=bool)
        keep_all[order[:k]] = False
        keeps, start = {}, 0
        for name, m in magnitudes.items():
            keeps[name] = keep_all[start:start + m.size]
            start += m.size
    else:
        keeps = {}
        for name, m in magnitudes.items():
            k = int(round(float(sparsity) * m.size))
            keep = np.ones(m.size, dtype=bool)
            keep[np.argsort(m, kind="stable")[:k]] = False
            keeps[name] = keep
    for name, layer in layers.items():
        W = layer.params["W"]
        old = getattr(layer, "masks", {}).get("W")
        keep = keeps[name].reshape(W.shape)
        if old is not None:
            keep &= to_numpy(old)
        layer.masks = {"W": to_device(keep, device_of(W))}
        W *= layer.masks["W"]
    return model


def pruning_schedule(sparsity: float, steps: int) -> list:
    """The sparsities of ``steps`` gradual cuts that end at ``sparsity``, on Zhu & Gupta's
    cubic schedule ``s_t = s (1 - (1 - t/steps)^3)``, t = 1..steps: large cuts first, while
    many weights are near zero, and small ones at the end (0.8 in 4 steps: 0.46, 0.7, 0.79,
    0.8)."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps is how many cuts to make, a whole number >= 1; got {steps!r}.")
    return [float(sparsity) * (1.0 - (1.0 - t / steps) ** 3) for t in range(1, steps + 1)]


def prune_gradually(model, sparsity: float, fine_tune, steps: int = 4, scope: str = "global"):
    """Prune ``model`` to ``sparsity`` in ``steps`` cuts (:func:`pruning_schedule`), calling
    ``fine_tune(model, step)`` after each cut (step = 0 .. steps-1), e.g. a few epochs of
    ``dl.fit``, which keeps the pruned weights at zero. Returns ``model`` (changed in place),
    pruned to exactly ``sparsity`` as :func:`prune` counts it."""
    if not callable(fine_tune):
        raise TypeError(f"prune_gradually(fine_tune=...) is a function fine_tune(model, step) "
                        f"that trains the pruned model a little, e.g. lambda m, step: "
                        f"dl.fit(m, loss, dl.Adam(m, lr=1e-3), X, y, epochs=2); got "
                        f"{type(fine_tune).__name__}.")
    for step, target in enumerate(pruning_schedule(sparsity, steps)):
        prune(model, target, scope=scope)
        fine_tune(model, step)
    return model


def keep_pruned(model) -> None:
    """Multiply every pruned weight by its mask (``dl.fit`` calls it after each step), so a
    pruned weight stays exactly zero. Nothing happens for a model that was never pruned."""
    for layer in every_layer(model):
        masks = getattr(layer, "masks", None)
        if not masks:
            continue
        for name, mask in masks.items():
            p = layer.params[name]
            if device_of(mask) != device_of(p):        # the model moved since it was pruned
                mask = masks[name] = to_device(mask, device_of(p))
            p *= mask


class KeepPruned:
    """The step this lesson adds to ``dl.fit``'s loop when the model was pruned::

        optimizer.step()
        keep_pruned(model)          # KeepPruned().after_step(model)
    """

    def after_step(self, model) -> None:
        keep_pruned(model)


def sparsity(model) -> dict:
    """The fraction of zeros in each Linear/Conv2d weight, by parameter name, and ``"total"``
    over all of them: ``{"0.W": 0.75, "2.W": 0.9, "total": 0.8}``."""
    report, zeros, size = {}, 0, 0
    for name, layer in prunable(model).items():
        W = layer.params["W"]
        z = int(get_array_module(W).count_nonzero(W == 0))
        report[name] = z / W.size
        zeros, size = zeros + z, size + W.size
    report["total"] = zeros / size if size else 0.0
    return report
