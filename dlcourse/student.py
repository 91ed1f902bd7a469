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

and the exercise's check (``dl.check.relu_backward(relu_backward)``) then answers
"relu_backward is not implemented yet: the gradient passes where the input was positive".
All outputs and execution counts are cleared; the notebook metadata is kept. In a markdown
cell, a block between the same markers becomes "YOUR ANSWER HERE" (nbgrader's placeholder).
"""
from __future__ import annotations

from pathlib import Path

from ._io import atomic_write

__all__ = ["write_student_notebooks", "make_student_notebook", "student_source",
           "SolutionMarkerError", "BEGIN", "END", "HINT", "GENERIC_HINT"]

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = "# HINT:"
GENERIC_HINT = "replace this line with your code (the text above says what it should do)."
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


def student_source(source: str, *, cell_type: str = "code", where: str = "the cell") -> str:
    """The student version of one cell's source (unchanged when it has no solution block).

    ``where`` names the cell in error messages, e.g. ``"03_backpropagation.ipynb, cell 12"``.
    Raises :class:`SolutionMarkerError` for an unbalanced block.
    """
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
                text = hint if hint else GENERIC_HINT
                out.append(f"{indent}raise NotImplementedError({_python_string(text)}){newline}")
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
    import copy
    nb = copy.deepcopy(nb)
    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        if cell.cell_type in ("code", "markdown"):
            cell.source = student_source(cell.source, cell_type=cell.cell_type, where=where)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def _write_atomic(nbformat, nb, path: Path) -> None:
    with atomic_write(path, "w", encoding="utf-8") as f:
        nbformat.write(nb, f)


def write_student_notebooks(source_dir, outdir) -> list[Path]:
    """Write the student version of every ``*.ipynb`` in ``source_dir`` (sorted) to ``outdir``,
    under the same names; return the written paths.

    Every notebook is converted and validated before any file is written, so an error leaves
    ``outdir`` as it was. Raises ``FileNotFoundError`` when ``source_dir`` holds no notebook,
    :class:`SolutionMarkerError` (naming the notebook and the cell) for an unbalanced solution
    block, and ``ValueError`` when ``outdir`` is ``source_dir`` (that would overwrite the
    solutions).
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
    converted = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        student = make_student_notebook(nb, path.name)
        try:
            nbformat.validate(student)
        except nbformat.ValidationError as err:
            raise ValueError(f"The student version of {path.name} is not a valid notebook: "
                             f"{err.message}") from err
        converted.append((outdir / path.name, student))
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for target, student in converted:
        _write_atomic(nbformat, student, target)
        written.append(target)
    return written
