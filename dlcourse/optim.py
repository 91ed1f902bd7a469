"""Optimizers: one loop over ``(params[k], grads[k])``, updating in place.

Introduced in notebook ``04_mlp_on_digits`` (SGD with momentum against Adam). On the GPU each
parameter's update is one fused CUDA kernel (``kernels/optimizers.cu``, lesson
``08c_fusion_and_graphs``) instead of four (SGD) or twelve (Adam) array operations, each a
kernel launch;
``dl.use_kernels(optimizer, False)`` runs the array code, which is what the kernels must match.
"""
from __future__ import annotations

import numpy as np

from . import kernels
from ._validate import model_class_error, number
from .backend import device_of, get_array_module, to_device


class Optimizer:
    use_kernels = True   # on the GPU: one fused kernel per parameter update

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

    def _fused(self, update, p, g, state, *scalars):
        """Do this parameter's update as one fused kernel (``update`` names it in
        dlcourse.kernels) if it can take the arrays (:func:`dlcourse.kernels.usable_for`: p on
        the GPU, kernels on, p, g and the state of one float dtype, p and the state
        C-contiguous; g is copied if it is not: a convolution's dW is a transpose). Returns
        whether it ran."""
        k = kernels.usable_for(p, self.use_kernels, same_dtype=(g, *state), contiguous=(p, *state))
        if k is None:
            return False
        getattr(k, update)(p, get_array_module(g).ascontiguousarray(g), *state, *scalars)
        return True

    def step(self):
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent, with optional momentum and weight decay (PyTorch's form):

    g = grad + weight_decay * p;  v = momentum * v + g;  p -= lr * v
    """

    def __init__(self, model, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(model, lr)
        self.momentum = number(momentum, "SGD(momentum=...)", "momentum=0.9", 0.0, 1.0)
        self.weight_decay = number(weight_decay, "SGD(weight_decay=...)", "weight_decay=1e-4", 0.0)

    def step(self):
        self.steps += 1
        for k, p, g in self._pairs():
            if self.momentum:
                v = self._buffer(k, p)
                if self._fused("sgd_momentum_update", p, g, [v], self.lr, self.momentum,
                               self.weight_decay):
                    continue                 # on the GPU: the lines below in one launch
            if self.weight_decay:
                g = g + self.weight_decay * p
            if self.momentum:
                v *= self.momentum
                v += g
                g = v
            p -= self.lr * g


class Adam(Optimizer):
    """Adam: per-parameter step sizes from running averages of the gradient (m) and of its
    square (v), bias-corrected for their zero start.

    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;  p -= lr * m̂ / (sqrt(v̂) + eps)

    The bias correction changes at every step and reaches the GPU kernel as a number, so a step
    captured in a CUDA graph would replay the captured step's correction (SGD's would not).
    """

    def __init__(self, model, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(model, lr)
        if not (isinstance(betas, (tuple, list, np.ndarray)) and len(betas) == 2):
            raise TypeError(f"Adam(betas=...) takes a pair (beta1, beta2), e.g. "
                            f"betas=(0.9, 0.999); got {betas!r}.")
        self.b1, self.b2 = (number(b, "Adam(betas=...)", "betas=(0.9, 0.999)", 0.0, 1.0) for b in betas)
        self.eps = number(eps, "Adam(eps=...)", "eps=1e-8", 0.0, None, low_open=True)
        self.weight_decay = number(weight_decay, "Adam(weight_decay=...)", "weight_decay=1e-4", 0.0)

    def step(self):
        self.steps += 1
        t = self.steps
        step_size = self.lr * (1 - self.b2 ** t) ** 0.5 / (1 - self.b1 ** t)
        eps = self.eps * (1 - self.b2 ** t) ** 0.5
        for k, p, g in self._pairs():
            m = self._buffer(k + "/m", p)
            v = self._buffer(k + "/v", p)
            if self._fused("adam_update", p, g, [m, v], self.b1, self.b2, step_size, eps,
                           self.weight_decay):
                continue                     # on the GPU: the lines below in one launch
            xp = get_array_module(p)
            if self.weight_decay:
                g = g + self.weight_decay * p
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * (g * g)
            denom = xp.sqrt(v)
            denom += eps
            p -= step_size * (m / denom)
