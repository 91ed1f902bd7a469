"""Derivation and shortcut cases of lessons 04-07, dlcourse/check/cnn.py (see __init__.py)."""

DERIVED: dict[str, list[str]] = {
}

SHORTCUTS: dict[str, tuple[str, str]] = {
}
