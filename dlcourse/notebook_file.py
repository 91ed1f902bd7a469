"""A notebook file read and written as plain JSON, without nbformat.

Looking up an exercise, its hint or its solution (``dlcourse solution``, ``dl.check.hint``)
and putting one exercise back (``dlcourse reset``) need the cells' sources, not nbformat's
schema validation; importing nbformat (jsonschema, a grammar built at import) takes seconds,
so these paths read the file with ``json`` (:func:`read_notebook`) and write it back as
nbformat lays it out (:func:`write_notebook`). Writing the student notebooks, which validates
them, still goes through nbformat (``student.py``).
"""
from __future__ import annotations

import copy
import json

from ._io import atomic_write

__all__ = ["NotebookNode", "read_notebook", "write_notebook"]


class NotebookNode(dict):
    """A notebook read as plain JSON: a dict whose keys read as attributes (``nb.cells``,
    ``cell.source``), as nbformat's own ``NotebookNode`` does."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self[name] = value


def read_notebook(path) -> NotebookNode:
    """The notebook (nbformat 4) at ``path``, each cell's ``source`` joined into one string,
    read with ``json`` alone: looking up an exercise, a hint or a solution needs no schema
    validation, and importing nbformat (jsonschema) takes seconds. Another nbformat version
    is read, and converted, by nbformat."""
    with open(path, encoding="utf-8") as f:
        nb = json.load(f, object_hook=NotebookNode)
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        import nbformat                  # only for another version than 4
        return nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
    return nb


def write_notebook(nb, path) -> None:
    """Write a notebook that :func:`read_notebook` read, atomically and as nbformat lays it out
    (sources split into lines, keys sorted, indent 1, a final newline); everything else in it
    (outputs, metadata) goes back exactly as it was read."""
    nb = copy.deepcopy(nb)
    nb.get("metadata", {}).pop("signature", None)          # nbformat's transient keys
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("trusted", None)
        if isinstance(cell.get("source"), str):
            cell["source"] = cell["source"].splitlines(True)
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(nb, indent=1, sort_keys=True, separators=(",", ": "),
                           ensure_ascii=False) + "\n")
