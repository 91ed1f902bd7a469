"""Fill .whl/ with the wheels the lent GPU machine lacks, for benchmarks/gpu_check.sh.

    python benchmarks/gpu_check_wheels.py [--dest .whl]

The GPU machine (docs/gpu_check.md) has no network; its Python 3.12 already holds NumPy, CuPy,
PyTorch, onnx, onnxruntime, pytest, matplotlib, scikit-learn, ml_dtypes and threadpoolctl. What
the check needs beyond them comes in two lists:

* WHEELS: mnist1d (the course's dependency) and nbval with the notebook stack (ipykernel,
  jupyter_client, ...), downloaded without their dependencies (each one needed is named here);
* SERVE_WHEELS: FastAPI, uvicorn, httpx (FastAPI's TestClient) and cryptography (signed
  checkpoints), for the service's tests (lessons 12 and 12b; the check's "service tests"
  step). They are downloaded with their dependencies resolved together (pydantic pins the one
  pydantic-core it works with), from SERVE_REQUIREMENTS; what pip fetched is compared with
  SERVE_WHEELS, and a difference is printed. The machine has some of them (anyio, httpx,
  typing-extensions, ...), in versions nobody has read: the carried ones are the versions
  these were resolved with, and are installed in front of the machine's.

Run this where pip reaches PyPI: wheels for CPython 3.12 on x86-64 Linux, about 27 MB in all
(the size is printed at the end). .whl/ is git-ignored; the device call carries it. A project
with two versions in .whl/ stops the check's install, so the script fails on one: empty .whl/
and run it again.
"""
import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WHEELS = """mnist1d nbval nbclient nbformat fastjsonschema jsonschema jsonschema-specifications
referencing rpds-py ipykernel ipython ipython-pygments-lexers jedi parso pexpect ptyprocess
prompt-toolkit wcwidth stack-data executing asttokens pure-eval traitlets comm debugpy
matplotlib-inline nest-asyncio2 jupyter-client jupyter-core platformdirs pyzmq tornado
ipywidgets widgetsnbextension jupyterlab-widgets""".split()

#: What the service's tests import (tests/test_serve.py, test_serve_engines.py,
#: test_cli_language_model.py, test_signature_notices.py, test_deploy_refusals.py,
#: test_protect.py): pip resolves their dependencies ...
SERVE_REQUIREMENTS = ["fastapi", "uvicorn", "httpx", "cryptography"]
#: ... to these (PyPI, 2026-11-29; sniffio is no longer among them: anyio 4.16 and httpx 0.28
#: do not need it).
SERVE_WHEELS = """fastapi starlette pydantic pydantic-core annotated-types typing-inspection
annotated-doc opentelemetry-api typing-extensions anyio idna uvicorn click h11 httpx httpcore
certifi cryptography cffi pycparser""".split()
#: Never carried, even where a dependency asks for it: it would stand in front of the
#: machine's own, which CuPy and PyTorch were built against.
NEVER_CARRY = {"numpy"}

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any"]


def project(wheel: Path) -> str:
    """The normalized project name of a wheel file: 'pydantic_core-2.50.5-...whl' -> 'pydantic-core'."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def pip_download(dest, names, deps):
    """pip download of ``names`` into ``dest`` for CPython 3.12 on x86-64 Linux, binary wheels
    only; with ``deps`` their dependencies resolved too. Returns pip's exit code."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(dest)]
    cmd += [] if deps else ["--no-deps"]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    return subprocess.call(cmd + list(names))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=str(Path(__file__).resolve().parents[1] / ".whl"))
    args = ap.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    if pip_download(dest, WHEELS, deps=False):
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        if pip_download(tmp, SERVE_REQUIREMENTS, deps=True):
            return 1
        fetched = sorted(Path(tmp).glob("*.whl"))
        names = {project(w) for w in fetched}
        for wheel in fetched:
            if project(wheel) in NEVER_CARRY:
                print(f"left out {wheel.name}: the machine's own {project(wheel)} must stay in use")
            else:
                shutil.move(str(wheel), dest / wheel.name)
    names -= NEVER_CARRY
    if names != set(SERVE_WHEELS):
        print(f"note: pip resolved the service's stack to {sorted(names)}; SERVE_WHEELS lists "
              f"{sorted(SERVE_WHEELS)}. New: {sorted(names - set(SERVE_WHEELS))}; no longer "
              f"needed: {sorted(set(SERVE_WHEELS) - names)}. Update SERVE_WHEELS.")
    wheels = sorted(dest.glob("*.whl"))
    versions = {}
    for wheel in wheels:
        versions.setdefault(project(wheel), []).append(wheel.name)
    twice = {name: files for name, files in versions.items() if len(files) > 1}
    if twice:
        print(f"{dest} holds two versions of {sorted(twice)} ({twice}): the check's pip install "
              f"stops on that. Empty {dest} and run this again.", file=sys.stderr)
        return 1
    size = sum(w.stat().st_size for w in wheels)
    print(f"{dest}: {len(wheels)} wheels, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
