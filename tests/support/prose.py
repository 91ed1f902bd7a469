"""What a lesson asks of its reader, counted the same way everywhere: the words of its prose
(markdown, without code, mathematics or HTML comments) and its checked exercises."""
from __future__ import annotations

import json
import re
from pathlib import Path

MAX_WORDS = 2000   # "each one lesson of at most about 2,000 words of prose"


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
        n += len(re.findall(r"[A-Za-z0-9]+(?:['’.-][A-Za-z0-9]+)*", text))
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
