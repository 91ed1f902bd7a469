"""A CUDA emulator for the tests: the kernels of ``dlcourse/kernels/*.cu`` compiled as C++
by g++ and run on the CPU, where there is no GPU (CI). Used by tests/test_kernel_emulation.py,
whose docstring says what it emulates and how.

Every ``.cu`` file is compiled with a small header standing in for CUDA's built-ins
(``threadIdx``, ``__syncthreads``, ``__shfl_down_sync``, ``float4``, ...). A launch runs the
grid one block after another; inside a block every thread is a *fiber* (a ``ucontext``), so
the threads of a block really do cooperate. Every array goes to a kernel inside bands of NaN
(``GUARD`` elements on each side): a read outside the array poisons the result, and a write
outside is caught after the launch. :class:`EmuArray` and ``FAKE_CUPY`` stand in for CuPy's
arrays and allocation, so the Python wrappers of ``dlcourse.kernels`` run on the emulated
kernels too.
"""
import ctypes
import functools
import math
import re
import shutil
import subprocess
import types
import weakref

import numpy as np

import dlcourse.kernels as K

GXX = shutil.which("g++")


CUDA_STAND_IN = r"""
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>

struct emu_dim3 { unsigned x, y, z; };
enum emu_state { EMU_READY, EMU_AT_BARRIER, EMU_AT_SHUFFLE, EMU_AT_WARP_OP, EMU_DONE };
struct emu_thread;
struct emu_warp_op {                         // a warp-collective call (__syncwarp, wmma::...)
    const char* name;
    void (*run)(emu_thread* lanes);          // does it for the 32 lanes, once all have come
    const void* ptr; unsigned ldm; int layout; float value;   // must agree across the warp
    void* frag[4];                           // this lane's fragments (d, a, b, c)
};
struct emu_thread {
    ucontext_t ctx;
    emu_dim3 idx;                            // threadIdx
    emu_state state;
    unsigned mask; int offset, bytes;        // the pending __shfl_down_sync
    unsigned char value[8], result[8];
    emu_warp_op op;                          // the pending warp-collective call
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
// A warp-collective call: wait until all 32 lanes of the warp have made it (with the same
// name and arguments), then the scheduler runs op.run once for the whole warp.
static void emu_warp_collective(const emu_warp_op& op)
{
    emu_self->op = op;
    emu_wait(EMU_AT_WARP_OP);
}
static void emu_nothing(emu_thread*) {}
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    emu_warp_op op{"__syncwarp", emu_nothing};
    op.ldm = mask;
    emu_warp_collective(op);
}
// half (cuda_fp16.h): the bits of an IEEE binary16, converted with round-to-nearest-even.
static inline unsigned short emu_float_to_half_bits(float f)
{
    unsigned u; std::memcpy(&u, &f, 4);
    const unsigned sign = (u >> 16) & 0x8000u;
    const unsigned exp = (u >> 23) & 0xffu;
    unsigned mant = u & 0x7fffffu;
    if (exp == 0xff) return sign | 0x7c00u | (mant ? 0x200u : 0u);          // inf, NaN
    int e = (int)exp - 127 + 15;
    if (e >= 31) return sign | 0x7c00u;                                      // overflow: inf
    if (e <= 0) {                                                            // subnormal or 0
        if (e < -10) return sign;
        mant |= 0x800000u;
        const int shift = 14 - e;
        unsigned half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1u))) ++half;
        return sign | half;
    }
    unsigned half = ((unsigned)e << 10) | (mant >> 13), rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;        // may carry into exp
    return sign | half;
}
static inline float emu_half_bits_to_float(unsigned short h)
{
    const unsigned sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    unsigned u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (mant << 13);
    else if (exp) u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    else if (!mant) u = sign;
    else { float f = std::ldexp((float)mant, -24); std::memcpy(&u, &f, 4); u |= sign; }
    float f; std::memcpy(&f, &u, 4);
    return f;
}
struct __half {
    unsigned short bits;
    __half() = default;
    __half(float f) : bits(emu_float_to_half_bits(f)) {}
    operator float() const { return emu_half_bits_to_float(bits); }
};
typedef __half half;
static inline __half __float2half(float f) { return __half(f); }
static inline float __half2float(__half h) { return float(h); }
struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
"""


# <mma.h>, nvcuda::wmma, for the 16 x 16 x 16 shape. A fragment is each lane's share of a
# 16 x 16 tile: lane l holds elements l, l + 32, ..., l + 224 of the tile in row-major order
# (CUDA does not specify its layout, so a kernel must not depend on it). Every operation is
# warp-collective (emu_warp_collective): the 32 lanes meet, their arguments are checked to
# agree, and the tile moves as a whole. matrix_a and matrix_b hold halves (a float stored into
# them is rounded to FP16); mma_sync multiplies exactly and sums in FP32, k in order. As CUDA
# asks, every pointer must be 32-byte aligned and ldm a multiple of 16 bytes (8 halves, 4 floats).
WMMA_STAND_IN = r"""
#pragma once
#include <cstdint>
#include <type_traits>
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {};
struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int m, int n, int k, typename T, typename Layout = void>
struct fragment {
    static_assert(m == 16 && n == 16 && k == 16, "the emulator's wmma has the 16x16x16 shape only");
    static_assert(!std::is_same<Use, accumulator>::value || std::is_same<T, float>::value,
                  "the emulator's accumulator fragments are float");
    typedef T element_type;
    enum { num_elements = 8 };
    T x[num_elements];
};
template <typename F> static inline F& emu_frag(emu_thread* lanes, unsigned l, int i)
{ return *static_cast<F*>(lanes[l].op.frag[i]); }
// The op, or (when the pointer or ldm break CUDA's rules) an op whose name says what is wrong
// and that the scheduler reports instead of running.
template <typename T> static emu_warp_op emu_memory_op(emu_warp_op op, const T* p, unsigned ldm)
{
    static char what[200];
    op.ptr = p; op.ldm = ldm;
    if (reinterpret_cast<std::uintptr_t>(p) % 32)
        std::snprintf(what, sizeof what, "%s: the pointer must be 32-byte aligned", op.name);
    else if (ldm * sizeof(T) % 16)
        std::snprintf(what, sizeof what, "%s: ldm = %u, but it must be a multiple of %d for "
                      "this element type (16 bytes)", op.name, ldm, (int)(16 / sizeof(T)));
    else
        return op;
    op.name = what; op.run = nullptr;
    return op;
}
static inline int emu_at(int e, unsigned ldm, bool col_major)   // element e of the tile in memory
{ return col_major ? (e % 16) * ldm + e / 16 : (e / 16) * ldm + e % 16; }

template <typename F> static void emu_fill(emu_thread* lanes)
{
    for (unsigned l = 0; l < 32; ++l)
        for (int i = 0; i < 8; ++i) emu_frag<F>(lanes, l, 0).x[i] = lanes[0].op.value;
}
template <typename F, typename T> static void emu_load(emu_thread* lanes)
{
    const T* p = static_cast<const T*>(lanes[0].op.ptr);
    for (unsigned l = 0; l < 32; ++l)
        for (int i = 0; i < 8; ++i)
            emu_frag<F>(lanes, l, 0).x[i] = p[emu_at(32 * i + l, lanes[0].op.ldm, lanes[0].op.layout)];
}
template <typename F, typename T> static void emu_store(emu_thread* lanes)
{
    T* p = static_cast<T*>(const_cast<void*>(lanes[0].op.ptr));
    for (unsigned l = 0; l < 32; ++l)
        for (int i = 0; i < 8; ++i)
            p[emu_at(32 * i + l, lanes[0].op.ldm, lanes[0].op.layout)] = emu_frag<F>(lanes, l, 0).x[i];
}
template <typename FD, typename FA, typename FB, typename FC> static void emu_mma(emu_thread* lanes)
{
    float a[256], b[256], c[256];                // the whole tiles, gathered from the 32 lanes
    for (unsigned l = 0; l < 32; ++l)
        for (int i = 0; i < 8; ++i) {
            a[32 * i + l] = emu_frag<FA>(lanes, l, 1).x[i];
            b[32 * i + l] = emu_frag<FB>(lanes, l, 2).x[i];
            c[32 * i + l] = emu_frag<FC>(lanes, l, 3).x[i];
        }
    for (int r = 0; r < 16; ++r)
        for (int col = 0; col < 16; ++col) {
            float sum = c[r * 16 + col];
            for (int k = 0; k < 16; ++k) sum += a[r * 16 + k] * b[k * 16 + col];   // FP32
            c[r * 16 + col] = sum;
        }
    for (unsigned l = 0; l < 32; ++l)
        for (int i = 0; i < 8; ++i) emu_frag<FD>(lanes, l, 0).x[i] = c[32 * i + l];
}

template <typename Use, int m, int n, int k, typename T, typename L>
static inline void fill_fragment(fragment<Use, m, n, k, T, L>& f, float value)
{
    emu_warp_op op{"wmma::fill_fragment", emu_fill<fragment<Use, m, n, k, T, L>>};
    op.value = value; op.frag[0] = &f;
    emu_warp_collective(op);
}
template <typename Use, int m, int n, int k, typename T, typename L, typename P>
static inline void load_matrix_sync(fragment<Use, m, n, k, T, L>& f, const P* p, unsigned ldm)
{
    static_assert(std::is_same<L, row_major>::value || std::is_same<L, col_major>::value,
                  "an accumulator is loaded with a layout: load_matrix_sync(f, p, ldm, layout)");
    emu_warp_op op = emu_memory_op(
        emu_warp_op{"wmma::load_matrix_sync", emu_load<fragment<Use, m, n, k, T, L>, P>}, p, ldm);
    op.layout = std::is_same<L, col_major>::value; op.frag[0] = &f;
    emu_warp_collective(op);
}
template <int m, int n, int k, typename T, typename P>
static inline void load_matrix_sync(fragment<accumulator, m, n, k, T>& f, const P* p, unsigned ldm,
                                    layout_t layout)
{
    emu_warp_op op = emu_memory_op(
        emu_warp_op{"wmma::load_matrix_sync", emu_load<fragment<accumulator, m, n, k, T>, P>}, p, ldm);
    op.layout = layout == mem_col_major; op.frag[0] = &f;
    emu_warp_collective(op);
}
template <int m, int n, int k, typename T, typename P>
static inline void store_matrix_sync(P* p, const fragment<accumulator, m, n, k, T>& f, unsigned ldm,
                                     layout_t layout)
{
    emu_warp_op op = emu_memory_op(
        emu_warp_op{"wmma::store_matrix_sync", emu_store<fragment<accumulator, m, n, k, T>, P>}, p, ldm);
    op.layout = layout == mem_col_major;
    op.frag[0] = const_cast<fragment<accumulator, m, n, k, T>*>(&f);
    emu_warp_collective(op);
}
template <typename FD, typename FA, typename FB, typename FC>
static inline void mma_sync(FD& d, const FA& a, const FB& b, const FC& c)
{
    emu_warp_op op{"wmma::mma_sync", emu_mma<FD, FA, FB, FC>};
    op.frag[0] = &d; op.frag[1] = const_cast<FA*>(&a); op.frag[2] = const_cast<FB*>(&b);
    op.frag[3] = const_cast<FC*>(&c);
    emu_warp_collective(op);
}
} }   // namespace nvcuda::wmma
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

// Run the warp-collective call all lanes of one warp wait in: the same call, with the same
// arguments, from every one of the 32 lanes of a full warp.
static int emu_collective(emu_thread* th, unsigned first, unsigned lanes)
{
    static char what[200];
    const emu_warp_op& op = th[first].op;
    for (unsigned l = 0; l < lanes; ++l) {
        const emu_thread& t = th[first + l];
        if (t.state == EMU_AT_WARP_OP && !t.op.run) return emu_fail(t.op.name, first + l);
        if (t.state != EMU_AT_WARP_OP) {
            std::snprintf(what, sizeof what, "%s while its warp waits in %s (a warp-collective "
                          "call: all 32 lanes must make it)", t.state == EMU_DONE ? "returned" :
                          t.state == EMU_AT_BARRIER ? "waits in __syncthreads()" :
                          "waits in __shfl_down_sync", op.name);
            return emu_fail(what, first + l);
        }
        if (lanes != 32)
            return emu_fail("a warp-collective call in a warp of fewer than 32 threads (make the "
                            "block a multiple of 32 threads)", first + l);
        if (std::strcmp(t.op.name, op.name) || t.op.run != op.run) {
            std::snprintf(what, sizeof what, "calls %s while lane 0 of its warp calls %s",
                          t.op.name, op.name);
            return emu_fail(what, first + l);
        }
        if (t.op.ptr != op.ptr || t.op.ldm != op.ldm || t.op.layout != op.layout ||
            std::memcmp(&t.op.value, &op.value, sizeof(float))) {
            std::snprintf(what, sizeof what, "calls %s with other arguments than lane 0 of its "
                          "warp (the pointer, ldm, layout and value must be the same for all 32)",
                          op.name);
            return emu_fail(what, first + l);
        }
    }
    op.run(th + first);
    for (unsigned l = 0; l < lanes; ++l) th[first + l].state = EMU_READY;
    return 0;
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
                bool shuffle = false, collective = false;   // run each lane until it waits or returns
                for (unsigned l = 0; l < lanes; ++l) {
                    emu_self = &th[first + (reverse ? lanes - 1 - l : l)];
                    if (emu_self->state == EMU_READY) swapcontext(&emu_scheduler, &emu_self->ctx);
                    shuffle |= emu_self->state == EMU_AT_SHUFFLE;
                    collective |= emu_self->state == EMU_AT_WARP_OP;
                }
                if (!shuffle && !collective) break;   // the warp waits at the barrier, or is done
                if (collective && !shuffle ? emu_collective(th, first, lanes)
                                           : emu_shuffle(th, first, lanes)) return 1;
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


# What every unit of launchers starts with: the macros, and `extern "C" {` (closed by "}\n").
LAUNCH_PRELUDE = r"""
#define GEOMETRY const unsigned* grid, const unsigned* block, int reverse
#define LAUNCH(call) return launch(grid, block, reverse, [&] { call; })
#define CONV_SIZES int N, int C, int H, int W, int KH, int KW, int stride, int padding, int OH, int OW
#define CONV_ARGS N, C, H, W, KH, KW, stride, padding, OH, OW
#define POOL_SIZES int N, int C, int H, int W, int KH, int KW, int stride, int OH, int OW
#define POOL_ARGS N, C, H, W, KH, KW, stride, OH, OW

extern "C" {
const char* emu_last_error() { return emu_error; }
"""


FLASH_WMMA_LAUNCHER = r"""
int run_flash_attention_wmma(GEOMETRY, const half* Q, const half* K, const half* V, float* O,
                             int T, float scale, int causal)
{ LAUNCH(flash_attention_wmma(Q, K, V, O, T, scale, causal)); }
"""


LAUNCHERS = LAUNCH_PRELUDE + FLASH_WMMA_LAUNCHER + r"""
int run_matmul_naive(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_naive(A, B, Cm, M, N, K)); }
int run_matmul_coalesced(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_coalesced(A, B, Cm, M, N, K)); }
int run_matmul_tiled(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_tiled(A, B, Cm, M, N, K)); }
int run_matmul_regblock(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_regblock(A, B, Cm, M, N, K)); }
int run_matmul_warptile(GEOMETRY, const float* A, const float* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_warptile(A, B, Cm, M, N, K)); }
int run_matmul_wmma(GEOMETRY, const half* A, const half* B, float* Cm, int M, int N, int K)
{ LAUNCH(matmul_wmma(A, B, Cm, M, N, K)); }
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
int run_softmax_cross_entropy_{t}_i(GEOMETRY, const {T}* z, const int* y, {T}* loss, {T}* dz,
                           int N, int C, {T} inv_N)
{{ LAUNCH((softmax_cross_entropy<{T}, int>(z, y, loss, dz, N, C, inv_N))); }}
int run_softmax_cross_entropy_{t}_l(GEOMETRY, const {T}* z, const long long* y, {T}* loss, {T}* dz,
                           int N, int C, {T} inv_N)
{{ LAUNCH((softmax_cross_entropy<{T}, long long>(z, y, loss, dz, N, C, inv_N))); }}
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


def compile_kernels(out, sources, name="emulated", launchers=None):
    """Compile the .cu sources (name -> text) with the stand-in into a ctypes library.
    launchers: the extern "C" run_* functions (and emu_last_error) to export, for a unit of
    some of the sources only; by default those of every kernel (all the sources needed)."""
    unit = CUDA_STAND_IN + "".join(f"// ---- {f}\n{text}\n" for f, text in sources.items())
    if launchers is None:
        launchers = LAUNCHERS + "".join(TYPED.format(t=t, T=T) for t, T in
                                        (("f", "float"), ("d", "double"))) + "}\n"
    unit += SCHEDULER + launchers
    (out / f"{name}.cpp").write_text(unit)
    (out / "mma.h").write_text(WMMA_STAND_IN)          # what #include <mma.h> finds
    lib = out / f"lib{name}.so"
    proc = subprocess.run([GXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas",
                           "-I", str(out), "-o", str(lib), str(out / f"{name}.cpp")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"g++ could not compile the kernels as C++:\n{proc.stderr[-4000:]}"
    emu = ctypes.CDLL(str(lib))
    emu.emu_last_error.restype = ctypes.c_char_p
    return emu


def all_sources():
    return {f: K.source(f) for f in K.SOURCES}


def fill_value(dtype):
    """What the guard bands hold: NaN, or for integers (labels) the most negative one."""
    return np.nan if dtype.kind == "f" else np.iinfo(dtype).min


BUFFERS = weakref.WeakValueDictionary()   # id -> every buffer guarded made, while alive


def guarded(a):
    """A C-contiguous copy of a inside a buffer with GUARD elements of fill_value on each side."""
    a = np.asarray(a)
    buf = np.full(a.size + 2 * GUARD, fill_value(a.dtype), dtype=a.dtype)
    BUFFERS[id(buf)] = buf
    inner = buf[GUARD:GUARD + a.size].reshape(a.shape)
    inner[...] = a
    assert inner.ctypes.data % 16 == 0, "the guarded array must be 16-byte aligned"
    return inner


def empty(shape, dtype):
    """An output: NaN inside (so anything left unwritten shows), NaN guards outside (for
    integers: the most negative one)."""
    return guarded(np.full(shape, fill_value(np.dtype(dtype)), dtype=dtype))


def guard_buffer(a):
    """The guarded buffer a lies in (checking that it lies inside the guards), or None."""
    buf = a.base
    if buf is None or BUFFERS.get(id(buf)) is not buf:
        return None
    lo, hi = _byte_bounds(a)
    start = buf.ctypes.data + GUARD * buf.itemsize
    assert start <= lo and hi <= start + (buf.size - 2 * GUARD) * buf.itemsize, \
        "the array reaches into its guard bands"
    return buf


def launch(emu, name, cfg, *args, reverse=False, strict=True):
    """Run the emulated kernel with cfg's grid and block; arrays go as pointers to their first
    element. Afterwards the guard bands around every array must still hold their fill. strict:
    every array must come from guarded (the tests' own arrays)."""
    grid, block = ((ctypes.c_uint * 3)(*cfg.grid), (ctypes.c_uint * 3)(*cfg.block))
    c_args, buffers = [], []
    for a in args:
        if isinstance(a, np.ndarray):
            buffers.append((len(c_args), guard_buffer(a)))
            assert buffers[-1][1] is not None or not strict, "pass arrays via guarded"
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
            np.testing.assert_array_equal(guards, np.full_like(guards, fill_value(buf.dtype)),
                                          err_msg=f"{name} wrote outside argument {i}")


def tolerance(dtype):
    """assert_allclose tolerances for sums taken in another order than the reference's."""
    return dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)


def elements(a):
    return tuple(np.int64(s // a.itemsize) for s in a.strides)


def with_defines(sources, defines):
    """The sources built with ((name, value), ...), as NVRTC's -D options would."""
    heads = "".join(f"#define {name} {value}\n" for name, value in defines)
    return {f: heads + text for f, text in sources.items()}


def channel_major(a):
    """a's values in a guarded (C, N, H, W) buffer, seen as (N, C, H, W): Conv2d's layout."""
    return guarded(a.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)


# ============================================================================================
# The Python wrappers and the layers' GPU branches, on the emulated kernels
# ============================================================================================
# With the patches of the `emulated_gpu` fixture, dlcourse.kernels takes NumPy arrays for CuPy
# ones, allocates through a small CuPy stand-in (guarded buffers again), and launches the
# emulated kernels. So the wrappers' own work (padding, strides, partial sums, the template
# each dtype picks, the type of every scalar argument) and the glue in Conv2d and the fused
# layers run in CI as they would on a GPU.
C_TYPES = {"half": np.float16, "float": np.float32, "double": np.float64, "int": np.int32, "long long": np.int64}


SHORT = {"float": "f", "double": "d", "int": "i", "long long": "l"}


@functools.lru_cache(maxsize=None)
def cu_params(source, kernel):
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


def device_array(a):
    """a, copied into a guarded buffer, as an EmuArray."""
    return guarded(a).view(EmuArray)


def step_launches(make_model, x, labels) -> list:
    """[with SGD's fused update, with the update as array code]: the launches one training step
    (forward, softmax cross-entropy, backward without the input's gradient, SGD with momentum)
    of ``make_model()`` makes on ``x`` (an EmuArray), counted on its second step (the first
    makes the momentum buffers). Needs the emulated kernels plugged in (``emulated_gpu``)."""
    import dlcourse as dl
    counted = []
    for fused_update in (True, False):
        model = make_model().map_arrays(lambda a: a.view(EmuArray))
        loss, opt = dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.01, momentum=0.9)
        dl.use_kernels(opt, fused_update)

        def step():
            loss.forward(model.forward(x), labels)
            model.backward(loss.backward(), input_grad=False)
            opt.step()
        step()
        before = EmuArray.launches
        step()
        counted.append(EmuArray.launches - before)
    return counted


FAKE_CUPY = types.SimpleNamespace(
    float16=np.float16,
    float32=np.float32,
    int32=np.int32,
    empty=lambda shape, dtype=np.float32: empty(shape, dtype).view(EmuArray),
    empty_like=lambda a: empty(a.shape, a.dtype).view(EmuArray),
    zeros=lambda shape, dtype=np.float32: device_array(np.zeros(shape, dtype=dtype)),
    asarray=lambda a, dtype=None: device_array(np.asarray(a, dtype=dtype)),
    ascontiguousarray=lambda a: device_array(np.ascontiguousarray(a)),
)


def emulated_kernel(emu, file, name):
    """What get_kernel(file, name) returns on a GPU: kernel(grid, block, args, shared_mem=0).
    It checks what CUDA would not: the argument count, each array's dtype and each scalar's
    exact type against the kernel's signature in the .cu file, and the launch limits."""
    kernel, _, targs = name.partition("<")
    targs = [t.strip() for t in targs.rstrip(">").split(",")] if targs else []
    params = cu_params(K.source(file), kernel)
    ctype = dict(C_TYPES, **dict(zip(("T", "L"), (C_TYPES[t] for t in targs))))
    run = "run_" + kernel.removesuffix("_kernel") + "".join("_" + SHORT[t] for t in targs)

    def kernel(grid, block, args, shared_mem=0):
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
        launch(emu, run, types.SimpleNamespace(grid=grid, block=block), *args, strict=False)
        EmuArray.launches += 1
    return kernel


def _byte_bounds(a):
    """(low, high) byte addresses of a: np.lib.array_utils.byte_bounds (NumPy 2), np.byte_bounds
    before it (NumPy 1.24)."""
    utils = getattr(np.lib, "array_utils", None)
    return (utils.byte_bounds if utils is not None else np.byte_bounds)(a)
