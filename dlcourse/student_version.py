"""The student version of a course notebook: each solution block replaced by a ``raise
NotImplementedError("<hint>")`` (a "YOUR ANSWER HERE" in markdown), each held-back derivation by
the note that it is held back, outputs cleared. The markers and the format are described in
``student.py``, which re-exports everything public here.
"""
from __future__ import annotations

import copy

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


def nbformat_module():
    try:
        import nbformat
    except ImportError:  # pragma: no cover - nbformat comes with jupyterlab
        raise ImportError("Making student notebooks needs nbformat: "
                          "python -m pip install nbformat (it comes with jupyterlab).") from None
    return nbformat


def is_marker(line: str, marker: str) -> bool:
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
        if is_marker(line, BEGIN_DERIVATION):
            name = line.strip()[len(BEGIN_DERIVATION):].strip().removesuffix("-->").strip()
            return name or None
    return None


def derivation_block(source: str, where: str) -> tuple[list[str], list[str], list[str]]:
    """(lines before, the derivation's lines, lines after) of a cell with a derivation block."""
    lines = source.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if is_marker(line, BEGIN_DERIVATION)]
    ends = [i for i, line in enumerate(lines) if is_marker(line, END_DERIVATION)]
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
        before, _, after = derivation_block(source, where)
        return "".join(before) + HELD_BACK.format(name=name) + "\n" + "".join(after)
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    begin_line = None          # 1-based line number of the open block's BEGIN marker
    indent, hint = "", None
    for number, line in enumerate(lines, start=1):
        if is_marker(line, BEGIN):
            if begin_line is not None:
                raise SolutionMarkerError(
                    f"{where}: a second `{BEGIN}` on line {number}, but the block opened on "
                    f"line {begin_line} was not closed: add `{END}` before it.")
            begin_line, hint = number, None
            indent = line[:len(line) - len(line.lstrip())]
        elif is_marker(line, END):
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


def notebook_text(nbformat, nb) -> str:
    """The notebook as the repository stores it (nbformat's layout and a final newline)."""
    return nbformat.writes(nb) + "\n"
