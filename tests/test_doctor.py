"""`dlcourse doctor` per lesson (issue 29): it says "ready" only when every lesson can run, and
otherwise which lessons can, what each other one misses and the one command that brings it.
Its table of what each lesson needs (doctor.LESSON_NEEDS) is held to the notebooks' imports and
calls, and to pyproject.toml's extras. Missing packages are simulated (find_spec says None)."""
from __future__ import annotations

import ast
import io
import json
import re
import sys
from pathlib import Path

import pytest

from dlcourse import doctor

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
# Imported by a lesson but not a lesson's own need: the library's dependencies and JupyterLab's
# (doctor's REQUIRED and RECOMMENDED, every lesson needs them), the GPU's CuPy (optional: GPU
# cells degrade on the CPU), PyTorch (optional: a comparison run only where it is installed).
EVERY_LESSON = {module for _, module, _ in doctor.REQUIRED + doctor.RECOMMENDED} | {"IPython"}
OPTIONAL = {"cupy", "cupyx", "torch"}
# What a library call or a command in a lesson's code needs.
CALLS = {r"load_mnist1d": ("mnist1d",),
         r"\bdl\.widgets\.|import dlcourse\.widgets": ("ipywidgets",),
         r"\bdl\.autocast|\bround_to\(": ("ml_dtypes",),
         r"export_onnx": ("onnx",),
         r"\bdl\.protect\.": ("cryptography",),
         r'"dlcourse",\s*"serve"': ("fastapi", "uvicorn"),
         r"\bmpiexec": ("mpiexec",)}


def _code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for c in cells if c["cell_type"] == "code"
                     for line in "".join(c["source"]).splitlines())


def _needs(path: Path) -> set[str]:
    code = _code(path)
    imported = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    imported -= set(sys.stdlib_module_names) | EVERY_LESSON | OPTIONAL | {"dlcourse"}
    called = {need for pattern, needs in CALLS.items() if re.search(pattern, code)
              for need in needs}
    return imported | called


def test_the_table_says_what_each_lesson_imports_and_runs():
    found = {p.stem.split("_")[0]: _needs(p) for p in NOTEBOOKS}
    table = {lesson: set(doctor.LESSON_NEEDS.get(lesson, ())) for lesson in found}
    assert table == found, {k: (table[k], found[k]) for k in found if table[k] != found[k]}
    assert set(doctor.LESSON_NEEDS) <= set(found), "a lesson in the table has no notebook"
    assert doctor.lessons() == sorted(found)


def test_every_need_comes_from_the_extra_the_doctor_names():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is new in Python 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for name, (dist, extra, _) in doctor.EXTRA_NEEDS.items():
        requirements = (project["dependencies"] if extra is None
                        else project["optional-dependencies"][extra])
        assert any(re.match(rf"{re.escape(dist)}\b", r) for r in requirements), (name, extra)
        if extra is not None:                                   # and .[course] brings it too
            assert any(extra == "course" or f"dlcourse[{extra}]" in r
                       for r in project["optional-dependencies"]["course"]), extra
    assert {n for needs in doctor.LESSON_NEEDS.values() for n in needs} == set(doctor.EXTRA_NEEDS)


def _run(monkeypatch, hidden=(), no_programs=False, rest_present=False):
    """doctor()'s exit status and report, with the modules ``hidden`` not found. With
    ``rest_present``, every other package and program the doctor looks for counts as
    installed, so the report is the same whichever extras this environment has (a core-only
    install would otherwise add its own missing extras to every line checked)."""
    real = doctor.find_spec
    monkeypatch.setattr(doctor, "find_spec",
                        lambda name, *args: None if name in hidden else real(name, *args))
    if rest_present:
        found = doctor.installed
        monkeypatch.setattr(doctor, "installed", lambda dist, module: None if module in hidden
                            else found(dist, module) or "9.9 (stand-in)")
        if not no_programs:
            monkeypatch.setattr(doctor, "program", lambda name: f"/usr/bin/{name}")
    if no_programs:
        monkeypatch.setattr(doctor, "program", lambda name: None)
    out = io.StringIO()
    return doctor.doctor(out), out.getvalue()


def test_ready_only_when_every_lesson_can_run(monkeypatch):
    status, out = _run(monkeypatch)
    if "Lessons:" in out or "not yet for the notebooks" in out:
        pytest.skip("this environment lacks an extra (the course install has them all)")
    assert status == 0 and "Result: ready for every lesson." in out and "Lessons:" not in out


def test_missing_extras_are_named_per_lesson_with_the_command(monkeypatch):
    status, out = _run(monkeypatch, hidden={"fastapi", "mpi4py"}, no_programs=True,
                       rest_present=True)
    assert status == 0                                     # the library itself runs
    assert "fastapi is missing (lessons 12, 12b: the prediction service)" in out
    assert "mpiexec is not on the PATH (lessons 13, 13b" in out
    assert '  warn  12 needs fastapi: python -m pip install -e ".[serve]"' in out
    assert '  warn  12b needs fastapi: python -m pip install -e ".[serve]"' in out
    assert '  warn  13 needs mpi4py, mpiexec: python -m pip install -e ".[distributed]"' in out
    assert ('for lessons 12, 12b, run python -m pip install -e ".[serve]" in the course folder '
            '(it installs fastapi)') in out
    assert '  warn  13b needs mpi4py, mpiexec: python -m pip install -e ".[distributed]"' in out
    assert "Result: ready for lessons 00-11b and 14-16b; not yet for 12-13b" in out
    assert "Result: ready for every lesson" not in out


def test_a_missing_core_package_names_its_lessons_and_pip_install_dot(monkeypatch):
    status, out = _run(monkeypatch, hidden={"mnist1d", "ml_dtypes"}, rest_present=True)
    assert status == 0
    assert "  warn  04b needs mnist1d: python -m pip install -e .\n" in out
    assert "  warn  10 needs ml_dtypes: python -m pip install -e .\n" in out
    assert "not yet for 04b, 04c, 07, 07b and 10" in out


def test_without_jupyterlab_no_lesson_is_ready(monkeypatch):
    status, out = _run(monkeypatch, hidden={"jupyterlab", "onnx"}, rest_present=True)
    assert status == 0 and "not yet for the notebooks (no jupyterlab)" in out
    assert "Lessons:" not in out and '".[serve]"' in out     # onnx's fix is still listed


def test_lesson_ranges():
    every = ["00", "01", "02", "03", "04a", "12", "12b", "13", "14"]
    assert doctor.lesson_ranges(["00", "01", "02", "03", "04a", "14"], every) == "00-04a and 14"
    assert doctor.lesson_ranges(["12", "12b", "13"], every) == "12, 12b and 13"
    assert doctor.lesson_ranges(["02"], every) == "02"
