"""A NumPy-backed stand-in for CuPy, held to the API of the CuPy that is installed (issue 18).

CI has no GPU, so the ``cupy`` case of the backend fixture would always skip and the GPU path
could drift from CuPy's real API unseen (DeZero's died when CuPy removed ``scatter_add``). This
module lets that case run on the CPU: ``install(monkeypatch)`` makes ``dlcourse.backend`` hand out
:data:`cupy` (a stand-in module) wherever it would hand out CuPy. The stand-in

- exposes only the names the installed ``cupy`` (and ``cupy.random``, ``cupy.linalg``, ...) and
  ``cupyx`` have, read from those modules at run time: a name CuPy lacks or removes is an
  ``AttributeError`` here as it would be on a GPU; so is an array method ``cupy.ndarray`` lacks;
- binds every call it forwards to the real function's signature (``inspect.signature``), so an
  argument CuPy does not take is a ``TypeError`` even where NumPy would take it;
- refuses host (NumPy) arrays wherever CuPy does: in its functions, ufuncs and operators, in
  NumPy functions dispatched to it (``__array_function__``), and in implicit conversion
  (``np.asarray(x)``: CuPy says "use .get()"); ``asarray``/``array`` copy from the host as CuPy's do;
- gives 0-d arrays where CuPy gives them (reductions, ``x[i, j]``), never NumPy scalars.

It is the one module besides ``dlcourse.backend`` that imports CuPy, to read its API; it never
touches CUDA. What it does not prove: that anything runs on a GPU (no kernel is compiled or
launched: the CUDA kernels are checked on the emulator), CuPy's numerics, dtype promotion or
memory behaviour, nor the behaviour of names it forwards to NumPy beyond their signature.
"""
from __future__ import annotations

import functools
import inspect
import os
import types

import numpy as np
import numpy.lib.mixins

import cupy as _real
import cupyx as _real_x

VERSION = _real.__version__

# Functions that take host arrays in CuPy: they copy them to the device.
_FROM_HOST = {"array", "asarray", "asanyarray"}


def _host_error(where, value):
    return TypeError(
        f"{where} was given a NumPy (host) array of shape {value.shape}: CuPy refuses host arrays "
        f"here (Unsupported type <class 'numpy.ndarray'>), so this line fails on a GPU. Make it "
        f"on the device (xp = get_array_module(x); xp.asarray(...)) or move it with "
        f"dl.to_device(a, 'gpu').")


def _unwrap(value, where):
    """NumPy arrays for stand-in arrays, inside tuples, lists and dicts; host arrays refused."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, np.ndarray):
        raise _host_error(where, value)
    if isinstance(value, (tuple, list)):
        return type(value)(_unwrap(v, where) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v, where) for k, v in value.items()}
    return value


def _index(key):
    """An index with its stand-in arrays unwrapped (host ones stay)."""
    if isinstance(key, ndarray):
        return key._a
    return tuple(_index(k) for k in key) if isinstance(key, tuple) else key


def _wrap(value):
    """Stand-in arrays for NumPy results; a NumPy scalar becomes a 0-d array, as in CuPy."""
    if isinstance(value, np.ndarray):
        return ndarray(value)
    if isinstance(value, np.generic):
        return ndarray(np.asarray(value))
    if type(value) in (tuple, list):
        return type(value)(_wrap(v) for v in value)
    return value


def _signature(func):
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):   # Cython functions without one: the name is still checked
        return None


def _forward(qualname, real, impl, host_ok=False):
    """``impl`` (NumPy's function) called as ``qualname``: the arguments bound to the real CuPy
    function's signature first, stand-in arrays unwrapped, host arrays refused."""
    is_ufunc = isinstance(real, _real.ufunc)
    sig = None if is_ufunc else _signature(real)

    @functools.wraps(impl)
    def call(*args, **kwargs):
        if is_ufunc and not real.nin <= len(args) <= real.nargs:
            raise TypeError(f"{qualname} takes {real.nin} inputs (and up to {real.nargs - real.nin}"
                            f" outputs), got {len(args)} arguments (CuPy {VERSION})")
        if sig is not None:
            try:
                sig.bind(*args, **kwargs)
            except TypeError as err:
                raise TypeError(f"{qualname}{sig}: {err} (CuPy {VERSION}'s signature)") from None
        if host_ok:                         # a copy from the host, as CuPy makes
            args = tuple(a._a if isinstance(a, ndarray) else
                         np.array(a) if isinstance(a, np.ndarray) else a for a in args)
        else:
            args = _unwrap(args, qualname)
        return _wrap(impl(*args, **_unwrap(kwargs, qualname)))
    call.__qualname__ = call.__name__ = qualname.rpartition(".")[2]
    if is_ufunc:        # the ufunc's methods the real one has (cupy.add.at: a scatter-add)
        for method in ("at", "reduce", "accumulate", "reduceat", "outer"):
            if hasattr(real, method):
                setattr(call, method, _forward(f"{qualname}.{method}", getattr(real, method),
                                               getattr(impl, method)))
    return call


def _not_emulated(qualname):
    def call(*args, **kwargs):
        raise NotImplementedError(f"{qualname} exists in CuPy {VERSION} but the NumPy stand-in "
                                  f"does not emulate it: run this on a GPU.")
    return call


class _Namespace(types.ModuleType):
    """A stand-in for a CuPy module: only the names ``real`` has, each built on first use:
    forwarded to ``numpy_module``'s function of that name, or, where NumPy has none (CuPy's own
    RawKernel, cuda, ...), one that says the stand-in does not emulate it when called."""

    def __init__(self, name, real, numpy_module, special=None):
        super().__init__(name)
        self._real, self._numpy, self._special = real, numpy_module, special or {}
        self._names = frozenset(n for n in dir(real) if not n.startswith("_"))

    def __dir__(self):
        return sorted(self._names)

    def __getattr__(self, name):
        if name.startswith("__") or name not in self._names:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}: the "
                                 f"installed CuPy {VERSION} has no such name, so this fails on "
                                 f"a GPU")
        value = self._build(name)
        setattr(self, name, value)
        return value

    def _build(self, name):
        qualname = f"{self.__name__}.{name}"
        real = getattr(self._real, name)
        if name in self._special:
            return self._special[name](qualname, real)
        numpy_value = getattr(self._numpy, name, None)
        if real is numpy_value or not (callable(real) or isinstance(real, types.ModuleType)):
            return real                     # a dtype, a constant: CuPy re-exports NumPy's
        if isinstance(real, types.ModuleType):   # NumPy's of that name (linalg, lib, ...), if any
            sub = numpy_value if isinstance(numpy_value, types.ModuleType) else None
            return _Namespace(qualname, real, sub)
        if not isinstance(real, type) and callable(numpy_value):
            return _forward(qualname, real, numpy_value, host_ok=name in _FROM_HOST)
        return _not_emulated(qualname)      # CuPy's own classes and functions (RawKernel, ...)


class ndarray(numpy.lib.mixins.NDArrayOperatorsMixin):
    """A CuPy array on the CPU: a NumPy array inside, CuPy's API outside."""

    __slots__ = ("_a",)
    __module__ = "cupy"                 # dlcourse.backend recognises CuPy arrays by their module
    _names = frozenset(dir(_real.ndarray))

    def __init__(self, a):
        self._a = a

    def __getattr__(self, name):
        if name not in ndarray._names:
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r} (CuPy "
                                 f"{VERSION}): this fails on a GPU")
        value = getattr(self._a, name)
        if callable(value):
            return _forward(f"cupy.ndarray.{name}", getattr(_real.ndarray, name), value)
        return _wrap(value)

    # CuPy's own: the device-host copies, and no implicit conversion to NumPy.
    def get(self, stream=None, order="C", out=None, blocking=True):
        return np.array(self._a, order=order)

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"cupy.ndarray.set takes a NumPy array, got {type(arr).__name__}")
        self._a[...] = arr

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` "
                        "to construct a NumPy array explicitly. (CuPy says this on a GPU: use "
                        "dl.to_numpy(x).)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc.__name__ not in cupy._names:
            return NotImplemented
        where = f"cupy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        if method != "__call__" and not hasattr(getattr(_real, ufunc.__name__), method):
            raise AttributeError(f"{where}: CuPy {VERSION}'s ufunc has no {method!r}")
        out = kwargs.get("out")
        result = getattr(ufunc, method)(*_unwrap(inputs, where), **_unwrap(kwargs, where))
        if out is not None:                 # the stand-in arrays given as out hold the result
            return out[0] if len(out) == 1 else out
        return _wrap(result)

    def __array_function__(self, func, types_, args, kwargs):
        space = cupy
        for part in func.__module__.split(".")[1:]:
            space = getattr(space, part, None)
            if space is None:
                return NotImplemented
        if func.__name__ not in getattr(space, "_names", ()):
            return NotImplemented           # NumPy then says no implementation was found
        return getattr(space, func.__name__)(*args, **kwargs)

    # Indexing takes host index arrays and values (CuPy copies them over); the stand-in does not
    # hold these to more than NumPy does.
    def __getitem__(self, key):
        return _wrap(self._a[_index(key)])

    def __setitem__(self, key, value):
        self._a[_index(key)] = value._a if isinstance(value, ndarray) else value

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (_wrap(row) for row in self._a)

    def __bool__(self):
        return bool(self._a)

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __complex__(self):
        return complex(self._a)

    def __index__(self):
        return self._a.__index__()

    def __copy__(self):
        return ndarray(self._a.copy())

    def __deepcopy__(self, memo):
        return ndarray(self._a.copy())

    def __repr__(self):
        return repr(self._a)

    def __str__(self):
        return str(self._a)

    def __format__(self, spec):
        return format(self._a[()] if self._a.ndim == 0 else self._a, spec)


def _random(qualname, real_random):
    """cupy.random on a seeded NumPy generator: CuPy's signatures, its ``dtype`` argument."""
    state = np.random.RandomState(0)

    def build(name):
        real = getattr(real_random, name)
        if name == "seed":
            return lambda seed=None: state.seed(seed)
        impl = getattr(state, name, None)
        sig = _signature(real)
        if impl is None or sig is None:
            return _not_emulated(f"{qualname}.{name}")

        def call(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            named = dict(bound.arguments)
            dtype = named.pop("dtype", None)
            positional = [named.pop(p.name) for p in sig.parameters.values()
                          if p.kind is p.VAR_POSITIONAL and p.name in named]
            extra = named.pop(next((p.name for p in sig.parameters.values()
                                    if p.kind is p.VAR_KEYWORD), ""), {})
            out = impl(*(positional[0] if positional else ()),
                       **_unwrap(named, f"{qualname}.{name}"), **extra)
            out = np.asarray(out)
            return _wrap(out.astype(dtype, copy=False) if dtype is not None else out)
        call.__name__ = name
        return call
    space = _Namespace(qualname, real_random, None)
    space._build = build                    # every name through CuPy's signature, NumPy's numbers
    return space


def _asnumpy(qualname, real):
    def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
        return a.get() if isinstance(a, ndarray) else np.asarray(a, order=order)
    return asnumpy


def _get_array_module(qualname, real):
    def get_array_module(*args):
        return cupy if any(isinstance(a, ndarray) for a in args) else np
    return get_array_module


def _ndarray(qualname, real):
    return ndarray


def _cuda(qualname, real_cuda):
    """cupy.cuda: what dlcourse.backend asks of it (a stream to synchronise, the device's
    description). The device is the host, and says so: no figure here is a GPU's."""
    stream = types.SimpleNamespace(synchronize=lambda: None)
    host_bytes = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    runtime = {
        "getDeviceCount": lambda: 1,
        "getDeviceProperties": lambda device: {"name": b"NumPy stand-in for CuPy (the host)",
                                               "major": 0, "minor": 0},
        "memGetInfo": lambda: (host_bytes, host_bytes),
        "driverGetVersion": lambda: 0,
        "runtimeGetVersion": lambda: 0,
    }
    return _Namespace(qualname, real_cuda, None, special={
        "get_current_stream": lambda q, real: lambda: stream,
        "Device": lambda q, real: lambda device=None: types.SimpleNamespace(id=device or 0),
        "runtime": lambda q, real: _Namespace(q, real, None, special={
            name: (lambda f: lambda q2, real2: f)(f) for name, f in runtime.items()}),
    })


cupy = _Namespace("cupy", _real, np, special={
    "random": _random, "asnumpy": _asnumpy, "get_array_module": _get_array_module,
    "ndarray": _ndarray, "cuda": _cuda})
cupy.__version__ = f"{VERSION} (a NumPy stand-in)"
cupyx = _Namespace("cupyx", _real_x, None)


def install(monkeypatch):
    """Make ``dlcourse.backend`` hand out the stand-in where it hands out CuPy, for one test.

    The backend's probe answers with the stand-in (so ``require_cupy()``, ``to_device(x, "gpu")``
    and ``gpu_available()`` use it), ``sys.modules["cupy"]`` is the stand-in (where
    ``get_array_module`` finds CuPy), and ``dlcourse.kernels.kernels_for`` answers None everywhere: the
    hand-written CUDA kernels are checked on the emulator, not here.
    """
    import sys

    from dlcourse import backend
    monkeypatch.setattr(backend, "_probe_result", (cupy, None))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupyx", cupyx)
    cupy.random.seed(backend._seed)         # as manual_seed does once CuPy is found
    from dlcourse import kernels          # every layer, loss and optimizer asks kernels.kernels_for
    monkeypatch.setattr(kernels, "kernels_for", lambda x, enabled=True, **checks: None)
