"""The learner derives, the checks assess (issue 26).

- A formula or backward pass an exercise asks for is not shown before the exercise in the
  learner's copy: the worked derivation sits in a held-back markdown cell
  (``<!-- BEGIN DERIVATION name -->`` ... ``<!-- END DERIVATION -->``) that the check shows on a
  pass. ``DERIVED`` lists those exercises with the key expressions of their answers.
- While a check runs the learner's function, the library is closed (tests/test_sealed.py tests
  the mechanism). ``SHORTCUTS`` holds, per exercise, an answer that just calls the library.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")

import dlcourse as dl  # noqa: E402
from dlcourse.check import harness  # noqa: E402
from dlcourse.student import (derivation_name, derivations, exercises,  # noqa: E402
                              make_student_notebook, student_source, tag_nbgrader)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# exercise -> regexes of the expression it asks for (matched against markdown with spaces
# removed): none may appear in a markdown cell before the exercise in the learner's copy, and the
# exercise must have a held-back derivation after it.
# exercise -> (the check to run, an answer that only calls the library's own implementation).
# The cases live per lesson group in tests/derive_cases/.
from derive_cases import basics, cnn, flagship, gpu, later  # noqa: E402
from derive_cases import recurrence  # noqa: E402  (lesson 14b)
from derive_cases import tokens  # noqa: E402  (lesson 15c)

DERIVED: dict[str, list[str]] = {**basics.DERIVED, **cnn.DERIVED, **gpu.DERIVED, **later.DERIVED,
                                 **flagship.DERIVED, **recurrence.DERIVED, **tokens.DERIVED}
SHORTCUTS: dict[str, tuple[str, str]] = {**basics.SHORTCUTS, **cnn.SHORTCUTS, **gpu.SHORTCUTS,
                                         **later.SHORTCUTS, **flagship.SHORTCUTS,
                                         **recurrence.SHORTCUTS, **tokens.SHORTCUTS}


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _find(name):
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for ex in exercises(nb):
            if ex.name == name:
                return path, nb, ex
    raise KeyError(name)


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_the_derivation_is_held_back_until_the_answer_passes(name):
    path, nb, ex = _find(name)
    held = derivations(nb)
    assert name in held, f"{path.name}: {name} has no <!-- BEGIN DERIVATION {name} --> cell"
    where = next(i for i, c in enumerate(nb.cells)
                 if c.cell_type == "markdown" and derivation_name(c.source) == name)
    assert where > ex.cell, f"{path.name}: the derivation of {name} must come after the exercise"
    student = make_student_notebook(nb, path.name)
    shown = _squash("".join(c.source for c in student.cells))
    body = [_squash(line) for line in held[name].splitlines() if len(_squash(line)) > 20]
    assert not [line for line in body if line in shown], "the learner's copy shows the derivation"
    before = [c.source for c in student.cells[:ex.cell] if c.cell_type == "markdown"]
    for pattern in DERIVED[name]:
        hits = [s for s in before if re.search(pattern, _squash(s))]
        assert not hits, (f"{path.name}: a markdown cell before {name} shows what it asks for "
                          f"({pattern}): move it into the held-back derivation")


@pytest.mark.parametrize("name", sorted(SHORTCUTS))
def test_the_check_refuses_the_librarys_own_implementation(name):
    if name == "load_signed":
        pytest.importorskip("cryptography", reason="load_signed's check signs with "
                                                   "cryptography (pip install -e '.[protect]')")
    check, source = SHORTCUTS[name]
    namespace = {"dl": dl, "np": np}
    exec(textwrap.dedent(source), namespace)  # noqa: S102 - the test's own answer
    fn = next(v for k, v in namespace.items() if callable(v) and k not in ("dl", "np"))
    with pytest.raises(dl.check.ExerciseError, match="library's own version"):
        getattr(dl.check, check)(fn)


# -- the machinery ---------------------------------------------------------------------------
CELL = ("Some setting.\n<!-- BEGIN DERIVATION demo_grad -->\n"
        "$\\partial L/\\partial x = 2x$, because ...\n<!-- END DERIVATION -->\n")


def test_a_derivation_cell_is_held_back_in_the_learners_copy_and_tagged_for_nbgrader():
    out = student_source(CELL, cell_type="markdown")
    assert out.startswith("Some setting.\n") and "2x" not in out
    assert "held back" in out and 'dl.check.derivation(\\"demo_grad\\")' not in out
    assert 'dl.check.derivation("demo_grad")' in out
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(CELL)])
    assert derivations(nb) == {"demo_grad": "$\\partial L/\\partial x = 2x$, because ..."}
    assert tag_nbgrader(nb).cells[0].metadata["nbgrader"]["grade_id"] == "derivation_demo_grad"
    with pytest.raises(ValueError, match="END DERIVATION"):
        student_source(CELL.replace("<!-- END DERIVATION -->", ""), cell_type="markdown")


def test_a_pass_shows_the_derivation_and_derivation_waits_for_it(monkeypatch, capsys):
    monkeypatch.setattr(harness, "_passed", set())
    monkeypatch.setattr(harness, "_derivation_text",
                        lambda name: "dx = 2x, because ..." if name == "demo_grad" else None)
    with pytest.raises(dl.check.ExerciseError, match="shown once your answer passes"):
        harness.derivation("demo_grad")

    def demo_grad():
        pass
    harness.passed(demo_grad, 3)
    out = capsys.readouterr().out
    assert "all 3 cases pass" in out and "The derivation of demo_grad" in out and "2x" in out
    assert harness.derivation("demo_grad") == "dx = 2x, because ..."
    with pytest.raises(KeyError, match="no held-back derivation"):
        harness.derivation("other")
