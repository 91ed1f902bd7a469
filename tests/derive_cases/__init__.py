"""Per-lesson cases for tests/test_derive.py (issue 26), one module per group of check modules:
``DERIVED`` (exercise -> regexes of the expression it asks for, which no markdown cell before
it may show in the learner's copy; it must hold its derivation back) and ``SHORTCUTS``
(exercise -> (check name, source of an answer that only calls the library))."""
