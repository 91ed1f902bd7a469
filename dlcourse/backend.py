"""Where arrays live: NumPy on the CPU, CuPy on the GPU.

Introduced in notebook ``00_setup_and_gpu_arrays``.

This is the **only** module in dlcourse that imports CuPy. Everything else asks this
module, and inside layers the *array decides the backend*::

    xp = get_array_module(x)     # numpy or cupy, whichever x belongs to
    out = xp.maximum(x, 0)

The device is chosen in two places only: when a model is moved (``model.to("gpu")``)
and when data is batched (``dl.data.batches(..., device="gpu")``).

Choosing a device
-----------------
``DLCOURSE_DEVICE=auto|cpu|gpu`` (environment variable) or :func:`set_device` picks the
default device. ``auto`` (the default) uses the GPU when one is usable and otherwise
falls back to NumPy with **one** notice that says why. Asking for ``gpu`` where there is
none raises :class:`DeviceError`, naming which of the three cases it is:

1. CuPy is not installed;
2. CuPy is installed but the CUDA driver cannot be used;
3. the driver works but there is no CUDA device.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np

__all__ = [
    "DeviceError", "get_array_module", "gpu_available", "gpu_problem", "set_device",
    "get_device", "device_of", "to_device", "to_numpy", "synchronize", "device_info",
    "describe_device", "require_cupy", "require_cupyx_distributed", "manual_seed", "rng",
    "set_rng", "random_uniform", "device_name",
]

DEVICES = ("auto", "cpu", "gpu")
ENV_VAR = "DLCOURSE_DEVICE"


class DeviceError(RuntimeError):
    """The requested device cannot be used (the message says why and how to fix it)."""


# --------------------------------------------------------------------------------------
# Probing for a usable GPU (done once, lazily: importing dlcourse never touches CUDA).
# --------------------------------------------------------------------------------------
_probe_result: tuple | None = None   # (cupy module or None, problem text or None)
_notice_shown = False
_requested: str | None = None        # set by set_device(); None means "read the env var"
_seed: int | None = None             # the last manual_seed, applied to CuPy once it is found

CPU_NOTICE = ("dlcourse: running on the CPU (NumPy), as the whole course can. For a GPU, see "
              "\"The GPU path\" in README.md; `dlcourse doctor` checks your set-up.")

_FIXES = {
    "missing": ("CuPy is not installed. For the GPU path install the CuPy build that "
                "matches your CUDA driver, with the CUDA libraries: python -m pip install -e "
                "\".[gpu]\" in the course folder (CUDA 12, cupy-cuda12x[ctk]), or pip install "
                "'cupy-cuda13x[ctk]' (CUDA 13)."),
    "libraries": ("CuPy is installed but a CUDA library it needs is missing ({err}). CuPy's "
                  "wheels do not bring the CUDA libraries: reinstall it with them, pip install "
                  "'cupy-cuda12x[ctk]' (or 'cupy-cuda13x[ctk]' for a CUDA 13 driver), or "
                  "install the CUDA Toolkit of the same version."),
    "driver": ("CuPy is installed but the CUDA driver could not be used ({err}). Check "
               "that `nvidia-smi` works and that the CuPy build (cupy-cuda12x or "
               "cupy-cuda13x) matches the CUDA version your driver supports."),
    "nodevice": ("CuPy and the CUDA driver are installed but no CUDA device is visible "
                 "({err}). Check `nvidia-smi` and the CUDA_VISIBLE_DEVICES variable."),
}


# Names in an error that point at a CUDA library (not the driver, libcuda): the toolkit's part.
_LIBRARY_ERROR = re.compile(r"nvrtc|cublas|cudart|curand|cusolver|cusparse|cufft|CUDA_PATH|"
                            r"CUDA path could not be detected", re.IGNORECASE)


def _problem(kind, err):
    """The fix text for ``kind``, or for missing CUDA libraries when ``err`` names one."""
    if _LIBRARY_ERROR.search(str(err)):
        kind = "libraries"
    return _FIXES[kind].format(err=err)


def _probe():
    """Return (cupy, None) when a GPU is usable, else (None, reason)."""
    global _probe_result
    if _probe_result is not None:
        return _probe_result
    try:
        import cupy
    except Exception as err:  # ImportError, or a broken install raising something else
        _probe_result = (None, _problem("missing", err))
        return _probe_result
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # cudaErrorInsufficientDriver, libcuda.so missing, ...
        kind = "nodevice" if "no CUDA-capable device" in str(err) else "driver"
        _probe_result = (None, _problem(kind, err))
        return _probe_result
    if count < 1:
        _probe_result = (None, _FIXES["nodevice"].format(err="device count is 0"))
        return _probe_result
    try:  # a tiny real computation: the runtime, the driver and NVRTC all answer
        float(cupy.arange(4, dtype=cupy.float32).sum())
    except Exception as err:
        _probe_result = (None, _problem("driver", err))
        return _probe_result
    if _seed is not None:   # manual_seed ran before anything looked for the GPU
        cupy.random.seed(_seed)
    _probe_result = (cupy, None)
    return _probe_result


def gpu_available() -> bool:
    """True when CuPy is installed and a CUDA device answers."""
    return _probe()[0] is not None


def gpu_problem() -> str | None:
    """Why the GPU cannot be used (``None`` when it can)."""
    return _probe()[1]


def require_cupy():
    """Return the ``cupy`` module, or raise :class:`DeviceError` saying why not."""
    cupy, problem = _probe()
    if cupy is None:
        raise DeviceError(f"A GPU was asked for, but it cannot be used. {problem} "
                          f"Or run on the CPU: set {ENV_VAR}=cpu.")
    return cupy


def require_cupyx_distributed():
    """``cupyx.distributed`` (NCCL communicators, lesson 13), or :class:`DeviceError`."""
    require_cupy()
    import cupyx.distributed
    return cupyx.distributed


# --------------------------------------------------------------------------------------
# The default device.
# --------------------------------------------------------------------------------------
def device_name(device: str) -> str:
    """``device`` as one of ``"auto"``, ``"cpu"``, ``"gpu"`` (``"cuda"``/``"cupy"`` mean the GPU,
    ``"numpy"`` the CPU), or a ValueError naming the choices."""
    name = str(device).lower()
    if name in ("cuda", "cupy"):
        name = "gpu"
    if name == "numpy":
        name = "cpu"
    if name not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}.")
    return name


def set_device(device: str) -> str:
    """Choose the default device: ``"auto"``, ``"cpu"`` or ``"gpu"``. Returns the one used."""
    global _requested
    name = device_name(device)
    if name == "gpu":
        require_cupy()
    _requested = name
    return get_device()


def get_device() -> str:
    """The default device, resolved: ``"cpu"`` or ``"gpu"``."""
    global _notice_shown
    requested = _requested
    if requested is None:
        raw = os.environ.get(ENV_VAR, "auto")
        try:
            requested = device_name(raw)
        except ValueError:
            raise DeviceError(f"{ENV_VAR} must be auto, cpu or gpu; it is {raw!r}.") from None
    if requested == "cpu":
        return "cpu"
    if requested == "gpu":
        require_cupy()
        return "gpu"
    if gpu_available():
        return "gpu"
    if not _notice_shown:
        _notice_shown = True
        problem = gpu_problem()
        if problem == _FIXES["missing"]:   # the usual CPU machine: one plain line, not a warning
            print(CPU_NOTICE)
        else:                              # CuPy is there but cannot be used: say why
            print(f"dlcourse: running on the CPU with NumPy. {problem}", file=sys.stderr)
    return "cpu"


# --------------------------------------------------------------------------------------
# Arrays and devices.
# --------------------------------------------------------------------------------------
def _is_cupy(x) -> bool:
    return type(x).__module__.split(".")[0] == "cupy"


def get_array_module(*arrays):
    """``numpy`` or ``cupy``: the module the given arrays belong to (cupy if any is)."""
    for x in arrays:
        if _is_cupy(x):
            return sys.modules["cupy"]
    return np


def device_of(x) -> str:
    """``"gpu"`` for a CuPy array, ``"cpu"`` for anything else."""
    return "gpu" if _is_cupy(x) else "cpu"


def to_numpy(x):
    """A NumPy copy of a CuPy array; a NumPy array (or scalar) is returned as it is."""
    if _is_cupy(x):
        return x.get()
    return np.asarray(x)


def to_device(x, device: str | None = None):
    """Move an array to ``"cpu"`` (NumPy) or ``"gpu"`` (CuPy); ``None`` means the default.

    Copies only when the array is not already there.
    """
    name = get_device() if device is None else device_name(device)
    if name == "auto":
        name = get_device() if _requested is not None else ("gpu" if gpu_available() else "cpu")
    if name == "cpu":
        return to_numpy(x)
    cupy = require_cupy()
    return cupy.asarray(x)


def synchronize() -> None:
    """Wait for all queued GPU work to finish (a no-op on the CPU).

    GPU calls return before the work is done: call this before reading a clock.
    """
    cupy = _probe_result[0] if _probe_result else None
    if cupy is not None:
        cupy.cuda.get_current_stream().synchronize()


def _blas_threads():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None, None
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            return pool.get("num_threads"), pool.get("internal_api")
    return None, None


def device_info(device: str | None = None) -> dict:
    """What the (default) device is: name, memory, versions, BLAS threads."""
    name = get_device() if device is None else device_name(device)
    threads, blas = _blas_threads()
    info = {"device": "cpu", "numpy": np.__version__, "blas": blas, "blas_threads": threads,
            "cpu_count": os.cpu_count()}
    if name == "cpu" or (name == "auto" and not gpu_available()):
        import platform
        info["name"] = platform.processor() or platform.machine()
        return info
    cupy = require_cupy()
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    free, total = cupy.cuda.runtime.memGetInfo()
    gpu_name = props["name"]
    info.update({
        "device": "gpu",
        "name": gpu_name.decode() if isinstance(gpu_name, bytes) else str(gpu_name),
        "memory_total_gb": round(total / 2**30, 1),
        "memory_free_gb": round(free / 2**30, 1),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "driver_version": _cuda_version(cupy.cuda.runtime.driverGetVersion()),
        "cuda_runtime_version": _cuda_version(cupy.cuda.runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
    })
    return info


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def describe_device(device: str | None = None) -> str:
    """One line about the device, e.g. ``GPU: NVIDIA H100 80GB HBM3 (79.1 GiB)``."""
    info = device_info(device)
    if info["device"] == "gpu":
        return (f"GPU: {info['name']} ({info['memory_total_gb']} GiB, "
                f"CUDA {info['cuda_runtime_version']}, CuPy {info['cupy']})")
    threads = info["blas_threads"]
    count = "? threads" if threads is None else f"{threads} thread{'s' if threads != 1 else ''}"
    return f"CPU: {info['name']} (NumPy {info['numpy']}, {info['blas'] or 'BLAS'} with {count})"


# --------------------------------------------------------------------------------------
# Random numbers: one seed makes a run repeatable.
# --------------------------------------------------------------------------------------
_rng = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed dlcourse's generator (weights, shuffling, dropout), and CuPy's when present.

    Seeding does not look for a GPU (that imports CuPy, which takes a while): if none has been
    looked for yet, CuPy's generator is seeded when one is found.
    """
    global _rng, _seed
    _rng = np.random.default_rng(seed)
    _seed = seed
    cupy = _probe_result[0] if _probe_result else None
    if cupy is not None:
        cupy.random.seed(seed)


def random_uniform(xp, shape, dtype=np.float32):
    """Uniform numbers in [0, 1) made by ``xp`` (NumPy: dlcourse's seeded generator)."""
    if xp is np:
        return _rng.random(shape, dtype=np.dtype(dtype) if np.dtype(dtype) in (np.float32, np.float64)
                           else np.float64)
    return xp.random.random(shape, dtype=dtype)


def set_rng(generator: np.random.Generator) -> None:
    """Make ``generator`` dlcourse's generator (as :func:`rng` returned it before a run that
    must not change it: ``saved = rng(); ...; set_rng(saved)``)."""
    global _rng
    _rng = generator


def rng(seed: int | None = None) -> np.random.Generator:
    """A NumPy generator: a fresh one for ``seed``, else the one :func:`manual_seed` set."""
    if seed is not None:
        return np.random.default_rng(seed)
    return _rng
