"""The set-up files agree with pyproject.toml (issue 29): the conda route installs exactly what
the pip route installs, because its pip section is the pip route (``-e .[course]``, and
``.[course,gpu]`` for the GPU file), beside conda's Python and pip only; both headers say
`dlcourse start`, not the solved notebooks; and the version lives in one module."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import dlcourse

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib", reason="tomllib is new in Python 3.11")
yaml = pytest.importorskip("yaml", reason="PyYAML comes with JupyterLab (jupyter_events)")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONDA_FILES = {"environment.yml": ("dlcourse", ["course"]),
               "environment-gpu.yml": ("dlcourse-gpu", ["course", "gpu"])}


def _conda(name):
    text = (ROOT / name).read_text()
    return text, yaml.safe_load(text)


@pytest.mark.parametrize("name", CONDA_FILES)
def test_a_conda_file_installs_what_pip_installs(name):
    env_name, extras = CONDA_FILES[name]
    text, env = _conda(name)
    assert env["name"] == env_name and env["channels"] == ["conda-forge"]
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    floor = PYPROJECT["project"]["requires-python"]              # ">=3.10"
    assert conda == [f"python{floor}", "pip"], \
        f"{name}: conda brings Python and pip only; every package comes from pyproject.toml"
    assert pip == [[f"-e .[{','.join(extras)}]"]]
    for extra in extras:
        assert extra in PYPROJECT["project"]["optional-dependencies"], extra
    assert f'pip install -e ".[{",".join(extras)}]"' in text     # the header names the pip route


@pytest.mark.parametrize("name", CONDA_FILES)
def test_a_conda_files_header_opens_the_learners_copy(name):
    header = "".join(line for line in (ROOT / name).read_text().splitlines(keepends=True)
                     if line.startswith("#"))
    assert "dlcourse start" in header and "dlcourse doctor" in header
    assert "jupyter lab notebooks" not in header                 # the solved copies


def test_the_course_extra_brings_every_lesson_and_the_gpu_extra_cupy_14():
    extras = PYPROJECT["project"]["optional-dependencies"]
    course = " ".join(extras["course"])
    for needed in ("jupyterlab", "ipywidgets", "ipykernel", "dlcourse[serve]",
                   "dlcourse[protect]", "dlcourse[distributed]"):
        assert needed in course, needed
    cupy = [r for r in extras["gpu"] if r.startswith("cupy")]
    assert cupy and all(re.search(r">=\s*(1[4-9]|[2-9]\d)", r) for r in cupy), cupy
    header = (ROOT / "environment-gpu.yml").read_text()
    assert "CuPy >= 14" in header and "cupy>=13" not in header


def test_the_version_lives_in_one_module():
    from dlcourse import _version
    assert dlcourse.__version__ == _version.__version__ == PYPROJECT["project"]["version"]
    for path in (ROOT / "dlcourse").rglob("*.py"):             # never the package itself
        assert not re.search(r"from \.+ import .*__version__", path.read_text()), path
