""""Did you mean ...?" for a misspelled name: a command, a data set, a lesson, an exercise.

Shared by the command line (``cli/``), the workspace commands (``workspace.py``) and the
exercise finder (``student.py``); it imports none of them.
"""
from __future__ import annotations

import difflib

__all__ = ["did_you_mean"]


def did_you_mean(word: str, choices, n: int = 3) -> str:
    """``" Did you mean 'conv2d_backward'?"`` naming the closest few of ``choices`` (at most
    ``n``), or ``""`` when none is close. Case does not count (``MNIST`` -> ``'mnist'``), and a
    choice that differs only in case comes first."""
    choices = [str(c) for c in choices]
    by_lower = {}
    for c in choices:
        by_lower.setdefault(c.lower(), c)
    word = str(word)
    close = [by_lower[c] for c in difflib.get_close_matches(word.lower(), list(by_lower), n=n,
                                                            cutoff=0.6)]
    if not close:
        return ""
    named = [repr(c) for c in close]
    either = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
    return f" Did you mean {either}?"
