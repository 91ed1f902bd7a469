"""Every lesson is one sitting and ends by asking the learner to do something (issue 27): at most
about 2,000 words of prose, and an Exercises section at the end that names at least two checked
exercises. Issue 39 counts what a learner reads, the mathematics and inline code too: at most
about 2,200 such words, and at most four checked exercises. Counted by tests/support/prose.py."""
from __future__ import annotations

from pathlib import Path

import pytest
from support.prose import (MAX_EXERCISES, MAX_READ_WORDS, MAX_WORDS, checked_exercises,
                           exercises_section, prose_words, read_words)

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9]*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_lesson_is_at_most_about_2000_words_of_prose(path):
    words = prose_words(path)
    assert words <= MAX_WORDS, (f"{path.name} has {words} words of prose, more than {MAX_WORDS}: "
                                f"trim it or split it into two lessons")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_lesson_is_at_most_about_2200_words_counting_its_mathematics_and_inline_code(path):
    words = read_words(path)
    assert words <= MAX_READ_WORDS, (
        f"{path.name} has {words} words counting its mathematics and inline code "
        f"({prose_words(path)} of prose), more than {MAX_READ_WORDS}: more than one sitting; trim "
        f"it or split it into two lessons, as 02 and 06 were (02a/02b, 06a/06b)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_lesson_checks_at_most_four_exercises(path):
    checked = checked_exercises(path)
    assert len(checked) <= MAX_EXERCISES, (
        f"{path.name} checks {len(checked)} exercises ({checked}), more than {MAX_EXERCISES}: "
        f"more than one sitting; move some to a lesson of their own")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_lesson_ends_with_at_least_two_checked_exercises_named_in_its_exercises_section(path):
    checked = checked_exercises(path)
    assert len(checked) >= 2, (f"{path.name} checks {len(checked)} exercise(s) ({checked}): every "
                               f"lesson has at least two, each a solution cell and its check_ cell")
    section = exercises_section(path)
    assert section, f"{path.name} has no '## Exercises' section at its end"
    missing = [name for name in checked if f"`{name}`" not in section]
    assert not missing, (f"{path.name}'s Exercises section does not name its checked exercises "
                         f"{missing} (as 'Checked above: `name`, ...')")


def test_the_counts_count_what_they_say(tmp_path):
    import json
    nb = {"cells": [{"cell_type": "markdown", "metadata": {},
                     "source": ["Two words $x^2 + y$ `code here` $\\frac{a}{b}$\n<!-- a comment -->\n",
                                "```python\nprint(1)\n```\n## Exercises\nCheck `f`."]},
                    {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "check_f"}},
                     "source": ["dl.check.f(f)"], "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "99_x.ipynb"
    path.write_text(json.dumps(nb))
    assert prose_words(path) == 4     # Two, words, Exercises, Check: no maths, code or comment
    assert read_words(path) == 12     # and x, 2, y, a, b (maths, not \\frac), code, here, f
    assert checked_exercises(path) == ["f"]
    assert "`f`" in exercises_section(path)
