"""The quantitative sentences of a lesson and what holds them (issue 39; tests/test_claims.py).

A *claim* is a sentence of a markdown cell that comes after the lesson's first code cell (so it
may describe an output) and states
  * a measured number: a number with a unit of time, rate, size or share, or a ratio
    (``16.0 ms``, ``0.3x``, ``59-61 %``, ``2.02×``, ``3 points``); not a shape (``32 × 32``),
    a count or a lesson's number;
  * or a comparison of results (faster, slower, lower, higher, better, beats, ...) in a cell
    that directly follows a code cell's output, or in a sentence that points at a result
    (measured, the printout, this run, recorded, every seed, here, above, ...).
Questions (``...?``), worked examples (``By hand: ...``), headings and the closing
``## Exercises`` section are not claims.

A claim is *held* when the code cell just before or just after its markdown cell checks it: the
cell asserts (``assert``) or freezes its output (``# NBVAL_CHECK_OUTPUT``, compared by nbval), and
every number the sentence states appears in that cell's source or output (59 % also as 0.59).
A faster/slower claim without a number needs a comparison (``<``, ``>``) asserted or printed by
such a cell. Better still, the code prints the sentence (an f-string from the outputs it
describes): then the prose and the output cannot part, and the markdown states no number.
The test cannot read what an assertion means: a reviewer checks that it holds the sentence.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

_NUM = r"\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUM}(?:\s?(?:[–-]|to)\s?{_NUM})?"
# a number with a unit of time, rate, size or share, or a ratio (2.0x, 7.0×, 6.7 times as ...);
# not a shape (32 × 32, 18 × (Linear ...)) or a count (1024 times)
_UNIT = (r"(?:\s?(?:ms|µs|us|ns|s|seconds|minutes|hours|%|GB/s|TB/s|Gb/s|TFLOP/s|GFLOP/s|"
         r"samples/s|tokens/s|MiB|MB|KiB|KB|GiB|GB|points)(?![\w/])"
         r"|x(?![\w])|\s?×(?!\s?[\d(`])"
         r"|\s(?:times)\s(?=as\b|faster|slower|larger|smaller|more|less|fewer|higher|lower|it\b))")
MEASURED = re.compile(rf"(?<![\w.^⁻:])(?<!lesson )(?<!section ){_RANGE}{_UNIT}")
COMPARATIVE = re.compile(r"\b(faster|slower|lower|higher|better|worse|beats?|beat|outperforms?|"
                         r"wins|more accurate|less accurate|larger than|smaller than|more than|"
                         r"less than|fewer than)\b", re.I)
POINTS_AT_A_RESULT = re.compile(r"\b(measured|measures|printed|prints|printout|output|this run|"
                                r"the run|recorded|timed|timings?|every seed|each seed|all seeds|"
                                r"always|never|in every|on every|at every|the plot|the table|"
                                r"the curve|the sweep|here|above|below)\b", re.I)
HOLDS = re.compile(r"^\s*assert\b|NBVAL_CHECK_OUTPUT", re.M)
# a speed is never the same twice: a faster/slower claim needs a comparison that is asserted, or
# printed (True/False) by a cell whose output nbval compares
COMPARES = re.compile(r"^\s*assert\b[^\n]*[<>]|NBVAL_CHECK_OUTPUT(?=.*[<>])", re.M | re.S)
SPEED = re.compile(r"\b(faster|slower|beats?|wins|outperforms?)\b", re.I)


@dataclass
class Claim:
    lesson: str          # the notebook's stem
    cell: int            # the markdown cell's index
    sentence: str        # as a learner reads it (code spans shown as `code`)
    numbers: list[str]   # the measured numbers it states
    held_by: int | None  # the index of the code cell that holds it, or None


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def sentences(markdown: str) -> list[str]:
    """The sentences of a markdown cell's prose: no code blocks, maths, comments or headings."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " ", text)
    lines = [line.strip() for line in text.split("\n") if not line.lstrip().startswith("#")]
    text = re.sub(r"\s+", " ", " ".join(lines))
    parts = re.split(r"(?<=[.!?:)])\s+(?=[A-Z*(\-])|\s+-\s+(?=\S)", text)
    return [p.strip(" -") for p in parts if p.strip(" -")]


def _without_code(sentence: str) -> str:
    return re.sub(r"`[^`]*`", " ", sentence)


def measured_numbers(sentence: str) -> list[str]:
    """The measured numbers of a sentence; a code span counts as a shape's factor (9 × `Block`)."""
    return [m.group(0) for m in MEASURED.finditer(re.sub(r"`[^`]*`", "`", sentence))]


def is_claim(sentence: str, after_output: bool = False) -> bool:
    """Whether ``sentence`` states a measured number or compares results. ``after_output``: its
    markdown cell comes right after a code cell with output, which a comparison there describes."""
    if sentence.endswith("?") or sentence.startswith("By hand"):
        return False   # a question, or a worked example (its arithmetic is the exercise's)
    prose = _without_code(sentence)
    if measured_numbers(sentence):
        return True
    return bool(COMPARATIVE.search(prose) and (after_output or POINTS_AT_A_RESULT.search(prose)))


def _forms(number: str) -> set[str]:
    """The ways a number of the prose may be written in code or its output: ``59-61 %`` gives
    59, 61, 0.59, 0.61; ``2.02x`` gives 2.02; ``213,851`` gives 213851 and 213,851."""
    forms = set()
    for n in re.findall(_NUM, number):
        n = n.rstrip(",")
        plain = n.replace(",", "")
        forms |= {n, plain}
        if "%" in number or "point" in number:       # 59 % is 0.59; 3 points is 0.03
            value = float(plain) / 100
            forms |= {f"{value:g}", f"{value:.2f}", f"{value:.3f}".rstrip("0")}
    return forms


def _carries(cell: dict, number: str) -> bool:
    text = _text(cell.get("source", ""))
    for out in cell.get("outputs", []):
        text += _text(out.get("text", "")) + _text(out.get("data", {}).get("text/plain", ""))
    return any(re.search(rf"(?<![\d.]){re.escape(f)}(?!\d)", text) for f in _forms(number))


def claims(path: Path) -> list[Claim]:
    """Every claim of the lesson at ``path``, with the code cell that holds it (or None)."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    found, seen_code = [], False
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            seen_code = True
            continue
        source = _text(cell["source"])
        if re.search(r"^## Exercises\s*$", source, re.M):
            break
        if not seen_code or cell["cell_type"] != "markdown":
            continue
        before = next((j for j in range(i - 1, -1, -1) if cells[j]["cell_type"] == "code"), None)
        after = next((j for j in range(i + 1, len(cells)) if cells[j]["cell_type"] == "code"),
                     None)
        holders = [j for j in (before, after)
                   if j is not None and HOLDS.search(_text(cells[j]["source"]))]
        after_output = i > 0 and bool(cells[i - 1].get("outputs"))
        for sentence in sentences(source):
            if not is_claim(sentence, after_output):
                continue
            numbers = measured_numbers(sentence)
            needs = COMPARES if SPEED.search(_without_code(sentence)) and not numbers else HOLDS
            held = next((j for j in holders if needs.search(_text(cells[j]["source"]))
                         and all(_carries(cells[j], n) for n in numbers)), None)
            found.append(Claim(Path(path).stem, i, sentence, numbers, held))
    return found
