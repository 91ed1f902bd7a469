"""Checks for lesson 14, the capstone: from hand-written backward passes to autograd.

Each check takes *your* function, runs it on small graphs built from
:class:`dlcourse.autograd.Tensor`, and either prints one line saying that every case passes
or raises :class:`ExerciseError` naming the case, the problem and, for the common mistakes,
the likely fix::

    dl.check.topological_order(topological_order)

=================  ================================  ========================================
lesson             check                             your function
=================  ================================  ========================================
14_autograd        :func:`unbroadcast`               ``(grad, shape) -> grad summed to shape``
14_autograd        :func:`tensor_mul`                ``(a, b) -> Tensor`` with its ``grad_fn``
14_autograd        :func:`topological_order`         ``(root) -> [Tensor, ...]``, parents first
=================  ================================  ========================================

The shared machinery (``call``, ``fail``, ``expect_close``, ...) lives in ``harness.py``; the
reference engine is ``dlcourse/autograd.py``.
"""
from __future__ import annotations

from ..autograd import Tensor
from .harness import (call, expect_close, expect_on_gpu, expect_shape, expect_unchanged, fail,
                      gpu, passed, rng, shape_text, to_array)

__all__ = ["unbroadcast", "tensor_mul", "topological_order"]


# ======================================================================================
# unbroadcast(grad, shape)
# ======================================================================================
def _sum_to(grad, shape):
    """The reference, written independently of dlcourse.autograd.unbroadcast."""
    __tracebackhide__ = True
    lead = grad.ndim - len(shape)
    out = grad.sum(axis=tuple(range(lead))) if lead else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1)
    return out.sum(axis=axes, keepdims=True) if axes else out


def _shape_fix(got_shape, grad_shape, shape):
    """The likely mistake behind a result of the wrong shape."""
    __tracebackhide__ = True
    if tuple(got_shape) == tuple(grad_shape):
        return ("you returned grad unchanged: a value broadcast in the forward pass was used "
                "once per copy, so its gradient is the SUM over the copies, shaped like the value.")
    if len(got_shape) > len(shape):
        return ("sum over the leading axes that broadcasting added (the first "
                f"{len(grad_shape) - len(shape)} axes of grad here), so the result has as many "
                "axes as shape.")
    if len(got_shape) < len(shape):
        return ("you summed axes away that shape keeps with size 1: sum those with "
                "keepdims=True, so the 1s stay.")
    return ("after the leading axes, sum (with keepdims=True) exactly over the axes where shape "
            "has a 1 and grad does not.")


def unbroadcast(fn):
    """Check ``fn(grad, shape)``: ``grad`` summed down to ``shape``, the backward pass of
    broadcasting. A bias (M,) added to (N, M) gets ``grad.sum(axis=0)``; a column (N, 1) gets
    ``grad.sum(axis=1, keepdims=True)``; a shape equal to grad's leaves it as it is."""
    __tracebackhide__ = True
    r = rng(14)
    cases = [
        ("a bias: grad (4, 3), shape (3,) (b was added to each of 4 rows)",
         r.standard_normal((4, 3)), (3,)),
        ("a column: grad (4, 3), shape (4, 1) (one number per row, stretched over 3 columns)",
         r.standard_normal((4, 3)), (4, 1)),
        ("grad (2, 3, 4), shape (3, 1): a leading axis added AND an axis stretched from 1",
         r.standard_normal((2, 3, 4)), (3, 1)),
        ("grad (2, 3), shape (2, 3): nothing was broadcast", r.standard_normal((2, 3)), (2, 3)),
        ("grad (2, 3), shape (): a single number broadcast everywhere", r.standard_normal((2, 3)), ()),
    ]
    for case, grad, shape in cases:
        given = grad.copy()
        got = to_array(call(fn, given, shape, case=case), fn, case, "the result")
        expect_unchanged(fn, case, [("grad", grad, given)])
        expect_shape(got, shape, fn, case, "the result", _shape_fix(got.shape, grad.shape, shape))
        expect_close(got, _sum_to(grad, shape), fn, case, "the result", rtol=1e-10, atol=1e-10,
                     mistakes=[(lambda: _sum_to(grad, shape) / (grad.size // max(got.size, 1)),
                                "you averaged; the gradient of a broadcast value is the SUM "
                                "over its copies (each copy contributed to the loss).")])
    cp = gpu()
    if cp is not None:
        case, grad, shape = cases[0]
        case = f"{case}, on the GPU (a CuPy array)"
        out = call(fn, cp.asarray(grad), shape, case=case)
        expect_on_gpu(out, fn, case, "the result")
        expect_close(to_array(out, fn, case, "the result"), _sum_to(grad, shape), fn, case,
                     "the result", rtol=1e-10, atol=1e-10)
    passed(fn, len(cases) + (cp is not None), cp is not None)


# ======================================================================================
# tensor_mul(a, b)
# ======================================================================================
def _expect_tensor(out, fn, case):
    __tracebackhide__ = True
    if not isinstance(out, Tensor):
        fail(fn, case, f"it returned a {type(out).__name__}, not a Tensor.",
             "return the Tensor the function builds (out), with its parents and its grad_fn.")
    return out


def _backward(loss, fn, case, fix):
    """loss.backward(), turning an error inside the learner's grad_fn into a named mistake."""
    __tracebackhide__ = True
    try:
        loss.backward()
    except NotImplementedError as err:             # the student version of grad_fn
        def not_yet():                             # the usual "not implemented yet: <hint>"
            __tracebackhide__ = True
            raise err
        not_yet.__name__ = getattr(fn, "__name__", "tensor_mul")
        call(not_yet, case=case)
    except Exception as err:  # noqa: BLE001 - the learner's grad_fn may raise anything
        fail(fn, case, f"the backward pass raised {type(err).__name__} in your grad_fn: {err}", fix)


def tensor_mul(fn):
    """Check ``fn(a, b)`` -> a Tensor ``out`` with ``out.data = a.data * b.data`` (broadcasting
    allowed), parents ``(a, b)`` and a ``grad_fn`` that ADDS ``out.grad * b.data`` to ``a.grad``
    and ``out.grad * a.data`` to ``b.grad``, each summed back to its own shape."""
    __tracebackhide__ = True
    r = rng(15)
    unbroadcast_fix = ("b was broadcast over the rows of a in the forward pass: sum each "
                       "input's gradient back to that input's own shape with your unbroadcast "
                       "(a's and b's alike).")
    n_cases = 0

    def run(case, a_val, b_val, build, expected):
        """Build the graph with fn, run backward, compare each named leaf's gradient."""
        __tracebackhide__ = True
        nonlocal n_cases
        a, b = Tensor(a_val.copy()), Tensor(b_val.copy())
        loss, out = build(a, b)
        _expect_tensor(out, fn, case)
        if out.grad_fn is None:
            fail(fn, case, "the result has no grad_fn, so backward cannot pass anything on.",
                 "define grad_fn inside tensor_mul and attach it: out.grad_fn = grad_fn.")
        if not any(p is a for p in out.parents):
            fail(fn, case, "the result's parents do not include a, so backward never reaches it.",
                 "give the result its inputs as parents: Tensor(a.data * b.data, (a, b)).")
        _backward(loss, fn, case, unbroadcast_fix)
        for name, leaf in (("a", a), ("b", b)):
            if name not in expected:
                continue
            want, mistakes = expected[name]
            got = to_array(leaf.grad, fn, case, f"{name}.grad")
            expect_shape(got, leaf.shape, fn, case, f"{name}.grad",
                         unbroadcast_fix if got.size != leaf.data.size else None)
            expect_close(got, want, fn, case, f"{name}.grad", rtol=1e-10, atol=1e-10,
                         mistakes=mistakes)
        n_cases += 1

    # 1. the plain product, with a non-trivial upstream gradient c
    a, b, c = r.standard_normal(3), r.standard_normal(3), r.standard_normal(3)
    case = "a, b of shape (3,), loss = (tensor_mul(a, b) * c).sum(), so out.grad = c"
    a_t, b_t = Tensor(a.copy()), Tensor(b.copy())
    out = _expect_tensor(call(fn, a_t, b_t, case=case), fn, case)
    got = to_array(out.data, fn, case, "out.data")
    expect_shape(got, (3,), fn, case, "out.data")
    expect_close(got, a * b, fn, case, "out.data", rtol=1e-12, atol=1e-12, mistakes=[
        (a @ b, "the product is elementwise, a.data * b.data, not a matrix product.")])

    def plain(a_t, b_t):
        __tracebackhide__ = True
        out = call(fn, a_t, b_t, case=case)
        return (out * c).sum() if isinstance(out, Tensor) else None, out
    swapped = ("each input's gradient is out.grad times the OTHER input's data (the derivative "
               "of a * b with respect to a is b).")
    no_chain = ("multiply by out.grad (the chain rule): the gradient arriving from the loss is "
                "c here, not 1.")
    run(case, a, b, plain, {"a": (c * b, [(c * a, swapped), (b, no_chain)]),
                            "b": (c * a, [(c * b, swapped), (a, no_chain)])})

    # 2. the same tensor twice: x * x
    x = r.standard_normal(4)
    case = "the same tensor twice: tensor_mul(x, x).sum() for x of shape (4,): d/dx = 2x"

    def squared(a_t, _):
        __tracebackhide__ = True
        out = call(fn, a_t, a_t, case=case)
        return out.sum() if isinstance(out, Tensor) else None, out
    overwrite = ("x is both parents, so its gradient must receive BOTH contributions: with "
                 "a.grad = ..., the second assignment replaced the first. Accumulate: a.grad += ... "
                 "and b.grad += ....")
    run(case, x, x, squared, {"a": (2 * x, [(x, overwrite)])})

    # 3. a used again elsewhere: tensor_mul(a, b) + a
    case = ("a used twice: loss = (tensor_mul(a, b) + a).sum(), a, b of shape (3,): the add "
            "gives a.grad 1 before the product's grad_fn runs")

    def reused(a_t, b_t):
        __tracebackhide__ = True
        out = call(fn, a_t, b_t, case=case)
        return ((out + a_t).sum() if isinstance(out, Tensor) else None), out
    run(case, a, b, reused, {"a": (b + 1, [(b, "a.grad lost the 1 that a's other use had added: "
                                               "accumulate with a.grad += ..., never assign.")])})

    # 4. broadcasting: a (4, 3) times b (3,)
    A, bias, C = r.standard_normal((4, 3)), r.standard_normal(3), r.standard_normal((4, 3))
    case = "broadcasting: a (4, 3) times b (3,), loss = (tensor_mul(a, b) * c).sum(), c (4, 3)"

    def broadcast(a_t, b_t):
        __tracebackhide__ = True
        out = call(fn, a_t, b_t, case=case, on_error=unbroadcast_fix)
        return ((out * C).sum() if isinstance(out, Tensor) else None), out
    run(case, A, bias, broadcast, {"a": (C * bias, []),
                                   "b": ((C * A).sum(axis=0), [((C * A).mean(axis=0),
                                          "sum over the rows b was copied to, do not average.")])})
    passed(fn, n_cases)


# ======================================================================================
# topological_order(root)
# ======================================================================================
def _graphs():
    """[(case, root)]: three small graphs; leaves carry their names in .op for the messages."""
    __tracebackhide__ = True
    r = rng(16)

    def leaf(name, shape=(2,)):
        __tracebackhide__ = True
        t = Tensor(r.standard_normal(shape))
        t.op = name
        return t
    graphs = []
    a = leaf("a")
    b = a.relu()
    c = b.exp()
    d = c.sum()
    graphs.append(("a chain: a -> relu -> exp -> sum", d))
    x, w = leaf("x"), leaf("w")
    p = x * w
    q = p + x                         # x reached along two paths
    s = (q * p).sum()                 # p reached along two paths
    graphs.append(("a diamond: p = x * w, q = p + x, loss = (q * p).sum() (x and p are each "
                   "used twice)", s))
    u, v = leaf("u", (3, 2)), leaf("v", (2, 2))
    h = (u @ v).relu()
    o = ((h @ v) + h).sum()           # v used in two products, h twice
    graphs.append(("two layers sharing a weight v: h = relu(u @ v), loss = (h @ v + h).sum()", o))
    return graphs


def _all_nodes(root):
    """Every tensor root depends on (a plain walk, to know what must be there)."""
    __tracebackhide__ = True
    found, stack = {}, [root]
    while stack:
        node = stack.pop()
        if id(node) not in found:
            found[id(node)] = node
            stack.extend(node.parents)
    return found


def _describe(node):
    __tracebackhide__ = True
    made = f"leaf {node.op}" if not node.parents else f"the result of {node.op!r}"
    return f"{made} (shape {shape_text(node.shape)})"


def topological_order(fn):
    """Check ``fn(root)`` -> a list of every Tensor ``root`` depends on (``root`` included),
    each exactly once and after all of its parents, so ``root`` comes last. Any such order
    passes."""
    __tracebackhide__ = True
    graphs = _graphs()
    for case, root in graphs:
        order = call(fn, root, case=case)
        if order is None:
            fail(fn, case, "it returned None.", "return the list you built.")
        try:
            order = list(order)
        except TypeError:
            fail(fn, case, f"it returned a {type(order).__name__}, not a list of tensors.")
        if not all(isinstance(n, Tensor) for n in order):
            bad = next(n for n in order if not isinstance(n, Tensor))
            fail(fn, case, f"the list holds a {type(bad).__name__}, not only Tensors.",
                 "append the tensors themselves (node), not their data or ids.")
        everything = _all_nodes(root)
        ids = [id(n) for n in order]
        if len(ids) != len(set(ids)):
            twice = next(n for n in order if ids.count(id(n)) > 1)
            fail(fn, case, f"{_describe(twice)} appears {ids.count(id(twice))} times; each tensor "
                           "must appear once (backward would send its gradient on more than once, "
                           "inflating its parents' gradients).",
                 "keep a set of the tensors already visited and skip a tensor that is in it: a "
                 "tensor used twice is reached along two paths.")
        missing = [n for i, n in everything.items() if i not in set(ids)]
        if missing:
            fail(fn, case, f"{len(missing)} of the graph's {len(everything)} tensors are missing, "
                           f"e.g. {_describe(missing[0])}.",
                 "visit every parent of every tensor (recursively), not just the root's parents.")
        if len(order) != len(everything):
            fail(fn, case, f"the list has {len(order)} tensors but the graph only {len(everything)}.",
                 "list only the tensors root depends on, found through .parents.")
        where = {id(n): i for i, n in enumerate(order)}
        if order[0] is root and len(order) > 1:
            fail(fn, case, "the root comes first: the list is in the wrong direction.",
                 "append a tensor only AFTER all its parents (post-order), so the root comes "
                 "last; backward then walks the list reversed.")
        for node in order:
            for parent in node.parents:
                if where[id(parent)] > where[id(node)]:
                    fail(fn, case, f"{_describe(node)} (at position {where[id(node)]}) comes before "
                                   f"its parent, {_describe(parent)} (at {where[id(parent)]}).",
                         "append a tensor after visiting ALL its parents (post-order), not "
                         "when you first reach it (pre-order).")
    passed(fn, len(graphs))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'unbroadcast': [
        ('the number of added leading axes is grad.ndim - len(shape); after summing them away, '
         'the axes to sum with keepdims=True are the indices i where shape[i] == 1'),
        ('grad.sum(axis=tuple(range(extra))) removes the leading axes; then '
         'grad.sum(axis=ones, keepdims=True) with ones the tuple of indices where shape has a 1 '
         '(skip each sum when its tuple of axes is empty)'),
    ],
    'tensor_mul': [
        ('for out = a * b: d out / d a = b and d out / d b = a, each times the gradient that '
         'arrives, out.grad; the product may have broadcast a or b to a bigger shape'),
        ('a.grad += the unbroadcast (yours, or dl.autograd.unbroadcast) of out.grad * b.data to '
         'a.shape, and the same for b with a.data and b.shape; += (never =) so that a tensor used '
         'twice gets both contributions'),
    ],
    'topological_order': [
        ('a tensor used twice is reached along two paths: keep a set of id(node) for the tensors '
         'already visited, and return at once for one of them'),
        ('only when the id of node is not yet in visited: add it to visited, call visit on '
         'every tensor in node.parents, then order.append(node) (after the parents, so the root '
         'comes last)'),
    ],
}
