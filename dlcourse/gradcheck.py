"""Numerical gradient checking: does backward agree with finite differences?

Introduced in notebook ``03_backpropagation``.

For a layer, gradcheck compares the analytic gradients of L = sum(forward(x) * R), for a
fixed random R, with central differences (L(a + eps) - L(a - eps)) / (2 eps) for every entry
of x and of every parameter. For a loss, L is the loss itself. All in float64, on whichever
backend x lives on. The relative error of each gradient is
||analytic - numerical|| / (||analytic|| + ||numerical||); a correct float64 backward gives
about 1e-9 or less, a wrong one about 1e-1.
"""
from __future__ import annotations

import copy

import numpy as np

from . import backend
from .backend import device_of, get_array_module, to_numpy


def _is_loss(module) -> bool:
    from .losses import Loss
    return isinstance(module, Loss)


def _relative_error(a, n, atol) -> float:
    xp = get_array_module(a)
    if a.size == 0:
        return 0.0
    # (CuPy's max takes no initial=, so the empty case is handled above.)
    if float(xp.abs(a).max()) < atol and float(xp.abs(n).max()) < atol:
        return 0.0   # both zero up to finite-difference noise (e.g. a bias just before BatchNorm)
    num = float(xp.linalg.norm((a - n).ravel()))
    den = float(xp.linalg.norm(a.ravel()) + xp.linalg.norm(n.ravel()))
    return num / den if den > 0 else 0.0


def _check_arguments(module, x, target, eps, tol, atol, max_entries):
    """Refuse what would make the comparison meaningless, before anything runs."""
    if isinstance(module, type):
        raise TypeError(f"gradcheck needs a layer, model or loss object, got the class "
                        f"{module.__name__} itself. Create one first: "
                        f"gradcheck({module.__name__}(...), x).")
    if not hasattr(module, "forward") or not hasattr(module, "backward"):
        raise TypeError(f"gradcheck needs a layer, model or loss (with forward and backward), "
                        f"got {type(module).__name__}.")
    for name, value in (("eps", eps), ("tol", tol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                             np.floating)) \
                or not np.isfinite(value) or value < 0 or (name == "eps" and value == 0):
            need = "a small positive number such as 1e-6" if name == "eps" else \
                "a finite number >= 0"
            raise ValueError(f"gradcheck({name}=...) must be {need}, got {value!r}."
                             + (" With eps <= 0 the finite differences measure nothing."
                                if name == "eps" else ""))
    if isinstance(max_entries, bool) or not isinstance(max_entries, (int, np.integer)) \
            or max_entries < 1:
        raise ValueError(f"gradcheck(max_entries=...) must be an int >= 1 (how many entries of "
                         f"each array to compare), got {max_entries!r}: with none compared "
                         f"there is no agreement to report.")
    for name, value in (("x", x), ("target", target)):
        kind = getattr(getattr(value, "dtype", None), "kind", None)
        if kind is None and value is not None:
            kind = np.asarray(value).dtype.kind
        if kind == "c":
            raise TypeError(f"gradcheck: {name} is complex ({value.dtype}); dlcourse's layers "
                            f"and gradients are real. Casting would silently drop the imaginary "
                            f"part: pass a real array.")
        if name == "x" and kind not in ("f", "i", "u", "b"):
            raise TypeError(f"gradcheck needs x as a numeric array, got "
                            f"{type(value).__name__}.")


def _numerical(f, a, eps, entries):
    """Central differences of f() with respect to the given flat entries of a (in place)."""
    xp = get_array_module(a)
    flat = a.reshape(-1)             # a view: writing to flat changes a
    grad = xp.zeros_like(flat)
    for i in entries:
        old = float(flat[i])
        flat[i] = old + eps
        plus = f()
        flat[i] = old - eps
        minus = f()
        flat[i] = old
        grad[i] = (plus - minus) / (2 * eps)
    return grad.reshape(a.shape)


def gradcheck(module, x, target=None, *, eps: float = 1e-6, tol: float = 1e-6, seed: int = 0,
              max_entries: int = 2000, atol: float = 1e-8, verbose: bool = True) -> float:
    """Check ``module.backward`` against numerical gradients; return the largest relative error.

    module: a layer, a model, or a loss (then ``target`` is its second argument).
    x: the input (or the logits, for a loss). It is copied to float64; the module is copied
    too, cast to float64 and moved to x's device, so nothing of yours is changed.
    Arrays with more than ``max_entries`` entries are checked at that many random entries.
    A gradient that is zero (both analytic and numerical below ``atol`` everywhere, as for a
    bias just before BatchNorm) counts as agreeing. On failure (error > tol) both gradients
    are printed when ``verbose``.

    It never reports agreement it did not establish: a NaN or inf in either gradient, nothing
    to compare (``max_entries < 1``, or an input or parameter with no entries), ``eps`` that
    is not a small positive number, complex input, or a class instead of a layer are errors.
    """
    _check_arguments(module, x, target, eps, tol, atol, max_entries)
    xp = get_array_module(x)
    x = xp.array(x, dtype=np.float64, copy=True)
    m = copy.deepcopy(module)
    is_loss = _is_loss(m)
    if not is_loss:
        m.astype(np.float64).to(device_of(x))
    if target is not None and hasattr(target, "dtype") and np.issubdtype(target.dtype, np.floating):
        target = xp.asarray(target, dtype=np.float64)
    saved_rng = backend.rng()
    gen = np.random.default_rng([seed, 2024])   # a stream of its own: R never equals your x
    try:
        def run():   # one forward pass with the same random numbers (Dropout) every time
            backend.manual_seed(seed)
            return m.forward(x, target) if is_loss else m.forward(x)

        if is_loss:
            def f():
                return float(run())
            run()
            analytic = {"x": m.backward()}
            tensors = {"x": x}
        else:
            out = run()
            R = xp.asarray(gen.standard_normal(out.shape))

            def f():
                return float((run() * R).sum())
            run()
            analytic = {"x": m.backward(R), **{f"params[{k!r}]": g for k, g in m.grads.items()}}
            tensors = {"x": x, **{f"params[{k!r}]": p for k, p in m.params.items()}}
        worst = 0.0
        for name, a in tensors.items():
            if name not in analytic:
                raise RuntimeError(f"{type(module).__name__}.backward() did not fill grads[{name}].")
            entries = np.arange(a.size)
            if a.size > max_entries:
                entries = np.sort(gen.choice(a.size, max_entries, replace=False))
            if a.size == 0:
                raise ValueError(f"gradcheck({type(module).__name__}): {name} has no entries "
                                 f"(shape {tuple(a.shape)}), so nothing of its gradient can be "
                                 f"compared. Give it at least one entry.")
            num = _numerical(f, a, eps, entries)
            ana = analytic[name]
            if tuple(ana.shape) != tuple(a.shape):
                raise ValueError(f"{type(module).__name__}: the gradient for {name} has shape "
                                 f"{tuple(ana.shape)}, but {name} has shape {tuple(a.shape)}.")
            for which, g in (("analytic (backward)", ana), ("numerical", num)):
                finite = xp.isfinite(g)
                if not bool(finite.all()):
                    first = tuple(int(i) for i in np.argwhere(~to_numpy(finite))[0])
                    raise FloatingPointError(
                        f"gradcheck({type(module).__name__}): the {which} gradient of {name} "
                        f"holds {int((~finite).sum())} NaN or inf value(s), the first at index "
                        f"{first}; no agreement can be measured. "
                        + ("Look for a division by zero or a log of 0 in backward."
                           if which.startswith("analytic") else
                           "The forward pass gives NaN or inf near this input (a log of 0, an "
                           "overflow): check the input, or the forward itself."))
            mask = xp.zeros(a.size, dtype=bool)
            mask[xp.asarray(entries)] = True
            mask = mask.reshape(a.shape)
            ana_checked = xp.where(mask, ana, 0)
            err = _relative_error(ana_checked, num, atol)
            worst = max(worst, err)
            if err > tol and verbose:
                with np.printoptions(precision=6, threshold=60, edgeitems=3):
                    print(f"gradcheck {type(module).__name__} {name}: relative error {err:.3e} > {tol:.0e}\n"
                          f"  analytic (backward):\n{to_numpy(ana_checked)}\n"
                          f"  numerical (finite differences):\n{to_numpy(num)}")
        return worst
    finally:
        backend.set_rng(saved_rng)
