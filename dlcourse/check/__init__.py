"""Exercise checks: call one on your function and it says what is wrong, not just that
something is. For example ``dl.check.linear_backward(my_linear_backward)``.

Each check raises :class:`ExerciseError` (an AssertionError) with a message that names the
case that failed, what was expected and what your function gave, and prints a short
confirmation when everything passes.
"""
from .basics import *  # noqa: F401,F403  (lessons 00-03)
from .cnn import *     # noqa: F401,F403  (lessons 04-07)
from .kernels import *  # noqa: F401,F403  (lesson 08)
from .playground import *  # noqa: F401,F403  (lesson 09)
