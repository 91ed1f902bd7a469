"""What the exercise-check tests share: run a check on a wrong answer and hold its message to the
words that name the mistake."""
import inspect
import textwrap
import types

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


def learner_copy(f):
    """A copy of a library function, standing in for the learner's own code: its source compiled
    anew, so that it is the learner's (the library is closed while a check runs), with the
    library helpers it calls copied likewise (the backend stays open)."""
    namespace = dict(f.__globals__)
    for name in f.__code__.co_names:
        helper = namespace.get(name)
        if isinstance(helper, types.FunctionType) and helper.__module__.startswith("dlcourse") \
                and helper.__module__ != "dlcourse.backend":
            namespace[name] = learner_copy(helper)
    exec(compile(textwrap.dedent(inspect.getsource(f)), "<the learner's copy>", "exec"),  # noqa: S102
         namespace)
    return namespace[f.__name__]
