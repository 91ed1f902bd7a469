"""Run the CUDA kernels on the CPU, where there is no GPU (CI).

The kernels whose threads never cooperate (no ``__syncthreads``, no shared memory, no warp
shuffles) can be emulated exactly: each ``.cu`` file is compiled as C++ by g++, with a small
header standing in for CUDA's built-ins (``threadIdx``, ``blockIdx``, ...), and a launch becomes
loops over every block and every thread of the grid, one thread after another. Since each thread
of these kernels reads and writes on its own, running them in turn gives what the GPU gives. This
tests the kernels' own index arithmetic, with the launch geometry the Python wrappers compute
(``K.launch_config``), against the NumPy references. The kernels that cooperate (the tiled and
register-blocked matmuls, the backward reductions, softmax cross-entropy) only compile here
(test_kernels.py) and are checked against the same references on a GPU.
"""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import dlcourse.kernels as K
from dlcourse.kernels import reference as R

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not on the PATH: the CUDA kernels "
                                                     "are emulated on the CPU only where it is")

EMULATED = ("matmul_naive.cu", "matmul_coalesced.cu", "bias_relu.cu", "im2col.cu")

CUDA_STAND_IN = r"""
#include <cmath>
#include <cstdlib>
struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
// Cooperation between threads cannot be emulated one thread at a time: kernels that use it
// compile here but abort if launched.
static inline void __syncthreads() { std::abort(); }
template <typename T> static inline T __shfl_down_sync(unsigned, T v, int) { std::abort(); return v; }
"""

LAUNCHERS = r"""
template <class Kernel>
static void launch(const unsigned* grid, const unsigned* block, Kernel kernel)
{
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    for (unsigned bz = 0; bz < grid[2]; ++bz)
    for (unsigned by = 0; by < grid[1]; ++by)
    for (unsigned bx = 0; bx < grid[0]; ++bx) {
        blockIdx = {bx, by, bz};
        for (unsigned tz = 0; tz < block[2]; ++tz)
        for (unsigned ty = 0; ty < block[1]; ++ty)
        for (unsigned tx = 0; tx < block[0]; ++tx) {
            threadIdx = {tx, ty, tz};
            kernel();
        }
    }
}
#define GEOMETRY const unsigned* grid, const unsigned* block
#define LAUNCH(call) launch(grid, block, [&] { call; })
#define CONV_SIZES int N, int C, int H, int W, int KH, int KW, int stride, int padding, int OH, int OW
#define CONV_ARGS N, C, H, W, KH, KW, stride, padding, OH, OW

extern "C" {
void run_matmul_naive(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_naive(A, B, Cm, M, N, K)); }
void run_matmul_coalesced(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_coalesced(A, B, Cm, M, N, K)); }
"""
TYPED = r"""
void run_bias_relu_forward_{t}(GEOMETRY, const {T}* x, const {T}* b, {T}* y, long long N, int F)
{{ LAUNCH(bias_relu_forward<{T}>(x, b, y, N, F)); }}
void run_bias_relu_rows_forward_{t}(GEOMETRY, const {T}* x, const {T}* b, {T}* y, long long M)
{{ LAUNCH(bias_relu_rows_forward<{T}>(x, b, y, M)); }}
void run_im2col_{t}(GEOMETRY, const {T}* x, {T}* cols_t, long long sN, long long sC,
                    long long sH, long long sW, CONV_SIZES)
{{ LAUNCH(im2col_kernel<{T}>(x, cols_t, sN, sC, sH, sW, CONV_ARGS)); }}
void run_col2im_{t}(GEOMETRY, const {T}* cols, {T}* dx, long long s_r, long long s_q, CONV_SIZES)
{{ LAUNCH(col2im_kernel<{T}>(cols, dx, s_r, s_q, CONV_ARGS)); }}
"""
SUFFIX = {np.float32: "f", np.float64: "d"}


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """The emulated kernels as a ctypes library."""
    out = tmp_path_factory.mktemp("emulated_kernels")
    unit = CUDA_STAND_IN + "".join(f'#include "{K.SOURCES[f].path.as_posix()}"\n' for f in EMULATED)
    unit += LAUNCHERS + "".join(TYPED.format(t=t, T=T) for t, T in (("f", "float"), ("d", "double")))
    unit += "}\n"
    (out / "emulated.cpp").write_text(unit)
    lib = out / "libemulated.so"
    proc = subprocess.run([GXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas",
                           "-o", str(lib), str(out / "emulated.cpp")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"g++ could not compile the kernels as C++:\n{proc.stderr[-4000:]}"
    return ctypes.CDLL(str(lib))


def _launch(emu, name, cfg, *args):
    """Call the emulated kernel with cfg's grid and block; arrays go as pointers."""
    grid, block = ((ctypes.c_uint * 3)(*cfg.grid), (ctypes.c_uint * 3)(*cfg.block))
    c_args = []
    for a in args:
        if isinstance(a, np.ndarray):
            c_args.append(ctypes.c_void_p(a.ctypes.data))
        elif isinstance(a, np.int64):
            c_args.append(ctypes.c_longlong(int(a)))
        else:
            c_args.append(ctypes.c_int(int(a)))
    getattr(emu, name)(grid, block, *c_args)


def _elements(a):
    return tuple(np.int64(s // a.itemsize) for s in a.strides)


@pytest.mark.parametrize("name", ["naive", "coalesced"])
@pytest.mark.parametrize("M, N, Kd", [(1, 1, 1), (37, 45, 29), (33, 64, 7)])
def test_emulated_matmul(emu, name, M, N, Kd):
    rng = np.random.default_rng(M + N)
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, Kd), (Kd, N)))
    C = np.full((M, N), np.nan, dtype=np.float32)
    _launch(emu, f"run_matmul_{name}", K.launch_config(name, M, N, Kd), A, B, C, M, N, Kd)
    np.testing.assert_allclose(C, R.matmul(A, B), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("N, F", [(1, 1), (37, 45), (1000, 3), (3, 300)])
def test_emulated_bias_relu_forward_both_layouts(emu, dtype, N, F):
    rng = np.random.default_rng(N * F)
    x, b = rng.standard_normal((N, F)).astype(dtype), rng.standard_normal(F).astype(dtype)
    y = np.full_like(x, np.nan)
    _launch(emu, f"run_bias_relu_forward_{SUFFIX[dtype]}", K.launch_config("bias_relu", N, F),
            x, b, y, np.int64(N), F)
    np.testing.assert_array_equal(y, R.bias_relu_forward_ref(x, b))
    rows = x.T.copy()                       # (F, N): the bias along rows, as in Conv2d
    y_rows = np.full_like(rows, np.nan)
    _launch(emu, f"run_bias_relu_rows_forward_{SUFFIX[dtype]}",
            K.launch_config("bias_relu_rows", F, N), rows, b, y_rows, np.int64(N))
    np.testing.assert_array_equal(y_rows, R.bias_relu_rows_forward_ref(rows, b))


CONV_CASES = [((2, 3, 5, 6), 3, 3, 1, 1), ((2, 2, 7, 7), 2, 3, 2, 0), ((1, 4, 6, 5), 3, 2, 1, 2),
              ((3, 1, 4, 4), 1, 1, 1, 0), ((2, 2, 8, 8), 3, 3, 3, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "channel-major view"])
@pytest.mark.parametrize("case", CONV_CASES)
def test_emulated_im2col_col2im(emu, case, layout, dtype):
    shape, KH, KW, s, p = case
    N, C, H, W = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    if layout != "contiguous":              # as Conv2d's outputs are: (C, N, H, W) in memory
        x = np.ascontiguousarray(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    OH, OW = K.unfold.output_shape(H, W, KH, KW, s, p)
    sizes = (N, C, H, W, KH, KW, s, p, OH, OW)
    t = SUFFIX[dtype]

    cols_t = np.full((C * KH * KW, N * OH * OW), np.nan, dtype=dtype)
    _launch(emu, f"run_im2col_{t}", K.launch_config("im2col", N, C, H, W, KH, KW, s, p),
            x, cols_t, *_elements(x), *sizes)
    np.testing.assert_array_equal(cols_t.T, R.im2col_ref(x, KH, KW, s, p))

    c = rng.standard_normal(cols_t.T.shape).astype(dtype)
    want = R.col2im_ref(c, shape, KH, KW, s, p)
    for cols in (c, np.asfortranarray(c)):  # either layout is read in place
        dx = np.full(shape, np.nan, dtype=dtype)
        _launch(emu, f"run_col2im_{t}", K.launch_config("col2im", N, C, H, W, KH, KW, s, p),
                cols, dx, *_elements(cols), *sizes)
        np.testing.assert_allclose(dx, want, rtol=1e-12 if dtype == np.float64 else 1e-5,
                                   atol=1e-12 if dtype == np.float64 else 1e-5)
