"""Student versions of the course notebooks: solutions out, hints in.

Used by ``dlcourse student-notebooks OUTDIR``. The notebooks in ``notebooks/`` are the
instructor versions: each exercise's solution sits between two marker lines (nbgrader's)::

    def relu_backward(dout, cache):
        x = cache
        ### BEGIN SOLUTION
        # HINT: the gradient passes where the input was positive
        dx = dout * (x > 0)
        ### END SOLUTION
        return dx

In the student version the block, markers included, becomes one line at the same indentation::

        raise NotImplementedError("the gradient passes where the input was positive")

(a hint too long for one line is split into adjacent string literals, one a line, under the
``raise NotImplementedError(``), and the exercise's check
(``dl.check.relu_backward(relu_backward)``) then answers "relu_backward is not implemented yet:
the gradient passes where the input was positive".
All outputs and execution counts are cleared; the notebook metadata is kept. In a markdown
cell, a block between the same markers becomes "YOUR ANSWER HERE" (nbgrader's placeholder).

The ``# HINT:`` line is the first-level hint, on the learner's screen from the start: a question
or a pointer (what to work out, the shapes, where the lesson sets it up), never the answer in
words nor code (tests keep it so, against the exercise's ``ANSWER_TOKENS``). Deeper levels come on
request: ``dl.check.hint(name)``.

nbgrader reads the same markers. :func:`tag_nbgrader` writes each notebook's nbgrader cell
metadata from them (a solution cell, graded by the locked check cell after it), deterministically,
so a new notebook is tagged with one command (a test fails while any notebook is out of date)::

    python -m dlcourse.student --tag-nbgrader notebooks/

Writing into a folder a learner works in never overwrites their edits: a manifest in the folder
(``.dlcourse-manifest.json``) records what was generated; a notebook the learner changed is kept
and the new version is written beside it (``NN_name.updated.ipynb``). See :func:`sync_notebooks`.

The student version of a notebook is made in ``student_version.py`` and written into a learner's
folder by ``notebook_sync.py``; this module finds the exercises in a notebook (and tags them for
nbgrader), finds an exercise, its hint and its solution among the course notebooks, and is where
the public names of both are imported from.
"""
from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple

from ._io import atomic_write
from ._suggest import did_you_mean
from .notebook_file import read_notebook
from .notebook_sync import MANIFEST, RENAMED, sync_notebooks, write_student_notebooks
from .student_version import (BEGIN, BEGIN_DERIVATION, END, END_DERIVATION, GENERIC_HINT, HINT,
                              RAISE_WIDTH, SolutionMarkerError, derivation_block, derivation_name,
                              is_marker, make_student_notebook, nbformat_module, notebook_text,
                              student_source)

__all__ = ["write_student_notebooks", "make_student_notebook", "student_source",
           "SolutionMarkerError", "BEGIN", "END", "HINT", "GENERIC_HINT",
           "Exercise", "exercises", "tag_nbgrader", "tag_notebooks", "notebooks_dir",
           "find_exercise", "first_hint", "solution_text", "sync_notebooks", "MANIFEST",
           "BEGIN_DERIVATION", "END_DERIVATION", "derivation_name", "derivations",
           "derivation_text", "RAISE_WIDTH", "lesson_exercises", "RENAMED"]


def _write_atomic(nbformat, nb, path: Path) -> None:
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(notebook_text(nbformat, nb))


# ======================================================================================
# Exercises: a solution block, and the check cell after it
# ======================================================================================
class Exercise(NamedTuple):
    """One exercise of a notebook: its name (the check's, e.g. ``conv2d_backward``), the index
    of the cell with the solution block, the index of its check cell (None if it has none) and
    the first-level hint."""
    name: str
    cell: int
    check: int | None
    hint: str | None


_CHECK_CALL = re.compile(r"\bdl\.check\.(\w+)\(")
_DEF = re.compile(r"^def (\w+)\(", re.MULTILINE)


def _has_block(source: str) -> bool:
    return any(is_marker(line, BEGIN) for line in source.splitlines())


def _block(source: str) -> tuple[str | None, list[str]]:
    """(the first block's hint, the first block's solution lines without the hint line)."""
    hint, lines, inside = None, [], False
    for line in source.splitlines():
        if is_marker(line, BEGIN):
            inside = True
        elif is_marker(line, END):
            break
        elif inside:
            if hint is None and line.strip().startswith(HINT):
                hint = line.strip()[len(HINT):].strip() or None
            else:
                lines.append(line)
    return hint, lines


def exercises(nb) -> list[Exercise]:
    """The exercises of a notebook node, in order.

    An exercise is a cell with a solution block. Its check cell is the next code cell (before
    the next exercise) that calls ``dl.check.<name>(...)``; its name is that check's name, or
    the first function the cell defines, or ``exercise_<cell index>``. Names are unique within
    a notebook (a repeated one gets ``_2``, ``_3``, ...).
    """
    found, seen = [], set()
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type not in ("code", "markdown") or not _has_block(cell.source):
            continue
        check, name = None, None
        for j in range(i + 1, len(cells)):
            if _has_block(cells[j].source):
                break
            match = cells[j].cell_type == "code" and _CHECK_CALL.search(cells[j].source)
            if match:
                check, name = j, match.group(1)
                break
        if name is None:
            match = _DEF.search(cell.source)
            name = match.group(1) if match else f"exercise_{i}"
        unique, k = name, 2
        while unique in seen:
            unique, k = f"{name}_{k}", k + 1
        seen.add(unique)
        found.append(Exercise(unique, i, check, _block(cell.source)[0]))
    return found


# ======================================================================================
# nbgrader metadata, derived from the markers
# ======================================================================================
POINTS = 1   # each exercise's check is worth one point


def _nbgrader_meta(grade: bool, solution: bool, locked: bool, grade_id: str | None = None,
                   points: int | None = None) -> dict:
    meta = {"grade": grade, "locked": locked, "schema_version": 3, "solution": solution}
    if grade_id is not None:
        meta["grade_id"] = grade_id
    if points is not None:
        meta["points"] = points
    return meta


def tag_nbgrader(nb):
    """A copy of ``nb`` whose nbgrader cell metadata follows from its markers, and nothing else.

    - a code cell with a solution block: an nbgrader solution cell, ``grade_id`` = the exercise
      name (``conv2d_backward``);
    - its check cell: a locked, autograded test cell, ``grade_id`` = ``check_<name>``, worth
      :data:`POINTS`; a markdown answer cell is graded by hand (grade and solution, 1 point);
    - a held-back derivation (``<!-- BEGIN DERIVATION name -->``): a markdown answer cell worth
      0 points, ``grade_id`` = ``derivation_<name>`` (nbgrader releases it as an answer cell for
      the learner's own derivation; it requires a markdown solution cell to be a grade cell);
    - every other cell: no nbgrader metadata.

    Running it twice gives the same notebook (the tool is idempotent).
    """
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        name = derivation_name(cell.source) if cell.cell_type == "markdown" else None
        if name is not None:
            cell.metadata["nbgrader"] = _nbgrader_meta(True, True, False, f"derivation_{name}", 0)
    for ex in exercises(nb):
        cell = nb.cells[ex.cell]
        if cell.cell_type == "markdown":
            cell.metadata["nbgrader"] = _nbgrader_meta(True, True, False, ex.name, POINTS)
            continue
        cell.metadata["nbgrader"] = _nbgrader_meta(False, True, False, ex.name)
        if ex.check is not None:
            nb.cells[ex.check].metadata["nbgrader"] = _nbgrader_meta(
                True, False, True, f"check_{ex.name}", POINTS)
    return nb


def tag_notebooks(folder, *, write: bool = True) -> list[Path]:
    """Tag every ``*.ipynb`` in ``folder`` with :func:`tag_nbgrader`; return the notebooks whose
    metadata was (with ``write=False``: would be) changed."""
    nbformat = nbformat_module()
    changed = []
    for path in sorted(Path(folder).glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        tagged = tag_nbgrader(nb)
        if any(a.metadata.get("nbgrader") != b.metadata.get("nbgrader")
               for a, b in zip(nb.cells, tagged.cells)):
            changed.append(path)
            if write:
                _write_atomic(nbformat, tagged, path)
    return changed


# ======================================================================================
# Finding the course notebooks, an exercise, its hint and its solution
# ======================================================================================
def notebooks_dir() -> Path:
    """The folder of the instructor notebooks: ``$DLCOURSE_NOTEBOOKS`` if set, else the
    repository's ``notebooks/`` (a checkout, or an editable install), else the copy a wheel
    installs under ``<prefix>/share/dlcourse/notebooks``."""
    import sysconfig
    env = os.environ.get("DLCOURSE_NOTEBOOKS")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parent.parent / "notebooks",
                   Path(sysconfig.get_path("data")) / "share" / "dlcourse" / "notebooks",
                   Path(sys.prefix) / "share" / "dlcourse" / "notebooks"]
    for folder in candidates:
        if folder.is_dir() and any(folder.glob("*.ipynb")):
            return folder
    raise FileNotFoundError(
        "The course notebooks were not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "). Install dlcourse from the repository (python -m pip install -e .) or set "
          "DLCOURSE_NOTEBOOKS to the folder that holds them.")


def find_exercise(name: str, folder=None):
    """``(notebook path, notebook node, Exercise)`` of the exercise called ``name``."""
    folder = Path(folder) if folder is not None else notebooks_dir()
    names = []
    for path in sorted(folder.glob("*.ipynb")):
        nb = read_notebook(path)
        for ex in exercises(nb):
            if ex.name == name:
                return path, nb, ex
            names.append(ex.name)
    close = did_you_mean(name, names)        # the closest few; else every name, to choose from
    raise KeyError(f"No exercise is called {name!r}."
                   + (close or f" The exercises are: {', '.join(names)}."))


def first_hint(name: str, folder=None) -> str | None:
    """The first-level hint of exercise ``name`` (its ``# HINT:`` line)."""
    return find_exercise(name, folder)[2].hint


def lesson_exercises(folder=None) -> list[tuple[str, list[str]]]:
    """``[(lesson, [exercise, ...]), ...]`` for every notebook in ``folder`` (default: the course
    notebooks), in course order. Read with ``json`` alone (no nbformat), once while the
    notebooks are unchanged: ``dl.check.progress()`` asks for it often."""
    folder = Path(folder) if folder is not None else notebooks_dir()
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.ipynb")))
    return [(lesson, list(names)) for lesson, names in _lesson_exercises(str(folder), stamp)]


@functools.lru_cache(maxsize=4)
def _lesson_exercises(folder: str, stamp) -> tuple:
    found = []
    for name, _ in stamp:
        raw = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
        cells = [_Cell(c.get("cell_type", ""), "".join(c.get("source", "")))
                 for c in raw.get("cells", [])]
        found.append((name[:-len(".ipynb")], tuple(ex.name for ex in exercises(_Notebook(cells)))))
    return tuple(found)


class _Cell(NamedTuple):          # the two fields exercises() reads, from a notebook's JSON
    cell_type: str
    source: str


class _Notebook(NamedTuple):
    cells: list


def derivations(nb) -> dict[str, str]:
    """Every held-back derivation of a notebook node: exercise name -> its markdown."""
    found = {}
    for i, cell in enumerate(nb.cells):
        name = derivation_name(cell.source) if cell.cell_type == "markdown" else None
        if name is not None:
            found[name] = "".join(derivation_block(cell.source, f"cell {i}")[1]).strip()
    return found


def derivation_text(name: str, folder=None) -> str | None:
    """The worked derivation held back for exercise ``name``, or None if it has none."""
    folder = Path(folder) if folder is not None else notebooks_dir()
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.ipynb")))
    return _all_derivations(str(folder), stamp).get(name)


@functools.lru_cache(maxsize=4)
def _all_derivations(folder: str, stamp) -> dict[str, str]:
    """Every derivation of the notebooks in ``folder`` (read once while they are unchanged)."""
    found = {}
    for name, _ in stamp:
        found.update(derivations(read_notebook(Path(folder) / name)))
    return found


def solution_text(name: str, folder=None) -> str:
    """The reference solution of exercise ``name``: the lines of its solution block."""
    _, nb, ex = find_exercise(name, folder)
    lines = _block(nb.cells[ex.cell].source)[1]
    width = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[width:] for line in lines)


# ======================================================================================
# python -m dlcourse.student --tag-nbgrader notebooks/
# ======================================================================================
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlcourse.student",
        description="Write the nbgrader cell metadata of the course notebooks from their "
                    "solution markers (idempotent).")
    parser.add_argument("--tag-nbgrader", metavar="FOLDER", required=True,
                        help="the folder of the notebooks to tag (notebooks/)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if any notebook is out of date")
    args = parser.parse_args(argv)
    changed = tag_notebooks(args.tag_nbgrader, write=not args.check)
    verb = "out of date" if args.check else "tagged"
    for path in changed:
        print(f"{verb}: {path}")
    if not changed:
        print(f"every notebook in {args.tag_nbgrader} has up-to-date nbgrader metadata")
    return 1 if (changed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
