"""Run the CUDA kernels on the CPU, where there is no GPU (CI).

Every ``.cu`` file is compiled as C++ by g++, with a small header standing in for CUDA's
built-ins (``threadIdx``, ``__syncthreads``, ``__shfl_down_sync``, ``float4``, ...). A launch
runs the grid one block after another; inside a block every thread is a *fiber* (a
``ucontext``: its own stack, switched by hand), so the threads of a block really do cooperate:

- a thread runs until it reaches ``__syncthreads()`` and waits there; when every thread of the
  block waits, all go on. A thread that returns while others wait is an error (the block
  would hang on a GPU).
- ``__shfl_down_sync`` waits until all 32 lanes of the warp have reached it, then each lane
  gets the value of lane ``lane + offset`` (its own when that is past lane 31), as on a GPU.
  Lanes of one warp at different sync points are an error.
- ``__shared__`` arrays are ``static``: one copy, seen by every thread of the block.

The warps of a block take turns (first to last, or last to first): each runs as far as it can
(its lanes one after the other, exchanging values at each shuffle) before the next starts. A
missing ``__syncthreads()`` then lets one warp read a tile the others have not written, or
overwrite one they still read, and the result is wrong: a test below removes one to show it. Every array goes to a kernel inside bands of NaN (``GUARD`` elements on each
side): a read outside the array poisons the result, and a write outside is caught after the
launch.

This tests the kernels' own index arithmetic and synchronisation, with the launch geometry the
Python wrappers compute (``K.launch_config``), against the NumPy references. The last section
runs the Python wrappers and the layers' kernel branches on the emulated kernels too. What it
cannot show is speed, and what happens when threads really do run at once (a GPU runs the same
code in test_kernels.py and the rest of the suite).
"""
import ctypes
import dataclasses
import functools
import math
import re
import shutil
import subprocess
import sys
import types
import weakref

import numpy as np
import pytest

import dlcourse as dl
import dlcourse.kernels as K
from dlcourse.kernels import reference as R
from test_fusion import MODELS, OPTIMIZERS, check_kernels_in_training
from test_kernels import CONV_CASES, MATMUL_BUILDS, POOL_CASES

GXX = shutil.which("g++")
pytestmark = [
    pytest.mark.skipif(GXX is None, reason="g++ is not on the PATH: the CUDA kernels are "
                                           "emulated on the CPU only where it is"),
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="the emulator's threads are glibc ucontext fibers (Linux only)"),
]

CUDA_STAND_IN = r"""
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>

struct emu_dim3 { unsigned x, y, z; };
enum emu_state { EMU_READY, EMU_AT_BARRIER, EMU_AT_SHUFFLE, EMU_DONE };
struct emu_thread {
    ucontext_t ctx;
    emu_dim3 idx;                            // threadIdx
    emu_state state;
    unsigned mask; int offset, bytes;        // the pending __shfl_down_sync
    unsigned char value[8], result[8];
};
// Not static, so that the compiler reloads them after every switch between threads.
emu_dim3 blockIdx, blockDim, gridDim;
emu_thread* emu_self;                        // the thread running now
ucontext_t emu_scheduler;
std::function<void()> emu_kernel;
char emu_error[400];

#define threadIdx (emu_self->idx)
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static                    // one copy for the block (blocks run in turn)
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
using std::min;                              // CUDA's device min(int, int)

static void emu_wait(emu_state why)
{
    emu_thread* me = emu_self;
    me->state = why;
    swapcontext(&me->ctx, &emu_scheduler);   // back here when the scheduler releases us
}
static inline void __syncthreads() { emu_wait(EMU_AT_BARRIER); }
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, int offset)
{
    static_assert(sizeof(T) <= 8, "the stand-in shuffles at most 8 bytes");
    emu_self->mask = mask; emu_self->offset = offset; emu_self->bytes = sizeof(T);
    std::memcpy(emu_self->value, &v, sizeof(T));
    emu_wait(EMU_AT_SHUFFLE);
    T out;
    std::memcpy(&out, emu_self->result, sizeof(T));
    return out;
}
struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
"""

SCHEDULER = r"""
static void emu_entry() { emu_kernel(); emu_self->state = EMU_DONE; }   // then uc_link

static int emu_fail(const char* what, unsigned tid)
{
    std::snprintf(emu_error, sizeof emu_error,
                  "block (%u, %u, %u), thread %u (threadIdx (%u, %u, %u)): %s", blockIdx.x,
                  blockIdx.y, blockIdx.z, tid, tid % blockDim.x, tid / blockDim.x % blockDim.y,
                  tid / (blockDim.x * blockDim.y), what);
    return 1;
}

// Exchange the values of one warp whose lanes all wait in __shfl_down_sync.
static int emu_shuffle(emu_thread* th, unsigned first, unsigned lanes)
{
    for (unsigned l = 0; l < lanes; ++l) {
        const emu_thread& t = th[first + l];
        if (t.state != EMU_AT_SHUFFLE)
            return emu_fail(t.state == EMU_DONE ? "returned while its warp waits in __shfl_down_sync"
                                                : "waits in __syncthreads() while its warp waits in "
                                                  "__shfl_down_sync", first + l);
        if (t.mask != 0xffffffffu || lanes != 32)
            return emu_fail("__shfl_down_sync with a mask other than all 32 lanes of a full warp "
                            "(the stand-in handles only that)", first + l);
        if (t.bytes != th[first].bytes)
            return emu_fail("lanes of one warp shuffle values of different types", first + l);
    }
    for (unsigned l = 0; l < lanes; ++l) {
        emu_thread& t = th[first + l];
        const unsigned src = l + (unsigned)t.offset < 32 ? l + t.offset : l;
        std::memcpy(t.result, th[first + src].value, 8);
        t.state = EMU_READY;
    }
    return 0;
}

static int emu_run_block(emu_thread* th, unsigned n, char* stacks, size_t stack_size, int reverse)
{
    for (unsigned i = 0; i < n; ++i) {
        getcontext(&th[i].ctx);
        th[i].ctx.uc_stack.ss_sp = stacks + i * stack_size;
        th[i].ctx.uc_stack.ss_size = stack_size;
        th[i].ctx.uc_link = &emu_scheduler;
        makecontext(&th[i].ctx, emu_entry, 0);
        th[i].state = EMU_READY;
    }
    const unsigned warps = (n + 31) / 32;
    for (;;) {
        for (unsigned k = 0; k < warps; ++k) {  // each warp in turn runs as far as it can
            const unsigned first = 32 * (reverse ? warps - 1 - k : k);
            const unsigned lanes = n - first < 32 ? n - first : 32;
            for (;;) {
                bool shuffle = false;           // run each lane until it waits or returns
                for (unsigned l = 0; l < lanes; ++l) {
                    emu_self = &th[first + (reverse ? lanes - 1 - l : l)];
                    if (emu_self->state == EMU_READY) swapcontext(&emu_scheduler, &emu_self->ctx);
                    shuffle |= emu_self->state == EMU_AT_SHUFFLE;
                }
                if (!shuffle) break;            // the warp waits at the barrier, or is done
                if (emu_shuffle(th, first, lanes)) return 1;
            }
        }
        unsigned done = 0;                    // else every thread waits at the barrier or is done
        for (unsigned i = 0; i < n; ++i) done += th[i].state == EMU_DONE;
        if (done == n) return 0;
        for (unsigned i = 0; i < n; ++i) {
            if (done && th[i].state == EMU_DONE)
                return emu_fail("returned while other threads of its block wait in "
                                "__syncthreads() (on a GPU the block may hang)", i);
            th[i].state = EMU_READY;
        }
    }
}

static int launch(const unsigned* grid, const unsigned* block, int reverse,
                  std::function<void()> kernel)
{
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    const unsigned n = block[0] * block[1] * block[2];
    const size_t stack_size = 64 * 1024;
    emu_thread* th = new emu_thread[n];
    char* stacks = static_cast<char*>(std::malloc(n * stack_size));
    emu_kernel = kernel;
    int failed = 0;
    for (unsigned bz = 0; bz < grid[2] && !failed; ++bz)
    for (unsigned by = 0; by < grid[1] && !failed; ++by)
    for (unsigned bx = 0; bx < grid[0] && !failed; ++bx) {
        blockIdx = {bx, by, bz};
        for (unsigned i = 0; i < n; ++i)
            th[i].idx = {i % block[0], i / block[0] % block[1], i / (block[0] * block[1])};
        failed = emu_run_block(th, n, stacks, stack_size, reverse);
    }
    std::free(stacks);
    delete[] th;
    return failed;
}
"""

LAUNCHERS = r"""
#define GEOMETRY const unsigned* grid, const unsigned* block, int reverse
#define LAUNCH(call) return launch(grid, block, reverse, [&] { call; })
#define CONV_SIZES int N, int C, int H, int W, int KH, int KW, int stride, int padding, int OH, int OW
#define CONV_ARGS N, C, H, W, KH, KW, stride, padding, OH, OW
#define POOL_SIZES int N, int C, int H, int W, int KH, int KW, int stride, int OH, int OW
#define POOL_ARGS N, C, H, W, KH, KW, stride, OH, OW

extern "C" {
const char* emu_last_error() { return emu_error; }
int run_matmul_naive(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_naive(A, B, Cm, M, N, K)); }
int run_matmul_coalesced(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_coalesced(A, B, Cm, M, N, K)); }
int run_matmul_tiled(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_tiled(A, B, Cm, M, N, K)); }
int run_matmul_regblock(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_regblock(A, B, Cm, M, N, K)); }
"""
TYPED = r"""
int run_bias_relu_forward_{t}(GEOMETRY, const {T}* x, const {T}* b, {T}* y, long long N, int F)
{{ LAUNCH(bias_relu_forward<{T}>(x, b, y, N, F)); }}
int run_bias_relu_backward_{t}(GEOMETRY, const {T}* dout, const {T}* y, {T}* dx, {T}* partial,
                               long long N, int F)
{{ LAUNCH(bias_relu_backward<{T}>(dout, y, dx, partial, N, F)); }}
int run_bias_relu_rows_forward_{t}(GEOMETRY, const {T}* x, const {T}* b, {T}* y, long long M)
{{ LAUNCH(bias_relu_rows_forward<{T}>(x, b, y, M)); }}
int run_bias_relu_rows_backward_{t}(GEOMETRY, const {T}* dout, const {T}* y, {T}* dx,
                                    {T}* partial, long long M)
{{ LAUNCH(bias_relu_rows_backward<{T}>(dout, y, dx, partial, M)); }}
int run_softmax_xent_{t}_i(GEOMETRY, const {T}* z, const int* y, {T}* loss, {T}* dz,
                           int N, int C, {T} inv_N)
{{ LAUNCH((softmax_xent<{T}, int>(z, y, loss, dz, N, C, inv_N))); }}
int run_softmax_xent_{t}_l(GEOMETRY, const {T}* z, const long long* y, {T}* loss, {T}* dz,
                           int N, int C, {T} inv_N)
{{ LAUNCH((softmax_xent<{T}, long long>(z, y, loss, dz, N, C, inv_N))); }}
int run_im2col_{t}(GEOMETRY, const {T}* x, {T}* cols_t, long long sN, long long sC,
                   long long sH, long long sW, CONV_SIZES)
{{ LAUNCH(im2col_kernel<{T}>(x, cols_t, sN, sC, sH, sW, CONV_ARGS)); }}
int run_col2im_{t}(GEOMETRY, const {T}* cols, {T}* dx, long long s_r, long long s_q, CONV_SIZES)
{{ LAUNCH(col2im_kernel<{T}>(cols, dx, s_r, s_q, CONV_ARGS)); }}
int run_maxpool_forward_{t}(GEOMETRY, const {T}* x, {T}* out, int* idx, long long sN,
                            long long sC, long long sH, long long sW, POOL_SIZES)
{{ LAUNCH(maxpool_forward<{T}>(x, out, idx, sN, sC, sH, sW, POOL_ARGS)); }}
int run_maxpool_backward_{t}(GEOMETRY, const {T}* dout, const int* idx, {T}* dx, long long dN,
                             long long dC, long long dH, long long dW, long long xN, long long xC,
                             long long xH, long long xW, POOL_SIZES)
{{ LAUNCH(maxpool_backward<{T}>(dout, idx, dx, dN, dC, dH, dW, xN, xC, xH, xW, POOL_ARGS)); }}
int run_sgd_momentum_update_{t}(GEOMETRY, {T}* p, const {T}* g, {T}* v, long long n, {T} lr,
                                {T} momentum, {T} weight_decay)
{{ LAUNCH(sgd_momentum_update<{T}>(p, g, v, n, lr, momentum, weight_decay)); }}
int run_adam_update_{t}(GEOMETRY, {T}* p, const {T}* g, {T}* m, {T}* v, long long n, {T} b1,
                        {T} one_minus_b1, {T} b2, {T} one_minus_b2, {T} step_size, {T} eps,
                        {T} weight_decay)
{{ LAUNCH(adam_update<{T}>(p, g, m, v, n, b1, one_minus_b1, b2, one_minus_b2, step_size, eps,
                           weight_decay)); }}
"""
SUFFIX = {np.float32: "f", np.float64: "d"}
CTYPES = {np.float32: ctypes.c_float, np.float64: ctypes.c_double}
GUARD = 64   # NaN elements on each side of every array: 256+ bytes, so float4 stays aligned


def _compile(out, sources, name="emulated"):
    """Compile the .cu sources (name -> text) with the stand-in into a ctypes library."""
    unit = CUDA_STAND_IN + "".join(f"// ---- {f}\n{text}\n" for f, text in sources.items())
    unit += SCHEDULER + LAUNCHERS
    unit += "".join(TYPED.format(t=t, T=T) for t, T in (("f", "float"), ("d", "double"))) + "}\n"
    (out / f"{name}.cpp").write_text(unit)
    lib = out / f"lib{name}.so"
    proc = subprocess.run([GXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas",
                           "-o", str(lib), str(out / f"{name}.cpp")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"g++ could not compile the kernels as C++:\n{proc.stderr[-4000:]}"
    emu = ctypes.CDLL(str(lib))
    emu.emu_last_error.restype = ctypes.c_char_p
    return emu


def _all_sources():
    return {f: K.source(f) for f in K.SOURCES}


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """Every kernel, emulated, as a ctypes library."""
    return _compile(tmp_path_factory.mktemp("emulated_kernels"), _all_sources())


@pytest.fixture(scope="module")
def emu_builds(emu, tmp_path_factory):
    """defines -> the emulated library built with them (as NVRTC's -D options would), each
    compiled the first time it is asked for; () is `emu`."""
    builds = {(): emu}

    def build(defines):
        defines = tuple(defines)
        if defines not in builds:
            builds[defines] = _compile(tmp_path_factory.mktemp("emulated_build"),
                                       _with_defines(_all_sources(), defines))
        return builds[defines]
    return build


def _fill(dtype):
    """What the guard bands hold: NaN, or for integers (labels) the most negative one."""
    return np.nan if dtype.kind == "f" else np.iinfo(dtype).min


_BUFFERS = weakref.WeakValueDictionary()   # id -> every buffer _guarded made, while alive


def _guarded(a):
    """A C-contiguous copy of a inside a buffer with GUARD elements of _fill on each side."""
    a = np.asarray(a)
    buf = np.full(a.size + 2 * GUARD, _fill(a.dtype), dtype=a.dtype)
    _BUFFERS[id(buf)] = buf
    inner = buf[GUARD:GUARD + a.size].reshape(a.shape)
    inner[...] = a
    assert inner.ctypes.data % 16 == 0, "the guarded array must be 16-byte aligned"
    return inner


def _empty(shape, dtype):
    """An output: NaN inside (so anything left unwritten shows), NaN guards outside (for
    integers: the most negative one)."""
    return _guarded(np.full(shape, _fill(np.dtype(dtype)), dtype=dtype))


# NumPy 2 moved byte_bounds to np.lib.array_utils; NumPy 1.x (down to our floor) has np.byte_bounds.
_byte_bounds = getattr(np.lib, "array_utils", np).byte_bounds


def _guard_buffer(a):
    """The guarded buffer a lies in (checking that it lies inside the guards), or None."""
    buf = a.base
    if buf is None or _BUFFERS.get(id(buf)) is not buf:
        return None
    lo, hi = _byte_bounds(a)
    start = buf.ctypes.data + GUARD * buf.itemsize
    assert start <= lo and hi <= start + (buf.size - 2 * GUARD) * buf.itemsize, \
        "the array reaches into its guard bands"
    return buf


def _launch(emu, name, cfg, *args, reverse=False, strict=True):
    """Run the emulated kernel with cfg's grid and block; arrays go as pointers to their first
    element. Afterwards the guard bands around every array must still hold their fill. strict:
    every array must come from _guarded (the tests' own arrays)."""
    grid, block = ((ctypes.c_uint * 3)(*cfg.grid), (ctypes.c_uint * 3)(*cfg.block))
    c_args, buffers = [], []
    for a in args:
        if isinstance(a, np.ndarray):
            buffers.append((len(c_args), _guard_buffer(a)))
            assert buffers[-1][1] is not None or not strict, "pass arrays via _guarded"
            c_args.append(ctypes.c_void_p(a.ctypes.data))
        elif isinstance(a, np.int64):
            c_args.append(ctypes.c_longlong(int(a)))
        elif isinstance(a, np.floating):
            c_args.append(CTYPES[a.dtype.type](a))
        else:
            c_args.append(ctypes.c_int(int(a)))
    if getattr(emu, name)(grid, block, int(reverse), *c_args):
        raise AssertionError(f"{name} {cfg}: {emu.emu_last_error().decode()}")
    for i, buf in buffers:
        if buf is not None:
            guards = np.concatenate([buf[:GUARD], buf[-GUARD:]])
            np.testing.assert_array_equal(guards, np.full_like(guards, _fill(buf.dtype)),
                                          err_msg=f"{name} wrote outside argument {i}")


def _tol(dtype):
    """assert_allclose tolerances for sums taken in another order than the reference's."""
    return dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)


def _elements(a):
    return tuple(np.int64(s // a.itemsize) for s in a.strides)


MATMUL_SIZES = [(1, 1, 1), (37, 45, 29), (33, 64, 7), (70, 33, 65)]
#: K, N multiples of 4 (float4); K = 52 is 4 k-steps at BK = 16, so double buffering reuses
#: each copy of the shared tiles.
REGBLOCK_SIZES = [(1, 4, 4), (130, 136, 20), (257, 132, 12), (70, 260, 52)]


@pytest.fixture(params=[False, True], ids=["warps-in-order", "warps-reversed"])
def reverse(request):
    """The order in which the threads of a block take turns: both must give the same result."""
    return request.param


@pytest.mark.parametrize("name, M, N, Kd, tuning",
                         [(name, *mnk, {}) for name in ("naive", "coalesced", "tiled")
                          for mnk in MATMUL_SIZES] +
                         [pytest.param("regblock", *mnk, t, id=f"regblock-{mnk}-{t}")
                          for mnk in REGBLOCK_SIZES for t in K.REGBLOCK_TUNINGS])
def test_emulated_matmul(emu_builds, name, M, N, Kd, tuning, reverse):
    """tuning: regblock's, built in with -D options as the wrapper builds it."""
    rng = np.random.default_rng(M + N)
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, Kd), (Kd, N)))
    C = _empty((M, N), np.float32)
    defines = K.matmul.regblock_defines(**tuning) if tuning else ()
    _launch(emu_builds(defines), f"run_matmul_{name}", K.launch_config(name, M, N, Kd, **tuning),
            _guarded(A), _guarded(B), C, M, N, Kd, reverse=reverse)
    np.testing.assert_allclose(C, R.matmul(A, B), rtol=1e-5, atol=1e-5)


def _with_defines(sources, defines):
    """The sources built with ((name, value), ...), as NVRTC's -D options would."""
    heads = "".join(f"#define {name} {value}\n" for name, value in defines)
    return {f: heads + text for f, text in sources.items()}


def _planted(tmp_path, plants, defines=()):
    """The kernels with bugs planted: plants maps a .cu file to (text, replacement)."""
    sources = _all_sources()
    for file, (old, new) in plants.items():
        assert sources[file].count(old) == 1, f"{file} changed: update the planted bug"
        sources[file] = sources[file].replace(old, new)
    return _compile(tmp_path, _with_defines(sources, defines), name="planted")


def _tiled_64(emu):
    """C from the emulated tiled kernel at M = N = K = 64, and A @ B."""
    rng = np.random.default_rng(0)
    A, B = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    C = _empty((64, 64), np.float32)
    _launch(emu, "run_matmul_tiled", K.launch_config("tiled", 64, 64, 64),
            _guarded(A), _guarded(B), C, 64, 64, 64)
    return C, R.matmul(A, B)


def test_emulation_catches_a_missing_syncthreads(tmp_path):
    """Without the __syncthreads() that ends each k-step, a thread that runs ahead overwrites
    the shared tiles while the others still read them: the result is wrong, and shows it."""
    broken = _planted(tmp_path, {"matmul_tiled.cu": (
        "        __syncthreads();                          // 4.", "        // (removed) 4.")})
    C, want = _tiled_64(broken)
    assert not np.allclose(C, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("plant", [
    ("            if (more) store(s ^ 1);", "            if (more) store(s);"),
    ("    if (DOUBLE_BUFFER) { store(0); __syncthreads(); }", "    if (DOUBLE_BUFFER) { store(0); }"),
], ids=["stores-into-the-copy-being-read", "no-wait-for-the-first-tiles"])
def test_emulation_catches_double_buffering_mistakes(tmp_path, plant):
    """Double buffering waits once per k-step, so the next tiles must go to the copy nobody
    reads during the step, and the first tiles must be waited for before the loop."""
    rng = np.random.default_rng(1)
    M, N, Kd = 130, 136, 52
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, Kd), (Kd, N)))
    tuning = dict(prefetch=True, double_buffer=True)
    broken = _planted(tmp_path, {"matmul_regblock.cu": plant},
                      defines=K.matmul.regblock_defines(**tuning))
    C = _empty((M, N), np.float32)
    _launch(broken, "run_matmul_regblock", K.launch_config("regblock", M, N, Kd, **tuning),
            _guarded(A), _guarded(B), C, M, N, Kd)
    assert not np.allclose(C, R.matmul(A, B), rtol=1e-5, atol=1e-5)


def test_emulation_reports_threads_that_would_hang(tmp_path):
    """A thread that returns while the rest of its block waits in __syncthreads(), or while its
    warp waits in a shuffle, would hang the block on a GPU; the emulator names the thread."""
    broken = _planted(tmp_path, {
        "matmul_tiled.cu": ("    float acc = 0.0f;\n",
                            "    float acc = 0.0f;\n    if (tx == 5 && ty == 1) return;\n"),
        "bias_relu.cu": ("    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n",
                         "    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n"
                         "    if (threadIdx.x == 40) return;\n")})
    with pytest.raises(AssertionError, match=r"thread 37 \(threadIdx \(5, 1, 0\)\): returned "
                                             r"while other threads of its block wait"):
        _tiled_64(broken)
    x = _guarded(np.ones((2, 300)))
    with pytest.raises(AssertionError, match=r"thread 40 .*returned while its warp waits in "
                                             r"__shfl_down_sync"):
        _launch(broken, "run_bias_relu_rows_backward_d", K.launch_config("bias_relu_rows", 2, 300),
                x, x, _empty((2, 300), np.float64), _empty((2, 2), np.float64), np.int64(300))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("N, F, few_blocks", [(1, 1, False), (37, 45, False), (1000, 3, False),
                                              (3, 300, False), (1000, 3, True), (200, 70, True)])
def test_emulated_bias_relu_both_layouts(emu, dtype, N, F, few_blocks, reverse):
    """few_blocks: a grid of only 2 blocks along the split axis, so each block walks several
    strides of rows (or of a row), as on a GPU with far more data than blocks."""
    rng = np.random.default_rng(N * F)
    x, b = rng.standard_normal((N, F)).astype(dtype), rng.standard_normal(F).astype(dtype)
    dout = rng.standard_normal((N, F)).astype(dtype)
    t = SUFFIX[dtype]
    tol = _tol(dtype)

    # bias along columns (Linear's (N, F) output): forward, then backward with db in partials
    cfg = K.launch_config("bias_relu", N, F)
    if few_blocks:
        cfg = dataclasses.replace(cfg, grid=(cfg.grid[0], 2, 1))
    y = _empty((N, F), dtype)
    _launch(emu, f"run_bias_relu_forward_{t}", cfg, _guarded(x), _guarded(b), y, np.int64(N), F)
    np.testing.assert_array_equal(y, R.bias_relu_forward_ref(x, b))
    dx, partial = _empty((N, F), dtype), _empty((cfg.grid[1], F), dtype)
    _launch(emu, f"run_bias_relu_backward_{t}", cfg, _guarded(dout), _guarded(y), dx, partial,
            np.int64(N), F, reverse=reverse)
    want_dx, want_db = R.bias_relu_backward_ref(dout, y)
    np.testing.assert_array_equal(dx, want_dx)
    np.testing.assert_allclose(partial.sum(axis=0), want_db, **tol)   # as the wrapper does

    # bias along rows (Conv2d's (F, M) output matrix)
    rows, dout_rows = x.T.copy(), dout.T.copy()
    cfg = K.launch_config("bias_relu_rows", F, N)
    if few_blocks:
        cfg = dataclasses.replace(cfg, grid=(2, F, 1))
    y_rows = _empty((F, N), dtype)
    _launch(emu, f"run_bias_relu_rows_forward_{t}", cfg, _guarded(rows), _guarded(b), y_rows,
            np.int64(N))
    np.testing.assert_array_equal(y_rows, R.bias_relu_rows_forward_ref(rows, b))
    dx_rows, partial = _empty((F, N), dtype), _empty((F, cfg.grid[0]), dtype)
    _launch(emu, f"run_bias_relu_rows_backward_{t}", cfg, _guarded(dout_rows), _guarded(y_rows),
            dx_rows, partial, np.int64(N), reverse=reverse)
    want_dx, want_db = R.bias_relu_rows_backward_ref(dout_rows, y_rows)
    np.testing.assert_array_equal(dx_rows, want_dx)
    np.testing.assert_allclose(partial.sum(axis=1), want_db, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("N, C, grid", [(1, 1, None), (7, 10, None), (33, 1000, None),
                                        (5, 33, None), (9, 300, 4)])
def test_emulated_softmax_cross_entropy(emu, dtype, label_dtype, N, C, grid, reverse):
    """grid=4: fewer blocks than rows, so each block walks its rows grid-stride (on a GPU that
    happens only past 2**20 rows) and reuses its shared memory from one row to the next."""
    rng = np.random.default_rng(N * C)
    z = (rng.standard_normal((N, C)) * 20).astype(dtype)
    z[0, 0] = 80 if dtype == np.float32 else 700          # exp would overflow unshifted
    y = rng.integers(0, C, N).astype(label_dtype)
    y[-1] = C if N > 1 else y[-1]                         # out of range: that row's loss is NaN
    cfg = K.launch_config("softmax_cross_entropy", N, C)
    if grid is not None:
        cfg = dataclasses.replace(cfg, grid=(grid, 1, 1))
    loss_rows, dz = _empty(N, dtype), _empty((N, C), dtype)
    name = f"run_softmax_xent_{SUFFIX[dtype]}_{'i' if label_dtype == np.int32 else 'l'}"
    _launch(emu, name, cfg, _guarded(z), _guarded(y), loss_rows, dz, N, C, dtype(1.0 / N),
            reverse=reverse)
    valid = y < C
    tol = _tol(dtype)["rtol"]
    ref_loss, ref_dz = R.softmax_cross_entropy_ref(z[valid], y[valid])
    assert np.isnan(loss_rows[~valid]).all()
    np.testing.assert_allclose(loss_rows[valid].mean(), ref_loss, rtol=tol)
    n_valid = valid.sum()                                 # the reference divides by its own N
    np.testing.assert_allclose(dz[valid] * N / n_valid, ref_dz, rtol=tol, atol=tol / N)
    assert np.isfinite(dz).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "channel-major view"])
@pytest.mark.parametrize("case", CONV_CASES)
def test_emulated_im2col_col2im(emu, case, layout, dtype):
    shape, KH, KW, s, p = case
    N, C, H, W = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    x_in = _guarded(x)
    if layout != "contiguous":              # as Conv2d's outputs are: (C, N, H, W) in memory
        x_in = _guarded(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    OH, OW = K.unfold.output_shape(H, W, KH, KW, s, p)
    sizes = (N, C, H, W, KH, KW, s, p, OH, OW)
    t = SUFFIX[dtype]

    cols_t = _empty((C * KH * KW, N * OH * OW), dtype)
    _launch(emu, f"run_im2col_{t}", K.launch_config("im2col", N, C, H, W, KH, KW, s, p),
            x_in, cols_t, *_elements(x_in), *sizes)
    np.testing.assert_array_equal(cols_t.T, R.im2col_ref(x, KH, KW, s, p))

    c = rng.standard_normal(cols_t.T.shape).astype(dtype)
    want = R.col2im_ref(c, shape, KH, KW, s, p)
    for cols in (_guarded(c), _guarded(c.T).T):   # either layout is read in place
        dx = _empty(shape, dtype)
        _launch(emu, f"run_col2im_{t}", K.launch_config("col2im", N, C, H, W, KH, KW, s, p),
                cols, dx, *_elements(cols), *sizes)
        np.testing.assert_allclose(dx, want, **_tol(dtype))


def _channel_major(a):
    """a's values in a guarded (C, N, H, W) buffer, seen as (N, C, H, W): Conv2d's layout."""
    return _guarded(a.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "channel-major view"])
@pytest.mark.parametrize("case", POOL_CASES)
def test_emulated_maxpool(emu, case, layout, dtype):
    """Forward (out and the position of the first maximum: small integers make many ties) and
    backward, with x, dout and dx as given, or channel-major as Conv2d's outputs are; the
    last case runs on 2 blocks, which walk the arrays grid-stride."""
    shape, KH, KW, s, grid = case
    N, C, H, W = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-3, 4, shape).astype(dtype)
    OH, OW = K.unfold.output_shape(H, W, KH, KW, s)
    dout = rng.standard_normal((N, C, OH, OW)).astype(dtype)
    place = _guarded if layout == "contiguous" else _channel_major
    x_in, dout_in, dx = place(x), place(dout), place(np.full(shape, np.nan, dtype))
    sizes = (N, C, H, W, KH, KW, s, OH, OW)
    configs = [K.launch_config(f"maxpool_{d}", N, C, H, W, KH, KW, s) for d in ("forward", "backward")]
    if grid is not None:
        configs = [dataclasses.replace(cfg, grid=(grid, 1, 1)) for cfg in configs]
    out, idx = _empty((N, C, OH, OW), dtype), _empty((N, C, OH, OW), np.int32)
    _launch(emu, f"run_maxpool_forward_{SUFFIX[dtype]}", configs[0], x_in, out, idx,
            *_elements(x_in), *sizes)
    want_out, want_idx = R.maxpool_forward_ref(x, KH, KW, s)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(idx, want_idx)
    _launch(emu, f"run_maxpool_backward_{SUFFIX[dtype]}", configs[1], dout_in, idx, dx,
            *_elements(dout_in), *_elements(dx), *sizes)
    np.testing.assert_allclose(dx, R.maxpool_backward_ref(dout, want_idx, shape, KH, KW, s),
                               **_tol(dtype))


B1, B2 = 0.9, 0.999
OPTIMIZER_UPDATES = {   # kernel -> (reference, state arrays, the reference's scalars, the kernel's)
    "sgd_momentum_update": (R.sgd_momentum_update_ref, 1, (0.1, 0.9, 0.01), (0.1, 0.9, 0.01)),
    "adam_update": (R.adam_update_ref, 2, (B1, B2, 0.05, 1e-8, 0.01),
                    (B1, 1 - B1, B2, 1 - B2, 0.05, 1e-8, 0.01)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, grid", [(1, None), (1000, None), (3001, 2)])
@pytest.mark.parametrize("kernel", sorted(OPTIMIZER_UPDATES))
def test_emulated_optimizer_updates(emu, kernel, n, grid, dtype):
    """grid=2: two blocks of 256 threads walk 3001 elements grid-stride."""
    ref, n_state, ref_scalars, kernel_scalars = OPTIMIZER_UPDATES[kernel]
    rng = np.random.default_rng(n)
    p, g, *state = (rng.standard_normal(n).astype(dtype) for _ in range(2 + n_state))
    state[-1] = np.abs(state[-1])                  # Adam's v (a mean of squares) is >= 0
    cfg = K.launch_config("optimizer_update", n)
    if grid is not None:
        cfg = dataclasses.replace(cfg, grid=(grid, 1, 1))
    p_dev, state_dev = _guarded(p), [_guarded(a) for a in state]
    _launch(emu, f"run_{kernel}_{SUFFIX[dtype]}", cfg, p_dev, _guarded(g), *state_dev,
            np.int64(n), *(dtype(a) for a in kernel_scalars))
    for got, want in zip([p_dev, *state_dev], ref(p, g, *state, *ref_scalars)):
        np.testing.assert_allclose(got, want, **_tol(dtype))


# ============================================================================================
# The Python wrappers and the layers' GPU branches, on the emulated kernels
# ============================================================================================
# With the patches of the `emulated_gpu` fixture, dlcourse.kernels takes NumPy arrays for CuPy
# ones, allocates through a small CuPy stand-in (guarded buffers again), and launches the
# emulated kernels. So the wrappers' own work (padding, strides, partial sums, the template
# each dtype picks, the type of every scalar argument) and the glue in Conv2d and the fused
# layers run in CI as they would on a GPU.
C_TYPES = {"float": np.float32, "double": np.float64, "int": np.int32, "long long": np.int64}
SHORT = {"float": "f", "double": "d", "int": "i", "long long": "l"}


@functools.lru_cache(maxsize=None)
def _cu_params(source, kernel):
    """((is_pointer, C type, name), ...) of a __global__ kernel, read from its .cu source."""
    source = re.sub(r"//[^\n]*", "", source)
    m = re.search(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?" + kernel +
                  r"\s*\(([^)]*)\)", source)
    assert m, f"no __global__ kernel {kernel} in the source"
    params = []
    for p in m.group(1).split(","):
        words = [w for w in p.replace("*", " * ").split() if w not in ("const", "__restrict__")]
        params.append(("*" in words, " ".join(w for w in words[:-1] if w != "*"), words[-1]))
    return tuple(params)


class EmuArray(np.ndarray):
    """A NumPy array standing in for a CuPy one: ``.data.ptr`` is its address, as in CuPy.

    It also counts what CuPy would launch a kernel for (``EmuArray.launches``): every ufunc call
    and reduction on it (``mean`` once: CuPy's is one reduction kernel, NumPy's two ufunc
    calls), and every launch of an emulated kernel."""

    launches = 0

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        EmuArray.launches += 1
        plain = [a.view(np.ndarray) if isinstance(a, EmuArray) else a for a in inputs]
        if out is not None:
            getattr(ufunc, method)(*plain, out=tuple(o.view(np.ndarray) for o in out), **kwargs)
            return out[0] if len(out) == 1 else out
        result = getattr(ufunc, method)(*plain, **kwargs)
        return result.view(EmuArray) if isinstance(result, np.ndarray) else result

    def mean(self, *args, **kwargs):
        EmuArray.launches += 1
        return self.view(np.ndarray).mean(*args, **kwargs)


def _device(a):
    """a, copied into a guarded buffer, as an EmuArray."""
    return _guarded(a).view(EmuArray)


FAKE_CUPY = types.SimpleNamespace(
    float32=np.float32,
    int32=np.int32,
    empty=lambda shape, dtype=np.float32: _empty(shape, dtype).view(EmuArray),
    empty_like=lambda a: _empty(a.shape, a.dtype).view(EmuArray),
    zeros=lambda shape, dtype=np.float32: _device(np.zeros(shape, dtype=dtype)),
    asarray=lambda a, dtype=None: _device(np.asarray(a, dtype=dtype)),
    ascontiguousarray=lambda a: _device(np.ascontiguousarray(a)),
)


def _emulated_kernel(emu, file, name):
    """What get_kernel(file, name) returns on a GPU: kernel(grid, block, args, shared_mem=0).
    It checks what CUDA would not: the argument count, each array's dtype and each scalar's
    exact type against the kernel's signature in the .cu file, and the launch limits."""
    kernel, _, targs = name.partition("<")
    targs = [t.strip() for t in targs.rstrip(">").split(",")] if targs else []
    params = _cu_params(K.source(file), kernel)
    ctype = dict(C_TYPES, **dict(zip(("T", "L"), (C_TYPES[t] for t in targs))))
    run = "run_" + kernel.removesuffix("_kernel") + "".join("_" + SHORT[t] for t in targs)

    def launch(grid, block, args, shared_mem=0):
        assert isinstance(grid, tuple) and isinstance(block, tuple) and shared_mem == 0
        assert all(isinstance(v, int) and v >= 1 for v in grid + block), (grid, block)
        assert math.prod(block) <= 1024 and max(grid[1:]) <= 65535, (grid, block)
        assert len(args) == len(params), f"{name}: {len(args)} arguments, {len(params)} parameters"
        for a, (pointer, t, pname) in zip(args, params):
            if pointer:
                assert isinstance(a, np.ndarray) and a.dtype == ctype[t], \
                    f"{name}: {pname} is a {t}*, got {getattr(a, 'dtype', type(a).__name__)}"
            else:
                assert type(a) is ctype[t], f"{name}: {pname} is a {t}, got {type(a).__name__}"
        _launch(emu, run, types.SimpleNamespace(grid=grid, block=block), *args, strict=False)
        EmuArray.launches += 1
    return launch


@pytest.fixture
def emulated_gpu(emu_builds, monkeypatch):
    """dlcourse.kernels and the layers' kernel branches running on the emulated kernels."""
    monkeypatch.setattr(K._build, "device_of", lambda a: "gpu")
    for module in (K.matmul, K.fused, K.unfold):
        monkeypatch.setattr(module, "require_cupy", lambda: FAKE_CUPY)
        monkeypatch.setattr(module, "get_kernel",
                            lambda f, n, defines=(): _emulated_kernel(emu_builds(defines), f, n))
    for module in (dl.conv, dl.fusion, dl.losses, dl.optim):
        monkeypatch.setattr(module, "gpu_kernels", lambda x, enabled=True: K if enabled else None)


@pytest.mark.parametrize("M, N, Kd, misaligned", [(37, 45, 29, False), (33, 64, 8, False),
                                                 (33, 64, 8, True), (130, 7, 5, False)])
@pytest.mark.parametrize("name, tuning", MATMUL_BUILDS, ids=str)
def test_emulated_matmul_wrappers(emulated_gpu, name, tuning, M, N, Kd, misaligned):
    """(130, 7, 5) and the misaligned view take matmul_regblock's zero-padded copies."""
    rng = np.random.default_rng(M * N)
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, Kd), (Kd, N)))
    A_dev = _device(np.vstack([A[:1], A]))[1:] if misaligned else _device(A)   # 4 B * K past
    C = K.MATMUL_KERNELS[name](A_dev, _device(B), **tuning)
    np.testing.assert_allclose(np.asarray(C), R.matmul(A, B), rtol=1e-5, atol=1e-5)


def test_emulated_matmul_regblock_refuses_an_untested_tuning(emulated_gpu):
    A = _device(np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match=r"bk 8 or 16.*got bk=12"):
        K.matmul_regblock(A, A, bk=12)
    with pytest.raises(ValueError, match=r"with double_buffer only together with prefetch"):
        K.matmul_regblock(A, A, double_buffer=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_emulated_fused_wrappers(emulated_gpu, dtype):
    rng = np.random.default_rng(5)
    tol = _tol(dtype)
    x, dout = (rng.standard_normal((300, 70)).astype(dtype) for _ in range(2))
    b = rng.standard_normal(70).astype(dtype)
    y = K.bias_relu_forward(_device(x), _device(b))
    np.testing.assert_array_equal(y, R.bias_relu_forward_ref(x, b))
    for got, want in zip(K.bias_relu_backward(_device(dout), y), R.bias_relu_backward_ref(dout, y)):
        np.testing.assert_allclose(got, want, **tol)
    x, dout = x.T.copy(), dout.T.copy()
    y = K.bias_relu_rows_forward(_device(x), _device(b))
    np.testing.assert_array_equal(y, R.bias_relu_rows_forward_ref(x, b))
    for got, want in zip(K.bias_relu_rows_backward(_device(dout), y),
                         R.bias_relu_rows_backward_ref(dout, y)):
        np.testing.assert_allclose(got, want, **tol)
    for label_dtype in (np.int32, np.int64):
        z = (rng.standard_normal((9, 300)) * 10).astype(dtype)
        labels = rng.integers(0, 300, 9).astype(label_dtype)
        loss, dz = K.softmax_cross_entropy(_device(z), _device(labels))
        want_loss, want_dz = R.softmax_cross_entropy_ref(z, labels)
        assert float(loss) == pytest.approx(want_loss, rel=tol["rtol"])
        np.testing.assert_allclose(dz, want_dz, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONV_CASES)
def test_emulated_unfold_wrappers(emulated_gpu, case, dtype):
    shape, KH, KW, s, p = case
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    want = R.im2col_ref(x, KH, KW, s, p)
    views = {"contiguous": _device(x),
             "channel-major": _device(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3),
             "reversed (copied)": _device(x[:, :, ::-1])[:, :, ::-1]}
    for layout, x_dev in views.items():
        np.testing.assert_array_equal(K.im2col(x_dev, KH, KW, s, p), want, err_msg=layout)
    cols = rng.standard_normal(want.shape).astype(dtype)
    want = R.col2im_ref(cols, shape, KH, KW, s, p)
    for cols_dev in (_device(cols), _device(cols.T).T):   # as given, and as im2col returns it
        np.testing.assert_allclose(K.col2im(cols_dev, shape, KH, KW, s, p), want, **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_emulated_maxpool_wrappers(emulated_gpu, dtype):
    """out and idx come back C-contiguous; dx is filled in the layout it is given; a reversed
    view of x is copied first; mismatched shapes are refused with the likely cause."""
    shape, KH, KW, s, _ = POOL_CASES[2]
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape).astype(dtype)
    want_out, want_idx = R.maxpool_forward_ref(x, KH, KW, s)
    dout = rng.standard_normal(want_out.shape).astype(dtype)
    want_dx = R.maxpool_backward_ref(dout, want_idx, shape, KH, KW, s)
    views = {"contiguous": _device(x), "channel-major": _channel_major(x).view(EmuArray),
             "reversed (copied)": _device(x[:, :, ::-1])[:, :, ::-1]}
    for layout, x_dev in views.items():
        out, idx = K.maxpool_forward(x_dev, KH, KW, s)
        assert out.flags.c_contiguous and idx.dtype == np.int32, layout
        np.testing.assert_array_equal(out, want_out, err_msg=layout)
        np.testing.assert_array_equal(idx, want_idx, err_msg=layout)
        for dx in (_device(np.empty(shape, dtype)), _channel_major(np.empty(shape, dtype))):
            assert K.maxpool_backward(_device(dout), idx, dx, KH, KW, s) is dx
            np.testing.assert_allclose(dx, want_dx, **_tol(dtype))
    with pytest.raises(ValueError, match="Were the same window and stride"):
        K.maxpool_backward(_device(dout), idx, _device(np.empty(shape, dtype)), 2, 2, 1)
    with pytest.raises(ValueError, match="positive strides"):
        K.maxpool_backward(_device(dout), idx, _device(np.empty(shape, dtype))[:, :, ::-1], KH, KW, s)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_emulated_optimizer_wrappers(emulated_gpu, dtype):
    """Each update works in place and returns p; wrong shapes, dtypes and layouts are refused."""
    rng = np.random.default_rng(6)
    for kernel, (ref, n_state, scalars, _) in OPTIMIZER_UPDATES.items():
        p, g, *state = (rng.standard_normal((30, 7)).astype(dtype) for _ in range(2 + n_state))
        state[-1] = np.abs(state[-1])
        want = ref(p, g, *state, *scalars)
        p_dev, state_dev = _device(p), [_device(a) for a in state]
        assert getattr(K, kernel)(p_dev, _device(g), *state_dev, *scalars) is p_dev
        for got, w in zip([p_dev, *state_dev], want):
            np.testing.assert_allclose(got, w, **_tol(dtype))
    p, v = _device(np.zeros((3, 4), dtype)), _device(np.zeros((3, 4), dtype))
    with pytest.raises(ValueError, match=r"grad has shape \(4, 3\) but p has shape \(3, 4\)"):
        K.sgd_momentum_update(p, _device(np.zeros((4, 3), dtype)), v, 0.1, 0.9)
    other = np.float64 if dtype == np.float32 else np.float32
    with pytest.raises(TypeError, match=np.dtype(dtype).name):
        K.sgd_momentum_update(p, _device(np.zeros((3, 4), other)), v, 0.1, 0.9)
    with pytest.raises(ValueError, match="C-contiguous"):
        K.adam_update(p, _device(np.zeros((4, 3), dtype)).T, v, v, 0.9, 0.999, 0.1, 1e-8)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("fused", [False, True], ids=["model", "dl.fuse(model)"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_emulated_kernels_in_training(emulated_gpu, name, fused, optimizer):
    """test_fusion's training check, with our kernels emulated against the plain array code."""
    check_kernels_in_training(name, fused, optimizer, to_dev=lambda *arrays: arrays)


def test_emulated_loss_kernel_names_a_bad_label(emulated_gpu):
    """On the GPU the range of the labels is checked only when the kernel's loss is NaN (no wait
    for the GPU otherwise); the error is the one the array code gives."""
    logits = np.zeros((4, 3))
    loss = dl.SoftmaxCrossEntropy()
    assert loss.forward(logits, np.array([0, 1, 2, 0])) == pytest.approx(np.log(3))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 2\].*from 0 to 3"):
        loss.forward(logits, np.array([0, 1, 3, 0]))
    logits[0, 0] = np.nan                      # NaN logits, valid labels: a NaN loss, no error
    assert np.isnan(loss.forward(logits, np.array([0, 1, 2, 0])))
    # Strided views, and labels of another integer type, are copied for the kernel first.
    for dtype in (np.int64, np.uint8):
        every_other = np.array([0, 9, 1, 9, 2, 9, 0, 9], dtype=dtype)[::2]
        assert loss.forward(np.zeros((4, 3))[::-1], every_other) == pytest.approx(np.log(3))
        np.testing.assert_allclose(loss.backward()[-1], [-2 / 12, 1 / 12, 1 / 12])


def test_lesson_08_counts_the_launches_of_a_training_step_right(emulated_gpu):
    """Lesson 08 (section 10) reads off the code how many kernels one training step of the MLP
    784-512-512-10 launches on the GPU, with SGD's fused update and with the update as array
    code; nbval checks that output. Count them here: with the arrays standing in for CuPy ones,
    every array operation and every launch of our kernels (the count does not depend on the
    layer sizes, so a small MLP will do)."""
    import json
    from pathlib import Path
    path = Path(__file__).parents[1] / "notebooks" / "08_cuda_kernels.ipynb"
    text = "".join("".join(o.get("text", "")) for c in json.loads(path.read_text())["cells"]
                   for o in c.get("outputs", []))
    stated = re.findall(r"(\d+) kernel launches per training step.*\((\d+) with SGD's update as "
                        r"array code\)", text)
    assert len(stated) == 1, "the lesson states the counts once"
    rng = np.random.default_rng(0)
    x, labels = _device(rng.standard_normal((8, 12), dtype=np.float32)), rng.integers(0, 10, 8)
    counted = []
    for fused_update in (True, False):
        model = dl.MLP([12, 16, 16, 10], seed=0)._map_arrays(lambda a: a.view(EmuArray))
        loss, opt = dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.01, momentum=0.9)
        dl.use_kernels(opt, fused_update)

        def step():
            loss.forward(model.forward(x), labels)
            model.backward(loss.backward(), input_grad=False)
            opt.step()
        step()                               # the first step makes the momentum buffers
        before = EmuArray.launches
        step()
        counted.append(EmuArray.launches - before)
    assert counted == [int(n) for n in stated[0]]
