"""Every test is written once and runs on every backend: NumPy always, CuPy when a GPU is
usable. Without a GPU but with CuPy installed, the cupy case runs on a NumPy stand-in held to the
installed CuPy's API (tests/support/cupy_standin.py; DLCOURSE_CUPY_STANDIN=0 turns it off, =1
makes it required); without CuPy it skips with the reason. Use the ``device`` fixture ("cpu" or
"gpu") and ``xp`` (numpy or cupy), and make arrays with ``to_dev``."""
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import backend

NO_GPU = f"no usable GPU: {backend.gpu_problem()}" if not backend.gpu_available() else ""


def _cupy_standin():
    """The stand-in module when the cupy case runs on it (no GPU, CuPy installed), else None."""
    wanted = os.environ.get("DLCOURSE_CUPY_STANDIN", "auto")
    if not NO_GPU or wanted == "0":
        return None
    try:
        from support import cupy_standin
    except ImportError as err:
        if wanted == "1":
            raise pytest.UsageError(f"DLCOURSE_CUPY_STANDIN=1 but the CuPy stand-in cannot be "
                                    f"built: {err}. Install CuPy: pip install cupy-cuda12x.")
        return None
    return cupy_standin


STANDIN = _cupy_standin()
BACKENDS = [pytest.param("cpu", id="numpy"),
            pytest.param("gpu", id="cupy", marks=() if STANDIN else pytest.mark.gpu)]


def pytest_collection_modifyitems(items):
    """Every test marked ``gpu`` (the cupy backend, and the GPU-only tests) skips, with the
    reason, where no GPU is usable: the one place that decides it."""
    if NO_GPU:
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(pytest.mark.skip(reason=NO_GPU))


@pytest.fixture(params=BACKENDS)
def device(request, monkeypatch):
    if request.param == "gpu" and STANDIN:
        STANDIN.install(monkeypatch)
    return request.param


@pytest.fixture
def xp(device):
    return backend.require_cupy() if device == "gpu" else np


@pytest.fixture
def to_dev(device):
    def move(*arrays):
        moved = [dl.to_device(np.asarray(a), device) for a in arrays]
        return moved[0] if len(moved) == 1 else moved
    return move


@pytest.fixture(autouse=True)
def _seed_and_device():
    """Each test starts from the same seed and the default device choice."""
    dl.manual_seed(0)
    saved = backend._requested
    yield
    backend._requested = saved


def pytest_report_header(config):
    if STANDIN:
        return (f"dlcourse backends: numpy + cupy on a NumPy stand-in held to CuPy "
                f"{STANDIN.VERSION}'s API ({NO_GPU})")
    return (f"dlcourse backends: numpy{'' if NO_GPU else ' + cupy'}"
            f" ({NO_GPU or backend.describe_device('gpu')}); DLCOURSE_DEVICE="
            f"{os.environ.get('DLCOURSE_DEVICE', 'auto')}")


@pytest.fixture
def benchmark_script(monkeypatch):
    """``benchmark_script("gpu_suite")``: a script of benchmarks/ imported as a module (they are
    scripts, not part of the package), so a test can call its functions."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(folder))              # the scripts import benchmarks/steps.py
    monkeypatch.setenv("CUPY_TF32", "0")                  # gpu_suite sets this on import; undone after

    def load(name):
        spec = importlib.util.spec_from_file_location(f"{name}_for_test", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load
