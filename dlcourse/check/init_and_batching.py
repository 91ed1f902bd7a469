"""Checks for lessons 04c-05: the initialization of an MLP, and GPU batching.

Each check takes *your* function, runs it on several small cases, compares it with the
library's rule (``dlcourse/layers.py``) and either prints one line saying that every case
passes, or raises :class:`ExerciseError` naming the case, the problem and, for the common
mistakes, the likely fix::

    dl.check.mlp_forward_batched(mlp_forward_batched)

==================  ===============================  ==============================================
lesson              check                            your function
==================  ===============================  ==============================================
04c_initialization  :func:`init_std`                 ``(fan_in, fan_out, scheme) -> float``
05_gpu_batching     :func:`mlp_forward_batched`      ``(X, W1, b1, W2, b2) -> logits``
==================  ===============================  ==============================================

The training checks of lesson 04a are in ``training.py``, the convolution lessons' (06-07) in
``convolution.py`` and ``cnn.py``; the shared machinery (``call``, ``fail``, ``expect_close``,
...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .. import backend
from .harness import (call, expect_close, expect_shape, expect_unchanged, fail, passed, rng,
                      to_array, to_number)

__all__ = ["init_std", "mlp_forward_batched"]


# The library's own versions of what each exercise builds: refused (an ExerciseError) while
# the learner's function runs, with every alias of them in a dlcourse module (dl.Linear, ...).
REFUSE: dict[str, list[str]] = {
    "init_std": ["dlcourse.layers.Linear.__init__"],
    "mlp_forward_batched": ["dlcourse.layers.Linear.forward", "dlcourse.layers.ReLU.forward",
                            "dlcourse.layers.Sequential.forward"],
}


# ======================================================================================
# 04c_initialization
# ======================================================================================
def _init_std_mistakes(fan_in, fan_out, scheme):
    """(a wrong std, what it is) for the usual mistakes; the first match names the fix."""
    __tracebackhide__ = True
    he = scheme == "he"
    fans = fan_in if he else (fan_in + fan_out) / 2
    return [
        (2.0 / fan_in if he else 2.0 / (fan_in + fan_out),
         "that is the VARIANCE; the weights are drawn with a standard deviation, its square root."),
        (np.sqrt(2.0 / fan_out), "that uses fan_out, the layer's outputs; He's argument keeps the "
                                 "forward signal steady, and each output sums fan_in products."
         if he else "Xavier averages the two fans: it uses fan_in AND fan_out."),
        (np.sqrt(1.0 / fan_in), "that is LeCun's 1 / fan_in, right for a linear or tanh layer; "
                                "ReLU zeroes half of its input, which halves E[x²]: He doubles "
                                "the variance to make up for it." if he else
         "that keeps only the forward signal steady; Xavier averages fan_in and fan_out."),
        (np.sqrt(6.0 / (fan_in + fan_out)), "that is the bound a of Glorot's UNIFORM(-a, a) "
                                            "distribution (its variance is a² / 3), not the "
                                            "standard deviation of a normal."),
        (1.0 / fans, "the variance is 1 / (the fans' average) here but the std is its square "
                     "root." if not he else "the standard deviation is a square root."),
    ]


def init_std(fn) -> None:
    """Check ``fn(fan_in, fan_out, scheme)`` -> the standard deviation of the normal
    distribution a ``Linear(fan_in, fan_out)`` layer's weights are drawn from, for ``scheme``
    ``"he"`` (keeps the signal's size through ReLU layers) or ``"xavier"`` (the compromise
    between the forward and the backward signal, for tanh or sigmoid). Layers with
    fan_in != fan_out tell which fan was used; the reference value is never printed."""
    __tracebackhide__ = True
    cases = [(256, 256, "he"), (40, 256, "he"), (256, 10, "he"),
             (256, 256, "xavier"), (40, 256, "xavier"), (300, 100, "xavier")]
    for fan_in, fan_out, scheme in cases:
        case = f"init_std({fan_in}, {fan_out}, {scheme!r})"
        got = to_number(call(fn, fan_in, fan_out, scheme, case=case, refuse=REFUSE["init_std"]),
                        fn, case, "the std",
                        "return one positive number, the standard deviation.")
        expected = (np.sqrt(2.0 / fan_in) if scheme == "he"
                    else np.sqrt(2.0 / (fan_in + fan_out)))
        if np.isclose(got, expected, rtol=1e-6, atol=0):
            continue
        fix = next((why for wrong, why in _init_std_mistakes(fan_in, fan_out, scheme)
                    if np.isclose(got, wrong, rtol=1e-6, atol=0)),
                   "redo the variance argument: each output sums fan_in products w·x, so "
                   "Var(out) = fan_in · Var(w) · E[x²]; choose Var(w) to keep that steady, "
                   "then take the square root.")
        fail(fn, case, f"it returned {got:.6g}, which is not the standard deviation that keeps "
                       f"the signal's size steady for a {scheme!r} layer with fan_in={fan_in} "
                       f"and fan_out={fan_out}.", fix)
    passed(fn, len(cases))


# ======================================================================================
# 05_gpu_batching
# ======================================================================================
class _Spy(np.ndarray):
    """An input array that records how the learner's function uses it.

    Each spy has a ``role`` (``"X"``, ``"W1"``, ...), passed on to its views (``X.T``,
    ``X.reshape(...)``, ``X[i]``). What it records goes to the shared :class:`_SpyLog`:
    every indexing of X (whatever the index: ``X[i]``, ``X[i, :]``, ``X[i:i + 1]``),
    ``X.take``, ``X.tolist()``, ``for x in X``, NumPy functions that hand out rows
    (``np.apply_along_axis``, ``np.split``), and how many operations each weight array takes
    part in. A per-sample loop shows up as N of something; a batched forward pass indexes X
    at most once or twice and uses each weight once. Results of arithmetic (``X @ W1``, ...)
    come back as plain arrays, so only the inputs themselves are watched.
    """

    role = None
    log = None          # the _SpyLog of the case being run

    def __array_finalize__(self, obj):
        __tracebackhide__ = True
        self.role = getattr(obj, "role", None)

    def __getitem__(self, index):
        __tracebackhide__ = True
        if self.role == "X":
            _Spy.log.took(_index_text(index))
        return super().__getitem__(index)

    def __iter__(self):
        __tracebackhide__ = True
        if self.role == "X":
            _Spy.log.iterated = True
        return iter(self.view(np.ndarray))   # plain rows: the loop is recorded once, here

    def __repr__(self):                      # print(X) while debugging is not a loop
        __tracebackhide__ = True
        return repr(self.view(np.ndarray))

    def __str__(self):
        __tracebackhide__ = True
        return str(self.view(np.ndarray))

    def tolist(self):
        __tracebackhide__ = True
        if self.role == "X":
            _Spy.log.tolist = True
        return super().tolist()

    def take(self, indices, *args, **kwargs):
        __tracebackhide__ = True
        if self.role == "X":
            _Spy.log.took(f"X.take({indices!r:.20})")
        return super().take(indices, *args, **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        __tracebackhide__ = True
        _Spy.log.used(inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_plain(o) for o in kwargs["out"])
        return getattr(ufunc, method)(*(_plain(a) for a in inputs), **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        __tracebackhide__ = True
        name = func.__name__
        if name == "take" and args and getattr(args[0], "role", None) == "X":
            indices = args[1] if len(args) > 1 else kwargs.get("indices")
            _Spy.log.took(f"np.take(X, {indices!r:.20})")
        elif name in _ROW_FUNCTIONS and any(getattr(a, "role", None) == "X"
                                            for a in (*args, *kwargs.values())):
            _Spy.log.functions.append(name)
        _Spy.log.used([*args, *kwargs.values()])
        return func(*_plain(args), **_plain(kwargs))


# NumPy functions that hand the batch out in rows (a loop in disguise)
_ROW_FUNCTIONS = {"apply_along_axis", "split", "array_split", "vsplit", "unstack"}


def _plain(value):
    """``value`` with every spy (also inside lists, tuples and dicts) as a plain ndarray."""
    __tracebackhide__ = True
    if isinstance(value, _Spy):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _index_text(index) -> str:
    """``X[...]`` as the learner wrote it, roughly: ``X[3, :]``, ``X[3:4]``, ``X[[...]]``."""
    __tracebackhide__ = True
    def one(i):
        __tracebackhide__ = True
        if isinstance(i, slice):
            ends = ["" if e is None else str(e) for e in (i.start, i.stop)]
            return ":".join(ends + ([] if i.step is None else [str(i.step)]))
        if i is Ellipsis:
            return "..."
        if isinstance(i, (int, np.integer)) or i is None:
            return str(i)
        return "[...]"
    parts = index if isinstance(index, tuple) else (index,)
    return "X[" + ", ".join(one(i) for i in parts) + "]"


class _SpyLog:
    """What one call of the learner's function did with its spied inputs."""

    def __init__(self):
        __tracebackhide__ = True
        self.indexed = []        # "X[0, :]", "np.take(X, 1)", ..., in order
        self.iterated = self.tolist = False
        self.functions = []      # the _ROW_FUNCTIONS called on X
        self.uses = {}           # role -> number of operations it took part in

    def took(self, text):
        __tracebackhide__ = True
        self.indexed.append(text)

    def used(self, arrays):
        __tracebackhide__ = True
        for role in {getattr(a, "role", None) for a in arrays} - {None, "X"}:
            self.uses[role] = self.uses.get(role, 0) + 1

    def loops(self) -> list[str]:
        """How the function took the batch apart, in words (empty: it did not)."""
        __tracebackhide__ = True
        found = []
        if self.iterated:
            found.append("it loops over the samples (`for x in X`)")
        if self.tolist:
            found.append("it turns X into Python lists, one per sample (X.tolist())")
        found += [f"np.{name} hands it X one row at a time" for name in dict.fromkeys(self.functions)]
        if len(self.indexed) >= 3:   # a batched forward pass indexes X once or twice at most
            found.append(f"it takes X apart row by row: X is indexed {len(self.indexed)} times "
                         f"({', '.join(self.indexed[:2])}, ...)")
        busy = [(role, n) for role, n in self.uses.items() if n >= 3]
        if busy and not found:       # X @ W1 + b1 uses W1 and b1 once each
            (role, n), rest = busy[0], "".join(f", {r} in {k}" for r, k in busy[1:])
            found.append(f"{role} takes part in {n} separate operations{rest}: the forward pass "
                         f"runs in a loop, once per sample (or per unit)")
        return found


def mlp_forward_batched(fn) -> None:
    """Check ``fn(X, W1, b1, W2, b2)``: the logits ``relu(X @ W1 + b1) @ W2 + b2`` of a
    two-layer MLP for a whole batch X (N, D) at once, with W1 (D, H), b1 (H,), W2 (H, K),
    b2 (K,); returns (N, K). It must give the per-sample loop's numbers without looping
    over the samples. Where a GPU is usable, one more case runs on CuPy arrays and the
    result must stay on the GPU."""
    __tracebackhide__ = True
    r = rng(6)
    sizes = [(1, 4, 5, 3), (7, 4, 5, 3), (64, 64, 32, 10)]
    for N, D, H, K in sizes:
        case = f"X of shape ({N}, {D}), W1 ({D}, {H}), W2 ({H}, {K})"
        X = r.standard_normal((N, D))
        W1, b1 = r.standard_normal((D, H)), r.standard_normal(H)
        W2, b2 = r.standard_normal((H, K)), r.standard_normal(K)
        hidden = X @ W1 + b1
        expected = np.maximum(hidden, 0) @ W2 + b2
        _Spy.log = log = _SpyLog()
        originals = {"X": X.copy(), "W1": W1.copy(), "b1": b1.copy(), "W2": W2.copy(),
                     "b2": b2.copy()}
        spies = []
        for role, a in (("X", X), ("W1", W1), ("b1", b1), ("W2", W2), ("b2", b2)):
            spies.append(a.view(_Spy))
            spies[-1].role = role
        out = call(fn, *spies, case=case, refuse=REFUSE["mlp_forward_batched"])
        loops = log.loops()
        got = to_array(out, fn, case, "the result")
        expect_shape(got, (N, K), fn, case, "the array of logits",
                     "one row of logits per sample: (N, D) @ (D, H) @ (H, K) gives (N, K).")
        expect_close(got, expected, fn, case, "the array of logits", mistakes=[
            (hidden @ W2 + b2, "the ReLU is missing: the hidden layer is clipped at 0 before "
                               "the second product."),
            (np.maximum(X @ W1, 0) @ W2 + b2, "b1 is missing."),
            (np.maximum(hidden, 0) @ W2, "b2 is missing."),
            (np.maximum(hidden @ W2 + b2, 0), "the ReLU belongs after the first layer only: "
                                              "the logits are not clipped."),
        ])
        if loops and N > 1:
            fail(fn, case, "the numbers are right, but the function does not compute the batch "
                           "at once: " + "; ".join(loops) + ".",
                 "write it for the whole batch, with no loop: one matrix product multiplies "
                 "every row of X at once, and a bias of shape (H,) broadcasts over the rows.")
        if got.dtype != np.float64:
            fail(fn, case, f"the logits are {got.dtype}, but X and the weights are float64.",
                 "do not cast the result to float32: float64 in gives float64 out, "
                 "and the operators (@, +) and xp's maximum already keep the inputs' dtype.")
        expect_unchanged(fn, case, [(spy.role, originals[spy.role], spy.view(np.ndarray))
                                    for spy in spies])
    on_gpu = backend.gpu_available()
    if on_gpu:   # the same code on CuPy arrays: the result must stay on the GPU
        cp = backend.require_cupy()
        N, D, H, K = 32, 16, 8, 4
        case = f"CuPy arrays on the GPU, X of shape ({N}, {D})"
        arrays = [r.standard_normal(s) for s in ((N, D), (D, H), (H,), (H, K), (K,))]
        out = call(fn, *[cp.asarray(a) for a in arrays], case=case,
                   refuse=REFUSE["mlp_forward_batched"])
        if backend.device_of(out) != "gpu":
            fail(fn, case, "the logits came back as a NumPy array for CuPy (GPU) inputs.",
                 "use operators (@, +) and the functions of X's own array module "
                 "(dl.get_array_module), not NumPy's, so the result stays where X lives.")
        X, W1, b1, W2, b2 = arrays
        expect_close(to_array(out, fn, case, "the logits"), np.maximum(X @ W1 + b1, 0) @ W2 + b2,
                     fn, case, "the logits")
    passed(fn, len(sizes) + on_gpu, on_gpu)


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'init_std': [
        ('write Var(out) for one output as a sum of fan_in products w·x; after a ReLU E[x²] is '
         'half the variance of its input. Which Var(w) keeps Var(out) equal to Var(x)? Xavier '
         'asks the same of the backward pass, where fan_out plays the role of fan_in, and takes '
         'a compromise between the two.'),
        ('the function returns a standard deviation: the square root of the variance you found, '
         'for the scheme asked. The setting is in the markdown cells above the exercise.'),
    ],
    'mlp_forward_batched': [
        "use xp's maximum against 0 for the ReLU, so the same code runs on NumPy and CuPy",
        ('hidden = the ReLU of (the batch matrix-multiplied by ___, plus ___), shape (N, H); '
         'logits = hidden matrix-multiplied by ___, plus ___, shape (N, K); no loop. '
         'forward_loop in section 1 spells out the two layers for one sample.'),
    ],
}
