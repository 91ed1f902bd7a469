"""Derivation and shortcut cases of lessons 10-14, dlcourse/check/compression.py, deploy.py, data_parallel.py, capstone.py (see __init__.py)."""

DERIVED: dict[str, list[str]] = {
}

SHORTCUTS: dict[str, tuple[str, str]] = {
}
