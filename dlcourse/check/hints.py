"""Hints in levels, the reference solution after trying, and your progress (every lesson).

The first level is the ``# HINT:`` line in the exercise's cell: a question or a pointer (what
to work out, the shapes, where the lesson sets it up), never the answer; in the student version
it is the ``NotImplementedError`` text. Deeper levels live beside each lesson's checks
(``HINTS`` in basics.py, gradient_descent.py, backprop.py, ...), shown one call at a time::

    dl.check.hint("conv2d_backward")       # the next level (1 the first time, then 2, 3, ...)
    dl.check.hint("conv2d_backward", 2)    # a given level
    dl.check.solution("conv2d_backward")   # the reference, once you have tried (see below)
    dl.check.progress()                    # what passed, what you tried, what you saw

``solution`` shows the reference only after the exercise's check has run on an answer of your
own and you have seen its last hint level; otherwise it says what is still to do. The record of
checks, hints and solutions is kept in your workspace (``learner_record.py``), never uploaded;
an instructor can turn solutions off for a graded class (docs/instructors.md).

Beside each lesson's ``HINTS`` sits its ``ANSWER_TOKENS``: for each exercise, the words and
expressions that would give its answer away (``1/(1-p)``, ``127``, ``unbiased``).
tests/test_hints.py holds every first-level hint to them.

Every level is words, shapes, a question or pseudo-code with blanks (``dx = ___ / sqrt(var +
eps)``), never a line of the reference (tests/test_hints.py holds every level to that); the
last level says where to look (which equation, which earlier cell).
"""
from __future__ import annotations

from . import (backprop, basics, capstone, cnn, compression, convolution, cuda, data_parallel,
               deploy, gpu_performance, gradient_descent, init_and_batching, learner_record,
               playground, quantization, residual, self_attention, training)
from . import flash_tiled, transformer_block     # lessons 15b, 16b
from . import sharding                           # lesson 13b
from . import recurrence                         # lesson 14b
from . import tokens_and_block                   # lesson 15c
from . import tensor_cores                       # lesson 08e

__all__ = ["hint", "solution", "progress", "HINTS", "ANSWER_TOKENS", "Shown"]


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
    **gpu_performance.HINTS, **playground.HINTS, **compression.HINTS, **quantization.HINTS,
    **deploy.HINTS, **data_parallel.HINTS, **capstone.HINTS, **self_attention.HINTS,
    **transformer_block.HINTS, **flash_tiled.HINTS, **sharding.HINTS, **recurrence.HINTS,
    **tokens_and_block.HINTS, **tensor_cores.HINTS,
}

# name -> what a first-level hint must not contain (its answer), kept beside each lesson's HINTS.
ANSWER_TOKENS: dict[str, list[str]] = {
    **basics.ANSWER_TOKENS, **gradient_descent.ANSWER_TOKENS, **backprop.ANSWER_TOKENS,
    **training.ANSWER_TOKENS, **init_and_batching.ANSWER_TOKENS, **convolution.ANSWER_TOKENS,
    **cnn.ANSWER_TOKENS, **residual.ANSWER_TOKENS, **cuda.ANSWER_TOKENS,
    **gpu_performance.ANSWER_TOKENS, **playground.ANSWER_TOKENS, **compression.ANSWER_TOKENS,
    **quantization.ANSWER_TOKENS, **deploy.ANSWER_TOKENS, **data_parallel.ANSWER_TOKENS,
    **capstone.ANSWER_TOKENS, **self_attention.ANSWER_TOKENS, **transformer_block.ANSWER_TOKENS,
    **flash_tiled.ANSWER_TOKENS, **sharding.ANSWER_TOKENS, **recurrence.ANSWER_TOKENS,
    **tokens_and_block.ANSWER_TOKENS, **tensor_cores.ANSWER_TOKENS,
}


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
    ``level``, the next level after the deepest one seen so far (level 1 the first time). The
    deepest level seen is kept in your record (:mod:`learner_record`)."""
    try:
        levels = _levels(name)
    except KeyError as err:
        raise KeyError(str(err.args[0])) from None
    if level is None:
        level = min(learner_record.entry(name)["hint"] + 1, len(levels))
    if not 1 <= level <= len(levels):
        raise ValueError(f"{name} has hints 1 to {len(levels)}; you asked for {level}.")
    learner_record.record(name, "hint", level)
    text = f"Hint {level} of {len(levels)} for {name}: {levels[level - 1]}"
    if level == len(levels):
        text += (f"\n(That is the last hint. Once your check has run on an answer of your own, "
                 f"dl.check.solution({name!r}) shows the reference.)")
    else:
        text += f"\n(More: dl.check.hint({name!r}) again.)"
    print(text)
    return Shown(text)


def solution(name: str) -> Shown:
    """Print (and return, as :class:`Shown`) the reference solution of exercise ``name``, from
    the instructor notebook, once you have run its check on an answer of your own and seen its
    last hint level (and unless your instructor turned solutions off); otherwise print, and
    return, what is still to do. Writing it yourself is the exercise."""
    from ..student import find_exercise, solution_text
    path, _, _ = find_exercise(name)
    withheld = learner_record.solution_withheld(name, len(_levels(name)))
    if withheld:
        print(withheld)
        return Shown(withheld)
    code = solution_text(name)
    learner_record.record(name, "solution")
    print(f"Reference solution of {name} ({path.name}):\n\n{code}")
    return Shown(code)


def progress() -> Shown:
    """Print (and return, as :class:`Shown`) your progress, lesson by lesson: which exercises
    pass, which you tried, which hints and solutions you saw. It is read from your workspace's
    record (:mod:`learner_record`), which stays on your machine."""
    from ..student import lesson_exercises
    text = learner_record.report(lesson_exercises())
    print(text)
    return Shown(text)
