"""Tests for dlcourse.kernels, in three layers:

(a) CPU, always: the NumPy references are right (hand-computed cases, the contract written out
    as loops, the adjoint identity of im2col/col2im, finite differences for softmax-CE), and the
    pure-Python parts (kernel registry, launch geometry, input checks) behave.
(b) compilers, without a GPU: every .cu file compiles with nvcc for sm_90 where nvcc is on
    the PATH, templates included (each name expression the wrappers ask NVRTC for is
    instantiated here too); and with NVRTC itself, the compiler CuPy uses, where libnvrtc can
    be loaded. Catches a syntax error in CI without a GPU.
(c) GPU, where CuPy and a CUDA device answer: every kernel against its reference on random
    inputs of awkward sizes (not multiples of any tile), and the learner-facing input errors.
"""
from __future__ import annotations

import inspect
import itertools
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import dlcourse as dl
import dlcourse.kernels as K
from dlcourse.kernels import reference as R

# --------------------------------------------------------------------------------------
# (a) CPU: references and pure-Python parts
# --------------------------------------------------------------------------------------
CONV_CASES = [  # (x_shape, KH, KW, stride, padding)
    ((2, 3, 5, 6), 3, 3, 1, 1),
    ((1, 2, 7, 7), 3, 2, 2, 0),
    ((2, 1, 5, 4), 2, 2, 2, 1),
    ((1, 2, 6, 7), 2, 3, 3, 1),
    ((3, 2, 4, 4), 1, 1, 1, 0),
    ((1, 1, 3, 3), 5, 5, 1, 2),
    ((2, 2, 7, 7), 2, 3, 2, 0),
    ((1, 4, 6, 5), 3, 2, 1, 2),
    ((2, 2, 8, 8), 3, 3, 3, 1),
]

POOL_CASES = [  # (x_shape, KH, KW, stride, blocks: None = launch_config's grid)
    ((2, 3, 6, 6), 2, 2, 2, None),      # the CNN's pooling: the windows tile x
    ((1, 2, 7, 9), 2, 2, 2, None),      # a row and a column left over
    ((2, 2, 7, 7), 3, 3, 2, None),      # overlapping windows
    ((1, 1, 5, 6), 2, 3, 1, None),      # stride 1, a window that is not square
    ((3, 2, 4, 4), 1, 1, 1, None),
    ((2, 3, 20, 22), 3, 2, 2, 2),       # 2 blocks for 2640 pixels: grid-stride loops
]


def im2col_loops(x, KH, KW, stride, padding):
    """The contract, written out one element at a time."""
    N, C, H, W = x.shape
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    cols = np.zeros((N * OH * OW, C * KH * KW), dtype=x.dtype)
    for n, oh, ow, c, kh, kw in itertools.product(range(N), range(OH), range(OW), range(C),
                                                  range(KH), range(KW)):
        h, w = oh * stride + kh - padding, ow * stride + kw - padding
        if 0 <= h < H and 0 <= w < W:
            cols[(n * OH + oh) * OW + ow, (c * KH + kh) * KW + kw] = x[n, c, h, w]
    return cols


def test_im2col_ref_hand_case():
    x = np.arange(9.0).reshape(1, 1, 3, 3)        # [[0 1 2] [3 4 5] [6 7 8]]
    expected = np.array([[0, 1, 3, 4],             # each row: one 2x2 window, read row by row
                         [1, 2, 4, 5],
                         [3, 4, 6, 7],
                         [4, 5, 7, 8]], dtype=float)
    np.testing.assert_array_equal(R.im2col_ref(x, 2, 2), expected)


def test_im2col_ref_hand_case_with_padding_and_stride():
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])    # padded to 4x4, 2x2 windows, stride 2
    expected = np.array([[0, 0, 0, 1],
                         [0, 0, 2, 0],
                         [0, 3, 0, 0],
                         [4, 0, 0, 0]], dtype=float)
    np.testing.assert_array_equal(R.im2col_ref(x, 2, 2, stride=2, padding=1), expected)


def test_col2im_ref_counts_windows():
    # col2im of all ones = how many windows cover each pixel.
    cols = np.ones((4, 4))
    counts = R.col2im_ref(cols, (1, 1, 3, 3), 2, 2)
    np.testing.assert_array_equal(counts[0, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]])


@pytest.mark.parametrize("case", CONV_CASES)
def test_im2col_ref_matches_contract(case):
    shape, KH, KW, s, p = case
    x = np.random.default_rng(0).standard_normal(shape)
    np.testing.assert_array_equal(R.im2col_ref(x, KH, KW, s, p), im2col_loops(x, KH, KW, s, p))


@pytest.mark.parametrize("case", CONV_CASES)
def test_im2col_col2im_ref_are_adjoint(case):
    # <im2col(x), c> == <x, col2im(c)> for all x, c: col2im is the transpose of im2col.
    shape, KH, KW, s, p = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    c = rng.standard_normal(R.im2col_ref(x, KH, KW, s, p).shape)
    lhs = np.sum(R.im2col_ref(x, KH, KW, s, p) * c)
    rhs = np.sum(x * R.col2im_ref(c, shape, KH, KW, s, p))
    assert abs(lhs - rhs) <= 1e-10 * max(1.0, abs(lhs)), (lhs, rhs)


@pytest.mark.parametrize("case", CONV_CASES)
def test_references_agree_with_dlcourse_conv(case):
    """The GPU kernels follow the same contract as dlcourse.conv's NumPy path."""
    from dlcourse import conv
    shape, KH, KW, s, p = case
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    cols = R.im2col_ref(x, KH, KW, s, p)
    np.testing.assert_allclose(conv.im2col(x, KH, KW, s, p), cols, rtol=0, atol=0)
    c = rng.standard_normal(cols.shape)
    np.testing.assert_allclose(conv.col2im(c, shape, KH, KW, s, p),
                               R.col2im_ref(c, shape, KH, KW, s, p), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", POOL_CASES)
def test_maxpool_refs_match_dl_maxpool2d(case):
    """The kernels' references against MaxPool2d's array code, with many ties (small integers):
    the same maxima, the same first-maximum positions, the same dx."""
    import dlcourse as dl
    shape, KH, KW, s, _ = case
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-3, 4, shape).astype(np.float64)
    pool = dl.MaxPool2d((KH, KW), stride=s)
    out, idx = R.maxpool_forward_ref(x, KH, KW, s)
    np.testing.assert_array_equal(pool.forward(x), out)
    np.testing.assert_array_equal(pool.cache[1], idx)
    dout = rng.standard_normal(out.shape)
    np.testing.assert_allclose(pool.backward(dout), R.maxpool_backward_ref(dout, idx, shape, KH, KW, s),
                               rtol=1e-15, atol=1e-15)


def test_maxpool_ref_hand_case():
    x = np.array([[[[1.0, 3.0, 2.0],
                    [3.0, 0.0, 5.0],
                    [4.0, 4.0, 1.0]]]])
    out, idx = R.maxpool_forward_ref(x, 2, 2, 1)             # four overlapping 2x2 windows
    np.testing.assert_array_equal(out[0, 0], [[3.0, 5.0], [4.0, 5.0]])
    np.testing.assert_array_equal(idx[0, 0], [[1, 3], [2, 1]])   # ties: the first maximum
    dx = R.maxpool_backward_ref(np.ones((1, 1, 2, 2)), idx, x.shape, 2, 2, 1)
    np.testing.assert_array_equal(dx[0, 0], [[0, 1, 0], [0, 0, 2], [1, 0, 0]])


def test_matmul_ref():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((5, 7)).astype(np.float32)
    B = rng.standard_normal((7, 3)).astype(np.float32)
    np.testing.assert_allclose(R.matmul(A, B), R.matmul_loops(A, B), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(R.matmul(A, B), A @ B, rtol=1e-5, atol=1e-5)
    assert R.matmul(A, B).dtype == np.float32


def test_bias_relu_refs():
    x = np.array([[-1.0, 0.5, 2.0], [0.2, -3.0, -0.1]])
    b = np.array([0.5, -1.0, 0.0])
    y = R.bias_relu_forward_ref(x, b)
    np.testing.assert_array_equal(y, [[0.0, 0.0, 2.0], [0.7, 0.0, 0.0]])
    dout = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    dx, db = R.bias_relu_backward_ref(dout, y)
    np.testing.assert_array_equal(dx, [[0.0, 0.0, 3.0], [4.0, 0.0, 0.0]])
    np.testing.assert_array_equal(db, [4.0, 0.0, 3.0])
    # The row layout (a convolution's output matrix) is the same maths on the transpose.
    y_rows = R.bias_relu_rows_forward_ref(x.T, b)
    np.testing.assert_array_equal(y_rows, y.T)
    dx_rows, db_rows = R.bias_relu_rows_backward_ref(dout.T, y_rows)
    np.testing.assert_array_equal(dx_rows, dx.T)
    np.testing.assert_array_equal(db_rows, db)


def test_softmax_cross_entropy_ref_against_formula_and_finite_differences():
    rng = np.random.default_rng(4)
    z = rng.standard_normal((4, 5))
    y = np.array([0, 4, 2, 2])
    loss, dz = R.softmax_cross_entropy_ref(z, y)
    direct = np.mean([-np.log(np.exp(z[n, y[n]]) / np.exp(z[n]).sum()) for n in range(4)])
    assert abs(loss - direct) < 1e-12
    h, num = 1e-6, np.zeros_like(z)
    for idx in np.ndindex(*z.shape):
        zp, zm = z.copy(), z.copy()
        zp[idx] += h
        zm[idx] -= h
        num[idx] = (R.softmax_cross_entropy_ref(zp, y)[0] - R.softmax_cross_entropy_ref(zm, y)[0]) / (2 * h)
    np.testing.assert_allclose(dz, num, atol=1e-8, err_msg=f"analytic\n{dz}\nnumeric\n{num}")


def test_softmax_cross_entropy_ref_is_stable():
    z = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)   # exp(1000) overflows
    loss, dz = R.softmax_cross_entropy_ref(z, np.array([1]))
    assert np.isfinite(loss) and abs(loss - 1000.0) < 1e-3
    assert np.all(np.isfinite(dz)) and dz.dtype == np.float32


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_optimizer_update_refs_match_the_optimizers(kind):
    """Three steps of dl.SGD / dl.Adam (their array code, on the CPU) equal the references fed
    the scalars the optimizers pass their kernels: for Adam, step_size and eps with the bias
    corrections lr * sqrt(1 - b2**t) / (1 - b1**t) and eps * sqrt(1 - b2**t) folded in."""
    import dlcourse as dl
    rng = np.random.default_rng(8)
    layer = dl.Linear(4, 3, seed=0).astype(np.float64)
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-8, 0.01
    opt = (dl.SGD(layer, lr=lr, momentum=0.9, weight_decay=wd) if kind == "SGD" else
           dl.Adam(layer, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd))
    params = {k: p.copy() for k, p in layer.params.items()}
    state = {k: [np.zeros_like(p) for _ in range(1 if kind == "SGD" else 2)] for k, p in params.items()}
    for t in (1, 2, 3):
        layer.grads = {k: rng.standard_normal(p.shape) for k, p in params.items()}
        opt.step()
        for k, g in layer.grads.items():
            if kind == "SGD":
                params[k], *state[k] = R.sgd_momentum_update_ref(params[k], g, *state[k], lr, 0.9, wd)
            else:
                c = (1 - b2 ** t) ** 0.5
                params[k], *state[k] = R.adam_update_ref(params[k], g, *state[k], b1, b2,
                                                         lr * c / (1 - b1 ** t), eps * c, wd)
    for k, p in layer.params.items():
        np.testing.assert_allclose(p, params[k], rtol=1e-13, atol=1e-15, err_msg=k)


def test_registry_lists_every_source_and_kernel():
    files = {p.name for p in K.KERNEL_DIR.glob("*.cu")}
    assert files == set(K.SOURCES), "every .cu file is registered, and nothing else"
    for info in K.SOURCES.values():
        text = K.source(info.file)
        for name in info.kernels:
            assert name.split("<")[0] in text, (info.file, name)
    assert "matmul_regblock" in K.list_kernels()
    assert "matmul_warptile" in K.list_kernels()
    with pytest.raises(KeyError, match="sources are"):
        K.source("nope.cu")


@pytest.mark.parametrize("name", ["naive", "coalesced", "tiled", "regblock"])
@pytest.mark.parametrize("M, N, Kd", [(1, 1, 1), (37, 45, 29), (130, 257, 36), (4096, 4096, 4096)])
def test_matmul_launch_geometry_covers_C(name, M, N, Kd):
    cfg = K.launch_config(name, M, N, Kd)
    assert cfg.threads_per_block <= 1024
    assert cfg.static_shared_mem + cfg.shared_mem <= 48 * 1024   # the default per-block limit
    # (size along grid x, size along grid y, rows/columns of C one block covers)
    along_x, along_y, tile = {"naive": (M, N, 32), "coalesced": (N, M, 32),
                              "tiled": (N, M, 32), "regblock": (N, M, 128)}[name]
    gx, gy, gz = cfg.grid
    assert gz == 1
    assert gx * tile >= along_x > (gx - 1) * tile     # covers C, and no block lies wholly outside
    assert gy * tile >= along_y > (gy - 1) * tile


@pytest.mark.parametrize("tuning", K.REGBLOCK_TUNINGS, ids=str)
def test_every_regblock_build_fits_the_static_shared_memory_limit(tuning):
    cfg = K.launch_config("regblock", 4096, 4096, 4096, **tuning)
    assert cfg.static_shared_mem <= 48 * 1024
    assert cfg.grid == K.launch_config("regblock", 4096, 4096, 4096).grid


def test_regblock_default_build_is_the_source_as_it_is():
    """Another default build (after a GPU run, gpu_suite's fastest) is set in several places:
    the #ifndef defaults of matmul_regblock.cu, REGBLOCK_TUNINGS[0] and the keyword defaults of
    the functions that take a tuning. This keeps them in step."""
    default = K.REGBLOCK_TUNINGS[0]
    in_source = re.findall(r"#ifndef (\w+)\n#define \1 (\d+)\n#endif", K.source("matmul_regblock.cu"))
    assert {name.lower(): int(value) for name, value in in_source} == {
        key: int(value) for key, value in default.items()}
    for fn in (K.matmul_regblock, K.matmul._tuning, K.matmul._regblock_geometry):
        parameters = inspect.signature(fn).parameters
        assert {key: parameters[key].default for key in default} == default, fn.__name__


def test_regblock_tunings_name_their_builds():
    assert K.matmul.regblock_defines() == ()                 # the default build: the file as it is
    assert K.matmul.regblock_defines(bk=16, prefetch=True, double_buffer=True) == (
        ("BK", 16), ("PREFETCH", 1), ("DOUBLE_BUFFER", 1))
    assert K.matmul.regblock_label(prefetch=True, avoid_conflicts=True) == (
        "regblock, BK=8, prefetch, fewer bank conflicts")
    assert K.matmul.regblock_label(bk=16, avoid_conflicts=True, two_blocks=True) == (
        "regblock, BK=16, fewer bank conflicts, two blocks per SM")
    assert K.matmul.regblock_defines(bk=16, two_blocks=True) == (("BK", 16), ("TWO_BLOCKS", 1))
    labels = [K.matmul.regblock_label(**t) for t in K.REGBLOCK_TUNINGS]
    assert len(set(labels)) == len(labels) == 18
    with pytest.raises(ValueError, match=r"two_blocks only at bk=16"):
        K.matmul.regblock_defines(two_blocks=True)
    with pytest.raises(ValueError, match=r"double_buffer only together with prefetch.*"
                                         r"got bk=8, prefetch=False, double_buffer=True"):
        K.matmul.regblock_defines(double_buffer=True)
    with pytest.raises(ValueError, match=r"bk 8 or 16.*got bk=12"):   # nor its geometry
        K.launch_config("regblock", 64, 64, 64, bk=12)


def test_warptile_geometry_is_the_sources():
    """WARPTILE_GEOMETRY (matmul.py) names the #defines of matmul_warptile.cu; the launch covers
    C with 8 warps of 64x32, and the shared memory is what the file declares."""
    text = K.source("matmul_warptile.cu")
    in_source = dict(re.findall(r"#define (\w+) (\d+)\b", text))
    g = K.WARPTILE_GEOMETRY
    for name, value in g.items():
        if name != "AS_PAD":
            assert int(in_source[name]) == value, name
    assert "#define AS_STRIDE (BM + %d)" % g["AS_PAD"] in text
    assert (g["WM"] // g["WMITER"] // g["TM"]) * (g["WN"] // g["WNITER"] // g["TN"]) == 32
    for M, N, Kd in [(1, 1, 4), (130, 257, 36), (4096, 4096, 4096)]:
        cfg = K.launch_config("warptile", M, N, Kd)
        assert cfg.block == (32 * (g["BM"] // g["WM"]) * (g["BN"] // g["WN"]), 1, 1) == (256, 1, 1)
        gx, gy, gz = cfg.grid
        assert gz == 1 and gx * 128 >= N > (gx - 1) * 128 and gy * 128 >= M > (gy - 1) * 128
        assert cfg.static_shared_mem == 16 * (132 + 128) * 4 <= 48 * 1024


def test_wmma_launch_geometry_and_numpy_path():
    """matmul_wmma: 8 warps of 64x32 cover a 128x128 block tile; its shared memory is what the
    .cu file declares; on NumPy arrays it is its reference (FP16 inputs, FP32 sums)."""
    cfg = K.launch_config("wmma", 130, 4096, 64)
    assert cfg.grid == (32, 2, 1) and cfg.block == (256, 1, 1)
    assert cfg.static_shared_mem == (128 * 40 + 32 * 136) * 2 + 8 * 256 * 4 <= 48 * 1024
    text = K.source("matmul_wmma.cu")
    for line in ("#define BM 128", "#define BN 128", "#define BK 32", "#define WARPS_M 2",
                 "#define WARPS_N 4", "#define AS_LD (BK + 8)", "#define BS_LD (BN + 8)"):
        assert line in text, line
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    want = A.astype(np.float16).astype(np.float64) @ B.astype(np.float16).astype(np.float64)
    got = K.matmul_wmma(A.astype(np.float16), B.astype(np.float16))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="columns of A must equal the rows of B"):
        K.matmul_wmma(A.astype(np.float16), A.astype(np.float16))


def test_other_launch_geometry():
    cfg = K.launch_config("bias_relu", 65536, 1024)
    assert cfg.block == (32, 8, 1) and cfg.grid[0] == 32 and cfg.grid[1] <= 65535
    rows = K.launch_config("bias_relu_rows", 16, 256 * 28 * 28)
    assert rows.block == (256, 1, 1) and rows.grid[1] == 16 and rows.num_blocks <= 4096
    assert K.launch_config("bias_relu_rows", 3, 10).grid == (1, 3, 1)   # short rows: one block
    assert K.launch_config("bias_relu_rows", 10000, 10**6).grid[0] == 1
    assert K.launch_config("softmax_cross_entropy", 64, 10).block == (32, 1, 1)
    assert K.launch_config("softmax_cross_entropy", 64, 1000).block == (256, 1, 1)
    assert K.launch_config("im2col", 256, 1, 28, 28, 3, 3, 1, 1).block == (256, 1, 1)
    assert K.launch_config("maxpool_forward", 256, 16, 28, 28, 2, 2, 2).num_blocks == 256 * 16 * 14 * 14 // 256
    assert K.launch_config("maxpool_backward", 256, 16, 28, 28, 2, 2, 2).grid[0] == 256 * 16 * 28 * 28 // 256
    assert K.launch_config("regblock", 4096, 4096, 4096, bk=16).static_shared_mem == 2 * 16 * 128 * 4
    assert K.launch_config("regblock", 4096, 4096, 4096, bk=16, prefetch=True, double_buffer=True,
                           avoid_conflicts=True).static_shared_mem == 2 * 16 * (132 + 128) * 4
    assert K.launch_config("optimizer_update", 1).grid == (1, 1, 1)
    assert K.launch_config("optimizer_update", 784 * 512).grid == (1568, 1, 1)
    assert K.launch_config("optimizer_update", 10**9).grid == (4096, 1, 1)   # then grid-stride
    with pytest.raises(ValueError, match="does not fit"):
        K.launch_config("im2col", 1, 1, 2, 2, 5, 5, 1, 0)
    with pytest.raises(KeyError, match="names are"):
        K.launch_config("fastest", 1, 1, 1)


def test_launch_geometry_is_remembered_and_still_checked():
    """launch_config runs on every launch, so its results are cached; the checks still apply."""
    assert K.launch_config("tiled", 64, 64, 64) is K.launch_config("tiled", 64, 64, 64)
    K.launch_config("im2col", 1, 1, 8, 8, 3, 3, 1, 0)
    with pytest.raises(ValueError, match="stride must be an integer"):
        K.launch_config("im2col", 1, 1, 8, 8, 3, 3, True, 0)   # True is not the cached 1
    with pytest.raises(ValueError, match="one number for both directions"):
        K.launch_config("im2col", 1, 1, 8, 8, [3, 3], 3, 1, 0)   # a list: not cached, checked


@pytest.mark.parametrize("call", [
    lambda a: K.matmul_naive(a, a), lambda a: K.matmul_regblock(a, a),
    lambda a: K.bias_relu_forward(a, a[0]), lambda a: K.softmax_cross_entropy(a, a[0]),
    lambda a: K.bias_relu_rows_forward(a, a[0]), lambda a: K.bias_relu_rows_backward(a, a),
    lambda a: K.im2col(a[None, None], 2, 2), lambda a: K.sgd_momentum_update(a, a, a, 0.1, 0.9),
    lambda a: K.adam_update(a, a, a, a, 0.9, 0.999, 0.1, 1e-8),
    lambda a: K.maxpool_forward(a[None, None], 2, 2, 2),
])
def test_wrappers_reject_numpy_arrays_with_a_hint(call):
    with pytest.raises(TypeError, match="to_device"):
        call(np.ones((4, 4), dtype=np.float32))


def test_kernels_import_and_references_work_without_cupy():
    """As on a machine without CuPy (import cupy fails): list, read, configure, reference."""
    code = ("import sys; sys.modules['cupy'] = None\n"          # makes `import cupy` fail
            "import numpy as np, dlcourse.kernels as K\n"
            "assert K.list_kernels() and 'matmul_tiled' in K.source('matmul_tiled.cu')\n"
            "K.launch_config('tiled', 8, 8, 8)\n"
            "a = np.ones((2, 3), np.float32); assert (K.reference.matmul(a, a.T) == 3).all()\n"
            "assert K.available() is False\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


# --------------------------------------------------------------------------------------
# (b) nvcc: every source compiles, every template instantiation the wrappers use included
# --------------------------------------------------------------------------------------
NVCC = shutil.which("nvcc")
NVCC_ARCH = os.environ.get("DLCOURSE_NVCC_ARCH", "sm_90")
#: Every build the wrappers ask for: each file as it is, and regblock with each other tuning.
BUILDS = {file: (file, ()) for file in sorted(K.SOURCES)}
BUILDS.update({" ".join(["matmul_regblock.cu", *K._build.define_options(d)]): ("matmul_regblock.cu", d)
               for d in (K.matmul.regblock_defines(**t) for t in K.REGBLOCK_TUNINGS) if d})


def _compile_unit(info) -> str:
    """A translation unit that includes the .cu file and takes the address of every template
    instantiation the wrappers ask NVRTC for, which makes nvcc instantiate (and compile) them."""
    lines = [f'#include "{info.path.as_posix()}"']
    if info.templated:
        lines.append("void* dlcourse_compile_test_instances[] = {")
        lines += [f"    (void*)&{name}," for name in info.kernels]
        lines.append("};")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def nvcc_builds(tmp_path_factory):
    """Start nvcc on every source at once (they run in parallel); tests wait on their own."""
    out = tmp_path_factory.mktemp("nvcc")
    procs = {}
    for i, (build, (file, defines)) in enumerate(BUILDS.items()):
        unit = out / f"unit{i}_{file}"
        unit.write_text(_compile_unit(K.SOURCES[file]))
        cubin = out / f"{i}_{file}.cubin"
        cmd = [NVCC, *K.NVRTC_OPTIONS, *K._build.define_options(defines), f"-arch={NVCC_ARCH}",
               "--cubin", "-Xptxas", "-v", "-o", str(cubin), str(unit)]   # -v: registers, spills
        procs[build] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True), cubin, cmd)
    yield procs
    for proc, _, _ in procs.values():
        if proc.poll() is None:
            proc.kill()


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on the PATH: the CUDA sources are "
                                         "compile-checked only where the CUDA toolkit is installed")
@pytest.mark.parametrize("build", list(BUILDS))
def test_cuda_source_compiles_with_nvcc(nvcc_builds, build):
    proc, cubin, cmd = nvcc_builds[build]
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{output}"
    binary = cubin.read_bytes()
    file = BUILDS[build][0]
    for name in K.SOURCES[file].kernels:   # every kernel made it into the binary
        assert name.split("<")[0].encode() in binary, (file, name)
    # ptxas -v reports, per kernel, "N bytes spill stores": registers that ran out and went to
    # local memory (slow, and in a loop a kernel's speed). None of our kernels may spill.
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", output)]
    assert spills and not any(spills), f"{build} spills registers:\n{output}"


def _load_nvrtc():
    """libnvrtc through ctypes, if this machine has it (no GPU needed to compile): from
    $DLCOURSE_NVRTC, the loader's search path, or the nvidia-cuda-nvrtc wheel."""
    import ctypes
    import glob
    paths = [os.environ.get("DLCOURSE_NVRTC", "")]
    try:
        import nvidia   # the namespace package of NVIDIA's pip wheels
        for root in nvidia.__path__:
            paths += sorted(glob.glob(os.path.join(root, "**", "libnvrtc.so*"), recursive=True))
    except ImportError:
        pass
    paths += ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
    for path in filter(None, paths):
        try:
            if os.path.dirname(path):   # NVRTC dlopens its builtins by name: load them first
                for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*")):
                    ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


NVRTC = _load_nvrtc()


@pytest.mark.skipif(NVRTC is None, reason="libnvrtc not found (install nvidia-cuda-nvrtc or set "
                                          "DLCOURSE_NVRTC=/path/to/libnvrtc.so)")
@pytest.mark.parametrize("build", list(BUILDS))
def test_cuda_source_compiles_with_nvrtc(build):
    """The compiler CuPy really uses at run time, with the same options and name expressions
    (NVRTC has no system headers: an #include <cstdint> passes nvcc but fails here)."""
    import ctypes
    file, defines = BUILDS[build]
    info = K.SOURCES[file]
    try:
        headers = K._build.header_options(file)   # matmul_wmma.cu's mma.h, from the wheels
    except RuntimeError as e:
        pytest.skip(str(e))
    prog = ctypes.c_void_p()

    def check(status):
        if status != 0:
            size = ctypes.c_size_t()
            NVRTC.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            NVRTC.nvrtcGetProgramLog(prog, log)
            pytest.fail(f"NVRTC error {status} compiling {file}:\n{log.value.decode()}")

    check(NVRTC.nvrtcCreateProgram(ctypes.byref(prog), K.source(file).encode(), file.encode(),
                                   0, None, None))
    try:
        names = info.kernels if info.templated else ()
        for name in names:
            check(NVRTC.nvrtcAddNameExpression(prog, name.encode()))
        opts = [o.encode() for o in K.NVRTC_OPTIONS + K._build.define_options(defines) + headers]
        # ... and the options CuPy adds itself (cupy/cuda/compiler.py) for an H100
        opts += [b"-arch=sm_90", b"-ftz=true", b"--device-as-default-execution-space"]
        check(NVRTC.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)))
        for name in names:
            lowered = ctypes.c_char_p()
            check(NVRTC.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(lowered)))
            assert lowered.value.startswith(b"_Z"), (name, lowered.value)
    finally:
        NVRTC.nvrtcDestroyProgram(ctypes.byref(prog))


# --------------------------------------------------------------------------------------
# (c) GPU: every kernel against its reference
# --------------------------------------------------------------------------------------
needs_gpu = pytest.mark.gpu   # skipped with the reason where there is no GPU (conftest.py)

MATMUL_SHAPES = [(1, 1, 1), (37, 45, 29), (130, 68, 36), (129, 257, 300), (128, 128, 128),
                 (5, 3, 0), (0, 4, 4)]
#: (rung, keyword arguments): every rung as it is, and regblock with each other tuning it is
#: built for (-DBK=16, -DPREFETCH=1, ...: REGBLOCK_TUNINGS).
MATMUL_BUILDS = ([(name, {}) for name in K.MATMUL_KERNELS] +
                 [("regblock", t) for t in K.REGBLOCK_TUNINGS[1:]])


@pytest.fixture
def cp():
    from dlcourse.backend import require_cupy
    return require_cupy()


@needs_gpu
@pytest.mark.parametrize("M, N, Kd", [(1, 1, 1), (37, 45, 29), (130, 136, 40), (256, 256, 512)])
def test_gpu_matmul_wmma(cp, M, N, Kd):
    """The tensor cores against reference.matmul_fp16 (both sum in FP32, in other orders)."""
    rng = np.random.default_rng(M + N)
    A, B = (rng.standard_normal(s).astype(np.float16) for s in ((M, Kd), (Kd, N)))
    C = K.matmul_wmma(cp.asarray(A), cp.asarray(B))
    assert C.dtype == cp.float32 and C.shape == (M, N)
    np.testing.assert_allclose(cp.asnumpy(C), K.reference.matmul_fp16(A, B), rtol=1e-4, atol=1e-3)
    assert K.get_kernel("matmul_wmma.cu", "matmul_wmma").local_size_bytes == 0, "no spills"


@needs_gpu
@pytest.mark.parametrize("name, tuning", MATMUL_BUILDS, ids=str)
@pytest.mark.parametrize("M, N, Kd", MATMUL_SHAPES)
def test_gpu_matmul_matches_reference(cp, name, tuning, M, N, Kd):
    rng = np.random.default_rng(M * 1000 + N + Kd)
    A = rng.standard_normal((M, Kd)).astype(np.float32)
    B = rng.standard_normal((Kd, N)).astype(np.float32)
    C = K.MATMUL_KERNELS[name](cp.asarray(A), cp.asarray(B), **tuning)
    assert C.shape == (M, N) and C.dtype == np.float32 and C.flags.c_contiguous
    np.testing.assert_allclose(C.get(), R.matmul(A, B), rtol=1e-4, atol=1e-4 * np.sqrt(max(Kd, 1)))


@needs_gpu
@pytest.mark.parametrize("M, N, Kd", MATMUL_SHAPES)
def test_gpu_matmul_warptile(cp, M, N, Kd):
    """Rung 5 against A @ B, awkward sizes (padded copies) included; and no register spills."""
    rng = np.random.default_rng(M * 1000 + N + Kd)
    A = rng.standard_normal((M, Kd)).astype(np.float32)
    B = rng.standard_normal((Kd, N)).astype(np.float32)
    C = K.matmul_warptile(cp.asarray(A), cp.asarray(B))
    assert C.shape == (M, N) and C.dtype == np.float32 and C.flags.c_contiguous
    np.testing.assert_allclose(C.get(), R.matmul(A, B), rtol=1e-4, atol=1e-4 * np.sqrt(max(Kd, 1)))
    assert K.get_kernel("matmul_warptile.cu", "matmul_warptile").local_size_bytes == 0, "no spills"


@needs_gpu
def test_gpu_matmul_regblock_misaligned_view(cp):
    # A view that starts 4 bytes into its buffer cannot be read with float4: the wrapper pads.
    rng = np.random.default_rng(5)
    flat = cp.asarray(rng.standard_normal(40 * 36 + 1).astype(np.float32))
    A = flat[1:].reshape(40, 36)
    B = cp.asarray(rng.standard_normal((36, 20)).astype(np.float32))
    np.testing.assert_allclose(K.matmul_regblock(A, B).get(), R.matmul(A.get(), B.get()),
                               rtol=1e-4, atol=1e-3)


@needs_gpu
@pytest.mark.parametrize("name", list(K.MATMUL_KERNELS))
def test_gpu_matmul_input_errors(cp, name):
    fn = K.MATMUL_KERNELS[name]
    A = cp.ones((8, 4), dtype=cp.float32)
    with pytest.raises(TypeError, match="float32"):
        fn(A.astype(cp.float64), A.T.copy())
    with pytest.raises(ValueError, match="C-contiguous"):
        fn(A.T, A)                                   # a transpose is a strided view
    with pytest.raises(ValueError, match="2-D"):
        fn(A[0], A)
    with pytest.raises(ValueError, match="B.T"):
        fn(A, A)


BIAS_RELU_LAYOUTS = {   # bias along columns (Linear) or rows (Conv2d): kernels, references
    "columns": (K.bias_relu_forward, K.bias_relu_backward, R.bias_relu_forward_ref,
                R.bias_relu_backward_ref, 0),
    "rows": (K.bias_relu_rows_forward, K.bias_relu_rows_backward, R.bias_relu_rows_forward_ref,
             R.bias_relu_rows_backward_ref, 1),
}


@needs_gpu
@pytest.mark.parametrize("layout", sorted(BIAS_RELU_LAYOUTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("N, F", [(1, 1), (37, 45), (1000, 3), (2, 300), (3001, 130),
                                  (16, 256 * 28 * 28)])
def test_gpu_bias_relu(cp, layout, dtype, N, F):
    """Both layouts; sum_axis is the axis db sums over (0 for columns, 1 for rows)."""
    forward, backward, forward_ref, backward_ref, sum_axis = BIAS_RELU_LAYOUTS[layout]
    rng = np.random.default_rng(N + F)
    x, dout = (rng.standard_normal((N, F)).astype(dtype) for _ in range(2))
    b = rng.standard_normal(x.shape[1 - sum_axis]).astype(dtype)
    y = forward(cp.asarray(x), cp.asarray(b))
    np.testing.assert_array_equal(y.get(), forward_ref(x, b))
    dx, db = backward(cp.asarray(dout), y)
    rdx, rdb = backward_ref(dout, y.get())
    np.testing.assert_array_equal(dx.get(), rdx)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(db.get(), rdb, rtol=tol, atol=tol * np.sqrt(x.shape[sum_axis]))
    _, db2 = backward(cp.asarray(dout), y)
    np.testing.assert_array_equal(db.get(), db2.get())   # deterministic: no atomics


@needs_gpu
def test_gpu_bias_relu_rows_input_errors(cp):
    x = cp.ones((4, 3), dtype=cp.float32)
    with pytest.raises(ValueError, match="one entry per row"):
        K.bias_relu_rows_forward(x, cp.ones(3, dtype=cp.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        K.bias_relu_rows_forward(x.T, cp.ones(3, dtype=cp.float32))
    with pytest.raises(ValueError, match="must match"):
        K.bias_relu_rows_backward(x, cp.ones((4, 4), dtype=cp.float32))
    with pytest.raises(ValueError, match="65535"):
        K.bias_relu_rows_forward(cp.ones((70000, 1), dtype=cp.float32),
                                 cp.ones(70000, dtype=cp.float32))


@needs_gpu
def test_gpu_bias_relu_input_errors(cp):
    x = cp.ones((4, 3), dtype=cp.float32)
    with pytest.raises(ValueError, match="one entry per column"):
        K.bias_relu_forward(x, cp.ones(4, dtype=cp.float32))
    with pytest.raises(TypeError, match="float32"):
        K.bias_relu_forward(x, cp.ones(3, dtype=cp.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        K.bias_relu_forward(cp.ones((3, 4), dtype=cp.float32).T, cp.ones(3, dtype=cp.float32))
    with pytest.raises(ValueError, match="must match"):
        K.bias_relu_backward(x, cp.ones((4, 4), dtype=cp.float32))


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("N, C", [(1, 1), (7, 10), (33, 1000), (5, 33), (1025, 257)])
def test_gpu_softmax_cross_entropy(cp, dtype, label_dtype, N, C):
    rng = np.random.default_rng(N * C)
    z = (rng.standard_normal((N, C)) * 20).astype(dtype)
    y = rng.integers(0, C, N).astype(label_dtype)
    loss, dz = K.softmax_cross_entropy(cp.asarray(z), cp.asarray(y))
    ref_loss, ref_dz = R.softmax_cross_entropy_ref(z, y)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert abs(float(loss) - ref_loss) <= tol * max(1.0, abs(ref_loss))
    np.testing.assert_allclose(dz.get(), ref_dz, rtol=tol, atol=tol / N)


@needs_gpu
def test_gpu_softmax_cross_entropy_stable_and_loud(cp):
    z = cp.asarray([[1000.0, 0.0, -1000.0]], dtype=cp.float32)
    loss, dz = K.softmax_cross_entropy(z, cp.asarray([1]))
    assert abs(float(loss) - 1000.0) < 1e-2 and bool(cp.isfinite(dz).all())
    loss, _ = K.softmax_cross_entropy(z, cp.asarray([3]))   # label out of range
    assert np.isnan(float(loss))
    with pytest.raises(TypeError, match="int32 or int64"):
        K.softmax_cross_entropy(z, cp.asarray([1.0]))
    with pytest.raises(ValueError, match="one class index per row"):
        K.softmax_cross_entropy(z, cp.asarray([1, 2]))


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONV_CASES + [((17, 3, 13, 11), 3, 3, 2, 1)])
def test_gpu_im2col_col2im(cp, dtype, case):
    shape, KH, KW, s, p = case
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(dtype)
    cols = K.im2col(cp.asarray(x), KH, KW, s, p)
    assert cols.T.flags.c_contiguous and cols.dtype == dtype   # stored transposed (im2col.cu)
    np.testing.assert_array_equal(cols.get(), R.im2col_ref(x, KH, KW, s, p))
    c = rng.standard_normal(cols.shape).astype(dtype)
    dx = K.col2im(cp.asarray(c), shape, KH, KW, s, p)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(dx.get(), R.col2im_ref(c, shape, KH, KW, s, p), rtol=tol, atol=tol)
    np.testing.assert_array_equal(dx.get(), K.col2im(cp.asarray(c), shape, KH, KW, s, p).get())
    dx_f = K.col2im(cp.asfortranarray(cp.asarray(c)), shape, KH, KW, s, p)   # read in place
    np.testing.assert_allclose(dx_f.get(), dx.get(), rtol=tol, atol=tol)


@needs_gpu
def test_gpu_im2col_errors_and_layouts(cp):
    x = cp.asarray(np.random.default_rng(7).standard_normal((2, 4, 5, 3)).astype(np.float32))
    xt = x.transpose(0, 3, 1, 2)                     # (2, 3, 4, 5), a strided view: read in place
    np.testing.assert_array_equal(K.im2col(xt, 2, 2, 1, 1).get(), R.im2col_ref(xt.get(), 2, 2, 1, 1))
    with pytest.raises(TypeError, match="float32 or float64"):
        K.im2col(x.astype(cp.float16), 2, 2)
    with pytest.raises(ValueError, match="4-D"):
        K.im2col(x[0], 2, 2)
    with pytest.raises(ValueError, match="Were the same"):
        K.col2im(cp.ones((3, 3), dtype=cp.float32), (2, 4, 5, 3), 2, 2)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (37, 45), (784, 512), (3 * 2**20 + 5,)])
def test_gpu_optimizer_updates(cp, dtype, shape):
    """Both updates against their references, in place; 3 * 2**20 + 5 elements need more than
    the 4096 blocks of the grid, so its threads walk the array grid-stride."""
    rng = np.random.default_rng(len(shape))
    p, g, m, v = (rng.standard_normal(shape).astype(dtype) for _ in range(4))
    v = np.abs(v)
    # p - lr * v may cancel: the error is an ulp of the operands (about 1), not of the result
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    p_dev, v_dev = cp.asarray(p), cp.asarray(v)
    assert K.sgd_momentum_update(p_dev, cp.asarray(g), v_dev, 0.1, 0.9, 0.01) is p_dev
    for got, want in zip((p_dev, v_dev), R.sgd_momentum_update_ref(p, g, v, 0.1, 0.9, 0.01)):
        np.testing.assert_allclose(got.get(), want, **tol)
    p_dev, m_dev, v_dev = cp.asarray(p), cp.asarray(m), cp.asarray(v)
    K.adam_update(p_dev, cp.asarray(g), m_dev, v_dev, 0.9, 0.999, 0.05, 1e-8, 0.01)
    for got, want in zip((p_dev, m_dev, v_dev), R.adam_update_ref(p, g, m, v, 0.9, 0.999, 0.05, 1e-8, 0.01)):
        np.testing.assert_allclose(got.get(), want, **tol)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "channel-major"])
@pytest.mark.parametrize("case", POOL_CASES + [((64, 16, 28, 28), 2, 2, 2, None)])
def test_gpu_maxpool(cp, case, layout, dtype):
    shape, KH, KW, s, _ = case
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-3, 4, shape).astype(dtype)              # ties: the first maximum wins
    x_dev = cp.asarray(x)
    if layout == "channel-major":                             # as Conv2d's outputs are
        x_dev = cp.ascontiguousarray(x_dev.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    out, idx = K.maxpool_forward(x_dev, KH, KW, s)
    want_out, want_idx = R.maxpool_forward_ref(x, KH, KW, s)
    np.testing.assert_array_equal(out.get(), want_out)
    np.testing.assert_array_equal(idx.get(), want_idx)
    dout = rng.standard_normal(out.shape).astype(dtype)
    dx = K.maxpool_backward(cp.asarray(dout), idx, cp.empty_like(x_dev), KH, KW, s)
    assert dx.strides == x_dev.strides, "dx in x's layout"
    tol = 1e-6 if dtype == np.float32 else 1e-15
    np.testing.assert_allclose(dx.get(), R.maxpool_backward_ref(dout, want_idx, shape, KH, KW, s),
                               rtol=tol, atol=tol)


def test_kernels_for_alone_decides_whether_a_kernel_takes_an_array(monkeypatch):
    """Device, the switch, dtype and layout: each refusal is a None (the caller runs its array
    code). Arrays count as GPU ones here, so the rule is checked without a GPU."""
    x = np.zeros((4, 3), np.float32)
    assert K.kernels_for(x) is None                       # a NumPy array: never a kernel
    monkeypatch.setattr(K, "device_of", lambda a: "gpu")
    monkeypatch.setattr(K, "gpu_available", lambda: True)
    assert K.kernels_for(x) is K and K.kernels_for(x.astype(np.float64)) is K
    assert K.kernels_for(x, False) is None                 # the owner's use_kernels switch
    assert K.kernels_for(x.astype(np.float16)) is None     # no kernel is compiled for it
    assert K.kernels_for(x.astype(np.int32)) is None
    assert K.kernels_for(x, same_dtype=(x.astype(np.float64),)) is None
    assert K.kernels_for(x, contiguous=(x, x.T)) is None
    assert K.kernels_for(x, contiguous=(x,)) is K
    monkeypatch.setattr(K, "gpu_available", lambda: False)
    assert K.kernels_for(x) is None                        # CuPy without a usable GPU


def test_use_kernels_switches_every_owner_of_a_kernel():
    model = dl.fuse(dl.CNN(1, 8, 3, channels=(2, 2)))
    owners = [model.layers[0], model.layers[0].layer, model.layers[2]]   # Conv2dReLU, its Conv2d, MaxPool2d
    loss, opt = dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1)
    for obj in (model, loss, opt):
        assert dl.use_kernels(obj, False) is obj
    assert not any(o.use_kernels for o in owners) and not loss.use_kernels and not opt.use_kernels
    dl.use_kernels(model)
    assert all(o.use_kernels for o in owners)


def test_source_from_a_line_on():
    text = K.source("matmul_tiled.cu", start="#define TILE")
    assert text.startswith("#define TILE") and text in K.source("matmul_tiled.cu")
    with pytest.raises(ValueError, match="no line containing"):
        K.source("matmul_tiled.cu", start="no such text")


def test_max_relative_error(xp):
    ref = xp.asarray([1.0, -4.0, 2.0])
    assert K.max_relative_error(xp.asarray([1.0, -4.0, 2.0], dtype=xp.float32), ref) == 0.0
    assert K.max_relative_error(xp.asarray([1.0, -3.0, 2.0]), ref) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="one shape"):
        K.max_relative_error(ref[:2], ref)
