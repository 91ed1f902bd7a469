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
"""
from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple

from ._io import atomic_write
from ._suggest import did_you_mean
from .notebook_file import read_notebook

__all__ = ["write_student_notebooks", "make_student_notebook", "student_source",
           "SolutionMarkerError", "BEGIN", "END", "HINT", "GENERIC_HINT",
           "Exercise", "exercises", "tag_nbgrader", "tag_notebooks", "notebooks_dir",
           "find_exercise", "first_hint", "solution_text", "sync_notebooks", "MANIFEST",
           "BEGIN_DERIVATION", "END_DERIVATION", "derivation_name", "derivations",
           "derivation_text", "RAISE_WIDTH", "lesson_exercises"]

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = "# HINT:"
# A worked derivation the learner's copy holds back until their answer passes: a markdown cell
# "<!-- BEGIN DERIVATION softmax_ce_grad -->" ... "<!-- END DERIVATION -->" (the comments do
# not render). The check shows it on a pass (dl.check.derivation(name) again later).
BEGIN_DERIVATION = "<!-- BEGIN DERIVATION"
END_DERIVATION = "<!-- END DERIVATION -->"
HELD_BACK = ("> **The derivation is held back** until your `{name}` passes: work it out from what "
             "this section gives you (write it here if you like), then the check shows the worked "
             "derivation to compare with yours; later, `dl.check.derivation(\"{name}\")`.")
GENERIC_HINT = "replace this raise with your code (the text above says what it should do)."
MARKDOWN_PLACEHOLDER = "YOUR ANSWER HERE"


class SolutionMarkerError(ValueError):
    """A solution block is not closed, or closed without being opened."""


def _nbformat():
    try:
        import nbformat
    except ImportError:  # pragma: no cover - nbformat comes with jupyterlab
        raise ImportError("Making student notebooks needs nbformat: "
                          "python -m pip install nbformat (it comes with jupyterlab).") from None
    return nbformat


def _is_marker(line: str, marker: str) -> bool:
    return line.strip().startswith(marker)


def _python_string(text: str) -> str:
    """``text`` as a Python string literal, in double quotes where that needs no escapes."""
    if '"' not in text and "\\" not in text and text.isprintable():
        return f'"{text}"'
    return repr(text)


RAISE_WIDTH = 88     # the longest line a student cell's ``raise`` may have (JupyterLab shows ~100)


def _raise_line(indent: str, text: str, newline: str) -> str:
    """``raise NotImplementedError("<text>")`` at ``indent``; a text too long for one line of
    RAISE_WIDTH is split at spaces into adjacent string literals, one a line, which Python
    joins back into exactly ``text``."""
    one_line = f"{indent}raise NotImplementedError({_python_string(text)})"
    if len(one_line) <= RAISE_WIDTH:
        return one_line + newline
    inner = indent + "    "
    width = max(RAISE_WIDTH - len(inner) - 3, 20)     # 3: the quotes and a closing bracket
    pieces, piece = [], ""
    for word in text.split(" "):                       # each piece keeps its trailing space
        if piece and len(piece) + len(word) > width:
            pieces.append(piece)
            piece = ""
        piece += word + " "
    pieces.append(piece[:-1])
    literals = [f"{inner}{_python_string(p)}" for p in pieces]
    return (f"{indent}raise NotImplementedError(\n" + "\n".join(literals) + ")" + newline)


def derivation_name(source: str) -> str | None:
    """The exercise whose derivation a markdown cell holds (its BEGIN DERIVATION marker), or None."""
    for line in source.splitlines():
        if _is_marker(line, BEGIN_DERIVATION):
            name = line.strip()[len(BEGIN_DERIVATION):].strip().removesuffix("-->").strip()
            return name or None
    return None


def _derivation_block(source: str, where: str) -> tuple[list[str], list[str], list[str]]:
    """(lines before, the derivation's lines, lines after) of a cell with a derivation block."""
    lines = source.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _is_marker(line, BEGIN_DERIVATION)]
    ends = [i for i, line in enumerate(lines) if _is_marker(line, END_DERIVATION)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise SolutionMarkerError(f"{where}: a derivation cell needs one `{BEGIN_DERIVATION} "
                                  f"<name> -->` line and one `{END_DERIVATION}` after it.")
    return lines[:starts[0]], lines[starts[0] + 1:ends[0]], lines[ends[0] + 1:]


def student_source(source: str, *, cell_type: str = "code", where: str = "the cell") -> str:
    """The student version of one cell's source (unchanged when it has no solution block; a
    derivation block becomes the note that it is held back).

    ``where`` names the cell in error messages, e.g. ``"03_backpropagation.ipynb, cell 12"``.
    Raises :class:`SolutionMarkerError` for an unbalanced block.
    """
    name = derivation_name(source) if cell_type == "markdown" else None
    if name is not None:
        before, _, after = _derivation_block(source, where)
        return "".join(before) + HELD_BACK.format(name=name) + "\n" + "".join(after)
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    begin_line = None          # 1-based line number of the open block's BEGIN marker
    indent, hint = "", None
    for number, line in enumerate(lines, start=1):
        if _is_marker(line, BEGIN):
            if begin_line is not None:
                raise SolutionMarkerError(
                    f"{where}: a second `{BEGIN}` on line {number}, but the block opened on "
                    f"line {begin_line} was not closed: add `{END}` before it.")
            begin_line, hint = number, None
            indent = line[:len(line) - len(line.lstrip())]
        elif _is_marker(line, END):
            if begin_line is None:
                raise SolutionMarkerError(
                    f"{where}: `{END}` on line {number} has no `{BEGIN}` before it.")
            newline = "\n" if line.endswith("\n") else ""
            if cell_type == "code":
                out.append(_raise_line(indent, hint or GENERIC_HINT, newline))
            else:
                out.append(f"{indent}{MARKDOWN_PLACEHOLDER}{newline}")
            begin_line = None
        elif begin_line is not None:
            stripped = line.strip()
            if hint is None and stripped.startswith(HINT):
                hint = stripped[len(HINT):].strip() or None
        else:
            out.append(line)
    if begin_line is not None:
        raise SolutionMarkerError(
            f"{where}: `{BEGIN}` on line {begin_line} has no `{END}` after it.")
    return "".join(out)


def make_student_notebook(nb, name: str = "the notebook"):
    """A student copy of a notebook node (nbformat 4): solutions replaced, outputs cleared."""
    nb = copy.deepcopy(nb)
    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        if cell.cell_type in ("code", "markdown"):
            cell.source = student_source(cell.source, cell_type=cell.cell_type, where=where)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def _notebook_text(nbformat, nb) -> str:
    """The notebook as the repository stores it (nbformat's layout and a final newline)."""
    return nbformat.writes(nb) + "\n"


def _write_atomic(nbformat, nb, path: Path) -> None:
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(_notebook_text(nbformat, nb))


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
    return any(_is_marker(line, BEGIN) for line in source.splitlines())


def _block(source: str) -> tuple[str | None, list[str]]:
    """(the first block's hint, the first block's solution lines without the hint line)."""
    hint, lines, inside = None, [], False
    for line in source.splitlines():
        if _is_marker(line, BEGIN):
            inside = True
        elif _is_marker(line, END):
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
    - a held-back derivation (``<!-- BEGIN DERIVATION name -->``): an ungraded markdown
      solution cell, ``grade_id`` = ``derivation_<name>`` (nbgrader releases it as an answer
      cell for the learner's own derivation);
    - every other cell: no nbgrader metadata.

    Running it twice gives the same notebook (the tool is idempotent).
    """
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        name = derivation_name(cell.source) if cell.cell_type == "markdown" else None
        if name is not None:
            cell.metadata["nbgrader"] = _nbgrader_meta(False, True, False, f"derivation_{name}")
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
    nbformat = _nbformat()
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
            found[name] = "".join(_derivation_block(cell.source, f"cell {i}")[1]).strip()
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
# Writing student versions without overwriting a learner's edits
# ======================================================================================
MANIFEST = ".dlcourse-manifest.json"

# Lessons that were renamed or split (issue 27): the old name -> the lessons that replace it. A
# learner's workspace may still hold the old one; :func:`sync_notebooks` says where it went.
RENAMED = {
    "04_mlp_on_digits": ("04a_mlp_on_digits", "04b_optimizers_and_regularization"),
    "04b_initialization": ("04c_initialization",),
    "08b_tiling_and_occupancy": ("08b_tiling_and_roofline",
                                 "08c_bank_conflicts_occupancy_and_tensor_cores"),
    "08c_fusion_and_graphs": ("08d_fusion_and_graphs",),
    "11_quantization_and_pruning": ("11a_quantization", "11b_pruning"),
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_manifest(outdir: Path) -> dict:
    try:
        data = json.loads((outdir / MANIFEST).read_text(encoding="utf-8"))
        return dict(data.get("generated", {}))
    except (FileNotFoundError, ValueError, AttributeError):
        return {}


def _file_sha(path: Path) -> str | None:
    try:
        return _sha(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _beside(outdir: Path, name: str, generated: dict) -> Path:
    """A free name beside ``name`` for the new version: ``NN_x.updated.ipynb`` (or ``-2``, ...),
    reusing one we wrote before if the learner has not changed it."""
    stem = name[:-len(".ipynb")]
    k = 1
    while True:
        candidate = outdir / (f"{stem}.updated.ipynb" if k == 1 else f"{stem}.updated-{k}.ipynb")
        sha = _file_sha(candidate)
        if sha is None or generated.get(candidate.name) == sha:
            return candidate
        k += 1


def sync_notebooks(source_dir, outdir) -> list[tuple[str, Path]]:
    """Write the student version of every notebook in ``source_dir`` into ``outdir`` without
    losing a learner's work; return ``[(what, path)]`` with ``what`` one of:

    - ``"added"``: a new lesson, written;
    - ``"updated"``: a newer version replaced one the learner had not changed;
    - ``"unchanged"``: already up to date;
    - ``"kept"``: the learner changed this notebook; it is kept as it is, and there is no new
      version of it;
    - ``"kept, new version beside"``: the learner changed it and the course has a newer version,
      written beside it (``path`` is the new file);
    - ``"retired"``: a lesson this folder got from an older version of the course that is no
      longer one (renamed or split, :data:`RENAMED`), untouched by the learner: removed;
    - ``"kept, retired"``: the same, but the learner changed it: kept as it is.

    What was generated is recorded (SHA-256) in ``outdir/.dlcourse-manifest.json``; a file
    the manifest does not know is the learner's. Every notebook is converted and validated
    before anything is written. Raises as :func:`write_student_notebooks` does.
    """
    nbformat = _nbformat()
    source_dir, outdir = Path(source_dir), Path(outdir)
    if not source_dir.is_dir():
        raise FileNotFoundError(f"{source_dir} is not a folder: pass the folder of the course "
                                f"notebooks (notebooks/ in the repository).")
    paths = sorted(source_dir.glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"{source_dir} holds no notebooks (*.ipynb): pass the folder "
                                f"of the course notebooks (notebooks/ in the repository).")
    if outdir.exists() and outdir.resolve() == source_dir.resolve():
        raise ValueError(f"The output folder {outdir} is the source folder: the student versions "
                         f"would overwrite the solutions. Choose another folder.")
    _check_outdir(outdir)
    converted = []
    for path in paths:
        student = _read_student_notebook(nbformat, path)
        try:
            nbformat.validate(student)
        except nbformat.ValidationError as err:
            raise ValueError(f"The student version of {path.name} is not a valid notebook: "
                             f"{err.message}") from err
        converted.append((path.name, student))
    outdir.mkdir(parents=True, exist_ok=True)
    generated = _read_manifest(outdir)
    done = []
    for name, student in converted:
        text = _notebook_text(nbformat, student)
        target = outdir / name
        current = _file_sha(target)
        if current is None and not target.exists():
            what = "added"
        elif current == _sha(text):
            done.append(("unchanged", target))
            generated[name] = current
            continue
        elif current is not None and generated.get(name) == current:
            what = "updated"
        elif generated.get(f"source:{name}") == _sha(text):
            done.append(("kept", target))       # the learner's edits, and no newer version
            continue
        else:
            target, what = _beside(outdir, name, generated), "kept, new version beside"
        with atomic_write(target, "w", encoding="utf-8") as f:
            f.write(text)
        generated[target.name] = _sha(text)
        generated[f"source:{name}"] = _sha(text)
        done.append((what, target))
    done += _retire(outdir, generated, {name for name, _ in converted})
    with atomic_write(outdir / MANIFEST, "w", encoding="utf-8") as f:
        json.dump({"about": "what dlcourse generated here (SHA-256), so that it never "
                            "overwrites a notebook you changed",
                   "generated": dict(sorted(generated.items()))}, f, indent=1)
        f.write("\n")
    return done


def _check_outdir(outdir: Path) -> None:
    """Refuse an output folder that is a file, or lies inside one, naming that file."""
    for path in (outdir, *outdir.parents):
        if path.exists():
            if not path.is_dir():
                inside = "" if path == outdir else f" (it would be inside the file {path})"
                raise NotADirectoryError(f"The output folder {outdir} is not a folder{inside}: "
                                         f"the student notebooks go into a folder. Choose a "
                                         f"new or existing folder.")
            return


def _read_student_notebook(nbformat, path: Path):
    """The student version of the notebook at ``path``; a file that is not a notebook is
    refused by its path (nbformat's own errors do not name it)."""
    try:
        return make_student_notebook(nbformat.read(path, as_version=4), path.name)
    except SolutionMarkerError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError) as err:   # not JSON, not UTF-8,
        reason = " ".join(str(err).split())[:200] or type(err).__name__  # not a notebook
        raise ValueError(f"{path} is not a notebook that can be read ({type(err).__name__}: "
                         f"{reason}). Is it damaged or only partly saved? Restore it (git "
                         f"checkout, or a fresh copy of the course) or move it out of "
                         f"{path.parent}.") from err


def _retire(outdir: Path, generated: dict, lessons: set) -> list[tuple[str, Path]]:
    """Lessons written here by an older course that renamed or split them (:data:`RENAMED`): an
    untouched one goes (it holds nothing of the learner's), a changed one stays. Forgets both in
    ``generated``."""
    done = []
    for name in sorted(generated):
        if name in lessons or name.removesuffix(".ipynb") not in RENAMED:
            continue          # still a lesson; or not one the course renamed (only those go)
        target = outdir / name
        sha = _file_sha(target)
        if sha is not None and sha == generated[name]:
            target.unlink()
            done.append(("retired", target))
        elif sha is not None:
            done.append(("kept, retired", target))
        del generated[name]
        generated.pop(f"source:{name}", None)
    return done


def write_student_notebooks(source_dir, outdir) -> list[Path]:
    """Write the student version of every ``*.ipynb`` in ``source_dir`` (sorted) to ``outdir``,
    under the same names unless the learner changed the notebook there (then the new version
    goes beside it, see :func:`sync_notebooks`); return the paths written.

    Every notebook is converted and validated before any file is written, so an error leaves
    ``outdir`` as it was. Raises ``FileNotFoundError`` when ``source_dir`` holds no notebook,
    :class:`SolutionMarkerError` (naming the notebook and the cell) for an unbalanced solution
    block, and ``ValueError`` when ``outdir`` is ``source_dir`` (that would overwrite the
    solutions).
    """
    return [path for what, path in sync_notebooks(source_dir, outdir)
            if what not in ("unchanged", "kept")]


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
