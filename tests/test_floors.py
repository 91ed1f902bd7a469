"""The versions pyproject.toml claims are the versions CI tests (issue 18): .ci/run installs
.ci/floors.txt exactly, with requires-python's oldest Python, and runs the unit tests there."""
import re
from pathlib import Path

from packaging.version import Version

try:
    import tomllib
except ImportError:           # Python 3.10: pytest brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _lower_bounds(requirements):
    """{name: lower bound} of requirements written ``name[extra]>=x.y`` (others are left out)."""
    bounds = {}
    for req in requirements:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][0-9A-Za-z.]*[0-9A-Za-z])", req)
        if m:
            bounds[m.group(1).lower()] = m.group(3)
    return bounds


def _floors():
    pins = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f".ci/floors.txt: {line!r} must pin one version with =="
            pins[name.strip().lower()] = version.strip()
    return pins


def test_floors_are_pyprojects_lower_bounds():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _lower_bounds(project["dependencies"])
    everywhere = dict(runtime)
    for extra in project["optional-dependencies"].values():
        everywhere.update(_lower_bounds(extra))
    pins = _floors()
    assert not set(runtime) - set(pins), \
        f".ci/floors.txt lacks the runtime dependencies {sorted(set(runtime) - set(pins))}"
    for name, version in pins.items():
        assert name in everywhere, f".ci/floors.txt pins {name}, which pyproject.toml does not bound"
        assert Version(version) == Version(everywhere[name]), \
            f".ci/floors.txt pins {name}=={version}; pyproject.toml says >={everywhere[name]}"


def test_ci_runs_the_floors_with_requires_pythons_oldest_python():
    python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert re.fullmatch(r">=\d+\.\d+", python), f"requires-python is {python!r}: .ci/run reads >=X.Y"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "-c .ci/floors.txt" in ci and "requires-python" in ci
