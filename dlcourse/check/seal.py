"""The library closed while a check runs the learner's function (one mechanism for every check).

While ``with sealed(fn, case, opens=...):`` runs, a profile hook (``sys.setprofile``, and
``threading.setprofile`` for the threads the check starts) sees every call. A call is refused
when it crosses from the learner's code into

- **dlcourse**, any module, public or private (the checks' own modules included), or
- **another installed package** (PyTorch, ml_dtypes, SciPy, scikit-learn, ...): site-packages,

unless the exercise opens it. Open always: NumPy and CuPy, the Python standard library and the
builtins, the learner's own code (anything that is none of the above: a notebook cell, a file of
their own), the library's exception classes (raising an error computes nothing), and its
backend module (``dl.get_array_module`` and its neighbours in ``backend.py``: how every lesson
picks and bridges NumPy and CuPy). A check opens, by name, what the
learner has built in an earlier exercise or what the lesson hands them as a tool::

    call(fn, x, case=..., opens=["dlcourse.conv.im2col", "dlcourse.conv.col2im"])

A name is a dotted path to a function, a class (every method of it) or a module or package
(every function in it: ``"cryptography"``); an object (a function, a class) works too. What the
check hands the function (its arguments: a fake clock, a counting communicator) is open, and so
is a class of a check module decorated with :func:`handed`.

"Crosses from the learner's code" is judged at the first frame above the call that is not the
standard library (``functools``, ``copy``, ``<frozen importlib>``: they cannot launder a call),
nor, for a call into dlcourse, NumPy (``np.vectorize(f)`` of a library function ``f``). A call
the library makes to itself is never refused: an opened function may use the rest of the
library.

A refused call raises inside the learner's code and is recorded; the check fails with the
record even where the learner's code caught the error. The hook is installed only around the
learner's function, and costs one dictionary look-up per call the function makes
(``tests/test_sealed.py`` measures it on the checks).
"""
from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
import threading
import types

__all__ = ["sealed", "handed", "Refusal", "library_object", "describe"]

_DLCOURSE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_OPEN_PACKAGES = ("numpy", "cupy", "cupyx", "cupy_backends")

# Kinds of code, by the file it lives in.
_LEARNER, _STDLIB, _OPEN, _LIBRARY, _OTHER = range(5)


def _dirs(paths):
    __tracebackhide__ = True
    out = []
    for p in paths:
        if p and os.path.isdir(p):
            out.append(os.path.realpath(p) + os.sep)
            if os.path.abspath(p) + os.sep not in out:
                out.append(os.path.abspath(p) + os.sep)
    return tuple(dict.fromkeys(out))


def _site_dirs():
    __tracebackhide__ = True
    paths = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    try:
        paths += site.getsitepackages()
    except AttributeError:   # an old virtualenv's site module
        pass
    paths.append(getattr(site, "USER_SITE", None))
    paths += [p for p in sys.path if p.rstrip(os.sep).endswith(("site-packages", "dist-packages"))]
    return _dirs(paths)


_SITE = _site_dirs()
_STDLIB_DIRS = _dirs([sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib")]
                     + [os.path.dirname(os.__file__)])


def _package_dirs(names):
    __tracebackhide__ = True
    out = []
    for name in names:
        spec = None
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            pass
        for location in (getattr(spec, "submodule_search_locations", None) or []):
            out.append(location)
    return _dirs(out)


_OPEN_DIRS = _package_dirs(_OPEN_PACKAGES)
_kinds: dict[str, int] = {}


def _file_kind(filename: str) -> int:
    __tracebackhide__ = True
    kind = _kinds.get(filename)
    if kind is None:
        kind = _kinds[filename] = _classify(filename)
    return kind


def _classify(filename: str) -> int:
    __tracebackhide__ = True
    if filename.startswith("<frozen"):
        return _STDLIB
    if not filename or filename.startswith("<"):
        return _LEARNER                      # a notebook cell, exec'd code
    path = os.path.abspath(filename)
    real = os.path.realpath(filename)
    if path.startswith(_DLCOURSE) or real.startswith(_DLCOURSE):
        return _LIBRARY
    if any(p.startswith(_OPEN_DIRS) for p in (path, real)):
        return _OPEN
    if any(p.startswith(_SITE) for p in (path, real)):
        return _OTHER
    if any(p.startswith(_STDLIB_DIRS) for p in (path, real)):
        return _STDLIB
    return _LEARNER


# C functions (c_call events): the kind of the module that defines them, by its top-level name.
_module_kinds: dict[str, int] = {"builtins": _STDLIB, "": _STDLIB}


def _module_kind(module: str) -> int:
    __tracebackhide__ = True
    top = module.partition(".")[0]
    kind = _module_kinds.get(top)
    if kind is None:
        found = sys.modules.get(top)
        where = getattr(found, "__file__", None)
        if top in _OPEN_PACKAGES:
            kind = _OPEN
        elif top == "dlcourse":
            kind = _LIBRARY
        elif where is None:
            kind = _STDLIB                   # a module built into the interpreter
        else:
            kind = _file_kind(where)
            kind = _STDLIB if kind == _LEARNER else kind
        _module_kinds[top] = kind
    return kind


_method_modules: dict = {}


def _c_module(fn) -> str:
    """The module of a C function, or of the class that defines a C method (NumPy's reshape,
    even on a check's ndarray subclass)."""
    __tracebackhide__ = True
    module = getattr(fn, "__module__", None)
    if module is None:
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, types.ModuleType):
            return owner.__name__
        if owner is None:
            return ""
        key = (type(owner), getattr(fn, "__name__", ""))
        module = _method_modules.get(key)
        if module is None:
            defines = next((k for k in key[0].__mro__ if key[1] in vars(k)), key[0])
            module = _method_modules[key] = defines.__module__ or ""
    return module or ""


# ---------------------------------------------------------------------------------------------
# What is open
# ---------------------------------------------------------------------------------------------
def _codes_of(obj, seen=None) -> set:
    """The code objects of a function, a method, a class (every method, property and nested
    class of it that the library defines), a partial, or a callable instance."""
    __tracebackhide__ = True
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return set()
    seen.add(id(obj))
    out = set()
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        for part in (obj.fget, obj.fset, obj.fdel):
            if part is not None:
                out |= _codes_of(part, seen)
        return out
    if isinstance(obj, functools.partial):
        return _codes_of(obj.func, seen)
    if isinstance(obj, types.MethodType):
        return _codes_of(obj.__func__, seen)
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        return _nested(code)
    if isinstance(obj, type):
        for klass in obj.__mro__:
            if klass is object:
                continue
            for value in vars(klass).values():
                if isinstance(value, (type, types.FunctionType, staticmethod, classmethod,
                                      property, functools.partial)):
                    out |= _codes_of(value, seen)
        return out
    return out


def _nested(code) -> set:
    """A code object and those of the functions defined inside it (a closure's grad_fn)."""
    __tracebackhide__ = True
    out = {code}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _nested(const)
    return out


def _resolve(dotted: str):
    """A dotted name -> ("module", prefix of its file or folder) or ("object", the object)."""
    __tracebackhide__ = True
    import importlib
    try:
        module = importlib.import_module(dotted)
    except ImportError:
        module = None
    if module is not None:
        where = getattr(module, "__file__", None) or ""
        if os.path.basename(where).startswith("__init__."):
            where = os.path.dirname(where) + os.sep
        return "module", (os.path.abspath(where), os.path.realpath(where), dotted, module)
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return "object", obj
    raise ValueError(f"sealed: {dotted!r} names nothing importable")


def handed(cls):
    """Mark a check module's class as handed to the learner (a counting communicator, a fake
    file): its methods are open while a check runs, wherever the learner's code meets it."""
    __tracebackhide__ = True
    _HANDED.update(_codes_of(cls))
    return cls


_HANDED: set = set()
_ALWAYS: set | None = None


def _always_open() -> set:
    """The library's exception classes and its backend (``dl.get_array_module`` and the rest of
    ``backend.py``: how NumPy and CuPy are chosen and bridged)."""
    __tracebackhide__ = True
    global _ALWAYS
    if _ALWAYS is None:
        codes = set()
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] != "dlcourse" or module is None:
                continue
            for value in list(vars(module).values()):
                if isinstance(value, type) and issubclass(value, BaseException) \
                        and value.__module__.startswith("dlcourse"):
                    codes |= _codes_of(value)
        from .. import backend
        for value in vars(backend).values():
            if isinstance(value, types.FunctionType) and value.__module__ == backend.__name__:
                codes |= _codes_of(value)
        _ALWAYS = codes | _codes_of(_ClosedType)
    return _ALWAYS


# ---------------------------------------------------------------------------------------------
# What a refused call is called, for the message
# ---------------------------------------------------------------------------------------------
def describe(code_or_fn) -> str:
    """``dl.attention`` for a function dl exports, ``dlcourse.autograd.Tensor.backward`` for the
    rest, ``torch.softmax`` for a C function of another package."""
    __tracebackhide__ = True
    if isinstance(code_or_fn, types.CodeType):
        code = code_or_fn
        path = os.path.abspath(code.co_filename)
        if path.startswith(_DLCOURSE):
            module = "dlcourse." + os.path.splitext(path[len(_DLCOURSE):])[0].replace(os.sep, ".")
            module = module.removesuffix(".__init__")
        else:
            module = _module_of_file(path)
        qual = _qualname(code, module).removesuffix(".__init__")   # a class: its constructor
        if qual == "<module>":
            return f"import {module}"
        if module.startswith("dlcourse"):
            top = sys.modules.get("dlcourse")
            head = qual.split(".")[0]
            owner = sys.modules.get(module)
            if top is not None and owner is not None and head in getattr(top, "__all__", ()) \
                    and getattr(top, head, None) is getattr(owner, head, object()):
                return f"dl.{qual}"                 # dl.softmax, dl.Dropout.forward
            return f"dl.{module.removeprefix('dlcourse.')}.{qual}"   # dl.autograd.unbroadcast
        return f"{module}.{qual}"
    module = _c_module(code_or_fn)
    name = getattr(code_or_fn, "__name__", None) or "?"
    return f"{module}.{name}" if module else name


def _qualname(code, module: str) -> str:
    """``Class.method`` for a method's code (``co_qualname`` from Python 3.11; on 3.10, found
    in the module)."""
    __tracebackhide__ = True
    qual = getattr(code, "co_qualname", None)
    if qual is not None:
        return qual
    for value in list(vars(sys.modules.get(module) or types.ModuleType("_")).values()):
        if isinstance(value, type):
            for key, member in vars(value).items():
                member = getattr(member, "fget", None) or getattr(member, "__func__", member)
                if getattr(member, "__code__", None) is code:
                    return f"{value.__qualname__}.{key}"
    return code.co_name


def _module_of_file(path: str) -> str:
    __tracebackhide__ = True
    for root in _SITE + _STDLIB_DIRS:
        if path.startswith(root):
            return os.path.splitext(path[len(root):])[0].replace(os.sep, ".").removesuffix(
                ".__init__")
    return os.path.splitext(os.path.basename(path))[0]


def library_object(obj) -> str | None:
    """The name of ``obj`` when it is the library's own function (or another package's) passed
    as an answer, else None: a partial, a bound method or a callable instance is looked through."""
    __tracebackhide__ = True
    if isinstance(obj, functools.partial):
        return library_object(obj.func)
    if isinstance(obj, types.MethodType):
        return library_object(obj.__func__)
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        kind = _file_kind(code.co_filename)
        return describe(code) if kind in (_LIBRARY, _OTHER) else None
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return describe(obj) if _module_kind(_c_module(obj)) in (_LIBRARY, _OTHER) else None
    call = getattr(type(obj), "__call__", None)
    if call is not None and not isinstance(obj, type) and isinstance(
            getattr(call, "__code__", None), types.CodeType):
        kind = _file_kind(call.__code__.co_filename)
        return describe(call.__code__) if kind in (_LIBRARY, _OTHER) else None
    if isinstance(obj, type) or callable(obj):
        module = getattr(obj, "__module__", "") or getattr(type(obj), "__module__", "")
        if _module_kind(module) in (_LIBRARY, _OTHER) and not isinstance(obj, type):
            return f"{module}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"
    return None


# ---------------------------------------------------------------------------------------------
# The hook
# ---------------------------------------------------------------------------------------------
class Refusal(Exception):
    """Raised inside the learner's code at a refused call (the check then fails, naming it)."""


def _unbidden(code) -> bool:
    """Code the interpreter runs on its own in the middle of the learner's code, which the
    learner did not call: a finalizer (``__del__``) or a garbage-collector callback (Hypothesis
    registers one), run when a collection happens to start there."""
    __tracebackhide__ = True
    import gc
    return code.co_name == "__del__" or any(
        code in _codes_of(callback) for callback in list(gc.callbacks))


class _ClosedType:
    """Stands for a closed package's scalar type (``ml_dtypes.bfloat16``) while a check runs.
    A cast to it calls no Python function that the hook could see (NumPy runs ml_dtypes' C
    loop), so the type itself is swapped for this stand-in: NumPy asks it for its ``dtype``,
    which refuses."""

    def __init__(self, seal, name):
        __tracebackhide__ = True
        self._seal, self._name = seal, name

    @property
    def dtype(self):
        __tracebackhide__ = True
        self._seal._refuse(f"{self._name} (a cast to it)", _OTHER)

    def __repr__(self):
        __tracebackhide__ = True
        return f"{self._name} (closed while the check runs your function)"


# Packages whose scalar types compute what an exercise builds (a cast rounds): swapped for
# stand-ins while a check runs, unless the exercise opens the package.
_TYPE_PACKAGES = ("ml_dtypes",)


class sealed:
    """``with sealed(fn, case, opens=(...), handed=args):`` -- see the module's docstring.

    After the block, ``self.refused`` is the first refused call (its description and the
    package it belongs to), or None; :func:`harness.call` turns it into the exercise's failure.
    """

    def __init__(self, fn, case: str, opens=(), handed=()):
        __tracebackhide__ = True
        self.fn, self.case = fn, case
        self.codes = set(_HANDED) | _always_open()
        self.prefixes: list[str] = []
        self.c_modules: set[str] = set()
        self.opened_names: list[str] = []
        for item in opens:
            self._open(item)
        for value in handed:
            self._hand(value)
        self.refused: tuple[str, str] | None = None
        self._saved = None
        self._saved_threads = None

    def _open(self, item):
        __tracebackhide__ = True
        if isinstance(item, str):
            kind, what = _resolve(item)
            self.opened_names.append(item.replace("dlcourse.", "dl.", 1) if item.startswith(
                "dlcourse.") else item)
            if kind == "module":
                path, real, dotted, module = what
                self.prefixes += [path, real]
                for value in list(vars(module).values()):     # its classes, inherited methods too
                    if isinstance(value, type) and value.__module__.startswith(dotted):
                        self.codes |= _codes_of(value)
                self.c_modules.add(dotted.partition(".")[0] if "." not in dotted else dotted)
                self.c_modules.add(dotted)
                return
            item = what
        self.codes |= _codes_of(item)

    def _hand(self, value, depth=0):
        __tracebackhide__ = True
        if callable(value) and not isinstance(value, type):
            self.codes |= _codes_of(value)
            if not hasattr(value, "__code__"):
                self.codes |= _codes_of(type(value)) if _file_kind(
                    getattr(sys.modules.get(type(value).__module__), "__file__", "") or "") \
                    == _LIBRARY and type(value).__module__.startswith("dlcourse.check") else set()
        elif type(value).__module__.startswith("dlcourse.check"):
            self.codes |= _codes_of(type(value))
        elif depth == 0 and isinstance(value, (list, tuple, dict)):
            for item in (value.values() if isinstance(value, dict) else value):
                self._hand(item, depth + 1)

    # the decision ---------------------------------------------------------------------------
    def _is_open_code(self, code) -> bool:
        __tracebackhide__ = True
        if code in self.codes:
            return True
        if self.prefixes:
            filename = code.co_filename
            if any(filename.startswith(p) or os.path.realpath(filename).startswith(p)
                   for p in self.prefixes):
                self.codes.add(code)          # decided once per function
                return True
        return False

    @staticmethod
    def _from_learner(frame, into_library: bool) -> bool:
        """Whether the first frame from ``frame`` up that is not the standard library (nor, for
        a call into dlcourse, NumPy or CuPy) is the learner's code."""
        __tracebackhide__ = True
        while frame is not None:
            kind = _file_kind(frame.f_code.co_filename)
            if kind == _STDLIB or (into_library and kind == _OPEN):
                frame = frame.f_back
                continue
            return kind == _LEARNER
        return False

    def _make_profile(self):
        """The hook: one dictionary look-up per call on the fast path (the learner's code,
        NumPy, the standard library), the frame walk only for a call into a closed package."""
        __tracebackhide__ = True
        kinds, module_kinds, library = _kinds, _module_kinds, _LIBRARY

        def profile(frame, event, arg):
            __tracebackhide__ = True
            if event == "call":
                filename = frame.f_code.co_filename
                kind = kinds.get(filename)
                if kind is None:
                    kind = _file_kind(filename)
                if kind >= library:
                    self._closed_call(frame, kind)
            elif event == "c_call":
                module = getattr(arg, "__module__", None) or _c_module(arg)
                kind = module_kinds.get(module.partition(".")[0])
                if kind is None:
                    kind = _module_kind(module)
                if kind >= library:
                    self._closed_c_call(frame, arg, module, kind)
        return profile

    def _closed_call(self, frame, kind):
        __tracebackhide__ = True
        code = frame.f_code
        if not self._from_learner(frame.f_back, kind == _LIBRARY):
            return                            # the library calling itself: the common case
        if not (self._is_open_code(code) or _unbidden(code)):
            self._refuse(describe(code), kind)

    def _closed_c_call(self, frame, arg, module, kind):
        __tracebackhide__ = True
        if module in self.c_modules or module.partition(".")[0] in self.c_modules:
            return
        if self._from_learner(frame, kind == _LIBRARY):
            self._refuse(describe(arg), kind)

    def _refuse(self, what: str, kind: int):
        __tracebackhide__ = True
        if self.refused is None:
            self.refused = (what, "dlcourse" if kind == _LIBRARY else what.partition(".")[0])
        raise Refusal(f"{what} is closed while the check runs your function")

    # the block ------------------------------------------------------------------------------
    def _swap_types(self):
        """Swap each closed package's scalar types for stand-ins, in the package and wherever
        the learner's namespace holds them; :meth:`_restore_types` puts them back."""
        __tracebackhide__ = True
        import numpy as np
        self._swapped = []
        learner = getattr(self.fn, "__globals__", None)
        for package in _TYPE_PACKAGES:
            module = sys.modules.get(package)
            if module is None or package in self.c_modules:
                continue
            for key, value in list(vars(module).items()):
                if isinstance(value, type) and issubclass(value, np.generic):
                    stand_in = _ClosedType(self, f"{package}.{key}")
                    self._swapped.append((vars(module), key, value))
                    setattr(module, key, stand_in)
                    for name, held in list((learner or {}).items()):
                        if held is value:
                            self._swapped.append((learner, name, value))
                            learner[name] = stand_in

    def _restore_types(self):
        __tracebackhide__ = True
        for namespace, key, value in reversed(self._swapped):
            namespace[key] = value
        self._swapped = []

    def __enter__(self):
        __tracebackhide__ = True
        self._swap_types()
        self._saved = sys.getprofile()
        self._saved_threads = getattr(threading, "_profile_hook", None)
        profile = self._make_profile()
        threading.setprofile(profile)
        sys.setprofile(profile)
        return self

    def __exit__(self, *exc):
        __tracebackhide__ = True
        sys.setprofile(self._saved)
        threading.setprofile(self._saved_threads)
        self._restore_types()
        return False

    def opened(self) -> str:
        __tracebackhide__ = True
        return ", ".join(self.opened_names)
