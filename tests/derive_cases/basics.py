"""Derivation and shortcut cases of lessons 00-03, dlcourse/check/basics.py (see __init__.py)."""

DERIVED: dict[str, list[str]] = {
}

SHORTCUTS: dict[str, tuple[str, str]] = {
}
