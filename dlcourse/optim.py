"""Optimizers: one loop over ``(params[k], grads[k])``, updating in place.

Introduced in notebook ``04_mlp_on_digits`` (SGD with momentum against Adam). On the GPU each
parameter's update is one fused CUDA kernel (``kernels/optimizers.cu``, lesson
``08_cuda_kernels``) instead of four (SGD) or twelve (Adam) array operations, each a kernel launch;
``dl.use_kernels(optimizer, False)`` runs the array code, which is what the kernels must match.
"""
from __future__ import annotations

import numpy as np

from .backend import device_of, get_array_module, gpu_kernels, to_device


# Examples the errors below give for building a model from its class.
_MODEL_EXAMPLES = {"MLP": "dl.MLP([64, 128, 10])", "CNN": "dl.CNN(in_channels=1, image_size=28)",
                   "Sequential": "dl.Sequential(dl.Linear(64, 10))"}


def _model_class_error(cls, where: str) -> TypeError:
    """The error for a model class given where a model is wanted: ``fit(dl.MLP, ...)``."""
    name = cls.__name__
    example = _MODEL_EXAMPLES.get(name, f"{name}(...)")
    return TypeError(f"{where} got the class {name}, not a model: create the model first, "
                     f"e.g. model = {example}, and pass model.")


def _number(value, what: str, example: str) -> float:
    """``value`` as a float, or a TypeError saying what was expected (a number, not a string
    or None). ``what`` names the argument (``"SGD(lr=...)"``), ``example`` shows one."""
    if value is not None and not isinstance(value, (bool, str, bytes)):
        try:                     # a Python or NumPy number, a 0-d array (NumPy or CuPy), ...
            return float(value)
        except (TypeError, ValueError):
            pass
    raise TypeError(f"{what} expects a number, e.g. {example}; got {value!r} "
                    f"({type(value).__name__}).")


class Optimizer:
    use_kernels = True   # on the GPU: one fused kernel per parameter update

    def __init__(self, model, lr: float):
        name = type(self).__name__
        if isinstance(model, type):
            raise _model_class_error(model, f"{name}(model, ...)")
        if not hasattr(model, "params") or not hasattr(model, "grads"):
            raise TypeError(f"An optimizer needs a model with params and grads, got {type(model).__name__}.")
        if not _number(lr, f"{name}(lr=...)", "lr=0.01") > 0:
            raise ValueError(f"The learning rate must be positive, got lr={lr}.")
        self.model, self.lr = model, float(lr)
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
        dlcourse.kernels) if it can run here: p on the GPU, kernels on, p, g and the state
        arrays of one float dtype, p and the state C-contiguous (g is copied if it is not: a
        convolution's dW is a transpose). Returns whether it ran."""
        kernels = gpu_kernels(p, self.use_kernels)
        if (kernels is None or p.dtype not in (np.float32, np.float64)
                or any(a.dtype != p.dtype for a in (g, *state))
                or not all(a.flags.c_contiguous for a in (p, *state))):
            return False
        getattr(kernels, update)(p, get_array_module(g).ascontiguousarray(g), *state, *scalars)
        return True

    def step(self):
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent, with optional momentum and weight decay (PyTorch's form):

    g = grad + weight_decay * p;  v = momentum * v + g;  p -= lr * v
    """

    def __init__(self, model, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(model, lr)
        momentum = _number(momentum, "SGD(momentum=...)", "momentum=0.9")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}.")
        self.momentum = momentum
        self.weight_decay = _number(weight_decay, "SGD(weight_decay=...)", "weight_decay=1e-4")

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
        self.b1, self.b2 = (_number(b, "Adam(betas=...)", "betas=(0.9, 0.999)") for b in betas)
        if not (0 <= self.b1 < 1 and 0 <= self.b2 < 1):
            raise ValueError(f"betas must be in [0, 1), got {betas}.")
        self.eps = _number(eps, "Adam(eps=...)", "eps=1e-8")
        self.weight_decay = _number(weight_decay, "Adam(weight_decay=...)", "weight_decay=1e-4")

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
