"""Derivation and shortcut cases of lessons 08a-09, dlcourse/check/cuda.py and playground.py (see __init__.py)."""

DERIVED: dict[str, list[str]] = {
}

SHORTCUTS: dict[str, tuple[str, str]] = {
}
