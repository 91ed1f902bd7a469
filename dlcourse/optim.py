"""Optimizers: one loop over ``(params[k], grads[k])``, updating in place.

Introduced in notebook ``04b_optimizers_and_regularization`` (SGD with momentum against Adam;
Adagrad, RMSprop and AdamW beside them; :func:`clip_grad_norm`, which ``dl.fit(clip_norm=...)``
calls before every step). On the GPU SGD's and Adam's update of a parameter is one fused CUDA
kernel (``kernels/optimizers.cu``, lesson ``08d_fusion_and_graphs``) instead of four (SGD) or twelve
(Adam) array operations, each a kernel launch; ``dl.use_kernels(optimizer, False)`` runs the
array code, which is what the kernels must match. Adagrad, RMSprop and AdamW have no kernel of
their own: they run their array code everywhere.

The road from SGD to Adam, one idea per step (g is the gradient, all operations elementwise):

* SGD:      p -= lr * g
* Momentum: v = mu v + g;  p -= lr * v                 (average the direction over steps)
* Adagrad:  G += g²;  p -= lr * g / (sqrt(G) + eps)    (a step per coordinate, shrinking
  where gradients have been large: sqrt(G) is the size of all past gradients together)
* RMSprop:  v = a v + (1-a) g²;  p -= lr * g / (sqrt(v) + eps)   (Adagrad with a memory that
  fades: v is a running mean of g², so the step stops shrinking forever)
* Adam:     RMSprop's v with momentum's average m of g, both corrected for starting at 0
* AdamW:    Adam, with weight decay taken out of the gradient and applied to p directly

Before any of them, the gradient may be clipped: :func:`clip_grad_norm` scales all of a model's
gradients together when their global norm is above a threshold (one rogue step cannot throw
the parameters far away; its direction is kept).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from . import kernels
from ._validate import model_class_error, number
from .backend import device_of, get_array_module, to_device
from .layer_base import every_layer


def _keep_pruned(model) -> None:
    """After a step, a pruned model's pruned weights go back to exactly zero (lesson 11b), in
    dl.fit or in a loop of your own. A model that was never pruned has no masks, and a plain
    step imports nothing of lesson 11b."""
    if any(getattr(layer, "masks", None) for layer in every_layer(model)):
        from .prune import keep_pruned
        keep_pruned(model)


class Optimizer:
    use_kernels = True   # on the GPU: one fused kernel per parameter update
    kernel = None        # the name of that kernel in dlcourse.kernels; None: array code only

    def __init__(self, model, lr: float):
        name = type(self).__name__
        if isinstance(model, type):
            raise model_class_error(model, f"{name}(model, ...)")
        if not hasattr(model, "params") or not hasattr(model, "grads"):
            raise TypeError(f"An optimizer needs a model with params and grads, got {type(model).__name__}.")
        try:
            self.lr = number(lr, f"{name}(lr=...)", "lr=0.01", 0.0, None, low_open=True)
        except ValueError:
            raise ValueError(f"The learning rate must be a finite number > 0, got lr={lr!r}. "
                             f"E.g. {name}(model, lr=0.01).") from None
        self.model = model
        self.state: dict = {}
        self.steps = 0

    def _pairs(self):
        params, grads = self.model.params, self.model.grads
        if not params:
            raise ValueError(f"{type(self.model).__name__} has no parameters to optimize.")
        missing = [k for k in params if k not in grads]
        if missing:
            raise RuntimeError(f"No gradients for {missing}: call model.backward(...) before step().")
        for k, p in params.items():
            yield k, p, grads[k]

    def _buffer(self, key, p):
        """Per-parameter state (momentum, moments), created on p's device, moved if p moved."""
        buf = self.state.get(key)
        if buf is None:
            buf = self.state[key] = get_array_module(p).zeros_like(p)
        elif device_of(buf) != device_of(p):
            buf = self.state[key] = to_device(buf, device_of(p))
        return buf

    def _fused(self, p, g, state, *scalars):
        """Do this parameter's update as one fused kernel (``self.kernel`` names it in
        dlcourse.kernels) if it can take the arrays (:func:`dlcourse.kernels.kernels_for`: p on
        the GPU, kernels on, p, g and the state of one float dtype, p and the state
        C-contiguous; g is copied if it is not: a convolution's dW is a transpose). Returns
        whether it ran: never for an optimizer without a kernel."""
        k = kernels.kernels_for(p, self.use_kernels and self.kernel is not None,
                                same_dtype=(g, *state), contiguous=(p, *state))
        if k is None:
            return False
        getattr(k, self.kernel)(p, get_array_module(g).ascontiguousarray(g), *state, *scalars)
        return True

    def _l2(self, p, g):
        """L2 regularization: the gradient of (weight_decay / 2) * ||p||² joins g."""
        return g + self.weight_decay * p if self.weight_decay else g

    def _weight_decay(self, weight_decay):
        name = type(self).__name__
        return number(weight_decay, f"{name}(weight_decay=...)", "weight_decay=1e-4", 0.0)

    def _eps(self, eps, example):
        name = type(self).__name__
        return number(eps, f"{name}(eps=...)", f"eps={example}", 0.0, None, low_open=True)

    def step(self):
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent, with optional momentum and weight decay (PyTorch's form):

    g = grad + weight_decay * p;  v = momentum * v + g;  p -= lr * v
    """

    kernel = "sgd_momentum_update"

    def __init__(self, model, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(model, lr)
        self.momentum = number(momentum, "SGD(momentum=...)", "momentum=0.9", 0.0, 1.0)
        self.weight_decay = self._weight_decay(weight_decay)

    def step(self):
        self.steps += 1
        for k, p, g in self._pairs():
            if self.momentum:
                v = self._buffer(k, p)
                if self._fused(p, g, [v], self.lr, self.momentum, self.weight_decay):
                    continue                 # on the GPU: the lines below in one launch
            g = self._l2(p, g)
            if self.momentum:
                v *= self.momentum
                v += g
                g = v
            p -= self.lr * g
        _keep_pruned(self.model)       # pruned weights stay zero (lesson 11b)


class Adam(Optimizer):
    """Adam: per-parameter step sizes from running averages of the gradient (m) and of its
    square (v), bias-corrected for their zero start.

    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;  p -= lr * m̂ / (sqrt(v̂) + eps)

    The bias correction changes at every step and reaches the GPU kernel as a number, so a step
    captured in a CUDA graph would replay the captured step's correction (SGD's would not).

    ``weight_decay`` here is L2 regularization: ``weight_decay * p`` is added to the gradient
    before the moments, so it too is divided by sqrt(v̂) (see :class:`AdamW` for the other way).
    """

    kernel = "adam_update"

    def __init__(self, model, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(model, lr)
        name = type(self).__name__
        if not (isinstance(betas, (tuple, list, np.ndarray)) and len(betas) == 2):
            raise TypeError(f"{name}(betas=...) takes a pair (beta1, beta2), e.g. "
                            f"betas=(0.9, 0.999); got {betas!r}.")
        self.b1, self.b2 = (number(b, f"{name}(betas=...)", "betas=(0.9, 0.999)", 0.0, 1.0) for b in betas)
        self.eps = self._eps(eps, "1e-8")
        self.weight_decay = self._weight_decay(weight_decay)

    def step(self):
        self.steps += 1
        t = self.steps
        # The docstring's update, rewritten with the corrections folded into two numbers:
        # lr * m_hat / (sqrt(v_hat) + eps) == step_size * m / (sqrt(v) + eps * sqrt(1 - b2^t))
        # (multiply top and bottom by sqrt(1 - b2^t)); the same step, two array passes fewer.
        step_size = self.lr * (1 - self.b2 ** t) ** 0.5 / (1 - self.b1 ** t)
        eps = self.eps * (1 - self.b2 ** t) ** 0.5
        for k, p, g in self._pairs():
            m = self._buffer(k + "/m", p)
            v = self._buffer(k + "/v", p)
            if self._fused(p, g, [m, v], self.b1, self.b2, step_size, eps, self.weight_decay):
                continue                     # on the GPU: the lines below in one launch
            xp = get_array_module(p)
            g = self._decay(p, g)           # L2 here; AdamW decays p instead
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            g2 = g * g                       # temporaries made and scaled in place, each
            g2 *= 1 - self.b2                # freed once used: at most two alive at once,
            v += g2                          # whatever NumPy's version (dl.memory_report)
            del g2
            denom = xp.sqrt(v)
            denom += eps
            update = m / denom
            del denom
            update *= step_size
            p -= update
            del update
        _keep_pruned(self.model)       # pruned weights stay zero (lesson 11b)

    def _decay(self, p, g):
        """Adam's weight decay is L2: it joins the gradient (AdamW's shrinks p instead)."""
        return self._l2(p, g)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
    Regularization", 2019):

    p -= lr * weight_decay * p;  then Adam's step with the plain gradient g.

    Why it differs from ``Adam(weight_decay=...)``: there the decay term ``wd * p`` is added to
    g and then divided, like g, by sqrt(v̂): a weight whose gradients are large (large v̂) is
    hardly decayed at all, one with small gradients strongly. AdamW shrinks every weight by the
    same fraction ``lr * wd`` per step, whatever its gradients: the weight decay of SGD, which
    is what L2 regularization was meant to give. (Only for plain SGD are the two the same.)
    No CUDA kernel of its own: the array code runs on every device.
    """

    kernel = None

    def __init__(self, model, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(model, lr, betas, eps, weight_decay)

    def _decay(self, p, g):
        if self.weight_decay:
            p *= 1 - self.lr * self.weight_decay      # decoupled: p shrinks, g is untouched
        return g


class Adagrad(Optimizer):
    """Adagrad (Duchi, Hazan & Singer, 2011): a learning rate per coordinate.

    G = G + g²;  p -= lr * g / (sqrt(G) + eps)

    Derivation: sqrt(G) is the size of every gradient this coordinate has seen, so a
    coordinate with large or frequent gradients takes small steps and a rarely-moved one large
    steps; dividing by it also makes the step independent of the gradient's scale (multiply the
    loss by 10 and nothing changes). G only grows, so every step shrinks, like lr / sqrt(t) for
    gradients of constant size: good for convex problems and sparse features, often too
    early a stop for a deep network (RMSprop's fix: forget old gradients). The first step is
    lr * g / |g| = lr * sign(g). ``weight_decay`` adds ``weight_decay * p`` to g (L2), as in
    PyTorch. No CUDA kernel: the array code runs on every device.
    """

    def __init__(self, model, lr: float = 0.01, eps: float = 1e-10, weight_decay: float = 0.0):
        super().__init__(model, lr)
        self.eps = self._eps(eps, "1e-10")
        self.weight_decay = self._weight_decay(weight_decay)

    def step(self):
        self.steps += 1
        for k, p, g in self._pairs():
            g = self._l2(p, g)
            G = self._buffer(k + "/G", p)
            G += g * g
            p -= self.lr * g / (get_array_module(p).sqrt(G) + self.eps)
        _keep_pruned(self.model)       # pruned weights stay zero (lesson 11b)


class RMSprop(Optimizer):
    """RMSprop (Hinton, Coursera lecture 6e, 2012): Adagrad with a fading memory.

    v = alpha v + (1 - alpha) g²;  p -= lr * g / (sqrt(v) + eps)
    with momentum mu > 0:  b = mu b + g / (sqrt(v) + eps);  p -= lr * b

    Derivation: replace Adagrad's sum of every g² by a running mean, so sqrt(v) is the
    root-mean-square of the *recent* gradients (over about 1 / (1 - alpha) steps): the step
    lr * g / rms(g) stays near lr in size instead of shrinking forever. Adam is this plus
    momentum's average of g and a correction for v starting at 0 (without it, RMSprop's first
    step is lr * sign(g) / sqrt(1 - alpha): ten times lr with alpha = 0.99). ``weight_decay``
    adds ``weight_decay * p`` to g (L2), as in PyTorch. No CUDA kernel: the array code runs on
    every device.
    """

    def __init__(self, model, lr: float = 0.01, alpha: float = 0.99, eps: float = 1e-8,
                 momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(model, lr)
        self.alpha = number(alpha, "RMSprop(alpha=...)", "alpha=0.99", 0.0, 1.0)
        self.eps = self._eps(eps, "1e-8")
        self.momentum = number(momentum, "RMSprop(momentum=...)", "momentum=0.9", 0.0, 1.0)
        self.weight_decay = self._weight_decay(weight_decay)

    def step(self):
        self.steps += 1
        for k, p, g in self._pairs():
            g = self._l2(p, g)
            v = self._buffer(k + "/v", p)
            v *= self.alpha
            v += (1 - self.alpha) * (g * g)
            step = g / (get_array_module(p).sqrt(v) + self.eps)
            if self.momentum:
                b = self._buffer(k + "/b", p)
                b *= self.momentum
                b += step
                step = b
            p -= self.lr * step
        _keep_pruned(self.model)       # pruned weights stay zero (lesson 11b)


def clip_grad_norm(model, max_norm: float) -> float:
    """Scale all of ``model``'s gradients, in place, so that their global norm is at most
    ``max_norm``; return the global norm they had before (a float).

    The global norm is one number over every parameter of the model, as if all gradients
    were one long vector g::

        norm = sqrt(sum over k of sum(grads[k] ** 2))
        if norm > max_norm:  grads[k] *= max_norm / (norm + 1e-6)   for every k

    so the update keeps its direction and only its length is capped (clipping each parameter,
    or each entry, on its own would turn it). PyTorch's ``torch.nn.utils.clip_grad_norm_``
    does the same. ``model``: a model with ``grads`` (after ``backward``), or a dict of
    gradient arrays (NumPy or CuPy: the arrays decide; the sums are taken in float64). A
    norm that is inf or NaN is returned and the gradients are left alone: that step has
    diverged, and ``dl.fit`` says so. Used by ``dl.fit(..., clip_norm=...)`` after the
    gradients are unscaled (lesson 10's loss scaling) and averaged over ranks (lesson 13),
    so every rank clips the same gradient by the same factor.
    """
    max_norm = number(max_norm, "clip_grad_norm(max_norm=...)", "max_norm=1.0", 0.0, None,
                      low_open=True)
    grads = model if isinstance(model, Mapping) else getattr(model, "grads", None)
    if grads is None:
        raise TypeError(f"clip_grad_norm needs a model with grads (or a dict of gradient "
                        f"arrays), got {type(model).__name__}.")
    if not grads:
        raise ValueError("clip_grad_norm: there are no gradients yet: call model.backward(...) "
                         "first.")
    arrays = list(grads.values())
    xp = get_array_module(arrays[0])
    norm = math.sqrt(float(sum(xp.sum(xp.square(g, dtype=xp.float64)) for g in arrays)))
    if math.isfinite(norm) and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in arrays:
            g *= g.dtype.type(scale)
    return norm
