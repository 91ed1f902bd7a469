"""Magnitude pruning: :func:`prune`, :func:`sparsity`, :func:`keep_pruned`; which layers to
prune how much, :func:`prune_sensitivity`; whole channels, :func:`prune_channels`.

Introduced in notebook ``11b_pruning``.

Pruning sets the weights of smallest magnitude to zero and keeps them there::

    dl.prune(model, 0.8)                 # 80 % of all Linear/Conv2d weights, smallest |w| first
    dl.fit(model, loss, opt, X, y)       # fine-tune: the pruned weights stay exactly zero
    dl.sparsity(model)                   # {"0.W": 0.71, "2.W": 0.93, ..., "total": 0.8}

``scope="global"`` ranks every weight of the model against one threshold (layers with many
small weights lose more); ``scope="layer"`` prunes each layer to the same fraction. Biases,
BatchNorm parameters and anything that is not a Linear or Conv2d weight are left alone.

The mask lives on the layer, ``layer.masks["W"]`` (True where a weight is kept). After every
optimizer step, in ``dl.fit`` or in a loop of your own, :func:`keep_pruned` multiplies each
pruned weight by its mask, so it stays exactly zero (``optim.py`` calls it for a model that
holds masks). The masks travel with the model: ``dl.save`` stores them (:func:`masks_of`) and
``dl.load`` puts them back (:func:`set_masks`), so a loaded pruned model stays pruned when it
is fine-tuned.

One cut of 80 % can cost a small model more than fine-tuning wins back. Practitioners prune
gradually (Zhu & Gupta 2017, "To prune, or not to prune"): a few cuts on the cubic schedule
``s_t = s (1 - (1 - t/n)^3)``, fine-tuning after each, so the network adapts as it thins::

    dl.prune_gradually(model, 0.8, fine_tune=lambda m, step: dl.fit(m, ...), steps=4)

Layers differ in how much pruning they bear. A **sensitivity scan** prunes one layer at a
time and measures the accuracy; the robust layers can then be pruned more than the sensitive
ones (one sparsity per layer, a dict)::

    table = dl.prune_sensitivity(model, X_val, y_val, [0, 0.3, 0.5, 0.7, 0.9])
    dl.prune(model, dl.choose_sparsities(table, max_drop=0.01))   # {"0.W": 0.3, "3.W": 0.7, ...}

Unstructured zeros make the file compressible and the model no faster on a dense matmul.
**Channel pruning** removes whole output channels of a Conv2d (those of smallest L1 norm) and
the inputs of the next layer that read them: a smaller dense model, faster on any hardware::

    small = dl.prune_channels(model, 3, keep=8)    # Conv2d model.layers[3]: 16 -> 8 channels
"""
from __future__ import annotations

import numpy as np

from ._validate import number
from .backend import device_of, get_array_module, to_device, to_numpy
from .layer_base import every_layer

__all__ = ["prune", "prune_gradually", "pruning_schedule", "sparsity", "keep_pruned",
           "masks_of", "set_masks",
           "prunable", "prune_sensitivity", "choose_sparsities", "channels_to_keep",
           "prune_channels"]


def prunable(model, prefix: str = "") -> dict:
    """{name: layer} of the layers whose weight ``W`` is pruned (Linear and Conv2d, also inside
    fused layers and inside containers: a Residual's block); names as in ``model.params``
    (``"0.W"``, ``"3.block.0.W"``)."""
    from .conv import Conv2d
    from .layers import Linear
    out = {}
    named = model.named_layers() if hasattr(model, "named_layers") else [("", model)]
    for name, layer in named:
        name = f"{prefix}{name}." if name else prefix
        if hasattr(layer, "named_layers"):                   # a container inside the model
            out.update(prunable(layer, name))
        for part in (layer, getattr(layer, "layer", None)):
            if isinstance(part, (Linear, Conv2d)):
                out[f"{name}W"] = part
    return out


def _fraction(sparsity, what="prune(sparsity=...)"):
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float, np.floating)) \
            or not 0.0 <= float(sparsity) < 1.0:
        raise ValueError(f"{what} is the fraction of weights to zero, in [0, 1); got "
                         f"{sparsity!r}. For 80 % use 0.8.")
    return float(sparsity)


def prune(model, sparsity, scope: str = "global"):
    """Zero the fraction ``sparsity`` (0 <= sparsity < 1) of the Linear and Conv2d weights with
    the smallest magnitude and keep a mask so that training leaves them at zero. ``scope``:
    ``"global"`` (one threshold for the whole model) or ``"layer"`` (each layer pruned to
    ``sparsity``). ``sparsity`` may also be a dict, one fraction per layer by parameter name
    (``{"0.W": 0.3, "3.W": 0.8}``, as :func:`choose_sparsities` returns): each named layer is
    pruned alone to its own fraction, the others are left as they are (``scope`` plays no
    part). Weights already pruned stay pruned. Returns ``model`` (changed in place)."""
    if scope not in ("global", "layer"):
        raise ValueError(f"prune(scope=...) is \"global\" or \"layer\", got {scope!r}.")
    layers = prunable(model)
    if not layers:
        raise ValueError(f"prune found no Linear or Conv2d weight in {type(model).__name__}.")
    if isinstance(sparsity, dict):
        unknown = sorted(set(sparsity) - set(layers))
        if unknown:
            raise KeyError(f"prune: {unknown} name no prunable weight of this model; its weights "
                           f"are {sorted(layers)}.")
        per_layer = {name: _fraction(s, f"prune(sparsity={{{name!r}: ...}})")
                     for name, s in sparsity.items()}
        layers = {name: layers[name] for name in per_layer}
    else:
        per_layer = dict.fromkeys(layers, _fraction(sparsity))
    magnitudes = {name: np.abs(to_numpy(layer.params["W"])).ravel() for name, layer in layers.items()}
    if scope == "global" and not isinstance(sparsity, dict):
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
            k = int(round(per_layer[name] * m.size))
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
    sparsity = _fraction(sparsity, "pruning_schedule(sparsity=...)")
    return [sparsity * (1.0 - (1.0 - t / steps) ** 3) for t in range(1, steps + 1)]


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
    sparsity = _fraction(sparsity, "prune_gradually(sparsity=...)")   # the value given, named
    for step, target in enumerate(pruning_schedule(sparsity, steps)):
        prune(model, target, scope=scope)
        fine_tune(model, step)
    return model


def keep_pruned(model) -> None:
    """Multiply every pruned weight by its mask (every optimizer's step calls it), so a
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


def masks_of(model) -> dict:
    """{"3.W": mask, ...}: every pruning mask of the model, as NumPy bool arrays, under the names
    of the weights they mask (what a checkpoint stores)."""
    return {name: to_numpy(layer.masks["W"]).astype(bool)
            for name, layer in prunable(model).items() if getattr(layer, "masks", None)}


def set_masks(model, masks: dict) -> None:
    """Put :func:`masks_of`'s masks back on the model's layers (after ``dl.load``); a name that
    is no prunable weight of the model, or a mask of the wrong shape, is refused."""
    layers = prunable(model)
    for name, mask in masks.items():
        layer = layers.get(name)
        if layer is None:
            raise KeyError(f"a mask for {name}, which is no prunable weight of this model (its "
                           f"weights: {sorted(layers)}).")
        W = layer.params["W"]
        mask = np.asarray(mask)
        if mask.shape != tuple(W.shape) or mask.dtype != bool:
            raise ValueError(f"the mask for {name} has shape {mask.shape} and dtype {mask.dtype}; "
                             f"the weight has shape {tuple(W.shape)} (a bool mask is expected).")
        layer.masks = {"W": to_device(mask, device_of(W))}


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


# ======================================================================================
# Which layers to prune how much: the sensitivity scan (Han et al. 2015; MIT 6.5940's lab)
# ======================================================================================
def prune_sensitivity(model, X, y, sparsities=(0.0, 0.3, 0.5, 0.7, 0.9), batch_size: int = 1024) -> dict:
    """The accuracy on (X, y) with ONE layer pruned at a time, for each prunable layer and each
    sparsity: ``{"0.W": {0.0: 0.96, 0.3: 0.96, ..., 0.9: 0.41}, "3.W": {...}, ...}``.

    Each layer's weights are pruned alone by magnitude (:func:`prune` with that layer's name),
    measured without fine-tuning, and put back: ``model`` is the same afterwards (weights, masks
    and mode). Measure on validation data, not on the test set, when the table chooses
    sparsities (:func:`choose_sparsities`).
    """
    fractions = [0.0 if s == 0 else _fraction(s, "prune_sensitivity(sparsities=[...])")
                 for s in sparsities]
    layers = prunable(model)
    first = next(iter(layers.values()), None)
    if first is None:
        raise ValueError(f"prune_sensitivity found no Linear or Conv2d weight in "
                         f"{type(model).__name__}.")
    X = to_device(X, device_of(first.params["W"])).astype(first.params["W"].dtype, copy=False)
    y = to_numpy(y)
    if y.ndim != 1 or len(y) != len(X):
        flat = " as a flat array: y.ravel()" if y.size == len(X) else ""
        raise ValueError(f"prune_sensitivity(model, X, y) needs one label per sample of X: X "
                         f"has {len(X)} samples, y has shape {tuple(y.shape)}. Pass the labels "
                         f"of the same samples (X_val, y_val){flat}.")

    def accuracy():
        return float((to_numpy(model.predict(X, batch_size=batch_size)) == y).mean())

    table = {}
    for name, layer in layers.items():
        W, masks = layer.params["W"].copy(), dict(getattr(layer, "masks", {}) or {})
        table[name] = {}
        try:
            for s in fractions:
                prune(model, {name: s})
                table[name][s] = accuracy()
                layer.params["W"][...] = W
                layer.masks = dict(masks)
        finally:
            layer.params["W"][...] = W
            if masks:
                layer.masks = masks
            elif hasattr(layer, "masks"):
                del layer.masks
    return table


def choose_sparsities(table: dict, max_drop: float = 0.01) -> dict:
    """Per layer, the largest sparsity of a :func:`prune_sensitivity` table whose accuracy is
    within ``max_drop`` of the layer's dense accuracy (its sparsity 0): a sensitive layer gets a
    small sparsity, a robust one a large one. ``{"0.W": 0.3, "3.W": 0.7, "7.W": 0.9}``; a layer
    that loses more than ``max_drop`` at every sparsity of the table gets 0. Pass the result to
    ``dl.prune(model, chosen)``."""
    max_drop = number(max_drop, "choose_sparsities(max_drop=...)", "max_drop=0.01 (one "
                      "percentage point of accuracy)", low=0.0, high=1.0, high_open=False)
    chosen = {}
    for name, row in table.items():
        if 0.0 not in row:
            raise ValueError(f"choose_sparsities needs each layer's dense accuracy: scan "
                             f"sparsity 0 too (prune_sensitivity(..., sparsities=[0, ...])); "
                             f"{name} has {sorted(row)}.")
        chosen[name] = max(s for s, acc in row.items() if acc >= row[0.0] - max_drop)
    return chosen


# ======================================================================================
# Structured pruning: whole output channels of a Conv2d (Li et al. 2017)
# ======================================================================================
def channels_to_keep(W, keep: int):
    """The indices, in increasing order, of the ``keep`` output channels of a Conv2d weight W
    (F, C, KH, KW) with the largest L1 norms ``sum |W[f]|`` (ties: the lower index). On W's
    device."""
    xp = get_array_module(W)
    F = W.shape[0]
    if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or not 1 <= keep <= F:
        raise ValueError(f"keep is how many of the {F} output channels to keep, a whole number "
                         f"from 1 to {F}; got {keep!r}.")
    norms = to_numpy(xp.abs(W).reshape(F, -1).sum(axis=1))
    order = np.argsort(-norms, kind="stable")          # largest first
    return xp.asarray(np.sort(order[:int(keep)]))


def _copy_layer(layer):
    from .layer_base import build_layer, layer_type
    copy = build_layer(layer_type(layer), layer.get_config())
    if layer.dtype is not None:
        copy.astype(layer.dtype)
    copy.to(layer.device)
    copy.load_state_dict(layer.state_dict())
    copy.train(layer.training)
    return copy


def _cut(layer, config_changes, arrays):
    """A copy of ``layer`` built with ``config_changes`` and holding ``arrays`` (its params and
    buffers, already cut)."""
    from .layer_base import build_layer, layer_type
    new = build_layer(layer_type(layer), {**layer.get_config(), **config_changes})
    new.params = {k: arrays[k].copy() for k in layer.params}
    new.buffers = {k: arrays[k].copy() for k in layer.buffers}
    new.train(layer.training)
    return new


def prune_channels(model, layer, keep: int):
    """A new, smaller model: the Conv2d ``model.layers[layer]`` keeps the ``keep`` output
    channels of largest L1 norm (:func:`channels_to_keep`) and loses the others, and every
    layer that reads those channels is cut to match. ``model`` is not changed.

    What is cut: the Conv2d's W (F, C, KH, KW) -> (keep, C, KH, KW) and b; a BatchNorm2d after it
    (gamma, beta, running mean and variance); then the next layer that mixes channels: a Conv2d
    (its input channels, W[:, kept]) or, after Flatten, a Linear (the rows of W that read the
    kept channels: Flatten puts channel c's H'W' values at rows c*H'W' ... (c+1)*H'W' - 1).
    Layers between them that treat each channel alone (ReLU, Sigmoid, Tanh, MaxPool2d, Dropout,
    Identity) are copied as they are.

    Args:
        model: an unfused Sequential (dl.CNN, dl.Sequential).
        layer: the index of the Conv2d in ``model.layers`` (``3``), or its weight's name
            (``"3.W"``).
        keep: how many output channels to keep, 1 <= keep <= out_channels.

    Returns:
        A ``dl.Sequential`` (the same device, dtype and mode) with fewer parameters, which
        ``dl.fit``, ``dl.save``, ``dl.quantize`` and ``dl.export_onnx`` take like any other. A
        removed channel whose weights, bias (and BatchNorm output) were zero changed nothing:
        the new model computes what the old one did.
    """
    from .conv import Conv2d, MaxPool2d
    from .layers import (BatchNorm2d, Dropout, Flatten, Identity, Linear, ReLU, Sequential,
                         Sigmoid, Tanh, unfused_layers)
    layers = unfused_layers(model, "prune_channels", "dl.CNN, dl.Sequential")
    i = layer
    if isinstance(layer, str):
        i = int(layer.split(".")[0]) if layer.split(".")[0].isdigit() else None
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -len(layers) <= i < len(layers) \
            or type(layers[i]) is not Conv2d:
        convs = [j for j, l in enumerate(layers) if type(l) is Conv2d]
        raise ValueError(f"prune_channels(layer=...) is the index of a Conv2d in model.layers "
                         f"(here {convs}) or its weight's name (\"{convs[0] if convs else 0}.W\"); "
                         f"got {layer!r}.")
    i %= len(layers)
    conv = layers[i]
    kept = channels_to_keep(conv.params["W"], keep)
    new = [_copy_layer(l) for l in layers[:i]]
    new.append(_cut(conv, {"out_channels": int(keep)},
                    {"W": conv.params["W"][kept], "b": conv.params["b"][kept]}))
    per_channel = (ReLU, Sigmoid, Tanh, MaxPool2d, Dropout, Identity)
    j, flat = i + 1, False
    while j < len(layers):
        nxt = layers[j]
        if type(nxt) is BatchNorm2d and not flat:
            new.append(_cut(nxt, {"num_features": int(keep)},
                            {k: v[kept] for k, v in nxt.state_dict().items()}))
        elif type(nxt) is Conv2d and not flat:
            new.append(_cut(nxt, {"in_channels": int(keep)},
                            {"W": nxt.params["W"][:, kept], "b": nxt.params["b"]}))
            break
        elif type(nxt) is Flatten and not flat:
            new.append(_copy_layer(nxt))
            flat = True
        elif type(nxt) is Linear and flat:
            F = conv.out_channels
            rows = nxt.params["W"].reshape(F, nxt.in_features // F, nxt.out_features)[kept]
            new.append(_cut(nxt, {"in_features": int(rows.shape[0] * rows.shape[1])},
                            {"W": rows.reshape(-1, nxt.out_features), "b": nxt.params["b"]}))
            break
        elif type(nxt) in per_channel and not (flat and type(nxt) is MaxPool2d):
            new.append(_copy_layer(nxt))
        else:
            raise TypeError(f"prune_channels cannot cut through layer {j} ({type(nxt).__name__}) "
                            f"after Conv2d {i}: between the pruned Conv2d and the next Conv2d "
                            f"(or Flatten and Linear) only BatchNorm2d and layers that treat "
                            f"each channel alone ({', '.join(c.__name__ for c in per_channel)}) "
                            f"can be cut to match.")
        j += 1
    else:
        raise ValueError(f"prune_channels: Conv2d {i} has no Conv2d or Flatten + Linear after it "
                         f"to read its channels, so its channels are the model's output; removing "
                         f"them would change what the model returns.")
    new += [_copy_layer(l) for l in layers[j + 1:]]
    return Sequential(*new).train(model.training)
