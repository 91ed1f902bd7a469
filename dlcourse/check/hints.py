"""Hints in levels, and the reference solution on request (every lesson's exercises).

The first level is the ``# HINT:`` line in the exercise's cell (what to compute, the shapes and
the idea; in the student version it is the ``NotImplementedError`` text). Deeper levels live
beside each lesson's checks (``HINTS`` in basics.py, gradient_descent.py, backprop.py, ...),
shown one call at a time::

    dl.check.hint("conv2d_backward")       # the next level (2, then 3, ...)
    dl.check.hint("conv2d_backward", 1)    # a given level
    dl.check.solution("conv2d_backward")   # the reference solution, only when asked for

Every level is words, shapes, a question or pseudo-code with blanks (``dx = ___ / sqrt(var +
eps)``), never a line of the reference (tests/test_hints.py holds every level to that); the
last level says where to look (which equation, which earlier cell).
"""
from __future__ import annotations

from . import (backprop, basics, capstone, cnn, compression, convolution, cuda, data_parallel,
               deploy, gpu_performance, gradient_descent, init_and_batching, playground, residual,
               self_attention, training)

__all__ = ["hint", "solution", "HINTS", "Shown"]


class Shown(str):
    """Text already printed: still a ``str`` for code that reads it, but a notebook does not
    echo it a second time as ``Out[n]`` (IPython calls ``_ipython_display_`` instead of showing
    the repr, with its ``\\n`` escapes). The plain ``python`` prompt still echoes it: assign it
    (``_ = dl.check.hint(...)``) there."""

    def _ipython_display_(self):
        pass


# name -> [level 2, level 3, ...], kept beside each lesson's checks (their HINTS).
HINTS: dict[str, list[str]] = {
    **basics.HINTS, **gradient_descent.HINTS, **backprop.HINTS, **training.HINTS,
    **init_and_batching.HINTS, **convolution.HINTS, **cnn.HINTS, **residual.HINTS, **cuda.HINTS,
    **gpu_performance.HINTS, **playground.HINTS, **compression.HINTS, **deploy.HINTS,
    **data_parallel.HINTS, **capstone.HINTS, **self_attention.HINTS,
}

_shown: dict[str, int] = {}   # the deepest level shown so far in this session


def _levels(name: str) -> list[str]:
    from ..student import first_hint    # the notebooks are read only when a hint is asked for
    try:
        first = first_hint(name)
    except KeyError:
        if name not in HINTS:
            raise
        first = None
    return [first or "(this exercise's cell has no first-level hint)"] + HINTS.get(name, [])


def hint(name: str, level: int | None = None) -> Shown:
    """Print (and return, as :class:`Shown`) hint ``level`` of exercise ``name``; without
    ``level``, the next level after the deepest one shown so far (starting at 2: level 1 is in
    the cell)."""
    try:
        levels = _levels(name)
    except KeyError as err:
        raise KeyError(str(err.args[0])) from None
    if level is None:
        level = min(_shown.get(name, 1) + 1, len(levels))
    if not 1 <= level <= len(levels):
        raise ValueError(f"{name} has hints 1 to {len(levels)}; you asked for {level}.")
    _shown[name] = max(_shown.get(name, 1), level)
    text = f"Hint {level} of {len(levels)} for {name}: {levels[level - 1]}"
    if level == len(levels):
        text += (f"\n(That is the last hint. The reference solution: "
                 f"dl.check.solution({name!r}).)")
    else:
        text += f"\n(More: dl.check.hint({name!r}) again.)"
    print(text)
    return Shown(text)


def solution(name: str) -> Shown:
    """Print (and return, as :class:`Shown`) the reference solution of exercise ``name``, from
    the instructor notebook. Try the hints first: writing it yourself is the exercise."""
    from ..student import find_exercise, solution_text
    path, _, _ = find_exercise(name)
    code = solution_text(name)
    print(f"Reference solution of {name} ({path.name}):\n\n{code}")
    return Shown(code)
