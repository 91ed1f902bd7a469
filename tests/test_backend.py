"""Device selection: CuPy missing, CuPy without a driver, no device — each falls back to
NumPy with one notice, and asking for the GPU says which case it is."""
import sys
import types

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import backend


@pytest.fixture
def fresh_probe(monkeypatch):
    """Forget the cached probe so a fake CuPy can be installed; restore afterwards."""
    monkeypatch.setattr(backend, "_probe_result", None)
    monkeypatch.setattr(backend, "_notice_shown", False)
    monkeypatch.setattr(backend, "_requested", None)
    monkeypatch.delenv("DLCOURSE_DEVICE", raising=False)
    return monkeypatch


def fake_cupy(device_count=None, error=None):
    runtime = types.SimpleNamespace()

    def get_device_count():
        if error:
            raise error
        return device_count
    runtime.getDeviceCount = get_device_count
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime), __version__="0-fake")


def _raises(err):
    def fn(*args, **kwargs):
        raise err
    return fn


CASES = {
    "missing": (None, "CuPy is not installed"),
    "driver": (fake_cupy(error=RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is "
                                            "insufficient")), "driver could not be used"),
    "nodevice": (fake_cupy(error=RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")),
                 "no CUDA device is visible"),
    "zero": (fake_cupy(device_count=0), "no CUDA device is visible"),
    "libraries": (types.SimpleNamespace(**vars(fake_cupy(device_count=1)), float32=np.float32,
                                        arange=_raises(RuntimeError(
                                            "CuPy failed to load libnvrtc.so.12: OSError: libnvrtc"
                                            ".so.12: cannot open shared object file"))),
                  "a CUDA library it needs is missing"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_missing_gpu_case_falls_back_with_one_notice(case, fresh_probe, capsys):
    module, words = CASES[case]
    fresh_probe.setitem(sys.modules, "cupy", module)   # None makes `import cupy` fail
    assert not dl.gpu_available()
    assert words in backend.gpu_problem()
    assert dl.get_device() == "cpu"
    assert dl.get_device() == "cpu"
    shown = capsys.readouterr()
    if case == "missing":   # a CPU machine: one plain line on stdout, the diagnosis in doctor
        assert shown.err == "" and shown.out == backend.CPU_NOTICE + "\n"
        assert "The GPU path" in shown.out and "dlcourse doctor" in shown.out
    else:                   # CuPy is there but unusable: the reason, on stderr
        assert shown.err.count("running on the CPU") == 1 and words in shown.err
    with pytest.raises(dl.DeviceError, match=words):
        dl.set_device("gpu")
    fresh_probe.setenv("DLCOURSE_DEVICE", "gpu")
    with pytest.raises(dl.DeviceError, match="DLCOURSE_DEVICE=cpu"):
        dl.get_device()


def test_manual_seed_before_the_gpu_is_found_still_seeds_cupy(fresh_probe):
    """A notebook seeds first and looks for the GPU later: CuPy's generator must be seeded when
    it is found, or dropout masks on the GPU would differ from run to run."""
    seeds = []
    cupy = fake_cupy(device_count=1)
    cupy.arange = lambda n, dtype=None: np.arange(n, dtype=dtype)
    cupy.float32 = np.float32
    cupy.random = types.SimpleNamespace(seed=seeds.append)
    fresh_probe.setitem(sys.modules, "cupy", cupy)
    fresh_probe.setattr(backend, "_seed", None)
    dl.manual_seed(5)
    assert seeds == []                       # seeding alone does not import CuPy
    assert dl.gpu_available()
    assert seeds == [5]
    dl.manual_seed(6)                        # once found, seeded at once
    assert seeds == [5, 6]


def test_cpu_choice_is_silent(fresh_probe, capsys):
    fresh_probe.setitem(sys.modules, "cupy", None)
    fresh_probe.setenv("DLCOURSE_DEVICE", "cpu")
    assert dl.get_device() == "cpu"
    assert capsys.readouterr().err == ""


def test_bad_device_names(fresh_probe):
    with pytest.raises(ValueError, match="auto"):
        dl.set_device("tpu")
    fresh_probe.setenv("DLCOURSE_DEVICE", "metal")
    with pytest.raises(dl.DeviceError, match="metal"):
        dl.get_device()


def test_set_device_cpu(fresh_probe):
    assert dl.set_device("cpu") == "cpu"
    assert dl.get_device() == "cpu"
    x = dl.to_device(np.ones(3))
    assert isinstance(x, np.ndarray)


def test_array_module_and_round_trip(device, xp):
    x = dl.to_device(np.arange(6.0).reshape(2, 3), device)
    assert dl.get_array_module(x) is xp
    assert dl.device_of(x) == device
    back = dl.to_numpy(x)
    assert isinstance(back, np.ndarray) and np.array_equal(back, np.arange(6.0).reshape(2, 3))
    dl.synchronize()


def test_describe_device(device):
    text = dl.describe_device(device)
    assert text.startswith("GPU:" if device == "gpu" else "CPU:")
    info = dl.device_info(device)
    assert info["device"] == device
    if device == "gpu":
        assert info["memory_total_gb"] > 0


def test_only_backend_imports_cupy():
    """One file imports CuPy: every other module asks backend."""
    import pathlib
    import re
    root = pathlib.Path(dl.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "backend.py"
                 and re.search(r"^\s*(import cupy|from cupy)", p.read_text(), re.M)]
    assert offenders == []
