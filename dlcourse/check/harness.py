"""The machinery every exercise check shares (the per-lesson checks live beside it:
``basics.py`` for lessons 00-01, ``gradient_descent.py`` 02, ``backprop.py`` 03, ``training.py``
04a-04b, ``init_and_batching.py`` 04c-05, ``convolution.py`` 06, ``cnn.py`` 07, ``residual.py``
07b, ``cuda.py`` 08a-08b, ``gpu_performance.py`` 08c-08d, ``playground.py`` 09,
``compression.py`` 10-11b, ``deploy.py`` 12-12b, ``data_parallel.py`` 13, ``capstone.py`` 14,
``self_attention.py`` 15-16).

A check calls the learner's function through :func:`call`, compares what came back with the
library's reference through the ``expect_*`` helpers, and raises :class:`ExerciseError` through
:func:`fail`, which holds no reference code::

    call(fn, *args, case=...)                       # run the learner's function
    to_array(value, fn, case, what)                 # NumPy copy of a returned array
    to_integer(value, fn, case, what, fix)          # a returned whole number, as an int
    expect_shape(got, shape, fn, case, what, fix)   # shape, with the likely fix
    expect_close(got, expected, fn, case, what, mistakes=[(array, fix), ...])
    expect_finite(got, fn, case, what, fix)
    expect_unchanged(fn, case, [(name, original, copy_passed), ...])   # no in-place writes
    fail(fn, case, problem, fix)                    # raise ExerciseError in the common format
    passed(fn, n_cases)                             # the one-line success message

Checks never show their own answers: every function here and in the check modules starts with
``__tracebackhide__ = True``, which IPython (and pytest) honour, and the error is raised from a
one-line frame of its own, ``<dl.check>`` (IPython always shows the last frame), so a failing
check's traceback shows the learner's cell and the message, not the check's code
(tests/test_hints.py runs a real kernel to keep it so).
"""
from __future__ import annotations

import linecache
import numbers

import numpy as np

from .. import backend
from ..shapes import shape_str as shape_text   # the one shape printer

__all__ = ["ExerciseError", "fail", "call", "to_array", "to_number", "to_integer",
           "expect_tuple", "expect_shape", "expect_finite", "expect_close", "expect_unchanged",
           "passed", "gpu", "expect_on_gpu", "rng", "shape_text", "refusing", "derivation",
           "raise_error"]


class ExerciseError(AssertionError):
    """Your function does not do what the exercise asks yet (the message says what and where)."""


# ======================================================================================
# Shared machinery
# ======================================================================================
def _name(fn) -> str:
    __tracebackhide__ = True
    return getattr(fn, "__name__", None) or type(fn).__name__


def _show(a) -> str:
    """A short, readable print of an array for an error message."""
    __tracebackhide__ = True
    a = np.asarray(a)
    if a.ndim == 0:
        return f"{a.item():.6g}" if np.issubdtype(a.dtype, np.floating) else str(a.item())
    with np.printoptions(precision=4, suppress=True, threshold=24, edgeitems=3, linewidth=88):
        text = np.array2string(a, separator=", ")
    return text.replace("\n", "\n" + " " * 14)   # aligned under "    expected: "


# IPython hides every frame that sets __tracebackhide__ except the last, the one that raises.
# So the error is raised from a one-line frame of its own, which holds no reference code.
_RAISER = "<dl.check>"
_RAISE_LINE = "raise error   # the check's message below says what is wrong and the likely fix\n"
_RAISE = compile(_RAISE_LINE, _RAISER, "exec")
linecache.cache[_RAISER] = (len(_RAISE_LINE), None, [_RAISE_LINE], _RAISER)


def _raise(error: BaseException, cause: BaseException | None = None):
    """Raise ``error`` (with ``cause`` as its ``__cause__``, else none) from the ``<dl.check>``
    frame, so that a traceback ends there and not in a check."""
    __tracebackhide__ = True
    error.__cause__, error.__suppress_context__ = cause, True
    linecache.cache.setdefault(_RAISER, (len(_RAISE_LINE), None, [_RAISE_LINE], _RAISER))
    exec(_RAISE, {"error": error})  # noqa: S102 - a fixed line of our own


raise_error = _raise   # for a check module that raises an error of its own from <dl.check>


def fail(fn, case: str, problem: str, fix: str | None = None):
    """Raise :class:`ExerciseError` in the common format: function, case, problem, likely fix."""
    __tracebackhide__ = True
    lines = [f"{_name(fn)} is not right yet.", f"  case:    {case}", f"  problem: {problem}"]
    if fix:
        lines.append(f"  likely fix: {fix}")
    _raise(ExerciseError("\n".join(lines)))


def call(fn, *args, case: str, on_error: str | None = None, refuse=(), **kwargs):
    """Call the learner's ``fn(*args, **kwargs)`` and return what it returns.

    ``NotImplementedError`` becomes ``ExerciseError("<fn> is not implemented yet: <hint>")``;
    any other exception becomes an ExerciseError naming the case (the original error, with
    the line in the learner's function, stays in the traceback). ``on_error`` is a likely
    fix to add when the function raises. ``refuse``: the library's own versions of what the
    exercise builds (dotted names, see :func:`refusing`), which answer with an ExerciseError
    while ``fn`` runs.
    """
    __tracebackhide__ = True
    try:
        with refusing(refuse, fn, case):
            return fn(*args, **kwargs)
    except NotImplementedError as err:
        hint = str(err).strip() or _first_hint(_name(fn))
        _raise(ExerciseError(f"{_name(fn)} is not implemented yet: {hint}"))
    except ExerciseError:
        raise
    except Exception as err:
        fix = on_error or "read the error above: the last lines of the traceback point at your code."
        _raise(ExerciseError(
            f"{_name(fn)} raised {type(err).__name__}: {err}\n"
            f"  case:    {case}\n"
            f"  likely fix: {fix}"), cause=err)


class refusing:
    """``with refusing(["dlcourse.losses.softmax", "dlcourse.layers.Dropout.forward"], fn,
    case):`` while the block runs, each named function of the library (with every alias of it in
    a dlcourse module, such as the one at the top of ``dl``, and in ``fn``'s own namespace)
    raises an ExerciseError that says it is what the learner is writing. NumPy and CuPy stay
    usable: only the library's answer is refused."""

    def __init__(self, names, fn, case):
        __tracebackhide__ = True
        self.names, self.fn, self.case, self.saved = tuple(names), fn, case, []

    def __enter__(self):
        __tracebackhide__ = True
        import importlib
        import sys
        for dotted in self.names:
            owner, attr = _resolve_owner(importlib, dotted)
            original = getattr(owner, attr)
            refused = _refuser(dotted, original, self.fn, self.case)
            places = [(owner, attr)] + [
                (module, key) for name, module in list(sys.modules.items())
                if name.split(".")[0] == "dlcourse" and module is not owner
                for key, value in list(vars(module).items()) if value is original]
            for place, key in places:
                self.saved.append((place, key, vars(place)[key] if isinstance(place, type)
                                   else getattr(place, key)))
                setattr(place, key, refused)
            # and a name the learner imported straight into their namespace (from ... import f)
            names = getattr(self.fn, "__globals__", {})
            for key, value in list(names.items()):
                if value is original:
                    self.saved.append((names, key, value))
                    names[key] = refused
        return self

    def __exit__(self, *exc):
        __tracebackhide__ = True
        for place, key, value in reversed(self.saved):
            if isinstance(place, dict):
                place[key] = value
            else:
                setattr(place, key, value)
        self.saved = []
        return False


def _resolve_owner(importlib, dotted):
    """("dlcourse.layers.Dropout.forward") -> (the Dropout class, "forward")."""
    __tracebackhide__ = True
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    raise ValueError(f"refusing: {dotted} names nothing importable")


def _refuser(dotted, original, fn, case):
    """A stand-in for ``original`` that fails the exercise, naming what was called."""
    __tracebackhide__ = True
    shown = "dl." + dotted.removeprefix("dlcourse.").replace("layers.", "").replace(
        "losses.", "").replace("optim.", "")

    def refused(*args, **kwargs):
        __tracebackhide__ = True
        fail(fn, case, f"it calls {shown}, the library's own version of what this exercise "
                       f"asks you to build, so the check would be testing the library, not you.",
             "compute it yourself from the arrays (NumPy or CuPy operations, xp.*): the library "
             "is there to check your answer, not to be it.")
    refused.__name__ = getattr(original, "__name__", "refused")
    return refused


def _first_hint(name: str) -> str:
    """The exercise's first-level hint, for a ``raise NotImplementedError()`` without text (as
    nbgrader releases it), or the generic advice."""
    __tracebackhide__ = True
    from ..student import first_hint
    try:
        hint = first_hint(name)
    except (KeyError, FileNotFoundError, ImportError):
        hint = None
    return hint or "replace the `raise NotImplementedError` line with your code."


def to_array(value, fn, case: str, what: str) -> np.ndarray:
    """``value`` as a NumPy array (CuPy arrays are copied to the host); fail on ``None``."""
    __tracebackhide__ = True
    if value is None:
        fail(fn, case, f"{what} is None.", "did your function `return` it?")
    if isinstance(value, (list, tuple)) and any(hasattr(v, "shape") for v in value):
        fail(fn, case, f"{what} is a {type(value).__name__} of {len(value)} items, not an array.",
             "return the array itself (check the `return` line and how you unpacked values).")
    try:
        array = np.asarray(backend.to_numpy(value))
    except Exception:  # noqa: BLE001 - anything that is not array-like
        fail(fn, case, f"{what} is a {type(value).__name__}, not an array.")
    if array.dtype.kind not in "biuf":
        fail(fn, case, f"{what} is not an array of numbers (got {type(value).__name__} "
                       f"with dtype {array.dtype}).")
    return array


def to_number(value, fn, case: str, what: str, fix: str | None = None) -> float:
    """A returned scalar as a float (fails on None, arrays with several values, strings)."""
    __tracebackhide__ = True
    if value is None:
        fail(fn, case, f"{what} is None.", "did your function `return` it?")
    try:
        return float(backend.to_numpy(value))
    except (TypeError, ValueError):
        fail(fn, case, f"{what} should be one number, got {type(value).__name__} {value!r:.80}.",
             fix)


def to_integer(value, fn, case: str, what: str, fix: str | None = None) -> int:
    """A returned whole number as an int; fail on None, arrays, or a float with a fraction."""
    __tracebackhide__ = True
    if value is None:
        fail(fn, case, f"{what} is None.", "did your function `return` it?")
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        fail(fn, case, f"{what} should be one whole number, got {type(value).__name__} "
                       f"{value!r:.80}.", fix)
    if isinstance(value, numbers.Integral):
        return int(value)
    if float(value).is_integer():
        return int(value)
    fail(fn, case, f"{what} is {value!r}, a fraction; it should be a whole number.",
         fix or "use integer arithmetic (//), not /.")


def expect_tuple(value, n: int, fn, case: str, names: str):
    """Check that a function returned ``n`` values (``names`` e.g. ``"dx, dW, db"``)."""
    __tracebackhide__ = True
    if not isinstance(value, (tuple, list)) or len(value) != n:
        got = (f"a {type(value).__name__} of {len(value)} items"
               if isinstance(value, (tuple, list)) else f"a single {type(value).__name__}")
        fail(fn, case, f"expected {n} values ({names}), got {got}.", f"end with `return {names}`.")
    return tuple(value)


def expect_shape(got: np.ndarray, shape, fn, case: str, what: str, fix: str | None = None):
    """Fail unless ``got.shape == shape``."""
    __tracebackhide__ = True
    if tuple(got.shape) != tuple(shape):
        fail(fn, case, f"{what} has shape {shape_text(got.shape)}, expected {shape_text(shape)}.", fix)


def expect_finite(got: np.ndarray, fn, case: str, what: str, fix: str | None = None):
    """Fail if ``got`` holds NaN or infinity."""
    __tracebackhide__ = True
    bad = ~np.isfinite(got)
    if bad.any() and got.ndim == 0:
        fail(fn, case, f"{what} is {got.item()}.", fix)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0]) if got.ndim else ()
        fail(fn, case, f"{what} contains {int(bad.sum())} non-finite value(s) (nan or inf), the "
                       f"first at index {where}:\n    got:      {_show(got)}", fix)


def _close(a, b, rtol, atol) -> bool:
    __tracebackhide__ = True
    return a.shape == np.shape(b) and bool(np.allclose(a, b, rtol=rtol, atol=atol))


def expect_close(got: np.ndarray, expected, fn, case: str, what: str, *, rtol: float = 1e-5,
                 atol: float = 1e-7, mistakes=(), fix: str | None = None):
    """Fail unless ``got`` is close to ``expected`` (same shape, ``np.allclose``).

    ``mistakes`` is a list of ``(wrong_result, explanation)``: when ``got`` matches a known
    wrong result, its explanation is given as the likely fix (else ``fix``). A wrong result
    may be a function of no arguments (called only when needed; if it raises, it is skipped).
    """
    __tracebackhide__ = True
    expected = np.asarray(expected)
    if _close(got, expected, rtol, atol):
        return
    for wrong, explanation in mistakes:
        if callable(wrong):
            try:
                with np.errstate(all="ignore"):
                    wrong = wrong()
            except Exception:  # noqa: BLE001 - a mistake that cannot even be computed here
                continue
        if _close(got, np.asarray(wrong), rtol, atol):
            fix = explanation
            break
    if got.shape == expected.shape and got.size:
        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        diff = np.where(np.isnan(diff), np.inf, diff)
        i = np.unravel_index(int(np.argmax(diff)), diff.shape)
        at = f" at index {tuple(int(k) for k in i)}" if got.ndim else ""
        if got.size > 24:   # too big to print whole (a 4-D conv output): name the worst entry
            bad = int((~np.isclose(got, expected, rtol=rtol, atol=atol)).sum())
            fail(fn, case, f"{what} is not what it should be: {bad} of {got.size} entries differ; "
                           f"the largest difference is{at}: expected {float(expected[i]):.6g}, "
                           f"got {float(got[i]):.6g}.", fix)
        largest = f" (largest difference {float(diff[i]):.3g}{at})"
    else:
        largest = ""
    fail(fn, case, f"{what} is not what it should be{largest}.\n"
                   f"    expected: {_show(expected)}\n"
                   f"    got:      {_show(got)}", fix)


def expect_unchanged(fn, case: str, inputs, fix: str | None = None):
    """Fail if the learner's function changed one of its input arrays in place.

    ``inputs`` is a list of ``(name, as_it_was, what_the_function_got)``: a check keeps the
    original and passes a copy, so a function that writes into its input shows here (and
    cannot spoil the check's own data). ``fix`` may mention ``{name}``.
    """
    __tracebackhide__ = True
    for name, before, given in inputs:
        before = np.asarray(before)
        after = np.asarray(backend.to_numpy(given))
        if after.shape == before.shape and np.array_equal(after, before):
            continue
        where = ""
        if after.shape == before.shape:
            i = tuple(int(k) for k in np.argwhere(after != before)[0])
            at = f" at index {i}" if before.ndim else ""
            where = (f" (the entry{at} was {_show(before[i])} when it was passed, and is "
                     f"{_show(after[i])} after the call)")
        fail(fn, case, f"your function changed its input {name} in place{where}, so the caller's "
                       f"{name} is no longer what it passed.",
             (fix or "leave {name} as it is and compute into a new array (out = {name} * ..., "
                     "not {name} *= ... or {name}[...] = ...): the caller may still need it.")
             .replace("{name}", name))


_passed: set[str] = set()    # exercises whose check passed in this session


def passed(fn, n_cases: int, on_gpu: bool = False, name: str | None = None):
    """Print the success line, ``"✓ linear_backward: all 4 cases pass (NumPy)."``, and, where
    the exercise (``name``, by default the function's name) has a held-back derivation, show it
    now: the learner has derived it and can compare."""
    __tracebackhide__ = True
    where = "NumPy and CuPy" if on_gpu else "NumPy"
    name = name or _name(fn)
    print(f"\u2713 {_name(fn)}: all {n_cases} cases pass ({where}).")
    _passed.add(name)
    text = _derivation_text(name)
    if text:
        _show_derivation(name, text)


def _derivation_text(name):
    __tracebackhide__ = True
    from ..student import derivation_text
    try:
        return derivation_text(name)
    except (FileNotFoundError, ImportError):
        return None


def _show_derivation(name, text):
    """Rendered markdown in a notebook, plain text elsewhere."""
    __tracebackhide__ = True
    heading = f"The derivation of {name}: compare it with yours."
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
        if get_ipython() is not None:
            display(Markdown(f"**{heading}**\n\n{text}"))
            return
    except ImportError:
        pass
    print(f"{heading}\n\n{text}")


def derivation(name: str) -> str:
    """The worked derivation of exercise ``name``, once its check has passed in this session
    (it was shown then; this shows it again)."""
    __tracebackhide__ = True
    text = _derivation_text(name)
    if text is None:
        raise KeyError(f"{name} has no held-back derivation (its lesson shows the reasoning in "
                       "place).")
    if name not in _passed:
        _raise(ExerciseError(
            f"The derivation of {name} is shown once your answer passes: derive it yourself, "
            f"then run its check (dl.check.{name}(your_function)). Stuck? "
            f"dl.check.hint({name!r}) gives the next hint."))
    _show_derivation(name, text)
    return text


def gpu():
    """The cupy module when a GPU is usable (the checks then also run a case there)."""
    __tracebackhide__ = True
    return backend.require_cupy() if backend.gpu_available() else None


def expect_on_gpu(value, fn, case, what):
    __tracebackhide__ = True
    if backend.device_of(value) != "gpu":
        fail(fn, case, f"{what} came back as a NumPy array for a CuPy (GPU) input.",
             "write xp = dl.get_array_module(x) and use xp.<function>, not np.<function>, "
             "so the result stays where the input lives.")


def rng(seed):
    __tracebackhide__ = True
    return np.random.default_rng([seed, 31337])
