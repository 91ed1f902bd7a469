"""The autograd engine (dlcourse/autograd.py, lesson 14): its gradients equal the library's
hand-written backward passes on an MLP, every operation passes a finite-difference check in
float64, and the classic mistakes (a value used twice, broadcasting) are handled. Every test
runs on every backend."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse.autograd import Tensor, cross_entropy, gradcheck, topological_order, unbroadcast


def _mlp_forward(params, x, n_linear):
    """Linear-ReLU-...-Linear from Tensors keyed like dl.MLP's params ("0.W", "0.b", "2.W", ...)."""
    h = x
    for i in range(n_linear):
        h = h @ params[f"{2 * i}.W"] + params[f"{2 * i}.b"]
        if i < n_linear - 1:
            h = h.relu()
    return h


@pytest.mark.parametrize("sizes", [[5, 8, 3], [7, 16, 12, 4]])
def test_gradients_equal_the_hand_written_layers_on_an_mlp(device, to_dev, sizes):
    rng = np.random.default_rng(1)
    N = 10
    model = dl.MLP(sizes, dtype=np.float64, seed=0).to(device)
    for k, p in model.params.items():             # non-zero biases, so their gradients matter
        if k.endswith(".b"):
            p += to_dev(rng.standard_normal(p.shape))
    x, y = to_dev(rng.standard_normal((N, sizes[0])), rng.integers(0, sizes[-1], N))

    loss_fn = dl.SoftmaxCrossEntropy()
    loss = loss_fn.forward(model.forward(x), y)
    dx = model.backward(loss_fn.backward())

    params = {k: Tensor(p.copy()) for k, p in model.params.items()}
    xt = Tensor(x.copy())
    loss_t = cross_entropy(_mlp_forward(params, xt, len(sizes) - 1), y)
    loss_t.backward()

    assert dl.device_of(loss_t.data) == device
    np.testing.assert_allclose(float(loss_t.data), loss, rtol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(xt.grad), dl.to_numpy(dx), rtol=1e-10, atol=1e-13)
    for k, g in model.grads.items():
        assert dl.device_of(params[k].grad) == device
        np.testing.assert_allclose(dl.to_numpy(params[k].grad), dl.to_numpy(g),
                                   rtol=1e-10, atol=1e-13, err_msg=k)


OPERATIONS = {
    "add, bias (N, M) + (M,)": (lambda a, b: ((a + b) * (a + b)).sum(), [(4, 3), (3,)]),
    "add, (N, 1) + (1, M)": (lambda a, b: ((a + b) ** 2).sum(), [(4, 1), (1, 3)]),
    "mul with broadcasting": (lambda a, b: (a * b * a).sum(), [(2, 3, 4), (3, 1)]),
    "a value used twice: x * x + x": (lambda a: (a * a + a).sum(), [(3, 2)]),
    "sub, div, number on the left": (lambda a, b: ((1.0 - a) / (b * b + 1.0)).mean(), [(3, 4), (4,)]),
    "matmul": (lambda a, b: ((a @ b) ** 2).mean(), [(5, 3), (3, 2)]),
    "relu": (lambda a: (a.relu() * a).sum(), [(4, 5)]),
    "exp and log": (lambda a: (a.exp() + 1.0).log().sum(), [(3, 3)]),
    "sum over an axis, keepdims": (lambda a: (a.sum(axis=1, keepdims=True) * a).sum(), [(3, 4)]),
    "sum over an axis": (lambda a: (a.sum(axis=0) ** 2).sum(), [(3, 4)]),
    "mean over an axis": (lambda a: (a.mean(axis=(0, 2)) ** 2).sum(), [(2, 3, 4)]),
    "reshape": (lambda a, b: (a.reshape(3, 4) @ b).sum(), [(2, 6), (4, 2)]),
    "log_softmax": (lambda a, b: (a.log_softmax() * b).sum(), [(4, 5), (4, 5)]),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_every_operation_passes_gradcheck(to_dev, name):
    f, shapes = OPERATIONS[name]
    rng = np.random.default_rng(2)
    arrays = [to_dev(rng.standard_normal(s)) for s in shapes]
    assert gradcheck(f, *arrays) < 1e-7


def test_an_mlp_with_cross_entropy_passes_gradcheck(to_dev):
    rng = np.random.default_rng(3)
    x, W1, b1, W2, b2 = (to_dev(rng.standard_normal(s)) for s in [(6, 4), (4, 5), (5,), (5, 3), (3,)])
    y = to_dev(rng.integers(0, 3, 6))

    def loss(x, W1, b1, W2, b2):
        return cross_entropy((x @ W1 + b1).relu() @ W2 + b2, y)
    assert gradcheck(loss, x, W1, b1, W2, b2) < 1e-7


def test_gradcheck_catches_a_wrong_backward(to_dev):
    """An operation whose grad_fn forgets to accumulate (= instead of +=) fails the check."""
    def square_that_overwrites(a):
        out = Tensor(a.data * a.data, (a, a))

        def grad_fn():
            a.grad = out.grad * a.data          # the bug: = overwrites, and a is a parent twice
        out.grad_fn = grad_fn
        return out
    x = to_dev(np.random.default_rng(4).standard_normal((3, 2)))
    assert gradcheck(lambda a: square_that_overwrites(a).sum(), x) > 0.1
    assert gradcheck(lambda a: (a * a).sum(), x) < 1e-7


def test_a_value_used_twice_gets_both_gradients(to_dev):
    x = Tensor(to_dev(np.array([3.0])))
    y = x * x + x                     # dy/dx = 2x + 1 = 7
    y.backward()
    assert float(x.grad[0]) == 7.0


def test_topological_order_puts_parents_first_and_each_node_once():
    a, b = Tensor(np.ones(2)), Tensor(np.ones(2))
    c = a * b
    d = c + a                         # a is used twice, c once more below
    e = (d * c).sum()
    order = topological_order(e)
    assert len(order) == len({id(n) for n in order}) and order[-1] is e
    where = {id(n): i for i, n in enumerate(order)}
    for node in order:
        assert all(where[id(p)] < where[id(node)] for p in node.parents)
    assert {id(n) for n in (a, b, c, d, e)} <= set(where)


def test_topological_order_of_a_deep_graph_needs_no_recursion():
    x = Tensor(np.ones(1))
    y = x
    for _ in range(5000):             # deeper than Python's default recursion limit
        y = y + 1.0
    y.backward()
    assert float(x.grad[0]) == 1.0


def test_unbroadcast_sums_back_to_the_shape():
    g = np.arange(24.0).reshape(2, 3, 4)
    assert unbroadcast(g, (3, 4)).shape == (3, 4)
    np.testing.assert_array_equal(unbroadcast(g, (4,)), g.sum(axis=(0, 1)))
    np.testing.assert_array_equal(unbroadcast(g, (3, 1)), g.sum(axis=(0, 2))[:, None])
    np.testing.assert_array_equal(unbroadcast(g, (1, 1, 1)), g.sum(keepdims=True))
    assert unbroadcast(g, (2, 3, 4)) is g
    assert unbroadcast(g, ()).shape == ()


def test_backward_a_second_time_starts_again_from_zero():
    x = Tensor(np.array([2.0]))
    y = (x * x).sum()
    y.backward()
    y.backward()
    assert float(x.grad[0]) == 4.0


def test_float32_stays_float32(to_dev):
    x = Tensor(to_dev(np.ones((2, 3), dtype=np.float32)))
    y = ((x * 2.0 + 1.0).relu() / 3.0).mean()
    y.backward()
    assert y.data.dtype == np.float32 and x.grad.dtype == np.float32


@pytest.mark.parametrize("make, message", [
    (lambda: Tensor([1.0, 2.0]), "np.asarray"),
    (lambda: Tensor(Tensor(np.ones(2))), "takes an array, got a Tensor"),
    (lambda: Tensor(np.ones((2, 3))).backward(), r"single number .* out\.sum\(\)"),
    (lambda: Tensor(np.ones((2, 3))) @ Tensor(np.ones((2, 3))), "transposed"),
    (lambda: Tensor(np.ones(3)) @ Tensor(np.ones((3, 2))), "two matrices"),
    (lambda: unbroadcast(np.ones(3), (2, 3)), "fewer axes"),
    (lambda: gradcheck(lambda a: a.sum(), np.ones(3, dtype=np.float32)), "float64"),
    (lambda: gradcheck(lambda a: a.sum(), np.ones((3, 2)).T), "contiguous"),
])
def test_mistakes_get_clear_errors(make, message):
    with pytest.raises((TypeError, ValueError), match=message):
        make()


# --------------------------------------------------------------------------------------
# The exercise checks of lesson 14 (dl.check.unbroadcast, tensor_mul, topological_order)
# --------------------------------------------------------------------------------------
def _mul(a, b, accumulate=True, unbroadcast_grads=True, swap=False):
    """tensor_mul, right by default; each flag puts in one classic mistake."""
    out = Tensor(a.data * b.data, (a, b))

    def grad_fn():
        ga, gb = out.grad * (a.data if swap else b.data), out.grad * (b.data if swap else a.data)
        if unbroadcast_grads:
            ga, gb = unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)
        if accumulate:
            a.grad += ga
            b.grad += gb
        else:
            a.grad = ga
            b.grad = gb
    out.grad_fn = grad_fn
    return out


def _mul_unbroadcast_b_only(a, b):
    """A tensor_mul written for the lesson's one broadcast case (b broadcast over a's rows)."""
    out = Tensor(a.data * b.data, (a, b))

    def grad_fn():
        a.grad += out.grad * b.data
        b.grad += unbroadcast(out.grad * a.data, b.shape)
    out.grad_fn = grad_fn
    return out


def _preorder(root):
    order, seen = [], set()

    def visit(node):
        if id(node) not in seen:
            seen.add(id(node))
            order.append(node)                  # the mistake: before its parents
            for p in node.parents:
                visit(p)
    visit(root)
    return order


def _no_seen_set(root):
    order = []

    def visit(node):
        for p in node.parents:
            visit(p)
        order.append(node)
    visit(root)
    return order


def _recursive_topo(root):
    order, seen = [], set()

    def visit(node):
        if id(node) not in seen:
            seen.add(id(node))
            for p in node.parents:
                visit(p)
            order.append(node)
    visit(root)
    return order


@pytest.mark.parametrize("checker, right", [
    ("unbroadcast", lambda g, shape: _own_unbroadcast(g, shape)),
    ("unbroadcast", lambda g, shape: g.sum(axis=tuple(range(g.ndim - len(shape)))).sum(
        axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)),
    ("tensor_mul", _mul),
    ("topological_order", lambda root: _iterative_topo(root)),
    ("topological_order", _recursive_topo),
])
def test_checks_accept_right_solutions(checker, right, capsys):
    getattr(dl.check, checker)(right)
    assert "\u2713" in capsys.readouterr().out


def _iterative_topo(root):
    """A learner's order written with a stack (the library's own is refused in the check)."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((p, False) for p in node.parents)
    return order


def _own_unbroadcast(g, shape):
    """A learner's correct unbroadcast (the library's is refused inside the check)."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


@pytest.mark.parametrize("checker, wrong, words", [
    ("unbroadcast", lambda g, shape: g, "unchanged"),
    ("unbroadcast", lambda g, shape: g.sum(axis=0), "keepdims"),
    ("unbroadcast", lambda g, shape: _own_unbroadcast(g, shape) / 4, "averaged"),
    ("tensor_mul", lambda a, b: _mul(a, b, accumulate=False), "Accumulate"),
    ("tensor_mul", lambda a, b: _mul(a, b, swap=True), "OTHER input"),
    ("tensor_mul", lambda a, b: _mul(a, b, unbroadcast_grads=False), "unbroadcast"),
    ("tensor_mul", lambda a, b: Tensor(a.data * b.data, (a, b)), "no grad_fn"),
    ("tensor_mul", lambda a, b: a.data * b.data, "not a Tensor"),
    ("topological_order", _preorder, "wrong direction"),
    ("topological_order", _no_seen_set, "set of the tensors already visited"),
    ("topological_order", lambda root: list(root.parents) + [root], "missing"),
    ("topological_order", lambda root: [n.data for n in _recursive_topo(root)], "not only Tensors"),
    # the library's own versions are refused while the learner's function runs (issue 26)
    ("tensor_mul", lambda a, b: a * b, "library's own version"),
    ("tensor_mul", lambda a, b: b.__rmul__(a), "library's own version"),
    ("unbroadcast", lambda g, shape: dl.autograd.unbroadcast(g, shape), "library's own version"),
    ("topological_order", lambda root: dl.autograd.topological_order(root), "library's own"),
    ("topological_order", lambda root: (root.backward(), [root])[1], "library's own version"),
    # holes closed: the size-1 axis first, the broadcast operand first, both broadcast
    ("unbroadcast", lambda g, shape: g.sum(axis=tuple(range(g.ndim - len(shape)))).sum(
        axis=tuple(i for i, n in enumerate(shape) if n == 1 and i == len(shape) - 1),
        keepdims=True) if any(n == 1 for n in shape[-1:]) else
        g.sum(axis=tuple(range(g.ndim - len(shape)))), "shape \\(1, 3\\)"),
    ("tensor_mul", lambda a, b: _mul_unbroadcast_b_only(a, b), "the other way round"),
])
def test_checks_name_the_mistake(checker, wrong, words):
    with pytest.raises(dl.check.ExerciseError, match=words):
        getattr(dl.check, checker)(wrong)


def test_checks_say_not_implemented_with_the_hint():
    def topological_order(root):
        raise NotImplementedError("visit the parents first")
    with pytest.raises(dl.check.ExerciseError, match="not implemented yet: visit the parents first"):
        dl.check.topological_order(topological_order)


def test_lesson_14_exercises_pass_their_checks_and_the_student_version_says_not_yet(capsys):
    """The notebook's own solutions pass dl.check; with the solutions removed (the student
    version), each check says "not implemented yet" with the exercise's hint."""
    nbformat = pytest.importorskip("nbformat")
    import re
    from pathlib import Path

    from dlcourse.student import student_source
    path = Path(__file__).resolve().parents[1] / "notebooks" / "14_autograd.ipynb"
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    exercises = [(i, re.search(r"^def (\w+)\(", s, re.M).group(1)) for i, s in enumerate(cells)
                 if "### BEGIN SOLUTION" in s]
    assert [name for _, name in exercises] == ["unbroadcast", "tensor_mul", "topological_order"]
    setup = {"dl": dl, "np": np, "Tensor": Tensor}
    for i, name in exercises:
        check = cells[i + 1]
        assert check.strip() == f"dl.check.{name}({name})"
        exec(cells[i], setup)                        # noqa: S102 - our own notebook
        exec(check, setup)                           # noqa: S102
        assert f"\u2713 {name}" in capsys.readouterr().out
        student = dict(setup)
        exec(student_source(cells[i]), student)      # noqa: S102
        hint = re.search(r"# HINT: (.*)", cells[i]).group(1).strip()
        with pytest.raises(dl.check.ExerciseError, match=f"{name} is not implemented yet"):
            try:
                exec(check, student)                 # noqa: S102
            except dl.check.ExerciseError as err:
                assert hint in str(err)
                raise
