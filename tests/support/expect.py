"""What the exercise-check tests share: run a check on a wrong answer and hold its message to the
words that name the mistake."""
import pytest

from dlcourse.check import ExerciseError


def expect_fail(check, fn, *words):
    """``check(fn)`` must raise ExerciseError whose message holds every one of ``words``
    (printed, so that ``pytest -s`` shows what a learner would read)."""
    with pytest.raises(ExerciseError) as e:
        check(fn)
    msg = str(e.value)
    print("\n---", fn.__name__, "->", msg)
    for w in words:
        assert w in msg, (w, msg)
