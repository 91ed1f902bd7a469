"""The lesson notebooks work as an nbgrader course (issue 15): their cell metadata follows from
the solution markers (``python -m dlcourse.student --tag-nbgrader notebooks/``), the real nbgrader
releases them with the same cells blanked as ``dlcourse student-notebooks``, and autograding
gives a solved copy full points and a copy with one wrong exercise all but that exercise's."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

from dlcourse.student import (POINTS, derivation_name, exercises, main,  # noqa: E402
                              make_student_notebook, tag_nbgrader)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOK_PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
LESSON = "01_perceptron"          # the quickest lesson with two exercises
TAG = "python -m dlcourse.student --tag-nbgrader notebooks/"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[p.stem for p in NOTEBOOK_PATHS])
def test_nbgrader_metadata_is_up_to_date(path):
    nb = nbformat.read(path, as_version=4)
    tagged = tag_nbgrader(nb)
    for index, (cell, want) in enumerate(zip(nb.cells, tagged.cells)):
        assert cell.metadata.get("nbgrader") == want.metadata.get("nbgrader"), (
            f"{path.name}, cell {index}: its nbgrader metadata is missing or out of date; "
            f"run `{TAG}`")


def test_every_exercise_is_a_solution_cell_graded_by_its_locked_check():
    for path in NOTEBOOK_PATHS:
        nb = nbformat.read(path, as_version=4)
        for ex in exercises(nb):
            meta = nb.cells[ex.cell].metadata["nbgrader"]
            assert meta["solution"] and meta["grade_id"] == ex.name, (path.name, ex.name)
            assert ex.check is not None, f"{path.name}: {ex.name} has no dl.check cell after it"
            check = nb.cells[ex.check].metadata["nbgrader"]
            assert check == {"grade": True, "grade_id": f"check_{ex.name}", "locked": True,
                             "points": POINTS, "schema_version": 3, "solution": False}


def test_tagging_is_idempotent_and_removes_stale_tags():
    nb = nbformat.read(NOTEBOOKS / f"{LESSON}.ipynb", as_version=4)
    nb.cells[0].metadata["nbgrader"] = {"grade": True, "grade_id": "stale", "locked": True,
                                        "points": 5, "schema_version": 3, "solution": False}
    once = tag_nbgrader(nb)
    assert "nbgrader" not in once.cells[0].metadata
    assert tag_nbgrader(once) == once


def test_tag_command_check_mode_fails_on_an_untagged_notebook(tmp_path, capsys):
    nb = nbformat.read(NOTEBOOKS / f"{LESSON}.ipynb", as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    nbformat.write(nb, tmp_path / "10_new.ipynb")
    command = ["--tag-nbgrader", str(tmp_path)]
    assert main(command + ["--check"]) == 1
    assert "out of date" in capsys.readouterr().out
    assert main(command) == 0
    assert main(command + ["--check"]) == 0
    assert tag_nbgrader(nbformat.read(tmp_path / "10_new.ipynb", as_version=4)).cells == \
        nbformat.read(tmp_path / "10_new.ipynb", as_version=4).cells


# --------------------------------------------------------------------------------------
# The real nbgrader
# --------------------------------------------------------------------------------------
def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    # nbgrader runs `alembic` (its database migrations) from PATH: this environment's bin first.
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                  os.environ.get("PATH", "")])}
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args,
                             f"--CourseDirectory.root={course}"],
                            cwd=course, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    pytest.importorskip("nbgrader", reason="nbgrader is not installed (it is in the test extra)")
    course = tmp_path_factory.mktemp("course")
    (course / "source" / "lesson").mkdir(parents=True)
    shutil.copy(NOTEBOOKS / f"{LESSON}.ipynb", course / "source" / "lesson")
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\nc.CourseDirectory.course_id = 'dlcourse'\n"
        "c.ExecutePreprocessor.timeout = 240\n")
    _nbgrader(course, "generate_assignment", "lesson", "--force")
    return course


def test_nbgrader_generates_every_lesson(tmp_path):
    """Every lesson goes through generate_assignment: nbgrader validates each cell's metadata
    (a held-back derivation, a markdown answer cell, must be a grade cell: 0 points)."""
    pytest.importorskip("nbgrader", reason="nbgrader is not installed (it is in the test extra)")
    (tmp_path / "source" / "all").mkdir(parents=True)
    for path in sorted(NOTEBOOKS.glob("[0-9]*.ipynb")):
        shutil.copy(path, tmp_path / "source" / "all")
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\nc.CourseDirectory.course_id = 'dlcourse'\n")
    _nbgrader(tmp_path, "generate_assignment", "all", "--force")
    released = sorted(p.name for p in (tmp_path / "release" / "all").glob("*.ipynb"))
    assert released == sorted(p.name for p in NOTEBOOKS.glob("[0-9]*.ipynb"))
    held = [c for p in NOTEBOOKS.glob("[0-9]*.ipynb")
            for c in nbformat.read(tmp_path / "release" / "all" / p.name, as_version=4).cells
            if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("derivation_")]
    assert held and all("YOUR ANSWER HERE" in c.source for c in held)
    assert all(c.metadata["nbgrader"]["points"] == 0 for c in held)


def _changed_cells(before, after) -> list[int]:
    return [i for i, (a, b) in enumerate(zip(before.cells, after.cells)) if a.source != b.source]


def test_nbgrader_releases_the_cells_student_notebooks_blank(course):
    source = nbformat.read(NOTEBOOKS / f"{LESSON}.ipynb", as_version=4)
    release = nbformat.read(course / "release" / "lesson" / f"{LESSON}.ipynb", as_version=4)
    ours = make_student_notebook(source, LESSON)
    assert len(release.cells) == len(source.cells)
    blanked = _changed_cells(source, release)
    held = [i for i, c in enumerate(source.cells)
            if c.cell_type == "markdown" and derivation_name(c.source)]
    assert blanked == _changed_cells(source, ours) == sorted(
        [ex.cell for ex in exercises(source)] + held)
    for i in blanked:
        if i in held:     # a derivation: nbgrader's answer cell for the learner's own
            assert "YOUR ANSWER HERE" in release.cells[i].source
        else:
            assert "raise NotImplementedError" in release.cells[i].source
    # nbgrader's stub has no text: the check names the exercise's first-level hint itself.
    import numpy as np

    import dlcourse as dl
    for ex in exercises(source):
        namespace = {"dl": dl, "np": np}
        exec(release.cells[ex.cell].source, namespace)  # noqa: S102 - our own notebook
        with pytest.raises(dl.check.ExerciseError) as info:
            getattr(dl.check, ex.name)(namespace[ex.name])
        assert f"{ex.name} is not implemented yet: {ex.hint}" in str(info.value)


def _submit(course: Path, student: str, nb) -> None:
    folder = course / "submitted" / student / "lesson"
    folder.mkdir(parents=True)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, folder / f"{LESSON}.ipynb")


def _scores(course: Path, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(LESSON, "lesson", student)
        return {grade.name: grade.score for grade in nb.grades}


def test_nbgrader_autograde_full_points_and_one_wrong_exercise(course):
    source = nbformat.read(NOTEBOOKS / f"{LESSON}.ipynb", as_version=4)
    _submit(course, "solved", source)
    wrong = nbformat.read(NOTEBOOKS / f"{LESSON}.ipynb", as_version=4)
    update = next(ex for ex in exercises(wrong) if ex.name == "perceptron_update")
    cell = wrong.cells[update.cell]
    assert "step = lr * (y - y_hat)" in cell.source
    cell.source = cell.source.replace("step = lr * (y - y_hat)", "step = lr * (y_hat - y)")
    _submit(course, "wrong", wrong)
    _nbgrader(course, "autograde", "lesson", "--force")
    ids = [f"check_{ex.name}" for ex in exercises(source)]
    assert _scores(course, "solved") == {i: float(POINTS) for i in ids}
    assert _scores(course, "wrong") == {i: float(POINTS) * (i != "check_perceptron_update")
                                        for i in ids}
