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
reference engine is ``dlcourse/autograd.py``, whose own versions of each exercise (its
``unbroadcast``, ``Tensor.__mul__``, ``topological_order`` and ``Tensor.backward``) answer with
an error while your function runs.
"""
from __future__ import annotations

from ..autograd import Tensor
from .harness import (ExerciseError, call, expect_close, expect_on_gpu, expect_shape,
                      expect_unchanged, fail, gpu, passed, check_wrapper, closed, rng, shape_text,
                      to_array)

__all__ = ["unbroadcast", "tensor_mul", "topological_order"]

# What the exercises open: a Tensor's constructor and attributes (what the learner builds and
# reads), and, for tensor_mul, unbroadcast, the learner's own from the exercise before. The
# Tensor's operations and backward stay closed.
_TENSOR = ["dlcourse.autograd.Tensor.__init__", "dlcourse.autograd.Tensor.shape",
           "dlcourse.autograd.Tensor.ndim", "dlcourse.autograd.Tensor.__repr__"]
_MUL_OPENS = [*_TENSOR, "dlcourse.autograd.unbroadcast"]



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
    """Check ``fn(grad, shape)``: the gradient of a value of shape ``shape`` that broadcasting
    stretched to ``grad.shape``, as an array of shape ``shape``: the backward pass of
    broadcasting."""
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
        ("a row: grad (4, 3), shape (1, 3) (the size-1 axis is FIRST this time)",
         r.standard_normal((4, 3)), (1, 3)),
        ("grad (2, 3, 4), shape (1, 4): a leading axis added, then a size-1 axis stretched",
         r.standard_normal((2, 3, 4)), (1, 4)),
        ("grad (2, 3, 4), shape (2, 1, 4): the size-1 axis in the middle",
         r.standard_normal((2, 3, 4)), (2, 1, 4)),
    ]
    for case, grad, shape in cases:
        given = grad.copy()
        got = to_array(call(fn, given, shape, case=case), fn, case,
                       "the result")
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
        with closed(fn, case, opens=_MUL_OPENS):   # the learner's grad_fn runs in here too
            loss.backward()
    except ExerciseError:
        raise
    except NotImplementedError as err:             # the student version of grad_fn
        @check_wrapper()
        def not_yet():                             # the usual "not implemented yet: <hint>"
            __tracebackhide__ = True
            raise err
        not_yet.__name__ = getattr(fn, "__name__", "tensor_mul")
        call(not_yet, case=case)
    except Exception as err:  # noqa: BLE001 - the learner's grad_fn may raise anything
        fail(fn, case, f"the backward pass raised {type(err).__name__} in your grad_fn: {err}", fix)


def tensor_mul(fn):
    """Check ``fn(a, b)`` -> a Tensor ``out``, the elementwise product (broadcasting allowed),
    with parents ``(a, b)`` and a ``grad_fn`` that passes the gradient of ``out`` on to both
    parents, each in its own shape, adding to what they already hold."""
    __tracebackhide__ = True
    r = rng(15)
    unbroadcast_fix = ("an input was broadcast in the forward pass (here b over the rows of a, "
                       "or a over the rows of b, or both): bring each input's gradient back to "
                       "that input's own shape with your unbroadcast (a's and b's alike, since "
                       "either may be the broadcast one).")
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
                 "define grad_fn inside tensor_mul and attach it to the result as its "
                 "grad_fn attribute.")
        if not any(p is a for p in out.parents):
            fail(fn, case, "the result's parents do not include a, so backward never reaches it.",
                 "give the result its inputs as parents, a and b, when you create it.")
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
    out = _expect_tensor(call(fn, a_t, b_t, case=case, opens=_MUL_OPENS), fn, case)
    got = to_array(out.data, fn, case, "out.data")
    expect_shape(got, (3,), fn, case, "out.data")
    expect_close(got, a * b, fn, case, "out.data", rtol=1e-12, atol=1e-12, mistakes=[
        (a @ b, "the product is elementwise (entry by entry), not a matrix product.")])

    def plain(a_t, b_t):
        __tracebackhide__ = True
        out = call(fn, a_t, b_t, case=case, opens=_MUL_OPENS)
        return (out * c).sum() if isinstance(out, Tensor) else None, out
    swapped = ("each input's gradient uses the OTHER input's values: what is the derivative "
               "of a * b with respect to a?")
    no_chain = ("the local derivative must be multiplied by the gradient that arrives at the "
                "result (the chain rule): that is c here, not 1.")
    run(case, a, b, plain, {"a": (c * b, [(c * a, swapped), (b, no_chain)]),
                            "b": (c * a, [(c * b, swapped), (a, no_chain)])})

    # 2. the same tensor twice: x * x
    x = r.standard_normal(4)
    case = "the same tensor twice: tensor_mul(x, x).sum() for x of shape (4,): d/dx = 2x"

    def squared(a_t, _):
        __tracebackhide__ = True
        out = call(fn, a_t, a_t, case=case, opens=_MUL_OPENS)
        return out.sum() if isinstance(out, Tensor) else None, out
    overwrite = ("x is both parents, so its gradient must receive BOTH contributions: an "
                 "assignment to a parent's gradient replaced the first contribution with the "
                 "second. Accumulate: add into each parent's gradient, never assign it.")
    run(case, x, x, squared, {"a": (2 * x, [(x, overwrite)])})

    # 3. a used again elsewhere: tensor_mul(a, b) + a
    case = ("a used twice: loss = (tensor_mul(a, b) + a).sum(), a, b of shape (3,): the add "
            "gives a.grad 1 before the product's grad_fn runs")

    def reused(a_t, b_t):
        __tracebackhide__ = True
        out = call(fn, a_t, b_t, case=case, opens=_MUL_OPENS)
        return ((out + a_t).sum() if isinstance(out, Tensor) else None), out
    run(case, a, b, reused, {"a": (b + 1, [(b, "a's gradient lost the 1 that a's other use had "
                                               "added: accumulate into it, never assign.")])})

    # 4. broadcasting: a (4, 3) times b (3,)
    A, bias, C = r.standard_normal((4, 3)), r.standard_normal(3), r.standard_normal((4, 3))
    case = "broadcasting: a (4, 3) times b (3,), loss = (tensor_mul(a, b) * c).sum(), c (4, 3)"

    def broadcast(a_t, b_t):
        __tracebackhide__ = True
        out = call(fn, a_t, b_t, case=case, on_error=unbroadcast_fix, opens=_MUL_OPENS)
        return ((out * C).sum() if isinstance(out, Tensor) else None), out
    run(case, A, bias, broadcast, {"a": (C * bias, []),
                                   "b": ((C * A).sum(axis=0), [((C * A).mean(axis=0),
                                          "sum over the rows b was copied to, do not average.")])})

    # 5. broadcasting the other way: a (3,) times b (4, 3): the broadcast operand comes first
    case = ("broadcasting, the other way round: a (3,) times b (4, 3), loss = "
            "(tensor_mul(a, b) * c).sum(), c (4, 3)")
    run(case, bias, A, broadcast, {"a": ((C * A).sum(axis=0), [((C * A).mean(axis=0),
                                          "sum over the rows a was copied to, do not average.")]),
                                   "b": (C * bias, [])})

    # 6. both broadcast: a column (4, 1) times a row (1, 3)
    col, row = r.standard_normal((4, 1)), r.standard_normal((1, 3))
    case = ("both broadcast: a (4, 1) times b (1, 3), loss = (tensor_mul(a, b) * c).sum(), "
            "c (4, 3)")
    run(case, col, row, broadcast, {"a": ((C * row).sum(axis=1, keepdims=True), []),
                                    "b": ((C * col).sum(axis=0, keepdims=True), [])})
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
        order = call(fn, root, case=case, opens=_TENSOR)
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
        ('two kinds of copies: leading axes that broadcasting added (how many? compare the '
         'number of axes of grad and of shape), and axes where shape has a 1 that were '
         'stretched. Each copy contributed to the loss, so the gradient adds them up along '
         'those axes'),
        ('pseudo-code: extra = (axes of grad) - (axes of shape); sum grad over the first ___ '
         'axes; ones = the positions i where shape[i] is 1; sum over those with the size-1 axes '
         'kept; skip a sum when it has no axes. Check it against the tiny example before the '
         'exercise'),
    ],
    'tensor_mul': [
        ('for out = a * b the local derivatives are b (for a) and a (for b); the chain rule '
         'multiplies each by the gradient that arrives at out; the product may have broadcast a '
         'or b to a bigger shape, and a parent may be used twice'),
        ('pseudo-code: (gradient of a) += unbroadcast(___ * ___, shape of a), and the same for '
         'b with the roles swapped; add, never assign. Section 3 lists the local derivatives, '
         'Exercise 1 the way back to a shape'),
    ],
    'topological_order': [
        ('a tensor used twice is reached along two paths: keep a set of the identities of the '
         'tensors already visited, and return at once for one of them'),
        ('pseudo-code: visit(t): if t was seen, return; mark t seen; visit each of its ___; '
         'append t to the list (after its parents, so the root comes last). Section 4 describes '
         'the depth-first walk'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'unbroadcast': ['sum away', 'sum over every axis', 'sum over the leading', 'keepdims=True',
        'sum(axis', 'keeping each axis'],
    'tensor_mul': ['never assign', 'add into', '+=', 'times the other parent',
        "other parent's values", 'grad * b', 'out.grad * b'],
    'topological_order': ['id(', 'seen.add', 'in seen', 'visited.add'],
}
