"""Learner code calls only public API: no notebook code cell reaches into a private name of
dlcourse (``dl.kernels._build``, ``dl.recorded._tell``, ``from dlcourse.x import _y``); and the
README's list of lessons is the notebooks that exist."""
import ast
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def _code(path):
    """(cell number, Python source) of each code cell, IPython magics and shell lines removed."""
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "code":
            src = "".join(cell["source"])
            yield i, "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                               for line in src.splitlines())


def _dlcourse_names(tree):
    """Names bound to dlcourse or one of its modules (``import dlcourse as dl``, ...)."""
    names = {"dlcourse"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "dlcourse":
                    names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dlcourse":
            names.update(a.asname or a.name for a in node.names)
    return names


def private_uses(source):
    """Every private name of dlcourse the code reaches: ``<dlcourse name>(.x)*._y`` attribute
    chains, and ``from dlcourse... import _y`` / ``import dlcourse._y``."""
    tree = ast.parse(source)
    roots, found = _dlcourse_names(tree), []
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:   # whole chains only
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in roots:
                found += [f"{base.id}.{'.'.join(reversed(chain))}"
                          for a in chain if a.startswith("_") and not a.startswith("__")][:1]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dlcourse":
            parts = node.module.split(".") + [a.name for a in node.names]
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if any(p.startswith("_") and not p.startswith("__") for p in parts)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "dlcourse"
                      and any(p.startswith("_") for p in a.name.split(".")[1:])]
    return found


def test_the_scan_finds_private_names():
    assert private_uses("import dlcourse as dl\ndl.kernels._build.get_kernel('a', 'b')") == [
        "dl.kernels._build.get_kernel"]
    assert private_uses("from dlcourse.kernels import _build") == ["from dlcourse.kernels import _build"]
    assert private_uses("from dlcourse._io import atomic_write") == ["from dlcourse._io import atomic_write"]
    assert private_uses("import dlcourse._validate") == ["dlcourse._validate"]
    assert private_uses("import dlcourse as dl\ndl.kernels.source('a')\nx._private\nlayer.__class__") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_code_uses_only_public_dlcourse_names(path):
    bad = [f"cell {i}: {use}" for i, src in _code(path) for use in private_uses(src)]
    assert not bad, (f"{path.name} reaches into private names of dlcourse (make them public "
                     f"where they live, or use the public API): " + "; ".join(bad))


def test_the_readme_lists_every_lesson_and_counts_them():
    """README's table of lessons names every notebook once, in order, and nothing else, and its
    "How long" line counts them (a learner plans their time with it)."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme.split("## The lessons", 1)[1].split("\n\n", 2)[1]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    assert listed == [p.stem for p in NOTEBOOKS]
    assert f"**How long**: {len(NOTEBOOKS)} lessons" in readme
