"""The machinery every exercise check shares (the per-lesson checks live beside it:
``basics.py`` for lessons 00-01, ``gradient_descent.py`` 02, ``backprop.py`` 03, ``training.py``
04a-04b, ``init_and_batching.py`` 04c-05, ``convolution.py`` 06, ``cnn.py`` 07, ``residual.py``
07b, ``cuda.py`` 08a-08b, ``gpu_performance.py`` 08c-08d, ``playground.py`` 09,
``compression.py`` 10 and 11b, ``quantization.py`` 11a, ``deploy.py`` 12-12b,
``data_parallel.py`` 13, ``capstone.py`` 14, ``recurrence.py`` 14b, ``self_attention.py`` 15-16).

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

import inspect
import linecache
import numbers

import numpy as np

from .. import backend
from ..shapes import shape_str as shape_text   # the one shape printer
from .learner_record import current_exercise, entry as _record_of, record_check as _record
from .seal import handed, sealed

__all__ = ["ExerciseError", "fail", "call", "to_array", "to_number", "to_integer",
           "expect_tuple", "expect_shape", "expect_finite", "expect_close", "expect_unchanged",
           "passed", "gpu", "expect_on_gpu", "rng", "shape_text", "closed", "check_wrapper",
           "handed", "sealed", "derivation", "raise_error", "PeakMemory", "lines_run", "GPU_FIX",
           "to_gpu", "expect_gpu_close"]


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
    _record(fn, "fail")     # the learner's own record (learner_record.py): a run that did not pass
    _raise(ExerciseError("\n".join(lines)))


def call(fn, *args, case: str, on_error: str | None = None, opens=(), on_refused=None,
         **kwargs):
    """Call the learner's ``fn(*args, **kwargs)`` and return what it returns.

    ``NotImplementedError`` becomes ``ExerciseError("<fn> is not implemented yet: <hint>")``;
    any other exception becomes an ExerciseError naming the case (the original error, with
    the line in the learner's function, stays in the traceback). ``on_error`` is a likely
    fix to add when the function raises. While ``fn`` runs the library is closed (see
    :class:`closed`): ``opens`` names what this exercise lets the learner use, and
    ``on_refused`` is the likely fix to give when a closed call is refused.
    """
    __tracebackhide__ = True
    try:
        with closed(fn, case, opens=opens, handed=(*args, *kwargs.values()), fix=on_refused):
            _expect_parameters(fn, args, kwargs, case)    # (a library answer is refused first)
            return fn(*args, **kwargs)
    except NotImplementedError as err:
        hint = str(err).strip() or _first_hint(_name(fn))
        _raise(ExerciseError(f"{_name(fn)} is not implemented yet: {hint}"))
    except ExerciseError:
        raise
    except Exception as err:
        fix = on_error or "read the error above: the last lines of the traceback point at your code."
        _record(fn, "fail")
        _raise(ExerciseError(
            f"{_name(fn)} raised {type(err).__name__}: {err}\n"
            f"  case:    {case}\n"
            f"  likely fix: {fix}"), cause=err)


def _expect_parameters(fn, args, kwargs, case: str):
    """Fail, naming both, when ``fn`` cannot take what the check passes: a parameter missing or
    extra, or a function written for an older version of the exercise (a learner's copy of a
    lesson from before the course changed that exercise)."""
    __tracebackhide__ = True
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):       # a builtin or a C function: its own call will say
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as err:
        exercise = current_exercise() or _name(fn)
        given = f"{len(args)} argument(s)" + "".join(f", {k}=..." for k in kwargs)
        fail(fn, case, f"it takes {signature}, and the check calls it with {given} ({err}).",
             f"give it the parameters of the exercise's stub. If your copy of the lesson "
             f"predates a change to this exercise, `{_reset_command(exercise)}` puts its cell "
             f"back to the current stub (your other cells stay as they are).")


def _reset_command(exercise: str) -> str:
    """``dlcourse reset LESSON EXERCISE`` for the lesson that holds ``exercise`` now."""
    __tracebackhide__ = True
    from ..student import lesson_exercises
    try:
        lesson = next((stem for stem, names in lesson_exercises() if exercise in names), None)
    except (OSError, ValueError):
        lesson = None
    return f"dlcourse reset {lesson.split('_')[0] if lesson else 'LESSON'} {exercise}"


class closed:
    """``with closed(fn, case, opens=[...]):`` runs the block with the library closed to the
    learner's code (:mod:`dlcourse.check.seal`): every call from it into dlcourse, public or
    private, or into an installed package other than NumPy and CuPy (PyTorch, ml_dtypes,
    SciPy, ...) is refused, except what ``opens`` names (what an earlier exercise built, or the
    tool the lesson hands over) and what the check hands in (``handed``: its arguments). A
    refused call fails the exercise when the block ends, naming the call, even where the
    learner's code caught the error it raised. A function of the library (or of another
    package) passed as the answer itself is refused before it runs."""

    def __init__(self, fn, case: str, opens=(), handed=(), fix=None):
        __tracebackhide__ = True
        self.fn, self.case, self.fix = fn, case, fix
        self.seal = sealed(fn, case, opens=opens, handed=handed)

    def __enter__(self):
        __tracebackhide__ = True
        from .seal import library_object
        answer = getattr(self.fn, "_check_wraps", self.fn)     # a check's wrapper: its answer
        given = None if answer is None else library_object(answer)
        if given is not None:
            fail(self.fn, self.case,
                 f"the function passed is {given}, the library's own (or another package's), "
                 f"not one you wrote: the check tests your function.",
                 "write the function yourself in the exercise's cell and pass that one.")
        self.seal.__enter__()
        return self

    def __exit__(self, *exc):
        __tracebackhide__ = True
        self.seal.__exit__(*exc)
        if self.seal.refused is not None:
            _refused(self.fn, self.case, self.seal, self.fix)
        return False


def check_wrapper(answer=None):
    """``@check_wrapper(fn)``: mark a function a check made around the learner's ``fn`` (judged
    as ``fn`` is: a function of the library passed as the answer is refused), or, with no
    answer (``@check_wrapper()``), one that holds no answer of the learner's."""
    __tracebackhide__ = True

    def mark(wrapper):
        __tracebackhide__ = True
        wrapper._check_wraps = answer
        return wrapper
    return mark


def _refused(fn, case, seal, fix=None):
    """Fail the exercise for the first call the seal refused, naming it and why."""
    __tracebackhide__ = True
    what, package = seal.refused
    opened = seal.opened()
    if package == "dlcourse":
        problem = (f"it calls {what}, and while the check runs your function the course's "
                   f"library is closed: the library's own version of what you are building may "
                   f"be behind any of its functions, so the check would be testing the library, "
                   f"not you.")
    else:
        problem = (f"it calls {what} ({package}), and while the check runs your function every "
                   f"package but NumPy and CuPy is closed: {package} may compute what you are "
                   f"building, so the check would be testing {package}, not you.")
    fix = fix or "compute it yourself from the arrays (NumPy or CuPy operations, xp.*)"
    fix = fix.rstrip(".") + (f"; this exercise lets you use {opened}." if opened else ".")
    fail(fn, case, problem, fix)


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
                 atol: float = 1e-7, mistakes=(), fix: str | None = None,
                 by_hand: bool = False):
    """Fail unless ``got`` is close to ``expected`` (same shape, ``np.allclose``).

    ``mistakes`` is a list of ``(wrong_result, explanation)``: when ``got`` matches a known
    wrong result, its explanation is given as the likely fix (else ``fix``). A wrong result
    may be a function of no arguments (called only when needed; if it raises, it is skipped).
    ``by_hand``: the case is the lesson's own by-hand example, whose answer the learner works
    out; the message then shows what came back and where, never the expected values.
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
    if by_hand:
        fail(fn, case, f"{what} is not what it should be on the lesson's by-hand example (work "
                       f"it out above the exercise: the check does not print its answer).\n"
                       f"    got:      {_show(got)}", fix)
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
    name = name or current_exercise() or _name(fn)
    print(f"\u2713 {_name(fn)}: all {n_cases} cases pass ({where}).")
    _passed.add(name)
    _record(fn, "pass", name)
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
    if name not in _passed and not _record_of(name)["passes"]:   # passed here, or before
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


#: The likely fix when the learner's function fails on CuPy inputs: arrays made on the host.
GPU_FIX = ("an array made with np. (np.zeros, np.ones, np.arange, np.full, ...) lives on the "
           "host, and CuPy refuses to mix it with the GPU's: write xp = "
           "dl.get_array_module(x) and make it with xp.<function>, where the inputs live.")


def to_gpu(cp, value):
    """``value`` with every NumPy array in it (inside dicts, tuples and lists) moved to CuPy;
    anything else (numbers, functions) as it is: the inputs of a check's GPU case."""
    __tracebackhide__ = True
    if isinstance(value, dict):
        return {k: to_gpu(cp, v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(to_gpu(cp, v) for v in value)
    return cp.asarray(value) if isinstance(value, np.ndarray) else value


def expect_gpu_close(got, ref, fn, case, what, **tol):
    """A result of a check's GPU case: still on the GPU, and equal to the NumPy reference."""
    __tracebackhide__ = True
    expect_on_gpu(got, fn, case, what)
    expect_close(to_array(got, fn, case, what), ref, fn, case, what, **tol)


class PeakMemory:
    """``with PeakMemory(on) as peak:`` the most memory (bytes) allocated at once in the block, above
    what was allocated before it (``peak.bytes``; tracemalloc sees NumPy's arrays). Off: 0."""

    def __init__(self, on: bool):
        __tracebackhide__ = True
        self.on, self.bytes, self.started = on, 0, False

    def __enter__(self):
        __tracebackhide__ = True
        import tracemalloc
        if self.on:
            self.started = not tracemalloc.is_tracing()
            if self.started:
                tracemalloc.start()
            tracemalloc.reset_peak()
            self.base = tracemalloc.get_traced_memory()[0]
        return self

    def __exit__(self, *exc):
        __tracebackhide__ = True
        import tracemalloc
        if self.on:
            self.bytes = tracemalloc.get_traced_memory()[1] - self.base
            if self.started:
                tracemalloc.stop()
        return False


def rng(seed):
    __tracebackhide__ = True
    return np.random.default_rng([seed, 31337])


def lines_run(fn, *args, case):
    """``(fn(*args), the number of lines of fn's own file that ran meanwhile)``: the same for
    every batch size when the code is vectorized, growing with N when it loops over the rows
    (a loop over a small axis of fixed size does not grow). For the rule "vectorized"."""
    __tracebackhide__ = True
    import sys
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    count = 0

    def local(frame, event, arg):
        __tracebackhide__ = True
        nonlocal count
        count += event == "line"
        return local

    def tracer(frame, event, arg):
        __tracebackhide__ = True
        return local if frame.f_code.co_filename == filename else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = call(fn, *args, case=case)
    finally:
        sys.settrace(previous)
    return out, count
