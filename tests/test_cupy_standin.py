"""The CuPy stand-in itself (tests/support/cupy_standin.py): it has CuPy's names and no others,
binds CuPy's signatures and refuses host arrays where CuPy does, so the backend fixture's cupy
case fails in CI where the code would fail on a GPU. Skips where CuPy is not installed."""
import numpy as np
import pytest

standin = pytest.importorskip("support.cupy_standin", reason="CuPy is not installed "
                              "(pip install cupy-cuda12x: it imports without a GPU)")
real = standin._real
cp = standin.cupy


def test_the_names_are_the_installed_cupys():
    assert set(dir(cp)) == {n for n in dir(real) if not n.startswith("_")}
    assert set(dir(cp.random)) == {n for n in dir(real.random) if not n.startswith("_")}
    assert set(dir(standin.cupyx)) == {n for n in dir(standin._real_x) if not n.startswith("_")}


def test_a_name_cupy_lacks_fails_as_it_would_on_a_gpu():
    with pytest.raises(AttributeError, match="has no such name"):
        cp.scatter_add                          # moved to cupyx: DeZero's GPU path died of it
    with pytest.raises(AttributeError, match="has no such name"):
        cp.random.default_rng_that_does_not_exist
    with pytest.raises(AttributeError, match="'cupy.ndarray' object has no attribute 'resize'"):
        cp.ones(3).resize                       # a NumPy method CuPy's arrays lack
    assert callable(standin.cupyx.scatter_add)  # where CuPy has it now


def test_a_name_cupy_removes_fails(monkeypatch):
    """The names are read from the installed CuPy: one it no longer has is gone here too."""
    fake = type("cupy", (), {n: getattr(real, n) for n in dir(real)
                             if not n.startswith("_") and n != "maximum"})
    space = standin._Namespace("cupy", fake, np)
    with pytest.raises(AttributeError, match="'maximum'"):
        space.maximum
    assert space.minimum(cp.ones(2), 0.5).get().tolist() == [0.5, 0.5]


def test_calls_are_bound_to_cupys_signatures():
    x = cp.ones((2, 3))
    with pytest.raises(TypeError, match=r"cupy\.sum.*CuPy .*signature"):
        cp.sum(x, where=x > 0)                  # NumPy takes where=, CuPy's sum does not
    assert cp.random.random((2, 2), dtype=np.float32).dtype == np.float32   # CuPy's dtype=
    assert cp.zeros_like(x, dtype=np.float32).dtype == np.float32


def test_host_arrays_are_refused_where_cupy_refuses_them():
    x, host = cp.ones(3), np.ones(3)
    for bad in (lambda: x + host, lambda: host * x, lambda: cp.maximum(x, host),
                lambda: np.maximum(host, x), lambda: cp.concatenate([x, host]),
                lambda: np.concatenate([x, host]), lambda: x.dot(host)):
        with pytest.raises(TypeError, match="NumPy \\(host\\) array"):
            bad()
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        np.asarray(x)
    assert not isinstance(x, np.ndarray)


def test_what_cupy_takes_from_the_host_is_copied():
    host = np.arange(3.0)
    x = cp.asarray(host)
    host[0] = 7
    assert x.get().tolist() == [0.0, 1.0, 2.0] and isinstance(x.get(), np.ndarray)
    x[1:] = np.array([5.0, 6.0])                # assignment copies from the host, as in CuPy
    assert cp.asnumpy(x).tolist() == [0.0, 5.0, 6.0]
    assert (x * 2.0 + np.float32(1)).get().tolist() == [1.0, 11.0, 13.0]   # scalars are fine


def test_results_are_device_arrays_and_reductions_0d():
    x = cp.arange(6.0).reshape(2, 3)
    for result in (x.sum(), x[1, 2], cp.max(x), np.mean(x)):
        assert type(result) is cp.ndarray and result.ndim == 0
    assert float(x.sum()) == 15.0 and int(x[1, 2]) == 5
    assert cp.get_array_module(x) is cp and cp.get_array_module(np.ones(1)) is np


def test_the_backend_hands_out_the_standin(monkeypatch):
    from dlcourse import backend
    standin.install(monkeypatch)
    x = backend.to_device(np.ones((2, 2), np.float32), "gpu")
    assert backend.device_of(x) == "gpu" and backend.get_array_module(x) is cp
    assert backend.require_cupy() is cp and isinstance(backend.to_numpy(x), np.ndarray)
    from dlcourse import kernels
    assert kernels.kernels_for(x) is None          # the kernels are the emulator's to check


def test_ufunc_methods_the_real_cupy_has_are_forwarded(monkeypatch):
    """cupy.add.at (a scatter-add, Embedding's backward) exists in CuPy; the stand-in forwards
    it, in place, on the stand-in's arrays."""
    import numpy as np
    from support import cupy_standin
    cupy_standin.install(monkeypatch)
    from dlcourse import backend
    cp = backend.require_cupy()
    out = cp.zeros(3)
    cp.add.at(out, cp.asarray([0, 2, 0]), cp.asarray([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(cp.asnumpy(out), [4.0, 0.0, 2.0])
