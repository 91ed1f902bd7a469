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
04c_initialization  :func:`dead_fraction`            ``(h) -> fraction of dead units``
05_gpu_batching     :func:`mlp_forward_batched`      ``(X, W1, b1, W2, b2) -> logits``
05_gpu_batching     :func:`batch_requests`           ``(requests, forward, max_batch) -> outputs``
==================  ===============================  ==============================================

The training checks of lessons 04a-04b are in ``training.py``, the convolution lessons' (06-07) in
``convolution.py`` and ``cnn.py``; the shared machinery (``call``, ``fail``, ``expect_close``,
...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .. import backend
from .harness import (call, expect_close, expect_shape, expect_unchanged, fail, passed, rng,
                      to_array, to_number)

__all__ = ["init_std", "dead_fraction", "mlp_forward_batched", "batch_requests"]


# While the learner's function runs the library is closed (harness.call; seal.py): an answer
# that calls into it, or into any package but NumPy and CuPy, fails, naming the call.


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
        got = to_number(call(fn, fan_in, fan_out, scheme, case=case),
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


def _dead_mistakes(h):
    """(a wrong fraction, what it is) for the usual mistakes; the first match names the fix."""
    __tracebackhide__ = True
    zero = h == 0
    N = h.shape[0]
    units = zero.reshape(N, -1)
    return [
        (units.any(axis=0).mean(), "that counts the units that are 0 for SOME sample; a unit is "
                                   "dead only when it is 0 for EVERY sample of the batch."),
        (units.mean(), "that is the fraction of all the entries that are 0 (about half, for a "
                       "ReLU); count units instead: a unit is one column, dead when all of its N "
                       "entries are 0."),
        (units.all(axis=1).mean(), "that is the fraction of SAMPLES whose every unit is 0: the "
                                   "samples run along axis 0, so a unit's N values lie along "
                                   "that axis."),
        (float(units.all(axis=0).sum()), "that is the NUMBER of dead units; return their "
                                         "fraction (divide by the number of units)."),
        (1 - units.all(axis=0).mean(), "that is the fraction of units ALIVE (not 0 for some "
                                       "sample); the exercise asks for the dead ones."),
        ((h.reshape(N, -1) < 1e-3).all(axis=0).mean(),
         "a small positive output is still alive: the unit passes a gradient and learns. Dead "
         "means exactly 0 (compare with 0, not with a tolerance)."),
        (zero.reshape(N, zero.shape[1], -1).all(axis=(0, 2)).mean() if h.ndim > 2 else np.nan,
         "that counts dead CHANNELS; here every channel at every position is a unit of its own "
         "(as dl.layer_stats counts them): look at each entry after the sample axis."),
        (lambda: (h < 0).reshape(N, -1).all(axis=0).mean(),
         "a ReLU's output is never negative: a dead unit's output is exactly 0."),
    ]


def dead_fraction(fn) -> None:
    """Check ``fn(h)`` -> the fraction of the units of a ReLU's output ``h`` (N, ...) that are 0
    for every sample of the batch (the samples run along axis 0; every entry after it is a
    unit: ``(N, H)`` for a Linear layer, ``(N, C, H, W)`` for a convolution), as one float, on
    NumPy and (where a GPU is usable) CuPy arrays."""
    __tracebackhide__ = True
    r = rng(7)
    x = r.standard_normal((64, 20))
    W = r.standard_normal((20, 32)) / np.sqrt(20)
    b = np.where(np.arange(32) % 6 == 0, -10.0, 0.0)       # 6 units pushed far below 0
    small = np.maximum(r.standard_normal((8, 10)), 0)
    small[:, 3] = 1e-6 * r.random(8)                        # alive, if only just
    small[:, 7] = 0.0
    image = np.maximum(r.standard_normal((5, 2, 3, 3)), 0)
    image[:, 1] = 0.0                                        # channel 1: dead everywhere
    image[:, 0, 2, 2] = 0.0
    cases = [
        ("h = [[0, 1.5, 0, 0.2, 1, 0], [0, 0, 2, 0.1, 0.5, 0], [0, 0.3, 0, 0.4, 0.7, 0], "
         "[0, 0, 0, 0.3, 0.9, 0], [0, 0, 0, 0, 0, 0]] (5 samples, 6 units)",
         np.array([[0.0, 1.5, 0.0, 0.2, 1.0, 0.0], [0.0, 0.0, 2.0, 0.1, 0.5, 0.0],
                   [0.0, 0.3, 0.0, 0.4, 0.7, 0.0], [0.0, 0.0, 0.0, 0.3, 0.9, 0.0],
                   [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])),
        ("h = relu(x @ W + b), 64 samples and 32 units, 6 of them with a bias of -10",
         np.maximum(x @ W + b, 0)),
        ("h of shape (8, 10): unit 3 gives only tiny positive outputs (about 1e-6), unit 7 "
         "only zeros", small),
        ("h of shape (5, 2, 3, 3), a convolution's ReLU output: every channel at every "
         "position is a unit (18 units; channel 1 is 0 everywhere)", image),
        ("a batch of one sample, h = [[0, 2, 0, 0.5]]", np.array([[0.0, 2.0, 0.0, 0.5]])),
    ]
    for case, h in cases:
        expected = float((h == 0).reshape(h.shape[0], -1).all(axis=0).mean())
        given = h.copy()
        got = to_number(call(fn, given, case=case,
                             on_error="h is (N, ...) with the samples along axis 0: which axis "
                                      "do the N values of one unit lie along?"),
                        fn, case, "the dead fraction",
                        "return one number, the fraction of the units that are dead.")
        if not np.isclose(got, expected, rtol=1e-9, atol=1e-12):
            fix = None
            for wrong, why in _dead_mistakes(h):
                if callable(wrong):
                    wrong = wrong()
                if np.isclose(got, wrong, rtol=1e-9, atol=1e-12):
                    fix = why
                    break
            fail(fn, case, f"it returned {got:.6g}; {expected:.6g} of the units are 0 for "
                           f"every sample.", fix)
        expect_unchanged(fn, case, [("h", h, given)])
    on_gpu = backend.gpu_available()
    if on_gpu:
        cp = backend.require_cupy()
        case, h = cases[1]
        case = f"{case}, as a CuPy array on the GPU"
        got = to_number(call(fn, cp.asarray(h), case=case),
                        fn, case, "the dead fraction",
                        "return one number: float(...) of the GPU's result copies it back.")
        expected = float((h == 0).all(axis=0).mean())
        if not np.isclose(got, expected, rtol=1e-9, atol=1e-12):
            fail(fn, case, f"it returned {got:.6g} on the GPU; {expected:.6g} of the units are "
                           f"0 for every sample.",
                 "use the array's own operations (or xp = dl.get_array_module(h)), not NumPy's.")
    passed(fn, len(cases) + on_gpu, on_gpu)


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
        out = call(fn, *spies, case=case)
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
        out = call(fn, *[cp.asarray(a) for a in arrays], case=case)
        if backend.device_of(out) != "gpu":
            fail(fn, case, "the logits came back as a NumPy array for CuPy (GPU) inputs.",
                 "use operators (@, +) and the functions of X's own array module "
                 "(dl.get_array_module), not NumPy's, so the result stays where X lives.")
        X, W1, b1, W2, b2 = arrays
        expect_close(to_array(out, fn, case, "the logits"), np.maximum(X @ W1 + b1, 0) @ W2 + b2,
                     fn, case, "the logits")
    passed(fn, len(sizes) + on_gpu, on_gpu)


class _Forward:
    """The model a service runs, for :func:`batch_requests`: ``forward(X)`` (B, D) -> (B, K), row
    by row, recording every batch it gets. Column 0 of every sample is its number (0, 1, ...,
    in the order of the requests), so the batches show which samples went through, and how
    often."""

    def __init__(self, W):
        __tracebackhide__ = True
        self.W, self.batches = W, []

    def __call__(self, X):
        __tracebackhide__ = True
        xp = backend.get_array_module(X)
        self.batches.append(np.array(backend.to_numpy(X), dtype=np.float64, copy=True))
        return xp.tanh(X @ xp.asarray(self.W)) + 0.5 * X[:, :1]


def _requests(sizes, D, r):
    """One (n_i, D) array per request; column 0 numbers the samples 0, 1, ... in order."""
    __tracebackhide__ = True
    total = sum(sizes)
    X = r.standard_normal((total, D))
    X[:, 0] = np.arange(total)
    starts = np.cumsum([0, *sizes])
    return [X[a:b] for a, b in zip(starts[:-1], starts[1:])]


def batch_requests(fn) -> None:
    """Check ``fn(requests, forward, max_batch)`` -> one output per request, in order: the
    samples of all the requests (a list of (n_i, D) arrays) go through ``forward`` ((B, D) ->
    (B, K)) in as few calls as possible, each of at most ``max_batch`` samples (a request may be
    split between two batches), and the outputs come back split per request, (n_i, K) each.
    Where a GPU is usable, one more case runs on CuPy arrays and the outputs must stay there."""
    __tracebackhide__ = True
    r = rng(9)
    D, K = 5, 3
    W = r.standard_normal((D, K))
    cases = [([3, 2, 4], 4, "3 requests of 3, 2 and 4 samples, max_batch = 4 (the second "
                            "request is split between two batches)"),
             ([1] * 7, 3, "7 requests of 1 sample each, max_batch = 3"),
             ([10, 2], 4, "a request of 10 samples, then one of 2, max_batch = 4 (the first "
                          "needs three batches)"),
             ([5, 3, 8], 16, "3 requests of 5, 3 and 8 samples, max_batch = 16 (one batch "
                             "holds them all)"),
             ([2, 6, 1, 1, 3], 5, "5 requests of 2, 6, 1, 1 and 3 samples, max_batch = 5")]
    for sizes, max_batch, case in cases:
        requests = _requests(sizes, D, r)
        given = [q.copy() for q in requests]
        forward = _Forward(W)
        out = call(fn, given, forward, max_batch, case=case,
                   on_error="requests is a list of (n_i, D) arrays, forward takes one (B, D) "
                            "batch and returns its (B, K) outputs.")
        total = sum(sizes)
        seen = forward.batches
        too_big = [len(s) for s in seen if len(s) > max_batch]
        if too_big:
            fail(fn, case, f"forward got a batch of {too_big[0]} samples; max_batch is "
                           f"{max_batch}.",
                 "cut the samples into batches of at most max_batch (the last one may be "
                 "smaller).")
        samples = np.concatenate(requests)
        rows = [row for s in seen if s.ndim == 2 and s.shape[1:] == (D,) for row in s]
        ids = np.array([int(row[0]) if row[0] == int(row[0]) and 0 <= row[0] < total else -1
                        for row in rows], dtype=np.int64)
        own = np.array([i >= 0 and np.array_equal(row, samples[i]) for i, row in zip(ids, rows)],
                       dtype=bool)
        counts = np.bincount(ids[own], minlength=total) if own.any() else np.zeros(total, int)
        if len(rows) != sum(len(s) for s in seen) or not own.all():
            fail(fn, case, "forward got rows that are no request's samples (padding, or a "
                           "copy of the wrong array).",
                 "hand forward only the requests' own samples: a short last batch is fine.")
        lost = np.flatnonzero(counts == 0)
        if lost.size:
            fail(fn, case, f"{lost.size} of the {total} samples never went through forward "
                           f"(the first is sample {int(lost[0])}, counting from 0 over all "
                           f"requests in order).",
                 "was the last, partial batch left out? It holds fewer than max_batch samples, "
                 "but its requests need their outputs too." if lost[-1] == total - 1 else None)
        twice = np.flatnonzero(counts > 1)
        if twice.size:
            fail(fn, case, f"sample {int(twice[0])} (counting from 0 over all requests in "
                           f"order) went through forward {int(counts[twice[0]])} times.",
                 "each sample goes through once: the batches follow each other, without "
                 "overlapping.")
        fewest = -(-total // max_batch)
        if len(forward.batches) > fewest:
            fix = ("that is one call per request: a service that does so runs small batches, "
                   "at small batches' throughput (section 4). Put the samples of all the "
                   "requests together first." if len(forward.batches) == len(sizes) else
                   "fill each batch up to max_batch, going on into the next request: a request "
                   "may be split between two batches.")
            fail(fn, case, f"forward was called {len(forward.batches)} times; the {total} "
                           f"samples fit in {fewest} batches of at most {max_batch}.", fix)
        if not isinstance(out, (list, tuple)):
            fail(fn, case, f"it returned a {type(out).__name__}; expected a list of "
                           f"{len(sizes)} arrays, one per request.",
                 "split the outputs back per request: the first n_0 rows belong to request 0, "
                 "the next n_1 to request 1, ...")
        if len(out) != len(sizes):
            fail(fn, case, f"it returned {len(out)} outputs for {len(sizes)} requests.",
                 "one output per request, in the order of the requests, not one per batch."
                 if len(out) == len(forward.batches) else None)
        lengths = [len(o) if hasattr(o, "shape") and len(o.shape) else -1 for o in out]
        if lengths != sizes and sorted(lengths) == sorted(sizes):
            fail(fn, case, f"the outputs have {lengths} rows, the requests {sizes} samples: "
                           f"they come back in another order than the requests.",
                 "output i belongs to request i: keep the requests' order throughout.")
        for i, (q, o) in enumerate(zip(requests, out)):
            what = f"the output of request {i} ({len(q)} samples)"
            got = to_array(o, fn, case, what)
            expected = np.tanh(q @ W) + 0.5 * q[:, :1]
            expect_shape(got, expected.shape, fn, case, what,
                         "request i gets as many rows as it has samples, (n_i, K): cut the "
                         "outputs at the running total of the sizes.")
            if not np.allclose(got, expected, rtol=1e-6, atol=1e-9):
                rows = [k for k, row in enumerate(got) if np.allclose(row, expected[0])]
                fail(fn, case, f"{what} holds other samples' outputs.",
                     "the outputs of request i start where the samples of the requests before "
                     "it end (the sum of their sizes), and keep the requests' order."
                     if not rows else None)
        expect_unchanged(fn, case, [(f"requests[{i}]", q, g)
                                    for i, (q, g) in enumerate(zip(requests, given))])
    on_gpu = backend.gpu_available()
    if on_gpu:
        cp = backend.require_cupy()
        sizes, max_batch = [3, 2, 4], 4
        case = "3 requests of 3, 2 and 4 samples as CuPy arrays on the GPU, max_batch = 4"
        requests = _requests(sizes, D, r)
        out = call(fn, [cp.asarray(q) for q in requests], _Forward(W), max_batch, case=case)
        if not isinstance(out, (list, tuple)) or len(out) != len(sizes):
            fail(fn, case, f"expected a list of {len(sizes)} outputs, one per request.")
        for i, (q, o) in enumerate(zip(requests, out)):
            if backend.device_of(o) != "gpu":
                fail(fn, case, f"the output of request {i} came back as a NumPy array for CuPy "
                               f"(GPU) requests.",
                     "join and split with the functions of the requests' own array module "
                     "(dl.get_array_module), not NumPy's, so the outputs stay on the GPU.")
            expect_close(to_array(o, fn, case, f"the output of request {i}"),
                         np.tanh(q @ W) + 0.5 * q[:, :1], fn, case,
                         f"the output of request {i}")
    passed(fn, len(cases) + on_gpu, on_gpu)


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'dead_fraction': [
        ('a unit is one entry of h after the sample axis; its N values, one per sample, lie '
         'along axis 0. Which reduction over that axis says "0 for every sample"?'),
        ('pseudo-code: dead = (h equal to ___) reduced with ___ over axis ___ (one answer per '
         'unit); the fraction = the mean of dead, as a float. The definition is the first '
         'paragraph of section 4'),
    ],
    'batch_requests': [
        ('three steps: put the samples of all the requests together, in order; run forward on '
         'consecutive slices of at most max_batch rows and put the outputs together; cut them '
         'back at the running totals of the request sizes'),
        ('pseudo-code: X = the requests joined along axis ___ (xp has a function for it); outs '
         '= forward of X[s : s + ___] for s = 0, max_batch, 2 max_batch, ...; Y = outs joined; '
         'ends = the running sums of the sizes; request i gets Y[ends[i-1] : ends[i]]. Section '
         '4 says why one call per request is slow'),
    ],
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

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'init_std': ['2/fan_in', '2 / fan_in', 'sqrt(2', 'factor two', 'factor of two', 'factor 2',
        'fan_in + fan_out', 'fan_in+fan_out', 'averaged', 'the average of the fans', '1/fan_in'],
    'dead_fraction': ['.all(', 'np.all(', '== 0).all', '(h == 0).all', '.mean()'],
    'mlp_forward_batched': ['X @ W1', 'np.maximum(', 'xp.maximum(', '@ W2'],
    'batch_requests': ['running totals', 'running sums', 'cumsum', 'concatenate',
        'join the samples', 'join its outputs', 'np.split', 'cut them back'],
}
