"""A small reverse-mode automatic differentiation engine, on arrays.

Introduced in notebook ``14_autograd`` (the capstone). Until then every layer had a
hand-written backward pass (``layers.py``, ``losses.py``); here the chain rule runs itself.

A :class:`Tensor` holds an array (``data``), the tensors it was computed from (``parents``)
and ``grad_fn``: a closure, written by the operation that made the tensor, which sends the
tensor's gradient on to its parents. Each operation computes ``out`` and, right under it,
its local chain rule::

    out = Tensor(a.data @ b.data, (a, b))
    def grad_fn():
        a.grad += out.grad @ b.data.T          # (N, M) @ (M, D) -> (N, D)
        b.grad += a.data.T @ out.grad          # (D, N) @ (N, M) -> (D, M)
    out.grad_fn = grad_fn

``loss.backward()`` puts every tensor of the graph in topological order (each after its
parents), gives each a zero gradient, sets d(loss)/d(loss) = 1 and calls the ``grad_fn`` of
each tensor from the loss back to the inputs. Gradients are *accumulated* (``+=``): a
tensor used twice receives the sum of both contributions. Broadcasting in the forward pass
(a bias ``(M,)`` added to ``(N, M)``) is undone in the backward pass by :func:`unbroadcast`,
which sums the gradient back to the parent's shape.

The array decides the backend: NumPy arrays stay on the CPU, CuPy arrays on the GPU
(``xp = get_array_module(data)``).

Unlike PyTorch, ``backward()`` starts every gradient from zero (PyTorch adds into the
leaves' ``.grad`` across calls, hence ``optimizer.zero_grad()``), and every tensor gets a
gradient (PyTorch records the graph, and computes gradients, only for what depends on a leaf
created with ``requires_grad=True``).
"""
from __future__ import annotations

import numbers

import numpy as np

from .backend import get_array_module

__all__ = ["Tensor", "unbroadcast", "topological_order", "cross_entropy", "one_hot", "gradcheck"]


def unbroadcast(grad, shape):
    """Sum ``grad`` down to ``shape``: the backward pass of NumPy broadcasting.

    A value broadcast in the forward pass was used once for every copy, so its gradient is
    the sum over the copies: over the leading axes broadcasting added, and over the axes
    where ``shape`` has 1. grad: (N, M), shape (M,) -> grad.sum(axis=0), shape (M,).
    """
    shape = tuple(shape)
    extra = grad.ndim - len(shape)
    if extra < 0:
        raise ValueError(f"unbroadcast: a gradient of shape {tuple(grad.shape)} cannot come "
                         f"from broadcasting a value of shape {shape} (it has fewer axes).")
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))                 # the axes broadcasting added
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if ones:
        grad = grad.sum(axis=ones, keepdims=True)                 # the axes stretched from 1
    return grad


def topological_order(root):
    """Every tensor ``root`` depends on, each after all of its parents, ``root`` last.

    A depth-first walk that appends a tensor once all its parents are in the list
    (post-order); the ``seen`` set keeps a tensor used twice from appearing twice.
    Written with an explicit stack, so deep graphs do not hit Python's recursion limit.
    """
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))                  # comes back after its parents
        stack.extend((p, False) for p in reversed(node.parents) if id(p) not in seen)
    return order


class Tensor:
    """An array in a computation graph.

    data: the array (NumPy or CuPy; a Python number becomes a 0-d float64 array).
    parents: the tensors ``data`` was computed from. grad: d(loss)/d(data), shaped like
    ``data``, filled by :meth:`backward`. grad_fn: sends ``grad`` to the parents (None for
    a leaf: an input or a parameter).
    """

    def __init__(self, data, parents=(), op: str = ""):
        if isinstance(data, Tensor):
            raise TypeError("Tensor(data) takes an array, got a Tensor: use the tensor itself, "
                            "or its .data for the array inside.")
        if isinstance(data, np.generic):              # a NumPy scalar (what .sum() returns)
            data = np.asarray(data)
        elif isinstance(data, numbers.Number):
            data = np.asarray(data, dtype=np.float64)
        if not hasattr(data, "shape") or not hasattr(data, "dtype"):
            raise TypeError(f"Tensor(data) takes a NumPy or CuPy array, got {type(data).__name__}. "
                            f"Wrap lists with np.asarray(...) first.")
        self.data = data
        self.parents = tuple(parents)
        self.op = op
        self.grad = None
        self.grad_fn = None

    # -- what it looks like ------------------------------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def ndim(self):
        return self.data.ndim

    def __repr__(self):
        made = f", op={self.op!r}" if self.op else ""
        return f"Tensor(shape={tuple(self.shape)}, dtype={self.data.dtype}{made})"

    def _lift(self, other):
        """``other`` as a Tensor on self's backend and in self's dtype (numbers, arrays)."""
        if isinstance(other, Tensor):
            return other
        xp = get_array_module(self.data)
        return Tensor(xp.asarray(other, dtype=self.data.dtype))

    # -- the backward pass ---------------------------------------------------------------------
    def backward(self):
        """Fill ``grad`` of every tensor this one depends on with d(self)/d(tensor).

        ``self`` must hold one number (a loss). Every gradient starts at zero; then the
        ``grad_fn`` of each tensor runs from ``self`` back to the leaves, so a tensor's
        gradient is complete (all its uses added in) before it is passed on.
        """
        if self.data.size != 1:
            raise ValueError(f"backward() starts from a single number (a loss), but this tensor "
                             f"has shape {tuple(self.shape)}. Reduce it first, e.g. "
                             f"loss = out.sum() or out.mean().")
        xp = get_array_module(self.data)
        order = topological_order(self)
        for node in order:
            node.grad = xp.zeros_like(node.data)
        self.grad = xp.ones_like(self.data)           # d(loss)/d(loss) = 1
        for node in reversed(order):
            if node.grad_fn is not None:
                node.grad_fn()

    # -- elementwise operations (with broadcasting) -------------------------------------------
    def __add__(self, other):
        a, b = self, self._lift(other)
        out = Tensor(a.data + b.data, (a, b), "+")

        def grad_fn():
            a.grad += unbroadcast(out.grad, a.shape)
            b.grad += unbroadcast(out.grad, b.shape)
        out.grad_fn = grad_fn
        return out

    def __mul__(self, other):
        a, b = self, self._lift(other)
        out = Tensor(a.data * b.data, (a, b), "*")

        def grad_fn():
            a.grad += unbroadcast(out.grad * b.data, a.shape)   # each gets the OTHER input
            b.grad += unbroadcast(out.grad * a.data, b.shape)
        out.grad_fn = grad_fn
        return out

    def __pow__(self, k):
        if not isinstance(k, numbers.Real):
            raise TypeError(f"Tensor ** k takes a number k, got {type(k).__name__}.")
        a = self
        out = Tensor(a.data ** k, (a,), f"**{k}")

        def grad_fn():
            a.grad += out.grad * k * a.data ** (k - 1)
        out.grad_fn = grad_fn
        return out

    def __neg__(self):
        return self * -1.0

    def __sub__(self, other):
        return self + (-self._lift(other))

    def __truediv__(self, other):
        return self * self._lift(other) ** -1

    def __radd__(self, other):
        return self._lift(other) + self

    def __rmul__(self, other):
        return self._lift(other) * self

    def __rsub__(self, other):
        return self._lift(other) - self

    def __rtruediv__(self, other):
        return self._lift(other) / self

    def relu(self):
        a = self
        xp = get_array_module(a.data)
        out = Tensor(xp.maximum(a.data, 0), (a,), "relu")

        def grad_fn():
            a.grad += out.grad * (a.data > 0)          # passes where the input was positive
        out.grad_fn = grad_fn
        return out

    def exp(self):
        a = self
        xp = get_array_module(a.data)
        out = Tensor(xp.exp(a.data), (a,), "exp")

        def grad_fn():
            a.grad += out.grad * out.data              # d exp(a) / da = exp(a)
        out.grad_fn = grad_fn
        return out

    def log(self):
        a = self
        xp = get_array_module(a.data)
        out = Tensor(xp.log(a.data), (a,), "log")

        def grad_fn():
            a.grad += out.grad / a.data
        out.grad_fn = grad_fn
        return out

    # -- matrix product, reductions, shapes ------------------------------------------------
    def __matmul__(self, other):
        a, b = self, self._lift(other)
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"Tensor @ Tensor takes two matrices, (N, D) @ (D, M); got shapes "
                             f"{tuple(a.shape)} and {tuple(b.shape)}.")
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"Tensor @ Tensor: (N, D) @ (D, M) needs the inner sizes to match, "
                             f"got {tuple(a.shape)} @ {tuple(b.shape)}. Is one of them transposed?")
        out = Tensor(a.data @ b.data, (a, b), "@")

        def grad_fn():
            a.grad += out.grad @ b.data.T              # (N, M) @ (M, D) -> (N, D)
            b.grad += a.data.T @ out.grad              # (D, N) @ (N, M) -> (D, M)
        out.grad_fn = grad_fn
        return out

    def sum(self, axis=None, keepdims: bool = False):
        a = self
        out = Tensor(a.data.sum(axis=axis, keepdims=keepdims), (a,), "sum")

        def grad_fn():
            g = out.grad
            if axis is not None and not keepdims:        # put the summed axes back, as size 1
                g = g.reshape(a.data.sum(axis=axis, keepdims=True).shape)
            a.grad += g                                 # every summed entry gets the gradient
        out.grad_fn = grad_fn
        return out

    def mean(self, axis=None, keepdims: bool = False):
        count = self.data.size // max(self.data.sum(axis=axis, keepdims=keepdims).size, 1)
        return self.sum(axis=axis, keepdims=keepdims) * (1.0 / count)

    def reshape(self, *shape):
        a = self
        out = Tensor(a.data.reshape(*shape), (a,), "reshape")

        def grad_fn():
            a.grad += out.grad.reshape(a.shape)
        out.grad_fn = grad_fn
        return out

    def log_softmax(self):
        """log softmax over the last axis, from the operations above: x - log sum exp x.

        The row max is subtracted as a constant (a new leaf) so nothing overflows; it
        needs no gradient, since log softmax does not change when a row is shifted.
        """
        shift = Tensor(self.data.max(axis=-1, keepdims=True))
        shifted = self - shift
        return shifted - shifted.exp().sum(axis=-1, keepdims=True).log()


def one_hot(labels, K: int, dtype=np.float64):
    """labels: (N,) integers in [0, K) -> (N, K) array with a 1 in each row's label column."""
    xp = get_array_module(labels)
    return (labels[:, None] == xp.arange(K)[None, :]).astype(dtype)


def cross_entropy(logits: Tensor, labels):
    """Softmax cross-entropy as a Tensor, from the operations above (nothing hand-derived):
    -mean over the batch of log_softmax(logits)[n, labels[n]].

    logits: Tensor (N, K); labels: (N,) integer array on the same backend.
    """
    N, K = logits.shape
    labels = get_array_module(logits.data).asarray(labels)                  # on the logits' device
    picked = logits.log_softmax() * one_hot(labels, K, logits.data.dtype)   # (N, K), one entry a row
    return -picked.sum() / N


def gradcheck(f, *arrays, eps: float = 1e-6) -> float:
    """The largest relative error between the engine's gradients and central differences.

    f: takes Tensors (one per array) and returns a one-number Tensor. arrays: float64 arrays
    (NumPy or CuPy), nudged in place one entry at a time and restored. The relative error
    ||analytic - numerical|| / (||analytic|| + ||numerical||) is about 1e-9 or less when the
    backward pass is right.
    """
    for a in arrays:
        if a.dtype != np.float64:
            raise TypeError(f"gradcheck needs float64 arrays (float32 rounding swamps the finite "
                            f"differences), got {a.dtype}: pass a.astype(np.float64).")
        if not a.flags.c_contiguous:
            raise ValueError("gradcheck nudges the arrays in place, so they must be contiguous: "
                             "pass a.copy() (a transposed or sliced view is not).")
    tensors = [Tensor(a) for a in arrays]
    f(*tensors).backward()
    worst = 0.0
    for a, t in zip(arrays, tensors):
        xp = get_array_module(a)
        flat, numerical = a.reshape(-1), xp.zeros(a.size)
        for i in range(a.size):
            old = float(flat[i])
            flat[i] = old + eps
            plus = float(f(*[Tensor(b) for b in arrays]).data)
            flat[i] = old - eps
            minus = float(f(*[Tensor(b) for b in arrays]).data)
            flat[i] = old
            numerical[i] = (plus - minus) / (2 * eps)
        analytic = t.grad.reshape(-1)
        scale = float(xp.linalg.norm(analytic) + xp.linalg.norm(numerical))
        if scale > 0:
            worst = max(worst, float(xp.linalg.norm(analytic - numerical)) / scale)
    return worst
