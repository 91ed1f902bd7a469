"""The lesson 08e exercise checks (08e_tensor_cores_by_hand, dlcourse/check/tensor_cores.py): a
right answer passes, and each common wrong answer gets the message that names its mistake.

Each wrong answer is a small function named after its mistake, written as a learner would."""

import numpy as np

import dlcourse.check as C
from support.expect import expect_fail


# ---- mma_sync
def mma_good(a, b, c):
    return a.astype(np.float32) @ b.astype(np.float32) + c


def mma_float64(a, b, c):                  # exact products, summed in float64: also right
    return (a.astype(np.float64) @ b.astype(np.float64) + c).astype(np.float32)


def mma_loop(a, b, c):                     # one k at a time, sums in float32
    d = c.copy()
    for k in range(16):
        d += np.outer(a[:, k].astype(np.float32), b[k].astype(np.float32))
    return d


def mma_loop_in_float16(a, b, c):          # each product rounded to float16
    d = c.copy()
    for k in range(16):
        d += np.outer(a[:, k], b[k])
    return d


def mma_in_float16(a, b, c):
    return (a @ b).astype(np.float32) + c


def mma_returns_float16(a, b, c):
    return (a @ b + c).astype(np.float16)


def mma_returns_float64(a, b, c):
    return a.astype(np.float64) @ b.astype(np.float64) + c


def mma_rounds_output(a, b, c):
    return (a.astype(np.float32) @ b.astype(np.float32) + c).astype(np.float16).astype(np.float32)


def mma_no_accumulator(a, b, c):
    return a.astype(np.float32) @ b.astype(np.float32)


def mma_b_transposed(a, b, c):
    return a.astype(np.float32) @ b.astype(np.float32).T + c


def mma_b_times_a(a, b, c):
    return b.astype(np.float32) @ a.astype(np.float32) + c


def mma_elementwise(a, b, c):
    return a.astype(np.float32) * b.astype(np.float32) + c


def mma_in_place(a, b, c):
    c += a.astype(np.float32) @ b.astype(np.float32)
    return c


def test_mma_sync():
    for fn in (mma_good, mma_float64, mma_loop):
        C.mma_sync(fn)
    expect_fail(C.mma_sync, mma_in_float16, "standard normal", "multiplied in float16")
    expect_fail(C.mma_sync, mma_loop_in_float16, "standard normal", "each product was rounded")
    expect_fail(C.mma_sync, mma_returns_float16, "d is float16", "float32")
    expect_fail(C.mma_sync, mma_returns_float64, "d is float64", "accumulator's format")
    expect_fail(C.mma_sync, mma_rounds_output, "rounded to float16")
    expect_fail(C.mma_sync, mma_no_accumulator, "accumulator is missing")
    expect_fail(C.mma_sync, mma_b_transposed, "b transposed")
    expect_fail(C.mma_sync, mma_b_times_a, "b @ a")
    expect_fail(C.mma_sync, mma_elementwise, "elementwise")
    expect_fail(C.mma_sync, mma_in_place, "changed its input c in place")
    expect_fail(C.mma_sync, lambda a, b, c: None, "d is None")


# ---- fragment_tiles
def ft_good(warp, block_m=128, block_n=128, warps_m=2, warps_n=4):
    wm, wn = block_m // warps_m, block_n // warps_n
    row0, col0 = (warp // warps_n) * wm, (warp % warps_n) * wn
    corners = np.zeros((wm // 16, wn // 16, 2), dtype=np.int64)
    corners[..., 0] = row0 + 16 * np.arange(wm // 16)[:, None]
    corners[..., 1] = col0 + 16 * np.arange(wn // 16)[None, :]
    return corners


def ft_lists(warp, block_m=128, block_n=128, warps_m=2, warps_n=4):   # nested lists: also right
    wm, wn = block_m // warps_m, block_n // warps_n
    r0, c0 = divmod(warp, warps_n)
    return [[(r0 * wm + 16 * i, c0 * wn + 16 * j) for j in range(wn // 16)]
            for i in range(wm // 16)]


def _ft(row, col, step=16):
    def fragment_tiles(warp, block_m=128, block_n=128, warps_m=2, warps_n=4):
        wm, wn = block_m // warps_m, block_n // warps_n
        r, c = row(warp, warps_m, warps_n), col(warp, warps_m, warps_n)
        s_m, s_n = (wm, wn) if step == "warp" else (step, step)
        return np.array([[(r * wm + s_m * i, c * wn + s_n * j) for j in range(wn // 16)]
                         for i in range(wm // 16)])
    return fragment_tiles


ft_column_major = _ft(lambda w, m, n: w % m, lambda w, m, n: w // m)
ft_warps_m = _ft(lambda w, m, n: w // m, lambda w, m, n: w % m)
ft_warp_step = _ft(lambda w, m, n: w // n, lambda w, m, n: w % n, step="warp")
ft_fragment_units = _ft(lambda w, m, n: w // n, lambda w, m, n: w % n, step=1)


def ft_inside_warp_only(warp, block_m=128, block_n=128, warps_m=2, warps_n=4):
    return ft_good(warp, block_m, block_n, warps_m, warps_n) - ft_good(warp, block_m, block_n,
                                                                       warps_m, warps_n)[0, 0]


def ft_col_row(warp, block_m=128, block_n=128, warps_m=2, warps_n=4):
    return ft_good(warp, block_m, block_n, warps_m, warps_n)[..., ::-1]


def ft_transposed(warp, block_m=128, block_n=128, warps_m=2, warps_n=4):
    return ft_good(warp, block_m, block_n, warps_m, warps_n).transpose(1, 0, 2)


def ft_flat(warp, block_m=128, block_n=128, warps_m=2, warps_n=4):
    return ft_good(warp, block_m, block_n, warps_m, warps_n).reshape(-1, 2)


def ft_fixed_geometry(warp, block_m=128, block_n=128, warps_m=2, warps_n=4):
    return ft_good(warp)


def test_fragment_tiles():
    C.fragment_tiles(ft_good)
    C.fragment_tiles(ft_lists)
    expect_fail(C.fragment_tiles, ft_column_major, "warp=1,", "COLUMN by column")
    expect_fail(C.fragment_tiles, ft_warps_m, "warp=2,", "not warps_m")
    expect_fail(C.fragment_tiles, ft_warp_step, "warp=0,", "16 apart")
    expect_fail(C.fragment_tiles, ft_fragment_units, "warp=0,", "in elements")
    expect_fail(C.fragment_tiles, ft_inside_warp_only, "warp=1,", "inside the WARP's tile")
    expect_fail(C.fragment_tiles, ft_col_row, "warp=0,", "the row first")
    expect_fail(C.fragment_tiles, ft_transposed, "shape (2, 4, 2)", "(FM, FN, 2)")
    expect_fail(C.fragment_tiles, ft_flat, "warp=0,", "(row, column) pair")
    expect_fail(C.fragment_tiles, ft_fixed_geometry, "block_m=64")
    expect_fail(C.fragment_tiles,
                lambda warp, *geometry: ft_good(warp, *geometry) + 0.5, "not whole numbers")


# ---- wmma_traffic
def wt_good(block_m, block_n, block_k, warps_m, warps_n):
    FM, FN = block_m // warps_m // 16, block_n // warps_n // 16
    slices, warps = block_k // 16, warps_m * warps_n
    return (FM + FN) * slices * warps, FM * FN * slices * warps


def _wt(loads, slices=True, per_block=True):
    def wmma_traffic(block_m, block_n, block_k, warps_m, warps_n):
        FM, FN = block_m // warps_m // 16, block_n // warps_n // 16
        times = (block_k // 16 if slices else 1) * (warps_m * warps_n if per_block else 1)
        return loads(FM, FN) * times, FM * FN * times
    return wmma_traffic


def test_wmma_traffic():
    C.wmma_traffic(wt_good)
    C.wmma_traffic(lambda *g: tuple(np.int64(v) for v in wt_good(*g)))
    expect_fail(C.wmma_traffic, _wt(lambda m, n: m + n, slices=False), "one 16-deep slice")
    expect_fail(C.wmma_traffic, _wt(lambda m, n: m + n, per_block=False), "one warp's count")
    expect_fail(C.wmma_traffic, _wt(lambda m, n: m * n), "ONCE per slice")
    expect_fail(C.wmma_traffic, _wt(lambda m, n: m), "fragments of B are missing")
    expect_fail(C.wmma_traffic, _wt(lambda m, n: n), "fragments of A are missing")
    expect_fail(C.wmma_traffic, _wt(lambda m, n: 2 * (m + n)), "the products are right")
    expect_fail(C.wmma_traffic, lambda *g: wt_good(*g)[0], "loads, products")
