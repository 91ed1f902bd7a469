"""``dlcourse doctor``: one screen that says whether this set-up can run the course, and how
to fix what is missing.

Introduced in notebook ``00_setup_and_gpu_arrays`` (and README's first steps). ``doctor()``
returns 0 when the library runs (the CPU is enough), 1 when something it needs is missing; the
command line (``dlcourse/cli/``) calls it. Beyond the library, it checks what each lesson
needs (``LESSON_NEEDS``: the extras' packages, ``mpiexec``) and says "ready" only when every
lesson can run; otherwise which lessons can, and the one command that brings the others.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

import numpy as np

__all__ = ["doctor", "installed", "program", "lessons", "lesson_problems", "lesson_ranges",
           "parse_nvidia_smi", "cupy_wheel", "LESSON_NEEDS", "EXTRA_NEEDS", "install_command"]

# ======================================================================================
REQUIRED = [  # (distribution, import name, why)
    ("numpy", "numpy", "arrays on the CPU"),
    ("scikit-learn", "sklearn", "the digits dataset and data splits"),
    ("tqdm", "tqdm", "progress bars"),
    ("matplotlib", "matplotlib", "plots in the notebooks"),
    ("threadpoolctl", "threadpoolctl", "choosing the number of BLAS threads"),
    ("nbformat", "nbformat", "dlcourse student-notebooks"),
]
RECOMMENDED = [  # the "course" extra: pip install -e '.[course]'
    ("jupyterlab", "jupyterlab", "to open the notebooks"),
    ("ipykernel", "ipykernel", "to run Python in the notebooks"),
    ("ipywidgets", "ipywidgets", "sliders and live progress bars in the notebooks"),
]
COURSE_INSTALL = 'python -m pip install -e ".[course]"'   # README's first command, its install

# What a lesson needs beyond the library and JupyterLab, read from its notebook (a test holds
# this table to the notebooks): the packages it imports, those of the library functions it
# calls (dl.data.load_mnist1d: mnist1d; dl.widgets: ipywidgets), those of the commands it runs
# (`dlcourse serve`: FastAPI and uvicorn), and `mpiexec`. Lessons not named need nothing more.
LESSON_NEEDS: dict[str, tuple[str, ...]] = {
    "04b": ("mnist1d", "ipywidgets"),
    "04c": ("mnist1d",),
    "04d": ("ipywidgets",),
    "07": ("mnist1d", "ipywidgets"),
    "07b": ("mnist1d",),
    "10": ("ml_dtypes",),
    "12": ("onnx", "onnxruntime", "fastapi", "uvicorn"),
    "12b": ("cryptography", "fastapi", "uvicorn"),
    "13": ("mpi4py", "mpiexec"),
    "13b": ("mpi4py", "mpiexec"),
}
# Each of those: (its distribution, the extra of pyproject.toml that installs it; None: the
# library's own dependencies, `pip install -e .`), and what it is for.
EXTRA_NEEDS: dict[str, tuple[str, str | None, str]] = {
    "mnist1d": ("mnist1d", None, "the MNIST-1D signals"),
    "ml_dtypes": ("ml_dtypes", None, "bfloat16 and float8 on NumPy"),
    "ipywidgets": ("ipywidgets", "course", "the interactive panels"),
    "onnx": ("onnx", "serve", "ONNX export"),
    "onnxruntime": ("onnxruntime", "serve", "running the exported model"),
    "fastapi": ("fastapi", "serve", "the prediction service"),
    "uvicorn": ("uvicorn", "serve", "the prediction service's web server"),
    "cryptography": ("cryptography", "protect", "signatures and encryption"),
    "mpi4py": ("mpi4py", "distributed", "MPI from Python"),
    "mpiexec": ("mpich", "distributed", "the program that starts the MPI ranks"),
}
PROGRAMS = ("mpiexec",)      # found as a program, not imported
CUPY_DISTS = ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")
MIN_PYTHON = (3, 10)


def _version_of(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed(dist: str, module: str) -> str | None:
    """The version when the package is installed and importable (found), else None."""
    version = _version_of(dist)
    try:
        found = find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return None
    return version or "version unknown"


def program(name: str) -> str | None:
    """Where the program ``name`` is (this environment's first, as lesson 13 looks), or None."""
    if name == "mpiexec":
        from .distributed import mpiexec_path
        return mpiexec_path()
    import shutil
    return shutil.which(name)


def install_command(extra: str | None) -> str:
    """The one command that installs an extra's packages (None: the library's own)."""
    if extra == "distributed" and platform.system() == "Windows":
        return ('python -m pip install -e ".[distributed]" and Microsoft MPI (MS-MPI, which '
                'brings mpiexec)')
    return "python -m pip install -e ." if extra is None else \
        f'python -m pip install -e ".[{extra}]"'


def lessons() -> list[str]:
    """The lesson ids (``00`` ... ``14``) of the course notebooks, in order."""
    try:
        from .student import notebooks_dir
        ids = {p.stem.split("_")[0] for p in notebooks_dir().glob("[0-9]*.ipynb")
               if ".updated" not in p.name}
    except FileNotFoundError:
        ids = set(LESSON_NEEDS)
    return sorted(ids)


def lesson_problems(missing) -> dict[str, list[str]]:
    """lesson -> what it needs of ``missing`` (names of LESSON_NEEDS), for the lessons that
    cannot run."""
    missing = set(missing)
    return {lesson: [n for n in needs if n in missing]
            for lesson, needs in LESSON_NEEDS.items() if missing & set(needs)}


def lesson_ranges(ids, every) -> str:
    """``"00-11b, 12b and 14"``: ``ids`` as runs of consecutive lessons of ``every`` (a run
    of four or more as first-last, shorter ones lesson by lesson)."""
    runs, run = [], []
    for lesson in every:
        if lesson in ids:
            run.append(lesson)
        elif run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    parts = [p for r in runs for p in ([f"{r[0]}-{r[-1]}"] if len(r) >= 4 else r)]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def doctor(out=None) -> int:
    """Print the set-up report; return 0 when the course can run, 1 when not."""
    out = out or sys.stdout
    from . import backend
    from ._version import __version__

    rows: list[tuple[str, str]] = []     # (mark, text)
    fixes: list[str] = []
    required_missing = False

    def row(mark, text, fix=None):
        rows.append((mark, text))
        if fix:
            fixes.append(fix)

    # -- Python and the required packages ----------------------------------------------
    py = sys.version_info
    python_ok = py[:2] >= MIN_PYTHON
    row("ok" if python_ok else "FAIL", f"Python {platform.python_version()} ({sys.executable})",
        None if python_ok else f"Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer is needed: "
                               f"install a newer Python and make a new virtual environment.")
    required_missing |= not python_ok
    row("ok", f"dlcourse {__version__} ({Path(__file__).resolve().parent})")
    for dist, module, why in REQUIRED:
        version = installed(dist, module)
        if version is None:
            required_missing = True
            row("FAIL", f"{dist} is missing (needed for {why})", f"pip install {dist}")
        elif dist == "numpy":
            info = backend.device_info("cpu")
            threads = info.get("blas_threads")
            blas = info.get("blas") or "BLAS"
            detail = f"{blas}, {threads} threads" if threads else "BLAS threads unknown"
            row("ok", f"NumPy {version} ({detail}; {info.get('cpu_count')} CPU cores)")
        else:
            row("ok", f"{dist} {version}")
    course_missing = []
    for dist, module, why in RECOMMENDED:
        version = installed(dist, module)
        if version is None:
            course_missing.append(dist)
            row("warn", f"{dist} is missing ({why})")
        else:
            row("ok", f"{dist} {version}")
    if course_missing:   # one command for all of them: the README's
        fixes.append(f"for the notebooks, run {COURSE_INSTALL} in the course folder (it installs "
                     f"{', '.join(course_missing)})")

    # -- what some lessons need beyond that ----------------------------------------------
    missing = list(course_missing)
    for name, (dist, extra, why) in EXTRA_NEEDS.items():
        if name in [d for d, _, _ in RECOMMENDED]:
            continue                                   # shown above
        users = [lesson for lesson, needs in LESSON_NEEDS.items() if name in needs]
        where = f"lesson{'s' if len(users) > 1 else ''} {', '.join(users)}"
        found = program(name) if name in PROGRAMS else installed(dist, name)
        if found is None:
            missing.append(name)
            gone = "is not on the PATH" if name in PROGRAMS else "is missing"
            row("warn", f"{name} {gone} ({where}: {why})")
        else:
            row("ok", f"{name} {found} ({where})")
    problems = lesson_problems(missing)
    by_extra: dict[str | None, list[str]] = {}         # the commands that fix them, in order
    for name in missing:
        by_extra.setdefault(EXTRA_NEEDS.get(name, (None, "course", ""))[1], []).append(name)
    for extra, names in by_extra.items():
        if extra == "course" and course_missing:
            continue                                   # said above, for the notebooks
        users = [lesson for lesson, needs in problems.items() if set(names) & set(needs)]
        fixes.append(f"for lesson{'s' if len(users) > 1 else ''} {', '.join(users)}, run "
                     f"{install_command(extra)} in the course folder (it installs "
                     f"{', '.join(EXTRA_NEEDS[n][0] for n in names)})")

    # -- the GPU ------------------------------------------------------------------------
    cupy_dists = [(d, _version_of(d)) for d in CUPY_DISTS]
    cupy_dists = [(d, v) for d, v in cupy_dists if v]
    if len(cupy_dists) > 1:
        names = ", ".join(f"{d} {v}" for d, v in cupy_dists)
        row("warn", f"several CuPy packages are installed ({names})",
            "Keep one: pip uninstall the others, then reinstall the one matching your driver.")
    gpu_ok = backend.gpu_available()
    if gpu_ok:
        info = backend.device_info("gpu")
        row("ok", f"CuPy {info['cupy']}" + (f" ({cupy_dists[0][0]})" if cupy_dists else ""))
        row("ok", f"GPU: {info['name']}, {info['memory_total_gb']} GiB "
                  f"({info['memory_free_gb']} GiB free), compute capability "
                  f"{info['compute_capability']}")
        row("ok", f"CUDA driver supports CUDA {info['driver_version']}; "
                  f"CuPy's CUDA runtime is {info['cuda_runtime_version']}")
    else:
        problem = backend.gpu_problem() or "no GPU"
        smi = _nvidia_smi()
        if smi:   # the driver sees a GPU that CuPy cannot use: say which CuPy fits it
            row("--", f"NVIDIA GPU: {smi['name']}, {smi['memory']}, driver {smi['driver']}"
                      + (f" (supports CUDA {smi['cuda']})" if smi.get("cuda") else ""))
            wheel = cupy_wheel(smi.get("cuda"))
            if wheel and not cupy_dists:
                problem += f" For this driver: pip install {wheel}"
        if cupy_dists:
            row("warn", f"{cupy_dists[0][0]} {cupy_dists[0][1]} is installed, but the GPU "
                        f"cannot be used", problem)
        else:
            row("--", "CuPy is not installed: the course runs on the CPU (the GPU parts are "
                      "optional)", None)
            fixes.append("(optional, for the GPU parts) " + problem)

    # -- the device the course will use --------------------------------------------------
    # (worked out here rather than with get_device(), which would print its CPU notice, but
    # with backend's own reading of the name, so doctor accepts exactly what a run accepts)
    requested = os.environ.get(backend.ENV_VAR, "auto")
    try:
        name = backend.device_name(requested)
    except ValueError:
        name = None
    unset = f"unset {backend.ENV_VAR} (the default, auto, uses the GPU when it can, else the CPU)"
    if name is None:
        required_missing = True
        row("FAIL", f"{backend.ENV_VAR}={requested!r} is not a device",
            f"Set {backend.ENV_VAR} to auto, cpu or gpu, or {unset}.")
    elif name == "gpu" and not gpu_ok:
        required_missing = True
        row("FAIL", f"{backend.ENV_VAR}={requested} asks for the GPU, which cannot be used",
            f"Make the GPU work (see above), or {unset}.")
    else:
        device = "cpu" if name == "cpu" or not gpu_ok else "gpu"
        row("ok", f"the course will run on the {device.upper()} ({backend.ENV_VAR}={requested})")

    # -- a tiny training step, to prove the library runs -----------------------------------
    if not required_missing:
        try:
            ms = _smoke_test()
            row("ok", f"a small MLP trains on the CPU ({ms:.0f} ms for 20 steps)")
        except Exception as err:   # report, do not crash: this is the doctor
            required_missing = True
            row("FAIL", f"a small training run failed: {type(err).__name__}: {err}",
                "Reinstall dlcourse (pip install -e . in the course folder) and run "
                "`dlcourse doctor` again; if it still fails, report the line above.")

    # -- the report ---------------------------------------------------------------------
    print("dlcourse doctor: can this set-up run the course?\n", file=out)
    for mark, text in rows:
        print(f"  {mark:<4}  {text}", file=out)
    every = lessons()
    notebooks = not ({"jupyterlab", "ipykernel"} & set(course_missing))
    if notebooks and problems:
        print("\nLessons:", file=out)
        ready = [lesson for lesson in every if lesson not in problems]
        if ready:
            print(f"  ok    {lesson_ranges(ready, every)}", file=out)
        for lesson, names in problems.items():
            extras = dict.fromkeys(EXTRA_NEEDS[n][1] for n in names)
            print(f"  warn  {lesson} needs {', '.join(names)}: "
                  f"{' and '.join(install_command(e) for e in extras)}", file=out)
    if fixes:
        print("\nTo fix:", file=out)
        for fix in fixes:
            print(f"  - {fix}", file=out)
    print("", file=out)
    if required_missing:
        print("Result: not ready (see FAIL above). Fix it, then run `dlcourse doctor` "
              "again.", file=out)
        return 1
    where = "on the GPU and the CPU" if gpu_ok else "on the CPU (the GPU parts will be skipped)"
    if {"jupyterlab", "ipykernel"} & set(course_missing):
        print(f"Result: ready for `dlcourse train`, not yet for the notebooks (no "
              f"{' or '.join(d for d in ('jupyterlab', 'ipykernel') if d in course_missing)}): "
              f"run {COURSE_INSTALL}. The library runs {where}.", file=out)
        return 0
    if problems:
        ready = [lesson for lesson in every if lesson not in problems]
        print(f"Result: ready for lessons {lesson_ranges(ready, every)}; not yet for "
              f"{lesson_ranges(list(problems), every)} (see \"To fix\"; {COURSE_INSTALL} "
              f"installs what every lesson needs). The library runs {where}.", file=out)
        return 0
    print(f"Result: ready for every lesson. The course runs {where}.", file=out)
    return 0


def _nvidia_smi() -> dict | None:
    """What ``nvidia-smi`` says about the first GPU (works without CuPy), or None."""
    import shutil
    import subprocess
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        query = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=10)
        header = subprocess.run([exe], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if query.returncode != 0:
        return None
    return parse_nvidia_smi(query.stdout, header.stdout)


def parse_nvidia_smi(query_csv: str, header: str) -> dict | None:
    """``{"name", "driver", "memory", "cuda"}`` from nvidia-smi's CSV query and its table."""
    import re
    lines = [line for line in query_csv.strip().splitlines() if line.strip()]
    if not lines:
        return None
    parts = [p.strip() for p in lines[0].split(",")]
    if len(parts) < 3:
        return None
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", header or "")
    return {"name": parts[0], "driver": parts[1], "memory": parts[2],
            "cuda": cuda.group(1) if cuda else None}


def cupy_wheel(cuda: str | None) -> str | None:
    """What to pip install for the CUDA version a driver supports ("12.4" -> the CuPy for
    CUDA 12 with its CUDA libraries: "'cupy-cuda12x[ctk]'"). CuPy 14 dropped CUDA 11: its
    last CuPy is 13, which needs a CUDA 11 toolkit installed beside it."""
    try:
        major = int(str(cuda).split(".")[0])
    except ValueError:
        return None
    if major == 11:
        return "'cupy-cuda11x<14' (and the CUDA 11 toolkit; or update the driver to CUDA 12+)"
    return {12: "'cupy-cuda12x[ctk]'"}.get(major, "'cupy-cuda13x[ctk]'" if major >= 13 else None)


def _smoke_test() -> float:
    from .layers import Sequential
    from .losses import SoftmaxCrossEntropy
    from .models import MLP
    from .optim import SGD
    gen = np.random.default_rng(0)
    X = gen.standard_normal((64, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    model: Sequential = MLP([4, 8, 2], seed=0)
    loss, opt = SoftmaxCrossEntropy(), SGD(model, lr=0.1)
    start = time.perf_counter()
    for _ in range(20):
        loss.forward(model.forward(X), y)
        model.backward(loss.backward())
        opt.step()
    return 1000 * (time.perf_counter() - start)
