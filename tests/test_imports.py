"""Imports run one way: no dlcourse module imports, even inside a function, a module that
imports it back (directly or round a longer circle), and none imports another module's
private names. Read from the source with ``ast``, so an import that only runs on the GPU
counts too."""
import ast
from pathlib import Path

import dlcourse

PACKAGE = Path(dlcourse.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path):
    """(imported module, [names]) for every import statement in the module, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            names = [a.name for a in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            for sub in submodules:                     # `from . import layers`: the module
                yield sub, []
            rest = [n for n in names if f"{target}.{n}" not in MODULES]
            if rest or not submodules:
                yield target, rest


def _graph():
    """module -> the dlcourse modules it imports. The root package, dlcourse/__init__.py, is
    the public face that imports everything, so a name taken from it (``from .. import MLP``)
    closes a circle through every module: it counts like any import. Only its __version__
    (from _version.py, which imports nothing) is not followed. Every other package
    (dlcourse.kernels, ...) is a module like the rest."""
    return {name: {t for t, names in _imports(name, path) if t in MODULES
                   and not (t == "dlcourse" and names and set(names) <= {"__version__"})}
            for name, path in MODULES.items()}


def _cycle(graph):
    """One import cycle as a list of modules [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_among_dlcourse_modules():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle_through_an_import_inside_a_function():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_backend_imports_no_other_dlcourse_module():
    assert _graph()["dlcourse.backend"] == set()


NOT_YET = ()     # every module is held to it


def test_no_module_imports_another_modules_private_names():
    found = [f"{name} imports {target}.{n}"
             for name, path in MODULES.items() if not (NOT_YET and name.startswith(NOT_YET))
             for target, names in _imports(name, path)
             if target.startswith("dlcourse") for n in names
             if n.startswith("_") and not n.startswith("__") and target != name]
    assert found == []


def test_the_reading_map_holds():
    """What a learner opens for lessons 06a-06b holds those lessons: conv.py imports neither the
    kernels (it asks layer_base.kernels_for, into which dlcourse.kernels plugs) nor dl.infer's
    module;
    layers.py holds the layers' math and imports none of the rebuilding (its build_layer is
    only re-exported for dlcourse.quantize), and stays under its line budget."""
    graph = _graph()
    assert not {m for m in graph["dlcourse.conv"]
                if m.startswith(("dlcourse.kernels", "dlcourse.fast_inference"))}
    from_base = {n for target, names in _imports("dlcourse.layers", MODULES["dlcourse.layers"])
                 if target == "dlcourse.layer_base" for n in names}
    assert from_base <= {"Layer", "Container", "checked", "check_init", "eval_mode", "build_layer"}
    source = MODULES["dlcourse.layers"].read_text()
    for plumbing in ("def build_layer", "LAYERS", "__init_subclass__", "def state_dict",
                     "def load_state_dict", "def map_arrays", "build_layer("):
        assert plumbing not in source, plumbing
    assert len(source.splitlines()) <= 500    # 350 before LayerNorm, GlobalAvgPool2d, Residual (07b)


def test_no_module_is_over_700_lines_among_the_layers():
    for name in ("layers", "layer_base", "conv", "fusion", "fast_inference", "checkpoint",
                 "shapes", "kernels.unfold", "kernels", "kernels._build"):
        lines = len(MODULES[f"dlcourse.{name}"].read_text().splitlines())
        assert lines <= 700, f"dlcourse.{name} has {lines} lines"


def test_no_library_module_is_over_600_lines():
    """Issue 40: a file holds one concern, and one past 600 lines is split along its seams, as
    cli.py became cli/ (one module per family of commands, each under 400 lines), and
    widgets/playground.py, train.py, student.py and checkpoint.py gave up their data sets and
    picture, argument checks, student version and sync, and file format. dlcourse/check/ has
    its own budget (below)."""
    lines = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()
             if name != "dlcourse.check" and not name.startswith("dlcourse.check.")}
    assert {name: n for name, n in lines.items() if n > 600} == {}
    assert {name: n for name, n in lines.items() if name.startswith("dlcourse.cli") and n > 400} == {}


def test_no_check_module_is_over_700_lines():
    """A check module holds one stretch of the course (issue 29): one that grows past 700 lines
    is split along lesson lines, as basics.py (00-01) and gradient_descent.py (02a-02b) were, or
    cuda.py (08a-08b) and gpu_performance.py (08c-08d)."""
    long = {name: lines for name, path in MODULES.items() if name.startswith("dlcourse.check.")
            if (lines := len(path.read_text().splitlines())) > 700}
    assert long == {}, f"split these check modules along lesson lines: {long}"



def test_the_reading_map_names_files_and_functions_that_exist():
    """docs/reading_map.md: every `dlcourse/...py` it names exists and has every name listed
    beside it (text in parentheses is commentary)."""
    import importlib
    import re
    text = (PACKAGE.parent / "docs" / "reading_map.md").read_text(encoding="utf-8")
    missing, lines = [], 0
    for line in text.splitlines():
        match = re.match(r"- (?:checks \()?`(dlcourse/[\w/]+\.py)`\)?: (.*)", line)
        if not match:
            continue
        lines += 1
        path, rest = match.groups()
        assert (PACKAGE.parent / path).is_file(), f"the map names {path}, which does not exist"
        # a package's __init__.py is the package itself (importing "pkg.__init__" would run it
        # a second time, as another module)
        module = importlib.import_module(
            path.removesuffix(".py").replace("/", ".").removesuffix(".__init__"))
        names = re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", rest))
        missing += [f"{path}: {n}" for n in names if not hasattr(module, n)]
    assert lines > 30 and missing == []


def test_the_training_loop_module_stays_one_concern():
    """Issue 29: train.py held more than one concern (763 lines); the loop stays under 700 and
    the confusion matrix lives in metrics.py."""
    assert len(MODULES["dlcourse.train"].read_text().splitlines()) <= 700
