"""Checks for lesson 08e, tensor cores by hand: what one ``mma_sync`` computes, which warp owns
which 16 x 16 tile of C, and what a warp loads from shared memory for its products.

Like the other GPU lessons' checks (``cuda.py``, ``gpu_performance.py``), every exercise is a
small NumPy function that reasons about ``matmul_wmma.cu`` without a GPU::

    dl.check.mma_sync(mma_sync)

======  ==========================  ==========================================================
lesson  check                       your function
======  ==========================  ==========================================================
08e     :func:`mma_sync`            ``(a, b, c) -> d``: one tensor-core product of 16 x 16
                                    fragments, FP16 in, FP32 sums
08e     :func:`fragment_tiles`      ``(warp, block_m, block_n, warps_m, warps_n) -> (FM, FN, 2)``:
                                    where warp ``warp``'s accumulator fragments sit in the
                                    block's tile of C
08e     :func:`wmma_traffic`        ``(block_m, block_n, block_k, warps_m, warps_n) -> (loads,
                                    products)``: the fragment loads and ``mma_sync`` calls of
                                    one block for one k-tile
======  ==========================  ==========================================================

(08e: ``08e_tensor_cores_by_hand``.) While a check runs the learner's function the library is
closed (``seal.py``): ``dl.kernels.matmul_wmma`` and its NumPy reference cannot answer for it.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_on_gpu, expect_shape, expect_tuple,
                      expect_unchanged, fail, gpu, passed, rng, to_array, to_integer)

__all__ = ["mma_sync", "fragment_tiles", "wmma_traffic"]

FRAG = 16          # the fragment shape m = n = k = 16 of matmul_wmma.cu


# ======================================================================================
# One tensor-core product
# ======================================================================================
def _mma_cases():
    """(case, a float16, b float16, c float32): random fragments, and two whose exact answer
    float16 arithmetic cannot give."""
    __tracebackhide__ = True
    g = rng(8)
    one = np.float16(1 + 2.0**-10)                     # the float16 just above 1
    eye = np.eye(FRAG, dtype=np.float16)
    return [
        ("a, b: standard normal float16, c: standard normal float32",
         g.standard_normal((FRAG, FRAG)).astype(np.float16),
         g.standard_normal((FRAG, FRAG)).astype(np.float16),
         g.standard_normal((FRAG, FRAG)).astype(np.float32)),
        ("a = b = (1 + 2**-10) times the identity, c = 0: each d[i, i] is ONE product, "
         "(1 + 2**-10)**2 = 1 + 2**-9 + 2**-20", eye * one, eye * one,
         np.zeros((FRAG, FRAG), np.float32)),
        ("a = ones, b = 1 + 2**-10 everywhere, c = 1000: each d[i, j] = 1000 + 16 (1 + 2**-10) "
         "= 1016.015625", np.ones((FRAG, FRAG), np.float16), np.full((FRAG, FRAG), one),
         np.full((FRAG, FRAG), 1000, np.float32)),
        ("a: uniform in [0, 4) float16, b: standard normal float16, c: uniform in [-100, 100)",
         g.uniform(0, 4, (FRAG, FRAG)).astype(np.float16),
         g.standard_normal((FRAG, FRAG)).astype(np.float16),
         g.uniform(-100, 100, (FRAG, FRAG)).astype(np.float32)),
    ]


def mma_sync(fn) -> None:
    """Check ``fn(a, b, c) -> d``: what one ``wmma::mma_sync(d, a, b, c)`` computes. ``a``,
    ``b``: (16, 16) float16 fragments, ``c``: (16, 16) float32 accumulator; ``d = a @ b + c``
    as a (16, 16) float32 array, with every product of two FP16 numbers exact and the sums in
    FP32. Two cases have exact answers that only FP32 sums of exact products give; on a GPU
    one more case runs on CuPy arrays."""
    __tracebackhide__ = True
    cases = _mma_cases()
    cp = gpu()
    if cp is not None:
        case, a, b, c = cases[0]
        cases.append((case + ", as CuPy arrays", a, b, c))
    for n, (case, a, b, c) in enumerate(cases):
        on_gpu = cp is not None and n == len(cases) - 1
        move = cp.asarray if on_gpu else np.array
        given = move(a), move(b), move(c)
        out = call(fn, *given, case=case,
                   on_error="a and b are (16, 16) float16, c is (16, 16) float32: "
                            "d = a @ b + c, with the products and sums in float32.")
        if on_gpu:
            expect_on_gpu(out, fn, case, "d")
        expect_unchanged(fn, case, [("a", a, given[0]), ("b", b, given[1]), ("c", c, given[2])])
        d = to_array(out, fn, case, "d")
        expect_shape(d, (FRAG, FRAG), fn, case, "d")
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        expected = a32 @ b32 + c
        if d.dtype == np.float16:
            fail(fn, case, "d is float16. A tensor core keeps the accumulator, and so d, in "
                           "float32.",
                 "multiply and add in float32: in NumPy, a float16 @ float16 product is a "
                 "float16 array, rounded to float16's 11 significant bits.")
        if d.dtype != np.float32:
            fail(fn, case, f"d is {d.dtype}; the accumulator fragment is float32.",
                 "return d in float32, the accumulator's format (c's dtype).")
        exact = n in (1, 2)
        mistakes = [
            (lambda: (a @ b).astype(np.float32) + c,
             "that multiplied in float16: NumPy's float16 @ float16 rounds each result to "
             "float16, so a product's low bits (and the small terms of a sum) are lost. The "
             "tensor core multiplies FP16 numbers exactly and sums in FP32."),
            (lambda: (a[:, :, None] * b[None]).astype(np.float32).sum(axis=1) + c,
             "each product was rounded to float16 (a float16 times a float16 in NumPy is a "
             "float16): the tensor core keeps every product exact, which float32 can."),
            (lambda: (a32 @ b32 + c).astype(np.float16).astype(np.float32),
             "the result was rounded to float16 somewhere: d stays in float32."),
            (lambda: a32 @ b32, "the accumulator is missing: mma_sync computes D = A B + C."),
            (lambda: a32 @ b32.T + c, "that uses b transposed: d[i, j] sums a[i, k] b[k, j] "
                                      "over k."),
            (lambda: b32 @ a32 + c, "that is b @ a: the product's order matters."),
            (lambda: a32 * b32 + c, "that multiplies elementwise: a fragment product is a "
                                    "matrix product."),
        ]
        expect_close(d, expected, fn, case, "d", rtol=0 if exact else 1e-6,
                     atol=0 if exact else 1e-5 * float((np.abs(a32) @ np.abs(b32)).max()
                                                         + np.abs(c).max()),
                     mistakes=mistakes)
    passed(fn, len(cases), on_gpu=cp is not None)


# ======================================================================================
# Which warp owns which tile
# ======================================================================================
def _tiles(warp, block_m, block_n, warps_m, warps_n, *, row=None, col=None, step=None):
    """The (FM, FN, 2) fragment corners of ``warp``; the keywords make the usual mistakes."""
    __tracebackhide__ = True
    wm, wn = block_m // warps_m, block_n // warps_n
    r = warp // warps_n if row is None else row
    c = warp % warps_n if col is None else col
    i = np.arange(wm // FRAG)[:, None] * (FRAG if step is None else step[0])
    j = np.arange(wn // FRAG)[None, :] * (FRAG if step is None else step[1])
    out = np.zeros((wm // FRAG, wn // FRAG, 2), np.int64)
    out[..., 0] = r * wm + i
    out[..., 1] = c * wn + j
    return out


GEOMETRIES = [   # (block_m, block_n, warps_m, warps_n)
    (128, 128, 2, 4),     # matmul_wmma.cu
    (64, 64, 2, 2),
    (128, 64, 4, 1),
    (64, 128, 1, 4),
    (256, 128, 4, 2),
    (32, 32, 1, 1),
]


def fragment_tiles(fn) -> None:
    """Check ``fn(warp, block_m, block_n, warps_m, warps_n) -> corners``, an integer array of
    shape (FM, FN, 2): ``corners[i, j]`` = (row, column), inside the block's block_m x block_n
    tile of C, of the top-left element of warp ``warp``'s accumulator fragment ``acc[i][j]``.
    The warps form a warps_m x warps_n grid numbered row by row; each owns a
    (block_m / warps_m) x (block_n / warps_n) warp tile of FM x FN fragments of 16 x 16,
    ``i`` counting down and ``j`` across. Every warp of six geometries is checked, the
    kernel's first (so together they cover each 16 x 16 tile of the block once)."""
    __tracebackhide__ = True
    n_cases = 0
    for block_m, block_n, warps_m, warps_n in GEOMETRIES:
        wm, wn = block_m // warps_m, block_n // warps_n
        for warp in range(warps_m * warps_n):
            n_cases += 1
            case = (f"warp={warp}, block_m={block_m}, block_n={block_n}, warps_m={warps_m}, "
                    f"warps_n={warps_n} (warp tiles of {wm} x {wn}: {wm // FRAG} x "
                    f"{wn // FRAG} fragments)")
            got = to_array(call(fn, warp, block_m, block_n, warps_m, warps_n, case=case,
                                on_error="return an integer array of shape (FM, FN, 2), FM = "
                                         "warp-tile rows / 16, FN = warp-tile columns / 16."),
                           fn, case, "corners")
            expected = _tiles(warp, block_m, block_n, warps_m, warps_n)
            if got.shape == (wn // FRAG, wm // FRAG, 2) and wm != wn:
                fail(fn, case, f"corners has shape {got.shape}; it should be "
                               f"{expected.shape}: (FM, FN, 2).",
                     "index it [i, j]: i the fragment row (down), j the fragment column "
                     "(across), and last (row, column).")
            expect_shape(got, expected.shape, fn, case, "corners",
                         f"FM = {wm} // 16 = {wm // FRAG} fragments down and FN = {wn} // 16 = "
                         f"{wn // FRAG} across, each with a (row, column) pair.")
            if got.dtype.kind == "f" and not np.array_equal(got, np.round(got)):
                fail(fn, case, "some corners are not whole numbers.",
                     "rows and columns are element indices: use integer arithmetic (// and %).")
            same = lambda **kw: (lambda: _tiles(warp, block_m, block_n, warps_m,  # noqa: E731
                                                warps_n, **kw))
            expect_close(got, expected, fn, case, "corners", rtol=0, atol=0, mistakes=[
                (same(row=warp % warps_m, col=warp // warps_m),
                 "that numbers the warps COLUMN by column. The lesson numbers them row by row, "
                 "like threads in a block: warps 0 to warps_n - 1 fill the grid's first row."),
                (same(row=warp // warps_m, col=warp % warps_m),
                 "the warp grid has warps_n warps in each ROW (and warps_m rows): a warp's row "
                 "and column in the grid come from warps_n, not warps_m."),
                (same(step=(wm, wn)),
                 "the fragments of one warp are 16 apart, inside its warp tile: the warp tiles "
                 "are (block_m / warps_m) x (block_n / warps_n), the fragments 16 x 16."),
                (same(step=(1, 1)),
                 "i and j count fragments, and the corners are in elements: neighbouring "
                 "fragments are a whole fragment (16 elements) apart."),
                (lambda: np.stack(np.broadcast_arrays(
                    np.arange(wm // FRAG)[:, None] * FRAG, np.arange(wn // FRAG)[None, :] * FRAG),
                    axis=-1),
                 "those are the corners inside the WARP's tile: add where the warp tile starts "
                 "in the block's tile."),
                (lambda: expected[..., ::-1],
                 "each corner is (row, column): the row first."),
            ])
    passed(fn, n_cases)


# ======================================================================================
# What a block loads and multiplies per k-tile
# ======================================================================================
def _traffic(block_m, block_n, block_k, warps_m, warps_n, *, slices=True, per="block",
             loads="sum"):
    __tracebackhide__ = True
    fm, fn_ = block_m // warps_m // FRAG, block_n // warps_n // FRAG
    k_slices = block_k // FRAG if slices else 1
    warps = warps_m * warps_n if per == "block" else 1
    n_loads = {"sum": fm + fn_, "product": fm * fn_, "a": fm, "b": fn_}[loads]
    return n_loads * k_slices * warps, fm * fn_ * k_slices * warps


def wmma_traffic(fn) -> None:
    """Check ``fn(block_m, block_n, block_k, warps_m, warps_n) -> (loads, products)``: for one
    block and one block_k-deep tile of A and B in shared memory, the ``load_matrix_sync`` calls
    of A and B fragments and the ``mma_sync`` calls that all its warps make, as
    ``matmul_wmma.cu`` does them: per 16-deep slice, each warp loads its FM fragments of A and
    FN of B once and multiplies every pair."""
    __tracebackhide__ = True
    geometries = [(128, 128, 32, 2, 4), (64, 64, 16, 2, 2), (128, 128, 64, 2, 2),
                  (128, 64, 32, 4, 1), (64, 128, 32, 1, 4), (256, 128, 32, 2, 4),
                  (32, 32, 48, 2, 2)]
    for block_m, block_n, block_k, warps_m, warps_n in geometries:
        fm, fn_ = block_m // warps_m // FRAG, block_n // warps_n // FRAG
        case = (f"block_m={block_m}, block_n={block_n}, block_k={block_k}, warps_m={warps_m}, "
                f"warps_n={warps_n} (each warp: {fm} x {fn_} fragments)")
        out = expect_tuple(call(fn, block_m, block_n, block_k, warps_m, warps_n, case=case),
                           2, fn, case, "loads, products")
        got = (to_integer(out[0], fn, case, "loads"), to_integer(out[1], fn, case, "products"))
        expected = _traffic(block_m, block_n, block_k, warps_m, warps_n)
        if got == expected:
            continue
        mistakes = [
            (_traffic(block_m, block_n, block_k, warps_m, warps_n, slices=False),
             "that is one 16-deep slice: a k-tile of block_k holds block_k / 16 of them, each "
             "with its own loads and products."),
            (_traffic(block_m, block_n, block_k, warps_m, warps_n, per="warp"),
             "that is one warp's count: add up every warp of the block's warp grid."),
            (_traffic(block_m, block_n, block_k, warps_m, warps_n, loads="product"),
             "that loads a fragment of A and one of B for every product. The warp loads each of "
             "its FM fragments of A and FN of B ONCE per slice and reuses them: FM of A with "
             "each of FN of B."),
            (_traffic(block_m, block_n, block_k, warps_m, warps_n, loads="a"),
             "the fragments of B are missing from the loads."),
            (_traffic(block_m, block_n, block_k, warps_m, warps_n, loads="b"),
             "the fragments of A are missing from the loads."),
        ]
        fix = next((why for wrong, why in mistakes if wrong == got), None)
        if fix is None and got[1] == expected[1]:
            fix = "the products are right; count the loads again: which fragments does a warp " \
                  "need for its FM x FN products in one slice?"
        fail(fn, case, f"it counted {got[0]} fragment loads and {got[1]} products; the block "
                       f"makes {expected[0]} and {expected[1]}.", fix)
    passed(fn, len(geometries))


# Deeper hint levels (level 1 is the `# HINT:` line in the exercise's cell): words, shapes,
# questions and pseudo-code with blanks, never a line of the reference.
HINTS: dict[str, list[str]] = {
    'mma_sync': [
        ("Two questions. How many significant bits has the product of two float16 numbers, and "
         "how many does a float32 hold? And what dtype does NumPy give a float16 @ float16 "
         "product? Convert first, multiply after."),
        ("pseudo-code: d = (a as ___) @ (b as ___) + c. Check on the second case: (1 + 2**-10)**2 "
         "must keep its 2**-20. Where to look: section 1's paragraph on what a fragment holds."),
    ],
    'fragment_tiles': [
        ("Two levels. Where does the warp's tile start? The warp's row in the warp grid and its "
         "column come from its number; each step in the grid moves a whole warp tile. Where does "
         "fragment (i, j) start inside the warp tile? Each step moves one fragment."),
        ("pseudo-code: wm, wn = the warp tile's rows and columns; warp row = warp ___ warps_n, "
         "warp column = warp ___ warps_n; corners[i, j] = (warp row * ___ + 16 * i, warp column "
         "* ___ + 16 * j). Check: in the kernel's geometry warp 5 starts at row 64, column 32. "
         "Where to look: the picture in section 2."),
    ],
    'wmma_traffic': [
        ("Count one warp and one 16-deep slice first: how many fragments of A does it load (one "
         "per fragment row of its tile), how many of B, and how many products does it make from "
         "them? Then: how many slices in block_k, how many warps in a block?"),
        ("pseudo-code: FM = the warp tile's rows over 16, FN = its columns over 16; per warp and "
         "slice: ___ loads and ___ products; multiply both by the slices in a k-tile and by ___. "
         "Check: the kernel's "
         "geometry (128, 128, 32, 2, 4) makes 128 products per k-tile. Where to look: section 3, "
         "the loop of the kernel's step 3."),
    ],
}

# What would give each answer away: no first-level hint may contain one of these.
ANSWER_TOKENS: dict[str, list[str]] = {
    'mma_sync': ['astype(np.float32)', 'astype(float32)', 'float32) @', '@ b + c', 'a @ b'],
    'fragment_tiles': ['warp // warps_n', 'warp % warps_n', '// warps_n', '% warps_n',
                       '16 * i', 'i * 16'],
    'wmma_traffic': ['fm + fn', '(fm + fn)', 'fm * fn', 'block_k // 16', 'block_k / 16'],
}
