"""Hand-written CUDA kernels, each beside the NumPy reference it must match.

Introduced in notebook ``08_cuda_kernels``. The CUDA sources are the ``.cu`` files in this
folder — read them: every one explains its idea (threads, blocks and grids; coalescing; shared
memory; tiling; register blocking; fusion) in its header. The Python wrappers are small: they
check their inputs, name the launch geometry, and launch.

    import dlcourse.kernels as K
    K.list_kernels()                       # works everywhere, no GPU needed
    print(K.source("matmul_tiled.cu"))     # the CUDA source
    print(K.launch_config("tiled", 4096, 4096, 4096))
    C = K.matmul_tiled(A, B)               # A, B: float32 CuPy arrays
    C_ref = K.reference.matmul(A, B)       # the NumPy answer it must match

Importing this package never imports CuPy; the kernels are compiled (by CuPy with NVRTC) the
first time they are called, and only there is a GPU needed. The library calls them where its
arrays are on the GPU (:func:`available` says whether they can run): ``dl.Conv2d`` calls
:func:`im2col` / :func:`col2im`, ``dl.MaxPool2d`` the pooling kernels, the fused layers the
bias+ReLU kernels, the loss and the optimizers theirs; ``dl.use_kernels(obj, False)`` turns
that off for a model, loss or optimizer.

The matmul ladder (matmul.py): ``matmul_naive``, ``matmul_coalesced``, ``matmul_tiled``,
``matmul_regblock``. Fused kernels (fused.py): ``bias_relu_forward``, ``bias_relu_backward``
(bias along columns, used by ``dl.LinearReLU``), ``bias_relu_rows_forward``,
``bias_relu_rows_backward`` (bias along rows, used by ``dl.Conv2dReLU``),
``softmax_cross_entropy`` (used by ``dl.SoftmaxCrossEntropy``), ``sgd_momentum_update`` and
``adam_update`` (used by ``dl.SGD`` and ``dl.Adam``). Image windows (unfold.py): ``im2col``,
``col2im`` (used by ``dl.Conv2d``), ``maxpool_forward``, ``maxpool_backward`` (used by
``dl.MaxPool2d``). References: ``dlcourse.kernels.reference``. Benchmarks:
``benchmarks/gpu_suite.py``. ``dl.fuse(model)`` rewrites a model's Linear→ReLU and Conv2d→ReLU
pairs into the fused layers.
"""
from __future__ import annotations

from ..backend import gpu_available
from . import reference
from ._build import (KERNEL_DIR, NVRTC_OPTIONS, SOURCES, LaunchConfig, launch_config,
                     list_kernels, source)
from .fused import (adam_update, bias_relu_backward, bias_relu_forward, bias_relu_rows_backward,
                    bias_relu_rows_forward, sgd_momentum_update, softmax_cross_entropy)
from .matmul import (MATMUL_KERNELS, REGBLOCK_TUNINGS, matmul_coalesced, matmul_naive,
                     matmul_regblock, matmul_tiled)
from .unfold import col2im, im2col, maxpool_backward, maxpool_forward

__all__ = [
    "available", "list_kernels", "source", "SOURCES", "KERNEL_DIR", "NVRTC_OPTIONS",
    "LaunchConfig", "launch_config",
    "matmul_naive", "matmul_coalesced", "matmul_tiled", "matmul_regblock", "MATMUL_KERNELS",
    "REGBLOCK_TUNINGS",
    "bias_relu_forward", "bias_relu_backward", "bias_relu_rows_forward", "bias_relu_rows_backward",
    "softmax_cross_entropy", "sgd_momentum_update", "adam_update",
    "im2col", "col2im", "maxpool_forward", "maxpool_backward", "reference",
]


def available() -> bool:
    """True when the kernels can run: CuPy is installed and a CUDA device answers."""
    return gpu_available()
