"""What a lesson asks of its reader, counted the same way everywhere: the words of its prose
(markdown, without code, mathematics or HTML comments), the words a learner reads (the prose
plus its mathematics and inline code, issue 39) and its checked exercises."""
from __future__ import annotations

import json
import re
from pathlib import Path

MAX_WORDS = 2000   # "each one lesson of at most about 2,000 words of prose"
MAX_READ_WORDS = 2200   # issue 39: "every lesson <= ~2,200 words counting math and inline code"
MAX_EXERCISES = 4       # issue 39: "... and <= 4 checked exercises": one sitting

_WORD = r"[A-Za-z0-9]+(?:['’.-][A-Za-z0-9]+)*"
# LaTeX that lays a formula out rather than says something: a learner reads \frac{a}{b} as "a
# over b" and \left( as "(", so these count for nothing; \sum, \log, \max, \sigma are read.
_LAYOUT = re.compile(r"\\(?:left|right|[Bb]igg?[lr]?|frac|tfrac|dfrac|text|mathrm|mathbf|mathit|"
                     r"mathcal|operatorname|quad|qquad|begin|end|displaystyle|limits|boldsymbol|"
                     r"hat|bar|tilde|overline|underbrace|overbrace|cdot|cdots|ldots|dots)(?![A-Za-z])")


def _markdown(path: Path) -> list[str]:
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def prose_words(path: Path) -> int:
    """The words a learner reads in a notebook's markdown cells: code blocks and spans, LaTeX
    ($...$, $$...$$) and HTML comments are left out; a number or a hyphenated word is one."""
    n = 0
    for text in _markdown(path):
        text = re.sub(r"```.*?```", " ", text, flags=re.S)
        text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
        text = re.sub(r"\$[^$\n]+\$", " ", text)
        text = re.sub(r"`[^`\n]*`", " ", text)
        text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
        n += len(re.findall(_WORD, text))
    return n


def read_words(path: Path) -> int:
    """The words a learner reads in a notebook's markdown cells: the prose, and also its
    mathematics ($...$, $$...$$: each symbol, number or named operator, LaTeX's layout commands
    left out) and inline code (`...`: each name or number). Code blocks (```) and HTML comments
    are left out, as in :func:`prose_words`."""
    n = 0
    for text in _markdown(path):
        text = re.sub(r"```.*?```", " ", text, flags=re.S)
        text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
        text = _LAYOUT.sub(" ", text)
        n += len(re.findall(_WORD, text))
    return n


def checked_exercises(path: Path) -> list[str]:
    """The names of the exercises a notebook checks: a solution cell (nbgrader ``solution``)
    followed by a graded cell ``check_<name>``."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    names = []
    for c in cells:
        grade_id = c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if c["cell_type"] == "code" and grade_id.startswith("check_"):
            names.append(grade_id.removeprefix("check_"))
    return names


def exercises_section(path: Path) -> str:
    """The text from the last ``## Exercises`` heading to the end ('' when there is none)."""
    text = "\n\n".join(_markdown(path))
    parts = re.split(r"^## Exercises\s*$", text, flags=re.M)
    return parts[-1] if len(parts) > 1 else ""
