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
import contextlib
import dataclasses
import re
import sys
import types

import numpy as np
import pytest

import dlcourse as dl
import dlcourse.kernels as K
from dlcourse.kernels import reference as R
from dlcourse.shapes import output_size
from support.cuda_emulator import (FAKE_CUPY, GXX, SUFFIX, EmuArray, all_sources, channel_major,
                                   compile_kernels, device_array, elements, empty,
                                   emulated_kernel, guarded, launch, step_launches, tolerance,
                                   with_defines)
from test_fusion import MODELS, OPTIMIZERS, check_kernels_in_training
from test_kernels import CONV_CASES, MATMUL_BUILDS, POOL_CASES

pytestmark = [
    pytest.mark.skipif(GXX is None, reason="g++ is not on the PATH: the CUDA kernels are "
                                           "emulated on the CPU only where it is"),
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="the emulator's threads are glibc ucontext fibers (Linux only)"),
]









@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """Every kernel, emulated, as a ctypes library."""
    return compile_kernels(tmp_path_factory.mktemp("emulated_kernels"), all_sources())


@pytest.fixture(scope="module")
def emu_builds(emu, tmp_path_factory):
    """defines -> the emulated library built with them (as NVRTC's -D options would), each
    compiled the first time it is asked for; () is `emu`."""
    builds = {(): emu}

    def build(defines):
        defines = tuple(defines)
        if defines not in builds:
            builds[defines] = compile_kernels(tmp_path_factory.mktemp("emulated_build"),
                                       with_defines(all_sources(), defines))
        return builds[defines]
    return build


















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
    C = empty((M, N), np.float32)
    defines = K.matmul.regblock_defines(**tuning) if tuning else ()
    launch(emu_builds(defines), f"run_matmul_{name}", K.launch_config(name, M, N, Kd, **tuning),
            guarded(A), guarded(B), C, M, N, Kd, reverse=reverse)
    np.testing.assert_allclose(C, R.matmul(A, B), rtol=1e-5, atol=1e-5)




def _planted(tmp_path, plants, defines=()):
    """The kernels with bugs planted: plants maps a .cu file to (text, replacement)."""
    sources = all_sources()
    for file, (old, new) in plants.items():
        assert sources[file].count(old) == 1, f"{file} changed: update the planted bug"
        sources[file] = sources[file].replace(old, new)
    return compile_kernels(tmp_path, with_defines(sources, defines), name="planted")


def _tiled_64(emu):
    """C from the emulated tiled kernel at M = N = K = 64, and A @ B."""
    rng = np.random.default_rng(0)
    A, B = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    C = empty((64, 64), np.float32)
    launch(emu, "run_matmul_tiled", K.launch_config("tiled", 64, 64, 64),
            guarded(A), guarded(B), C, 64, 64, 64)
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
    C = empty((M, N), np.float32)
    launch(broken, "run_matmul_regblock", K.launch_config("regblock", M, N, Kd, **tuning),
            guarded(A), guarded(B), C, M, N, Kd)
    assert not np.allclose(C, R.matmul(A, B), rtol=1e-5, atol=1e-5)


#: Rung 5, matmul_warptile.cu: K, N multiples of 4 (float4). (130, 136, 20): four blocks, ragged
#: in M and N, two k-steps (BK = 16), the second partial; (70, 36, 36): three k-steps.
WARPTILE_SIZES = [(1, 4, 4), (130, 136, 20), (70, 36, 36)]


@pytest.mark.parametrize("M, N, Kd", WARPTILE_SIZES)
def test_emulated_matmul_warptile(emu, M, N, Kd, reverse):
    rng = np.random.default_rng(M + N)
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, Kd), (Kd, N)))
    C = empty((M, N), np.float32)
    launch(emu, "run_matmul_warptile", K.launch_config("warptile", M, N, Kd),
           guarded(A), guarded(B), C, M, N, Kd, reverse=reverse)
    np.testing.assert_allclose(C, R.matmul(A, B), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("plant", [
    ("        __syncthreads();                         // 1.", "        // (removed) 1."),
    ("        __syncthreads();                         // 2.", "        // (removed) 2."),
    ("&As[k * AS_STRIDE + warpRow * WM + wm * WSUBM + laneRow * TM]",
     "&As[k * BM + warpRow * WM + wm * WSUBM + laneRow * TM]"),
], ids=["no-wait-for-the-tiles", "no-wait-before-overwriting", "stride-without-padding"])
def test_emulation_catches_warptile_mistakes(tmp_path, plant, reverse):
    """Without the first wait a warp reads tiles the others have not stored yet; without the
    second it overwrites tiles they still read; a k-row of As read with BM instead of its
    padded stride reads the wrong rows of A. Each gives a wrong C, in either warp order."""
    rng = np.random.default_rng(2)
    M, N, Kd = 130, 136, 52
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, Kd), (Kd, N)))
    broken = _planted(tmp_path, {"matmul_warptile.cu": plant})
    C = empty((M, N), np.float32)
    launch(broken, "run_matmul_warptile", K.launch_config("warptile", M, N, Kd),
           guarded(A), guarded(B), C, M, N, Kd, reverse=reverse)
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
    x = guarded(np.ones((2, 300)))
    with pytest.raises(AssertionError, match=r"thread 40 .*returned while its warp waits in "
                                             r"__shfl_down_sync"):
        launch(broken, "run_bias_relu_rows_backward_d", K.launch_config("bias_relu_rows", 2, 300),
                x, x, empty((2, 300), np.float64), empty((2, 2), np.float64), np.int64(300))


# --------------------------------------------------------------------------------------------
# Tensor cores: matmul_wmma.cu on the emulator's nvcuda::wmma (warp-collective fragments)
# --------------------------------------------------------------------------------------------
#: K, N multiples of 8 (16-byte loads); 130 x 136: four blocks, ragged in M and N; K = 40: two
#: k-steps, the second half empty.
WMMA_SIZES = [(1, 8, 8), (130, 136, 40), (33, 264, 16)]


def _wmma(emu, A, B, reverse=False):
    (M, Kd), N = A.shape, B.shape[1]
    C = empty((M, N), np.float32)
    launch(emu, "run_matmul_wmma", K.launch_config("wmma", M, N, Kd), guarded(A), guarded(B), C,
           M, N, Kd, reverse=reverse)
    return C


def _half(rng, shape):
    return rng.standard_normal(shape).astype(np.float16)


@pytest.mark.parametrize("M, N, Kd", WMMA_SIZES)
def test_emulated_matmul_wmma(emu, M, N, Kd, reverse):
    """Against reference.matmul_fp16 (float16 inputs, float32 sums), in both warp orders."""
    rng = np.random.default_rng(M + N)
    A, B = _half(rng, (M, Kd)), _half(rng, (Kd, N))
    np.testing.assert_allclose(_wmma(emu, A, B, reverse), R.matmul_fp16(A, B), rtol=1e-5, atol=1e-5)


def test_emulated_wmma_sums_in_float32_not_float16(emu):
    """64 products of 1 * (1 + 2**-10) sum to 64.0625 in float32; float16 (spacing 2**-4 at 64)
    would lose the 0.0625. Each product is exact: an FP16 times an FP16 fits in an FP32."""
    A = np.ones((16, 64), np.float16)
    B = np.full((64, 8), 1 + 2.0**-10, np.float16)
    assert (_wmma(emu, A, B) == np.float32(64 * (1 + 2.0**-10))).all()


WMMA_PLANTS = {
    "no-wait-for-the-tiles": ("        __syncthreads();                                          // 2.",
                              "        // (removed) 2."),
    "no-wait-before-overwriting": ("        __syncthreads();                                          // 4.",
                                   "        // (removed) 4."),
    "wrong-ldm-of-A": ("wmma::load_matrix_sync(a[i], &As[(warpRow * WM + i * WMMA_M) * AS_LD + kk], AS_LD)",
                       "wmma::load_matrix_sync(a[i], &As[(warpRow * WM + i * WMMA_M) * AS_LD + kk], BK)"),
    "wrong-fragment-of-B": ("&Bs[kk * BS_LD + warpCol * WN + j * WMMA_N]", "&Bs[kk * BS_LD + warpCol * WN]"),
}


@pytest.mark.parametrize("plant", sorted(WMMA_PLANTS))
def test_emulation_catches_wmma_mistakes(tmp_path, plant):
    """A missing __syncthreads() lets a warp read tiles the others have not written (or
    overwrite tiles they still read); a wrong leading dimension (still a multiple of 8, so
    CUDA accepts it) or a wrong fragment offset reads the wrong elements: each gives a wrong C."""
    rng = np.random.default_rng(2)
    A, B = _half(rng, (130, 72)), _half(rng, (72, 136))
    broken = _planted(tmp_path, {"matmul_wmma.cu": WMMA_PLANTS[plant]})
    C = _wmma(broken, A, B, reverse=plant == "no-wait-before-overwriting")
    assert not np.allclose(C, R.matmul_fp16(A, B), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("plant, error", [
    (("BS_LD);\n", "BN + 4);\n"), r"ldm = 132, but it must be a multiple of 8"),
    (("+ kk], AS_LD);", "+ kk + 1], AS_LD);"), r"the pointer must be 32-byte aligned"),
    (("                for (int j = 0; j < FN; ++j) wmma::mma_sync",
      "                for (int j = 0; j < FN; ++j) if (lane != 7) wmma::mma_sync"),
     r"thread 7 .*calls wmma::load_matrix_sync while lane 0 of its warp calls wmma::mma_sync"),
], ids=["ldm-not-16-bytes", "misaligned-tile", "a-lane-skips-mma_sync"])
def test_emulator_enforces_the_rules_of_wmma(tmp_path, plant, error):
    """What CUDA asks of every WMMA call, which a GPU does not check (it computes garbage or
    hangs): the emulator names the thread and the rule."""
    rng = np.random.default_rng(3)
    A, B = _half(rng, (16, 32)), _half(rng, (32, 16))
    broken = _planted(tmp_path, {"matmul_wmma.cu": plant})
    with pytest.raises(AssertionError, match=error):
        _wmma(broken, A, B)


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
    tol = tolerance(dtype)

    # bias along columns (Linear's (N, F) output): forward, then backward with db in partials
    cfg = K.launch_config("bias_relu", N, F)
    if few_blocks:
        cfg = dataclasses.replace(cfg, grid=(cfg.grid[0], 2, 1))
    y = empty((N, F), dtype)
    launch(emu, f"run_bias_relu_forward_{t}", cfg, guarded(x), guarded(b), y, np.int64(N), F)
    np.testing.assert_array_equal(y, R.bias_relu_forward_ref(x, b))
    dx, partial = empty((N, F), dtype), empty((cfg.grid[1], F), dtype)
    launch(emu, f"run_bias_relu_backward_{t}", cfg, guarded(dout), guarded(y), dx, partial,
            np.int64(N), F, reverse=reverse)
    want_dx, want_db = R.bias_relu_backward_ref(dout, y)
    np.testing.assert_array_equal(dx, want_dx)
    np.testing.assert_allclose(partial.sum(axis=0), want_db, **tol)   # as the wrapper does

    # bias along rows (Conv2d's (F, M) output matrix)
    rows, dout_rows = x.T.copy(), dout.T.copy()
    cfg = K.launch_config("bias_relu_rows", F, N)
    if few_blocks:
        cfg = dataclasses.replace(cfg, grid=(2, F, 1))
    y_rows = empty((F, N), dtype)
    launch(emu, f"run_bias_relu_rows_forward_{t}", cfg, guarded(rows), guarded(b), y_rows,
            np.int64(N))
    np.testing.assert_array_equal(y_rows, R.bias_relu_rows_forward_ref(rows, b))
    dx_rows, partial = empty((F, N), dtype), empty((F, cfg.grid[0]), dtype)
    launch(emu, f"run_bias_relu_rows_backward_{t}", cfg, guarded(dout_rows), guarded(y_rows),
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
    loss_rows, dz = empty(N, dtype), empty((N, C), dtype)
    name = f"run_softmax_cross_entropy_{SUFFIX[dtype]}_{'i' if label_dtype == np.int32 else 'l'}"
    launch(emu, name, cfg, guarded(z), guarded(y), loss_rows, dz, N, C, dtype(1.0 / N),
            reverse=reverse)
    valid = y < C
    tol = tolerance(dtype)["rtol"]
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
    x_in = guarded(x)
    if layout != "contiguous":              # as Conv2d's outputs are: (C, N, H, W) in memory
        x_in = guarded(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    OH, OW = output_size(H, W, KH, KW, s, p)
    sizes = (N, C, H, W, KH, KW, s, p, OH, OW)
    t = SUFFIX[dtype]

    cols_t = empty((C * KH * KW, N * OH * OW), dtype)
    launch(emu, f"run_im2col_{t}", K.launch_config("im2col", N, C, H, W, KH, KW, s, p),
            x_in, cols_t, *elements(x_in), *sizes)
    np.testing.assert_array_equal(cols_t.T, R.im2col_ref(x, KH, KW, s, p))

    c = rng.standard_normal(cols_t.T.shape).astype(dtype)
    want = R.col2im_ref(c, shape, KH, KW, s, p)
    for cols in (guarded(c), guarded(c.T).T):   # either layout is read in place
        dx = empty(shape, dtype)
        launch(emu, f"run_col2im_{t}", K.launch_config("col2im", N, C, H, W, KH, KW, s, p),
                cols, dx, *elements(cols), *sizes)
        np.testing.assert_allclose(dx, want, **tolerance(dtype))




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
    OH, OW = output_size(H, W, KH, KW, s)
    dout = rng.standard_normal((N, C, OH, OW)).astype(dtype)
    place = guarded if layout == "contiguous" else channel_major
    x_in, dout_in, dx = place(x), place(dout), place(np.full(shape, np.nan, dtype))
    sizes = (N, C, H, W, KH, KW, s, OH, OW)
    configs = [K.launch_config(f"maxpool_{d}", N, C, H, W, KH, KW, s) for d in ("forward", "backward")]
    if grid is not None:
        configs = [dataclasses.replace(cfg, grid=(grid, 1, 1)) for cfg in configs]
    out, idx = empty((N, C, OH, OW), dtype), empty((N, C, OH, OW), np.int32)
    launch(emu, f"run_maxpool_forward_{SUFFIX[dtype]}", configs[0], x_in, out, idx,
            *elements(x_in), *sizes)
    want_out, want_idx = R.maxpool_forward_ref(x, KH, KW, s)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(idx, want_idx)
    launch(emu, f"run_maxpool_backward_{SUFFIX[dtype]}", configs[1], dout_in, idx, dx,
            *elements(dout_in), *elements(dx), *sizes)
    np.testing.assert_allclose(dx, R.maxpool_backward_ref(dout, want_idx, shape, KH, KW, s),
                               **tolerance(dtype))


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
    p_dev, state_dev = guarded(p), [guarded(a) for a in state]
    launch(emu, f"run_{kernel}_{SUFFIX[dtype]}", cfg, p_dev, guarded(g), *state_dev,
            np.int64(n), *(dtype(a) for a in kernel_scalars))
    for got, want in zip([p_dev, *state_dev], ref(p, g, *state, *ref_scalars)):
        np.testing.assert_allclose(got, want, **tolerance(dtype))














@pytest.fixture
def emulated_gpu(emu_builds, monkeypatch):
    """dlcourse.kernels and the library's kernel branches running on the emulated kernels:
    every array counts as a GPU one, for the wrappers' checks and for the one function that
    decides whether a kernel takes an array (dlcourse.kernels.kernels_for)."""
    monkeypatch.setattr(K._build, "device_of", lambda a: "gpu")
    monkeypatch.setattr(K, "device_of", lambda a: "gpu")
    monkeypatch.setattr(K, "gpu_available", lambda: True)
    for module in (K.matmul, K.fused, K.unfold):
        monkeypatch.setattr(module, "require_cupy", lambda: FAKE_CUPY)
        monkeypatch.setattr(module, "get_kernel",
                            lambda f, n, defines=(): emulated_kernel(emu_builds(defines), f, n))


@pytest.mark.parametrize("M, N, Kd, misaligned", [(37, 45, 29, False), (33, 64, 8, False),
                                                 (33, 64, 8, True), (130, 7, 5, False)])
@pytest.mark.parametrize("name, tuning", MATMUL_BUILDS, ids=str)
def test_emulated_matmul_wrappers(emulated_gpu, name, tuning, M, N, Kd, misaligned):
    """(130, 7, 5) and the misaligned view take matmul_regblock's zero-padded copies."""
    rng = np.random.default_rng(M * N)
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, Kd), (Kd, N)))
    A_dev = device_array(np.vstack([A[:1], A]))[1:] if misaligned else device_array(A)   # 4 B * K past
    C = K.MATMUL_KERNELS[name](A_dev, device_array(B), **tuning)
    np.testing.assert_allclose(np.asarray(C), R.matmul(A, B), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("M, N, Kd, misaligned", [(130, 136, 40, False), (37, 45, 29, False),
                                                 (33, 64, 8, True)])
def test_emulated_matmul_wmma_wrapper(emulated_gpu, monkeypatch, M, N, Kd, misaligned):
    """(37, 45, 29) and the misaligned view take the zero-padded copies; on NumPy arrays the
    same function returns its reference, and refuses what the kernel would refuse."""
    rng = np.random.default_rng(M * N)
    A, B = _half(rng, (M, Kd)), _half(rng, (Kd, N))
    np.testing.assert_array_equal(K.matmul_wmma(A, B), R.matmul_fp16(A, B))   # NumPy: the reference
    with pytest.raises(TypeError, match=r"2-D float16 array.*astype\(np.float16\)"):
        K.matmul_wmma(A.astype(np.float32), B)
    monkeypatch.setattr(K.matmul, "device_of", lambda a: "gpu")
    A_dev = device_array(np.vstack([A[:1], A]))[1:] if misaligned else device_array(A)   # 2 B * K past
    before = EmuArray.launches
    C = K.matmul_wmma(A_dev, device_array(B))
    assert EmuArray.launches > before, "the emulated kernel ran"
    assert C.dtype == np.float32 and C.shape == (M, N)
    np.testing.assert_allclose(np.asarray(C), R.matmul_fp16(A, B), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match=r"must have dtype float16.*astype\(cupy.float16\)"):
        K.matmul_wmma(device_array(A.astype(np.float32)), device_array(B))


@pytest.mark.parametrize("M, N, Kd, misaligned", [(37, 45, 29, False), (33, 64, 8, True)])
def test_emulated_matmul_warptile_wrapper(emulated_gpu, M, N, Kd, misaligned):
    """(37, 45, 29) and the misaligned view take the zero-padded copies (float4 loads)."""
    rng = np.random.default_rng(M * N)
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, Kd), (Kd, N)))
    A_dev = device_array(np.vstack([A[:1], A]))[1:] if misaligned else device_array(A)   # 4 B * K past
    C = K.matmul_warptile(A_dev, device_array(B))
    assert C.shape == (M, N) and C.dtype == np.float32
    np.testing.assert_allclose(np.asarray(C), R.matmul(A, B), rtol=1e-5, atol=1e-5)


def test_emulated_matmul_regblock_refuses_an_untested_tuning(emulated_gpu):
    A = device_array(np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match=r"bk 8 or 16.*got bk=12"):
        K.matmul_regblock(A, A, bk=12)
    with pytest.raises(ValueError, match=r"with double_buffer only together with prefetch"):
        K.matmul_regblock(A, A, double_buffer=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_emulated_fused_wrappers(emulated_gpu, dtype):
    rng = np.random.default_rng(5)
    tol = tolerance(dtype)
    x, dout = (rng.standard_normal((300, 70)).astype(dtype) for _ in range(2))
    b = rng.standard_normal(70).astype(dtype)
    y = K.bias_relu_forward(device_array(x), device_array(b))
    np.testing.assert_array_equal(y, R.bias_relu_forward_ref(x, b))
    for got, want in zip(K.bias_relu_backward(device_array(dout), y), R.bias_relu_backward_ref(dout, y)):
        np.testing.assert_allclose(got, want, **tol)
    x, dout = x.T.copy(), dout.T.copy()
    y = K.bias_relu_rows_forward(device_array(x), device_array(b))
    np.testing.assert_array_equal(y, R.bias_relu_rows_forward_ref(x, b))
    for got, want in zip(K.bias_relu_rows_backward(device_array(dout), y),
                         R.bias_relu_rows_backward_ref(dout, y)):
        np.testing.assert_allclose(got, want, **tol)
    for label_dtype in (np.int32, np.int64):
        z = (rng.standard_normal((9, 300)) * 10).astype(dtype)
        labels = rng.integers(0, 300, 9).astype(label_dtype)
        loss, dz = K.softmax_cross_entropy(device_array(z), device_array(labels))
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
    views = {"contiguous": device_array(x),
             "channel-major": device_array(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3),
             "reversed (copied)": device_array(x[:, :, ::-1])[:, :, ::-1]}
    for layout, x_dev in views.items():
        np.testing.assert_array_equal(K.im2col(x_dev, KH, KW, s, p), want, err_msg=layout)
    cols = rng.standard_normal(want.shape).astype(dtype)
    want = R.col2im_ref(cols, shape, KH, KW, s, p)
    for cols_dev in (device_array(cols), device_array(cols.T).T):   # as given, and as im2col returns it
        np.testing.assert_allclose(K.col2im(cols_dev, shape, KH, KW, s, p), want, **tolerance(dtype))


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
    views = {"contiguous": device_array(x), "channel-major": channel_major(x).view(EmuArray),
             "reversed (copied)": device_array(x[:, :, ::-1])[:, :, ::-1]}
    for layout, x_dev in views.items():
        out, idx = K.maxpool_forward(x_dev, KH, KW, s)
        assert out.flags.c_contiguous and idx.dtype == np.int32, layout
        np.testing.assert_array_equal(out, want_out, err_msg=layout)
        np.testing.assert_array_equal(idx, want_idx, err_msg=layout)
        for dx in (device_array(np.empty(shape, dtype)), channel_major(np.empty(shape, dtype))):
            assert K.maxpool_backward(device_array(dout), idx, dx, KH, KW, s) is dx
            np.testing.assert_allclose(dx, want_dx, **tolerance(dtype))
    with pytest.raises(ValueError, match="Were the same window and stride"):
        K.maxpool_backward(device_array(dout), idx, device_array(np.empty(shape, dtype)), 2, 2, 1)
    with pytest.raises(ValueError, match="positive strides"):
        K.maxpool_backward(device_array(dout), idx, device_array(np.empty(shape, dtype))[:, :, ::-1], KH, KW, s)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_emulated_optimizer_wrappers(emulated_gpu, dtype):
    """Each update works in place and returns p; wrong shapes, dtypes and layouts are refused."""
    rng = np.random.default_rng(6)
    for kernel, (ref, n_state, scalars, _) in OPTIMIZER_UPDATES.items():
        p, g, *state = (rng.standard_normal((30, 7)).astype(dtype) for _ in range(2 + n_state))
        state[-1] = np.abs(state[-1])
        want = ref(p, g, *state, *scalars)
        p_dev, state_dev = device_array(p), [device_array(a) for a in state]
        assert getattr(K, kernel)(p_dev, device_array(g), *state_dev, *scalars) is p_dev
        for got, w in zip([p_dev, *state_dev], want):
            np.testing.assert_allclose(got, w, **tolerance(dtype))
    p, v = device_array(np.zeros((3, 4), dtype)), device_array(np.zeros((3, 4), dtype))
    with pytest.raises(ValueError, match=r"grad has shape \(4, 3\) but p has shape \(3, 4\)"):
        K.sgd_momentum_update(p, device_array(np.zeros((4, 3), dtype)), v, 0.1, 0.9)
    other = np.float64 if dtype == np.float32 else np.float32
    with pytest.raises(TypeError, match=np.dtype(dtype).name):
        K.sgd_momentum_update(p, device_array(np.zeros((3, 4), other)), v, 0.1, 0.9)
    with pytest.raises(ValueError, match="C-contiguous"):
        K.adam_update(p, device_array(np.zeros((4, 3), dtype)).T, v, v, 0.9, 0.999, 0.1, 1e-8)


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


def test_lesson_08d_counts_the_launches_of_a_training_step_right(emulated_gpu):
    """Lesson 08d (section 4) reads off the code how many kernels one training step of the MLP
    784-512-512-10 launches on the GPU, with SGD's fused update and with the update as array
    code; nbval checks that output. Count them here: with the arrays standing in for CuPy ones,
    every array operation and every launch of our kernels (the count does not depend on the
    layer sizes, so a small MLP will do)."""
    import json
    from pathlib import Path
    path = Path(__file__).parents[1] / "notebooks" / "08d_fusion_and_graphs.ipynb"
    text = "".join("".join(o.get("text", "")) for c in json.loads(path.read_text())["cells"]
                   for o in c.get("outputs", []))
    stated = re.findall(r"(\d+) kernel launches per training step.*\((\d+) with SGD's update as "
                        r"array code\)", text)
    assert len(stated) == 1, "the lesson states the counts once"
    rng = np.random.default_rng(0)
    x, labels = device_array(rng.standard_normal((8, 12), dtype=np.float32)), rng.integers(0, 10, 8)
    counted = step_launches(lambda: dl.MLP([12, 16, 16, 10], seed=0), x, labels)
    assert counted == [int(n) for n in stated[0]]


def test_emulated_per_axis_stride_or_padding_runs_the_array_code(emulated_gpu):
    """The image kernels take one stride and one padding for both axes: kernels.kernels_for says
    no to anything else, and the layers then run their array code (the same numbers as the
    naive loops), as a 1-D signal seen as a 1xL image needs."""
    x = np.random.default_rng(0).standard_normal((2, 3, 1, 12))
    assert K.kernels_for(x, same_per_axis=((1, 2),)) is None
    assert K.kernels_for(x, same_per_axis=((2, 2), 1)) is K
    conv = dl.Conv2d(3, 4, (1, 5), stride=(1, 2), padding=(0, 2), dtype=np.float64, seed=0)
    out = conv.forward(x)
    W, b = conv.params["W"], conv.params["b"]
    np.testing.assert_allclose(out, dl.conv.conv2d_forward_naive(x, W, b, (1, 2), (0, 2)), atol=1e-12)
    dout = np.random.default_rng(1).standard_normal(out.shape)
    np.testing.assert_allclose(conv.backward(dout),
                               dl.conv.conv2d_backward_naive(dout, x, W, (1, 2), (0, 2))[0], atol=1e-12)
    pool = dl.MaxPool2d((1, 3), stride=(1, 2))
    np.testing.assert_array_equal(pool.forward(x), dl.conv.maxpool_forward_naive(x, 1, 3, (1, 2)))


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_emulated_products_on_kernel_train_like_the_array_code(emulated_gpu, monkeypatch, name):
    """dl.kernels.products_on_kernel() (lesson 08d's CUDA graph: CuPy refuses to capture cuBLAS)
    runs every product of a float32 training step, forward and backward (transposed operands
    included), on matmul_regblock: the step must equal the one computed with `@`."""
    monkeypatch.setattr(K.matmul, "device_of", lambda a: "gpu")
    calls, regblock = [], K.matmul.matmul_regblock
    monkeypatch.setattr(K.matmul, "matmul_regblock", lambda A, B: calls.append(1) or regblock(A, B))
    rng = np.random.default_rng(1)
    shape = (6, 12) if name == "mlp" else (4, 1, 6, 6)
    x, labels = device_array(rng.standard_normal(shape).astype(np.float32)), rng.integers(0, 10, 6)[:shape[0]]
    make = ((lambda: dl.MLP([12, 16, 10], seed=0)) if name == "mlp" else
            (lambda: dl.Sequential(dl.Conv2d(1, 4, 3, padding=1), dl.ReLU(), dl.Flatten(),
                                   dl.Linear(4 * 36, 10))))
    runs = []
    for on_kernel in (False, True):
        dl.manual_seed(0)
        model = make().map_arrays(lambda a: a.view(EmuArray))
        loss, opt = dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1, momentum=0.9)
        with K.products_on_kernel() if on_kernel else contextlib.nullcontext():
            for _ in range(2):
                value = loss.forward(model.forward(x), labels)
                model.backward(loss.backward(), input_grad=False)
                opt.step()
        runs.append((float(value), {k: np.asarray(p).copy() for k, p in model.params.items()}))
    # per step, two layers with weights: 2 forward, 2 dW, 1 dx (the first layer's is not asked)
    assert len(calls) == 2 * 5
    assert runs[1][0] == pytest.approx(runs[0][0], rel=1e-5)
    for k, want in runs[0][1].items():
        np.testing.assert_allclose(runs[1][1][k], want, rtol=1e-4, atol=1e-5, err_msg=k)
    assert dl.ops.matmul(np.eye(2), np.ones((2, 2))).tolist() == [[1, 1], [1, 1]]  # put back


def test_the_suites_kernel_sections_run_on_the_emulated_kernels(emulated_gpu, benchmark_script,
                                                                monkeypatch):
    """benchmarks/gpu_suite.py's tensor_cores and flash_memory sections, end to end at small
    sizes: matmul_wmma and matmul_warptile on the emulated kernels, checked against the products
    the suite uses as cuBLAS's; the flash kernels replaced by the NumPy attention and
    dl.kernels.reference.flash_attention_fp16 (their own tests are in test_flash_attention.py
    and test_flash_wmma.py), checked against the suite's naive attention, causal too. No
    PyTorch (its SDPA lines are left out). The clock, the memory pool and the spill count are
    stand-ins: no figure here is a measurement."""
    from dlcourse.attention import attention_forward
    from dlcourse.kernels.reference import flash_attention_fp16
    suite = benchmark_script("gpu_suite")
    plain = lambda a: a.view(np.ndarray) if isinstance(a, EmuArray) else a   # noqa: E731

    def matmul(a, b, out=None):
        c = np.matmul(plain(a), plain(b))
        if out is None:
            return device_array(c)
        out[...] = c
        return out

    class RandomState:
        def __init__(self, seed):
            self.rng = np.random.RandomState(seed)

        def standard_normal(self, shape, dtype=np.float64):
            return device_array(self.rng.standard_normal(shape).astype(dtype))

    pool = types.SimpleNamespace(free_all_blocks=lambda: None, total_bytes=lambda: 0)
    cp = types.SimpleNamespace(**vars(FAKE_CUPY), float64=np.float64, matmul=matmul, abs=np.abs,
                               exp=np.exp, triu=np.triu, full=np.full,
                               random=types.SimpleNamespace(RandomState=RandomState),
                               get_default_memory_pool=lambda: pool,
                               cuda=types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(
                                   synchronize=lambda: None)))
    monkeypatch.setattr(K.matmul, "device_of", lambda a: "gpu")
    monkeypatch.setattr(suite, "TENSOR_CORES_N", 128)
    monkeypatch.setattr(suite, "FLASH_MEMORY_SHAPE", dict(N=1, H=2, d=16, T=(40, 72), causal_T=(40,),
                                                          wmma_T=(72,), target_s=0.0))
    monkeypatch.setattr(suite, "time_cuda", lambda cp, fn, target_s, warmup=2: (
        fn(), {"median_ms": 1.0, "min_ms": 1.0, "repeats": 1})[1])
    monkeypatch.setattr(suite, "_no_spills", lambda file, name: 0)
    monkeypatch.setattr(K, "flash_attention_forward", lambda q, k, v, causal=False: (
        device_array(attention_forward(plain(q), plain(k), plain(v), causal=causal)[0]), None))
    monkeypatch.setattr(K, "flash_attention_wmma", lambda q, k, v, causal=False: device_array(
        flash_attention_fp16(plain(q), plain(k), plain(v), causal)), raising=False)

    out = {}
    suite.section_tensor_cores(cp, {"target_s": 0.0}, out)
    for name, base in (("wmma", "cublas_fp16"), ("warptile", "cublas_fp32")):
        assert "error" not in out[name], out[name]
        assert out[name][f"max_rel_err_vs_{base}"] < (1e-2 if name == "wmma" else 1e-5)
        assert out[name]["local_size_bytes"] == 0 and out[name]["share_of_cublas"] == 1.0
    out = {}
    suite.section_flash_memory(cp, {"target_s": 0.0}, out, None, "no PyTorch (a stand-in note)")
    assert sorted(out["cases"]) == ["T=40", "T=40 causal", "T=72"]
    for entry in out["cases"].values():
        assert entry["flash_kernel"]["max_rel_err_vs_naive"] < 1e-5, entry
        assert entry["speedup_over_naive"] == 1.0 and entry["naive"]["peak_bytes"] == 0
        assert "torch_sdpa_fp32" not in entry
    assert out["torch_note"] == "no PyTorch (a stand-in note)"
    wmma = out["wmma"]["cases"]["T=72"]["flash_attention_wmma"]
    assert wmma["max_rel_err_vs_fp32"] < suite.WMMA_TOL and wmma["median_ms"] == 1.0, wmma
