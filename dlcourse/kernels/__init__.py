"""Hand-written CUDA kernels, each beside the NumPy reference it must match.

Introduced in notebook ``08a_gpu_execution_and_memory``, grown in ``08b_tiling_and_roofline``
and ``08d_fusion_and_graphs``; ``08c_bank_conflicts_occupancy_and_tensor_cores`` reads what the
matmul kernels need (their shared-memory banks, registers and occupancy). The CUDA sources are
the ``.cu`` files in this folder — read them: every one explains its idea (threads, blocks and
grids; coalescing; shared memory; tiling; register blocking; fusion) in its header. The Python wrappers are small: they
check their inputs, name the launch geometry, and launch.

    import dlcourse.kernels as K
    K.list_kernels()                       # works everywhere, no GPU needed
    print(K.source("matmul_tiled.cu"))     # the CUDA source
    print(K.launch_config("tiled", 4096, 4096, 4096))
    C = K.matmul_tiled(A, B)               # A, B: float32 CuPy arrays
    C_ref = K.reference.matmul(A, B)       # the NumPy answer it must match

Importing this package never imports CuPy; the kernels are compiled (by CuPy with NVRTC) the
first time they are called, and only there is a GPU needed. The library calls them where its
arrays are on the GPU, and :func:`kernels_for` alone decides whether a kernel takes an array
(on the GPU, a dtype the kernels are compiled for, the layout they need, the owner's switch
on); the layers (``conv.py``, ``fusion.py``) ask it through the one hook
``layer_base.kernels_for``, which this package plugs into when imported: ``dl.Conv2d`` calls
:func:`unfold_cols` / :func:`fold_cols`, ``dl.MaxPool2d`` the pooling kernels, the fused layers the
bias+ReLU kernels, the loss and the optimizers theirs; ``dl.use_kernels(obj, False)`` turns
that off for a model, loss or optimizer.

The matmul ladder (matmul.py): ``matmul_naive``, ``matmul_coalesced``, ``matmul_tiled``,
``matmul_regblock``; ``products_on_kernel()`` runs the library's products on the last (a CUDA
graph can capture them, not cuBLAS's). Rung 5, warp tiling: ``matmul_warptile``. On the tensor cores: ``matmul_wmma`` (float16 in,
float32 out; on NumPy arrays its reference). Fused kernels (fused.py): ``bias_relu_forward``,
``bias_relu_backward`` (bias along columns, used by ``dl.LinearReLU``),
``bias_relu_rows_forward``, ``bias_relu_rows_backward`` (bias along rows, used by
``dl.Conv2dReLU``), ``softmax_cross_entropy`` (used by ``dl.SoftmaxCrossEntropy``),
``sgd_momentum_update`` and ``adam_update`` (used by ``dl.SGD`` and ``dl.Adam``). Image windows
(unfold.py): ``unfold_cols``, ``fold_cols`` (used by ``dl.Conv2d``; ``im2col`` and ``col2im``
are them with one row per window), ``maxpool_forward``, ``maxpool_backward`` (used by
``dl.MaxPool2d``). Attention (flash.py, notebook 16): ``flash_attention_forward`` (used by
``dl.flash_attention`` for float32 heads of d <= 64) and, on the tensor cores,
``flash_attention_wmma`` (float16 heads of d = 64, float32 out; on NumPy arrays its reference).
References: ``dlcourse.kernels.reference``. Benchmarks:
``benchmarks/gpu_suite.py``. ``dl.fuse(model)`` rewrites a model's Linear→ReLU and Conv2d→ReLU
pairs into the fused layers.
"""
from __future__ import annotations

import sys

import numpy as np

from ..backend import device_of, get_array_module, gpu_available
from ..layer_base import every_layer, plug_in_kernels
from . import reference
from ._build import (KERNEL_DIR, NVRTC_OPTIONS, SOURCES, LaunchConfig, define_options,
                     get_kernel, launch_config, list_kernels, source)
from .flash import (FLASH_BC, FLASH_BR, FLASH_HEAD_DIMS, FLASH_WMMA_D,
                    flash_attention_forward, flash_attention_wmma, flash_head_dim,
                    flash_kernel_takes)
from .fused import (adam_update, bias_relu_backward, bias_relu_forward, bias_relu_rows_backward,
                    bias_relu_rows_forward, sgd_momentum_update, softmax_cross_entropy)
from .matmul import (MATMUL_KERNELS, REGBLOCK_TUNINGS, matmul_coalesced, matmul_naive,
                     WARPTILE_GEOMETRY, matmul_regblock, matmul_tiled, matmul_warptile,
                     matmul_wmma, products_on_kernel)
from .unfold import col2im, fold_cols, im2col, maxpool_backward, maxpool_forward, unfold_cols

__all__ = [
    "max_relative_error", "available", "kernels_for", "use_kernels", "FLOAT_DTYPES", "get_kernel", "define_options",
    "list_kernels", "source", "SOURCES", "KERNEL_DIR", "NVRTC_OPTIONS",
    "LaunchConfig", "launch_config",
    "matmul_naive", "matmul_coalesced", "matmul_tiled", "matmul_regblock", "MATMUL_KERNELS",
    "matmul_wmma", "matmul_warptile", "WARPTILE_GEOMETRY",
    "REGBLOCK_TUNINGS", "products_on_kernel",
    "bias_relu_forward", "bias_relu_backward", "bias_relu_rows_forward", "bias_relu_rows_backward",
    "softmax_cross_entropy", "sgd_momentum_update", "adam_update",
    "unfold_cols", "fold_cols", "im2col", "col2im", "maxpool_forward", "maxpool_backward", "reference",
    "flash_attention_forward", "flash_kernel_takes", "flash_head_dim", "FLASH_HEAD_DIMS",
    "FLASH_BR", "FLASH_BC", "flash_attention_wmma", "FLASH_WMMA_D",
]


def max_relative_error(a, ref) -> float:
    """``max |a - ref| / max |ref|`` as a Python float: how far a kernel's output ``a`` is from
    its reference ``ref`` (same shape; NumPy or CuPy, ``a`` cast to ``ref``'s dtype first)."""
    if a.shape != ref.shape:
        raise ValueError(f"max_relative_error compares arrays of one shape, got {a.shape} and "
                         f"{ref.shape}: did the kernel write the output transposed?")
    xp = get_array_module(ref)
    scale = float(xp.abs(ref).max()) if ref.size else 0.0
    diff = float(xp.abs(a.astype(ref.dtype) - ref).max()) if ref.size else 0.0
    return diff / scale if scale else diff


def available() -> bool:
    """True when the kernels can run: CuPy is installed and a CUDA device answers."""
    return gpu_available()


#: The dtypes the library's kernels are compiled for.
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def kernels_for(x, enabled=True, *, same_dtype=(), contiguous=(), same_per_axis=()):
    """This package, when a hand-written kernel can take ``x``; else None, and the caller runs
    its array code (NumPy or CuPy). The one place that decides it, for every layer, loss and
    optimizer: ``enabled`` (the owner's ``use_kernels`` switch) is on, ``x`` is on the GPU and
    the kernels can run there, ``x`` is float32 or float64 and the arrays in ``same_dtype``
    have its dtype, the arrays in ``contiguous`` are C-contiguous (a kernel that needs
    its input so and copies it when not is not asked: it takes any layout), and each (h, w)
    setting in ``same_per_axis`` (a stride, a padding; an int counts as equal) is the same for
    both axes: the image kernels take one number for both, so a per-axis one runs the array code."""
    if not enabled or device_of(x) != "gpu" or not gpu_available():
        return None
    if x.dtype not in FLOAT_DTYPES or any(a.dtype != x.dtype for a in same_dtype):
        return None
    if not all(a.flags.c_contiguous for a in contiguous):
        return None
    if any(isinstance(v, (tuple, list)) and v[0] != v[1] for v in same_per_axis):
        return None
    return sys.modules[__name__]


plug_in_kernels(lambda x, enabled=True, **checks: kernels_for(x, enabled, **checks))


def use_kernels(obj, enabled: bool = True):
    """Let (``enabled=True``, the default) or stop ``obj`` from using the hand-written CUDA
    kernels on the GPU: every layer of a model that has one (Conv2d's im2col/col2im,
    MaxPool2d's pooling kernels, the fused layers' bias+ReLU), a loss
    (``dl.SoftmaxCrossEntropy``) or an optimizer (``dl.SGD``, ``dl.Adam``): their fused kernel.
    Without them the same code runs as plain CuPy array operations. No effect on the CPU.
    Returns ``obj``."""
    for owner in every_layer(obj):               # a fused layer and its layer too
        if hasattr(owner, "use_kernels"):
            owner.use_kernels = bool(enabled)
    return obj
