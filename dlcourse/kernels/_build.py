"""Where the CUDA sources live, how they are compiled, and the input checks every wrapper shares.

Nothing here imports CuPy at module level: listing kernels and reading their sources works on a
machine without a GPU. Compilation happens on first use, through ``cupy.RawModule`` (CuPy hands
the source to NVRTC, NVIDIA's runtime compiler, and caches the binary on disk), and the loaded
module is cached here so each ``.cu`` file is compiled at most once per process.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..backend import device_of, require_cupy

KERNEL_DIR = Path(__file__).parent
#: Options passed to NVRTC (and to nvcc in the compile test, so both see the same language).
NVRTC_OPTIONS = ("-std=c++17",)


@dataclass(frozen=True)
class Source:
    """One ``.cu`` file and the kernels it provides.

    ``kernels`` are the names a wrapper asks for: plain ``extern "C"`` names, or, for templates,
    *name expressions* such as ``"im2col_kernel<float>"`` that NVRTC instantiates and CuPy
    looks up (``RawModule(name_expressions=...)``).
    """
    file: str
    kernels: tuple[str, ...]
    summary: str
    #: CUDA headers the file includes (NVRTC has none of its own: see header_options)
    headers: tuple[str, ...] = ()

    @property
    def templated(self) -> bool:
        return any("<" in k for k in self.kernels)

    @property
    def path(self) -> Path:
        return KERNEL_DIR / self.file


SOURCES: dict[str, Source] = {s.file: s for s in (
    Source("matmul_naive.cu", ("matmul_naive",),
           "matmul rung 1: one thread per output, x along rows (uncoalesced baseline)"),
    Source("matmul_coalesced.cu", ("matmul_coalesced",),
           "matmul rung 2: one thread per output, x along columns (coalesced)"),
    Source("matmul_tiled.cu", ("matmul_tiled",),
           "matmul rung 3: 32x32 shared-memory tiles"),
    Source("matmul_regblock.cu", ("matmul_regblock",),
           "matmul rung 4: 128x128x8 block tile, 8x8 register micro-tile, float4 loads"),
    Source("matmul_warptile.cu", ("matmul_warptile",),
           "matmul rung 5: 128x128x16 block tile, 64x32 warp tiles in 2x2 sub-tiles, 4x4 per "
           "lane, float4 shared-memory loads"),
    Source("matmul_wmma.cu", ("matmul_wmma",),
           "tensor cores: FP16 in, FP32 accumulated, 16x16x16 WMMA fragments, 128x128x32 "
           "block tiles in shared memory, 64x32 per warp",
           headers=("mma.h", "crt/mma.h", "cuda_fp16.h")),
    Source("bias_relu.cu",
           ("bias_relu_forward<float>", "bias_relu_forward<double>",
            "bias_relu_backward<float>", "bias_relu_backward<double>",
            "bias_relu_rows_forward<float>", "bias_relu_rows_forward<double>",
            "bias_relu_rows_backward<float>", "bias_relu_rows_backward<double>"),
           "fused bias + ReLU forward and backward (deterministic sums for db), with the bias "
           "along columns (Linear) or rows (Conv2d)"),
    Source("softmax_cross_entropy.cu",
           ("softmax_cross_entropy<float, int>", "softmax_cross_entropy<float, long long>",
            "softmax_cross_entropy<double, int>", "softmax_cross_entropy<double, long long>"),
           "fused softmax cross-entropy: per-row loss and gradient, one block per row"),
    Source("im2col.cu",
           ("im2col_kernel<float>", "im2col_kernel<double>",
            "col2im_kernel<float>", "col2im_kernel<double>"),
           "im2col (gather into rows) and col2im (its adjoint, gathered: no atomics)"),
    Source("maxpool.cu",
           ("maxpool_forward<float>", "maxpool_forward<double>",
            "maxpool_backward<float>", "maxpool_backward<double>"),
           "max pooling: each window's maximum and its place; the backward gathered (no atomics)"),
    Source("optimizers.cu",
           ("sgd_momentum_update<float>", "sgd_momentum_update<double>",
            "adam_update<float>", "adam_update<double>"),
           "the SGD-with-momentum and Adam updates of one parameter, one launch each"),
    Source("flash_attention_forward.cu",
           ("flash_attention_forward<16>", "flash_attention_forward<32>",
            "flash_attention_forward<64>"),
           "FlashAttention's forward: one block per query tile, K/V tiles in shared memory, the "
           "online softmax's running max, sum and output in registers"),
    Source("flash_attention_wmma.cu", ("flash_attention_wmma",),
           "FlashAttention's forward on the tensor cores: FP16 q, k, v with d = 64, FP32 out; "
           "S = Q Kᵀ and O += P V on WMMA fragments, 16 query rows per warp, the online "
           "softmax in FP32 between them",
           headers=("mma.h", "crt/mma.h", "cuda_fp16.h")),
)}

#: C++ spelling of the dtypes the templated kernels are instantiated for.
CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
         np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}


def list_kernels() -> list[str]:
    """Every kernel name (or template name expression), over all ``.cu`` files."""
    return [k for s in SOURCES.values() for k in s.kernels]


def source(file: str, start: str | None = None) -> str:
    """The CUDA source text of one file, e.g. ``source("matmul_tiled.cu")``; with ``start``,
    from the line that contains ``start`` on (``source("matmul_tiled.cu", "#define TILE")``)."""
    if file not in SOURCES:
        raise KeyError(f"No kernel source {file!r}. The sources are: {', '.join(SOURCES)}.")
    text = SOURCES[file].path.read_text()
    if start is None:
        return text
    if start not in text:
        raise ValueError(f"{file} has no line containing {start!r}: give a piece of text that "
                         "the file contains, or start=None for the whole file.")
    return text[text.rfind("\n", 0, text.index(start)) + 1:]


@functools.lru_cache(maxsize=None)
def _module(file: str, defines: tuple = ()):
    cupy = require_cupy()
    info = SOURCES[file]
    name_expressions = info.kernels if info.templated else None
    return cupy.RawModule(code=source(file), options=NVRTC_OPTIONS + define_options(defines)
                          + header_options(file), name_expressions=name_expressions)


def cuda_include_dirs() -> list:
    """Folders that may hold the CUDA headers (mma.h, cuda_fp16.h), most likely first: $CUDA_PATH
    or $CUDA_HOME, the pip wheels of NVIDIA (nvidia-cuda-runtime and nvidia-cuda-crt put them in
    nvidia/cu13/include), /usr/local/cuda."""
    import glob
    import os
    dirs = [os.path.join(os.environ[v], "include") for v in ("CUDA_PATH", "CUDA_HOME")
            if os.environ.get(v)]
    try:
        import nvidia   # the namespace package of NVIDIA's pip wheels
        for root in nvidia.__path__:
            dirs += sorted(glob.glob(os.path.join(root, "cu*", "include")), reverse=True)
            dirs += sorted(glob.glob(os.path.join(root, "cuda_runtime", "include")))
    except ImportError:
        pass
    return dirs + ["/usr/local/cuda/include"]


def header_options(file: str) -> tuple:
    """The -I option NVRTC needs for the CUDA headers ``file`` includes (matmul_wmma.cu:
    mma.h): () for a file that includes none. NVRTC has no headers of its own, so they come
    from a CUDA toolkit or from NVIDIA's pip wheels (``pip install nvidia-cuda-runtime
    nvidia-cuda-crt``: mma.h, cuda_fp16.h); an error says so when neither is found."""
    from pathlib import Path as _Path
    headers = SOURCES[file].headers
    if not headers:
        return ()
    for folder in cuda_include_dirs():
        if all((_Path(folder) / h).is_file() for h in headers):
            return (f"-I{folder}",)
    raise RuntimeError(f"{file} needs {', '.join(headers)} from CUDA, and NVRTC has no "
                       f"headers of its own; none of {', '.join(cuda_include_dirs())} holds them. "
                       f"Install them with `python -m pip install nvidia-cuda-runtime "
                       f"nvidia-cuda-crt` (the major version of your CuPy's CUDA), or set "
                       f"CUDA_PATH to a CUDA toolkit.")


def define_options(defines: tuple = ()) -> tuple:
    """Compiler options for ((name, value), ...): ``(("BK", 16),)`` -> ``("-DBK=16",)``."""
    return tuple(f"-D{name}={value}" for name, value in defines)


@functools.lru_cache(maxsize=None)
def get_kernel(file: str, name: str, defines: tuple = ()):
    """The compiled kernel ``name`` from ``file`` (compiled on first use, then cached).
    ``defines``: ((name, value), ...) to compile the file with, e.g. ``(("BK", 16),)`` to
    override a tile size the source #defines only if it is not defined yet.

    Cached too, not only the module: CuPy's ``RawModule.get_function`` makes a new kernel
    object on every call, and looking it up again at each launch would add host time to every
    training step."""
    return _module(file, tuple(defines)).get_function(name)


# --------------------------------------------------------------------------------------
# Input checks shared by the wrappers. Errors say what was expected, what was given, and
# the likely fix.
# --------------------------------------------------------------------------------------
def check_gpu_array(fn: str, name: str, a, *, ndim: int | None = None, dtypes=None,
                    contiguous: bool = True):
    """Check that ``a`` is a CuPy array the kernel can take; return it."""
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        raise TypeError(f"{fn}: {name} must be a CuPy array, got {type(a).__name__}.")
    if device_of(a) != "gpu":
        raise TypeError(f"{fn}: {name} is a NumPy array, but this is a CUDA kernel. Move it to "
                        f"the GPU with dl.to_device({name}, 'gpu'), or use the NumPy version in "
                        f"dlcourse.kernels.reference on the CPU.")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{fn}: {name} must be {ndim}-D, got shape {tuple(a.shape)} "
                         f"({a.ndim}-D).")
    if dtypes is not None and a.dtype not in [np.dtype(d) for d in dtypes]:
        wanted = " or ".join(np.dtype(d).name for d in dtypes)
        raise TypeError(f"{fn}: {name} must have dtype {wanted}, got {a.dtype}. This kernel "
                        f"is compiled for {wanted} only; convert with "
                        f"{name}.astype(cupy.{np.dtype(dtypes[0]).name}).")
    if contiguous and not a.flags.c_contiguous:
        raise ValueError(f"{fn}: {name} must be C-contiguous (row-major, no gaps): the kernel "
                         f"computes addresses as row * cols + col. It is a strided view "
                         f"(a transpose or a slice?); make a compact copy with "
                         f"cupy.ascontiguousarray({name}).")
    return a


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------
# Launch geometry: every wrapper asks launch_config() for its grid, block and shared memory,
# so a learner can print the numbers without launching anything.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaunchConfig:
    """How a kernel is launched: ``kernel[grid, block](args, shared_mem=shared_mem)``.

    grid:  number of blocks along (x, y, z);   block: threads per block along (x, y, z);
    shared_mem: *dynamic* shared memory in bytes passed at launch (0 for all our kernels);
    static_shared_mem: bytes of ``__shared__`` arrays the kernel declares itself.
    """
    name: str
    file: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int = 0
    static_shared_mem: int = 0
    note: str = ""

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def num_blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def __str__(self):
        s = (f"{self.name}: grid={self.grid} block={self.block} "
             f"({self.num_blocks} blocks x {self.threads_per_block} threads), "
             f"shared_mem={self.shared_mem} B dynamic + {self.static_shared_mem} B static")
        return s + (f" — {self.note}" if self.note else "")


_GEOMETRY: dict = {}


def remembered(fn):
    """fn, remembering its results: for the pure functions of a few numbers that the wrappers
    call on every launch (launch geometry, output sizes). A launch's Python time is part of
    every training step, and at small batches it is most of it. A call with an argument that
    cannot be a dictionary key (a list) runs fn itself; typed: 1, 1.0 and True differ."""
    cache = functools.lru_cache(maxsize=1024, typed=True)(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            hash((args, tuple(kwargs.items())))
        except TypeError:
            return fn(*args, **kwargs)
        return cache(*args, **kwargs)
    return call


def geometry(name: str):
    """Register the function that computes ``name``'s launch geometry from its sizes."""
    def register(fn):
        _GEOMETRY[name] = fn
        return fn
    return register


@remembered
def launch_config(name: str, *sizes, **tuning) -> LaunchConfig:
    """The launch geometry of kernel ``name`` for the given sizes.

    ``launch_config("naive" | "coalesced" | "tiled" | "regblock" | "warptile" | "wmma", M, N, K)`` for C = A @ B
    (``launch_config("regblock", M, N, K, bk=16, prefetch=True, ...)`` for another build of
    regblock: the keywords of ``matmul_regblock``);
    ``launch_config("bias_relu", N, F[, itemsize])``; ``launch_config("bias_relu_rows", F, M[, itemsize])``;
    ``launch_config("softmax_cross_entropy", N, C[, itemsize])`` (itemsize: 4 for float32, 8 for
    float64; it only changes the shared memory reported);
    ``launch_config("im2col" | "col2im", N, C, H, W, KH, KW, stride, padding)``;
    ``launch_config("maxpool_forward" | "maxpool_backward", N, C, H, W, KH, KW, stride)``;
    ``launch_config("optimizer_update", n)`` for a parameter of n elements;
    ``launch_config("flash_attention_forward", B, Tq, Tk, d)`` for B = N * heads problems.
    ``launch_config("flash_attention_wmma", B, T)`` (d = 64, on the tensor cores).
    """
    if name not in _GEOMETRY:
        raise KeyError(f"No kernel named {name!r}; the names are: {', '.join(_GEOMETRY)}.")
    return _GEOMETRY[name](*sizes, **tuning)
