"""Checks for the GPU lessons 08a-08b: the index arithmetic and memory counting behind kernels.

Every exercise there is a small NumPy function that reasons about a kernel without a GPU; each
check runs it on several cases and either prints one line saying that all pass, or raises
:class:`ExerciseError` naming the case, what was expected, what your function gave and, for the
common mistakes, the likely fix::

    dl.check.grid_size(grid_size)

======  ============================  ======================================================
lesson  check                         your function
======  ============================  ======================================================
08a     :func:`global_index`          ``(block_idx, block_dim, thread_idx) -> i``: the element
                                      a thread owns along one axis
08a     :func:`grid_size`             ``(n, block) -> int``: the blocks needed for n elements
08a     :func:`warp_transactions`     ``(addresses, segment_bytes=128) -> int``: the memory
                                      segments one warp's 32 addresses fall into
08b     :func:`tiled_matmul`          ``(A, B, tile) -> C``: matmul_tiled.cu in NumPy
08b     :func:`arithmetic_intensity`  ``(tile_m, tile_n, K, itemsize=4)``: FLOPs per byte
                                      loaded from global memory
======  ============================  ======================================================

(08a: ``08a_gpu_execution_and_memory``; 08b: ``08b_tiling_and_roofline``.)

The checks of lessons 08c-08d (bank conflicts, occupancy, fusion, launches per step) are in
``gpu_performance.py``. While a check runs the learner's function the library is closed (a
kernel's NumPy reference, the launch-geometry helpers and the rest: ``seal.py``). The shared
machinery (``call``, ``fail``, ``expect_close``, ...) lives in
``harness.py``.
"""
from __future__ import annotations

import math

import numpy as np

from .harness import (call, expect_close, expect_shape, expect_unchanged, fail, passed, rng,
                      to_array, to_integer, to_number)

__all__ = ["global_index", "grid_size", "warp_transactions", "tiled_matmul",
           "arithmetic_intensity"]



# ======================================================================================
# Threads, blocks and grids
# ======================================================================================
def global_index(fn) -> None:
    """Check ``fn(block_idx, block_dim, thread_idx)``: the global index of a thread along one
    axis (the element it owns), for ints and for NumPy int arrays that broadcast together (one
    call for a whole grid), with the block index and the thread index each as the row and as
    the column of the grid."""
    __tracebackhide__ = True
    cases = [(0, 32, 5), (3, 32, 5), (2, 256, 255), (7, 128, 0), (1, 1, 0)]
    for b, d, t in cases:
        case = f"block_idx={b}, block_dim={d}, thread_idx={t}"
        expected = b * d + t
        got = to_integer(call(fn, b, d, t, case=case), fn, case, "the index")
        if got == expected:
            continue
        fix = None
        if got == b + t:
            fix = ("each block before this one holds block_dim threads, not one: how many "
                   "threads do the blocks numbered below block_idx hold together?")
        elif got == t * d + b:
            fix = ("you scaled the THREAD index by the block size, so neighbouring threads own "
                   "elements block_dim apart. In CUDA consecutive threads own consecutive "
                   "elements: which of the two indices counts whole blocks?")
        elif got == (b + 1) * d + t:
            fix = "blocks are numbered from 0: block 0 starts at index 0, so use block_idx, not block_idx + 1."
        elif got == b * d + t + 1 or got == b * d + t - 1:
            fix = ("indices start at 0 and need no +1 or -1: thread 0 of block 0 owns "
                   "element 0.")
        fail(fn, case, f"the index is {got}; expected {expected}.", fix)

    # A whole grid at once: 4 blocks of 8 threads must cover 0..31, each index once; then 5
    # blocks of 3 threads with the roles of rows and columns swapped.
    grids = [("block_idx = np.arange(4)[:, None], block_dim = 8, thread_idx = np.arange(8)[None, :] "
              "(a grid of 4 blocks of 8 threads, all at once)",
              np.arange(4)[:, None], 8, np.arange(8)[None, :]),
             ("block_idx = np.arange(5)[None, :], block_dim = 3, thread_idx = np.arange(3)[:, None] "
              "(5 blocks of 3 threads, blocks along the columns this time)",
              np.arange(5)[None, :], 3, np.arange(3)[:, None])]
    for case, bi, d, ti in grids:
        got = to_array(call(fn, bi, d, ti, case=case,
                            on_error="use only arithmetic (* and +): it then works element by "
                                     "element on NumPy arrays as well as on ints."),
                       fn, case, "the indices")
        expected = bi * d + ti
        expect_shape(got, expected.shape, fn, case, "the indices",
                     f"combine the arrays with * and + only; NumPy broadcasts "
                     f"{bi.shape} and {ti.shape} to {expected.shape}.")
        expect_close(got, expected, fn, case, "the indices", rtol=0, atol=0)
        if len(np.unique(got)) != got.size:
            fail(fn, case, "two threads of the grid got the same index.")
    passed(fn, len(cases) + len(grids))


def grid_size(fn) -> None:
    """Check ``fn(n, block)``: how many blocks of ``block`` threads a 1-D grid needs so that
    every one of ``n`` elements gets a thread, as a whole number, computed with integers (a
    case with n near 2**60 catches floating-point division)."""
    __tracebackhide__ = True
    cases = [(1024, 256), (1000, 256), (1, 256), (257, 256), (2048, 32), (100, 1), (31, 32),
             (0, 128), (768, 256), (96, 32), (1025, 1024), (2 ** 60 + 1, 1024)]
    for n, block in cases:
        case = f"n={n} elements, block={block} threads"
        expected = -(-n // block)
        got = to_integer(call(fn, n, block, case=case), fn, case,
                       "the number of blocks",
                       "return a whole number of blocks, e.g. with integer division //.")
        if got == expected:
            continue
        fix = None
        if n == 0:
            fix = ("with n = 0 no element needs a thread, so the count is 0 blocks, which a "
                   "rounding up done with integers gives by itself. (A guard such as max(1, ...) "
                   "belongs where the kernel is launched, not in the count.)")
        elif got == math.ceil(n / block):
            fix = (f"that is {n} / {block} rounded up in FLOATING POINT: a float keeps about 16 "
                   f"digits, so at n this large the remainder is lost before the rounding. Stay "
                   f"with whole numbers all the way (integer division //).")
        elif got == n // block:
            fix = (f"{n} // {block} = {n // block} blocks give only {n // block * block} threads, "
                   f"so the last {n - n // block * block} element(s) get none. Round UP, with "
                   f"integers only: what can you add to n before dividing so that any remainder "
                   f"adds one block and no remainder adds none?")
            if 0 < n / block - n // block < 0.01:
                fix += (f" (Adding 0.999 or the like before truncating misses a remainder this "
                        f"small: {n} / {block} = {n / block:.6f}.)")
        elif got == n // block + 1:   # also what (n + block) // block and round(n / block + 0.5) give
            fix = (f"one block too many: {n} is a multiple of {block} ({n} = {n // block} x "
                   f"{block}), so {n // block} blocks are exactly enough. n // block + 1, "
                   f"(n + block) // block and round(n / block + 0.5) all give one more here "
                   f"(round() takes halves to the nearest EVEN number, so it is right only "
                   f"sometimes). Round up with integers only, so that an exact multiple "
                   f"stays as it is.")
        fail(fn, case, f"the grid has {got} block(s); expected {expected} "
                       f"({expected} x {block} = {expected * block} threads >= {n} elements).", fix)
    passed(fn, len(cases))


# ======================================================================================
# Memory coalescing
# ======================================================================================
def _segments(addresses, segment_bytes):
    __tracebackhide__ = True
    return len(np.unique(np.asarray(addresses) // segment_bytes))


def warp_transactions(fn) -> None:
    """Check ``fn(addresses, segment_bytes=32)``: the number of distinct, aligned memory
    segments of ``segment_bytes`` bytes that the byte ``addresses`` of one warp's 32 threads
    fall into — with 32, the sectors the memory system fetches for that warp's access; with
    128, the cache lines it touches."""
    __tracebackhide__ = True
    lane = np.arange(32)
    cases = [   # (in this order, a count in elements fails before one from the address range)
        ("32 consecutive float32 starting at byte 0 (4 * lane)", 4 * lane, 128),
        ("32 consecutive float64 (8 * lane)", 8 * lane, 128),
        ("32 consecutive float32 starting at byte 64 (not aligned to 128)", 64 + 4 * lane, 128),
        ("float32 at stride 2048 elements (4 * 2048 * lane: down a column of a 2048-wide matrix)",
         4 * 2048 * lane, 128),
        ("all 32 threads read the same address 4096 (a broadcast)", np.full(32, 4096), 128),
        ("32 consecutive float32, counted in 32-byte sectors (segment_bytes=32)", 4 * lane, 32),
        ("32 consecutive float32 in shuffled order", 4 * np.random.default_rng(8).permutation(32),
         128),
        ("every other float32 (8 * lane + 1024)", 8 * lane + 1024, 128),
        ("32 consecutive float32 starting at byte 96, in 64-byte segments", 96 + 4 * lane, 64),
    ]
    for case, addresses, seg in cases:
        case = f"{case}, segment_bytes={seg}"
        expected = _segments(addresses, seg)
        given = addresses.astype(np.int64)
        got = to_integer(call(fn, given, seg, case=case), fn, case,
                       "the number of transactions")
        expect_unchanged(fn, case, [("addresses", addresses, given)])
        if got == expected:
            continue
        fix = None
        span = int(addresses.max() // seg - addresses.min() // seg + 1)
        by_range = int((addresses.max() - addresses.min()) // seg + 1)
        if got == len(addresses) and expected != len(addresses):
            fix = ("that is one transaction per thread. Threads whose addresses fall in the same "
                   "segment share one: count the different segments, not the threads.")
        elif got == len(np.unique(addresses)):
            fix = ("that counts distinct ADDRESSES. Map every address to the segment it falls "
                   "in first, then count the different segments.")
        elif got == span:
            fix = ("you counted every segment from the lowest to the highest address; only the "
                   "segments some thread actually touches are fetched: count those, each once.")
        elif got == _segments(addresses, 128) and seg != 128:
            fix = "use the segment_bytes argument, not a fixed 128."
        elif got == by_range:
            fix = ("you divided the address RANGE (max - min) by segment_bytes. Segments are "
                   "aligned, starting at multiples of segment_bytes, so a range of fewer bytes "
                   "can still straddle two of them (bytes 64 to 191 touch segments 0 and 1), and "
                   "a wide range may skip most segments. Count the segments the threads touch, "
                   "each once.")
        elif got == _segments(addresses // 4, seg):
            fix = ("the addresses are already in BYTES: divide them by segment_bytes directly, "
                   "without converting to elements first.")
        fail(fn, case, f"the warp needs {expected} transaction(s); your function says {got}.", fix)
    passed(fn, len(cases))


# ======================================================================================
# Shared memory and tiling
# ======================================================================================
def _last_k_tile_only(A, B, tile):
    """The wrong result of C = ... (overwriting) instead of C += ...: only the last k-tile."""
    __tracebackhide__ = True
    M, K = A.shape
    k0 = (K - 1) // tile * tile
    return A[:, k0:] @ B[k0:, :]


def _inner_tiles_only(A, B, tile):
    """The wrong result of loops that stop at the last whole tile (range(M // tile) ...)."""
    __tracebackhide__ = True
    M, K = A.shape
    N = B.shape[1]
    Mt, Nt, Kt = M // tile * tile, N // tile * tile, K // tile * tile
    C = np.zeros((M, N))
    C[:Mt, :Nt] = A[:Mt, :Kt] @ B[:Kt, :Nt]
    return C


class _Whole(np.ndarray):
    """A whole input matrix that notes when it is multiplied as a whole (``A @ B``,
    ``np.dot(A, B)``): tiled_matmul must multiply tiles, not the matrices. Slices of it (the
    tiles) are plain arrays, so only the whole matrix is watched."""

    used_whole = False

    def __getitem__(self, index):
        __tracebackhide__ = True
        return np.asarray(self)[index]

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        __tracebackhide__ = True
        if ufunc is np.matmul:
            _Whole.used_whole = True
        inputs = tuple(np.asarray(a) if isinstance(a, _Whole) else a for a in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        __tracebackhide__ = True
        if func in (np.dot, np.matmul, np.inner, np.tensordot, np.einsum, np.vdot):
            _Whole.used_whole = True
        args = tuple(np.asarray(a) if isinstance(a, _Whole) else a for a in args)
        return func(*args, **kwargs)


def tiled_matmul(fn) -> None:
    """Check ``fn(A, B, tile)``: C = A @ B computed tile by tile as in ``matmul_tiled.cu``,
    for square and ragged sizes (M, N, K not multiples of ``tile``), a tile of 1, and a tile
    larger than the matrices. A: (M, K), B: (K, N) -> C: (M, N)."""
    __tracebackhide__ = True
    r = rng(8)
    sizes = [(8, 8, 8, 4), (5, 7, 9, 4), (6, 4, 10, 3), (3, 5, 2, 8), (4, 3, 5, 1),
             (33, 31, 65, 16)]
    for M, N, K, tile in sizes:
        A = r.standard_normal((M, K))
        B = r.standard_normal((K, N))
        case = f"A of shape ({M}, {K}), B of shape ({K}, {N}), tile={tile}"
        A_given, B_given = A.copy(), B.copy()
        got = to_array(call(fn, A_given, B_given, tile, case=case,
                            on_error="slice each tile out of A and B by its range of rows and "
                                     "of columns; a slice past the edge is simply shorter (copy "
                                     "it into a zero tile, as the kernel does)."), fn, case, "C")
        expect_shape(got, (M, N), fn, case, "C", "C has one row per row of A and one column per "
                                                  "column of B: (M, N).")
        expect_close(got, A @ B, fn, case, "C", rtol=1e-9, atol=1e-9, mistakes=[
            (lambda A=A, B=B, t=tile: _last_k_tile_only(A, B, t),
             "C holds only the LAST k-tile's product: each step must ADD its tile product to "
             "the accumulator, not replace what is there."),
            (lambda A=A, B=B, t=tile: A[:, :t] @ B[:t, :],
             "C holds only the FIRST k-tile's product: the loop over k0 must run over all of K, "
             "range(0, K, tile)."),
            (lambda A=A, B=B, t=tile: _inner_tiles_only(A, B, t),
             "the ragged edges are missing: loop with range(0, M, tile) (and likewise for N and "
             "K) so that the last, partial tile is visited too."),
            (lambda A=A, B=B: 2 * (A @ B),
             "C is twice A @ B: is the tile added to C twice (once inside the k-loop, once "
             "after it)?"),
        ])
        expect_unchanged(fn, case, [("A", A, A_given), ("B", B, B_given)],
                         "copy the tiles out of {name} (As[...] = a), never write into {name}.")
    M, N, K, tile = sizes[-1]
    case = f"A of shape ({M}, {K}), B of shape ({K}, {N}), tile={tile}, watching the products"
    _Whole.used_whole = False
    call(fn, r.standard_normal((M, K)).view(_Whole), r.standard_normal((K, N)).view(_Whole), tile,
         case=case)
    if _Whole.used_whole:
        fail(fn, case, "the whole matrices were multiplied (A @ B or np.dot(A, B)): the result "
                       "is right, but that is not the tiled algorithm the kernel runs.",
             "multiply only (tile, tile) tiles, one k-step at a time, and add them up.")
    passed(fn, len(sizes) + 1)


# ======================================================================================
# Arithmetic intensity
# ======================================================================================
def arithmetic_intensity(fn) -> None:
    """Check ``fn(tile_m, tile_n, K, itemsize=4)``: FLOPs per byte loaded from global memory
    when one block computes a ``tile_m x tile_n`` tile of C = A @ B over the whole K, loading
    each element of its strips of A and B once, ``itemsize`` bytes each (a multiply and an add
    are 2 FLOPs)."""
    __tracebackhide__ = True
    cases = [(1, 1, 2048, 4), (32, 32, 2048, 4), (128, 128, 2048, 4), (128, 64, 512, 4),
             (32, 32, 100, 8), (16, 4, 7, 2)]
    for tm, tn, K, itemsize in cases:
        case = f"tile_m={tm}, tile_n={tn}, K={K}, itemsize={itemsize}"
        flops, nbytes = 2 * tm * tn * K, itemsize * (tm + tn) * K
        expected = flops / nbytes
        got = to_number(call(fn, tm, tn, K, itemsize, case=case), fn, case,
                        "the intensity")
        if np.isclose(got, expected, rtol=1e-9):
            continue
        fix = None
        ratio = got / expected if expected else np.nan
        if np.isclose(ratio, 0.5):
            fix = ("a multiply-add is 2 FLOPs: count a multiply AND an add for every product "
                   "term of the tile.")
        elif np.isclose(ratio, itemsize) and itemsize != 1:
            fix = (f"that is FLOPs per ELEMENT loaded; each element is itemsize = {itemsize} "
                   f"bytes: turn the element count into bytes.")
        elif np.isclose(got, 2 * tm * tn * K / (itemsize * tm * tn * K)) or \
                np.isclose(got, 2 * tm * tn * K / (itemsize * 2 * tm * tn * K)):
            fix = ("that counts one load per product, with no re-use. The block loads each "
                   "element of its strips ONCE: how many elements does the strip of A hold, and "
                   "the strip of B?")
        elif np.isclose(got, 2 * tm * tn * K / (itemsize * (tm * tn + K))):
            fix = ("the strips are tile_m x K (of A) and K x tile_n (of B): count the elements "
                   "of each strip, not of the tile.")
        elif np.isclose(got, 1 / expected):
            fix = "that is bytes per FLOP: divide FLOPs by bytes, not bytes by FLOPs."
        fail(fn, case, f"the intensity is {got:.6g} FLOP/byte; expected {flops} FLOPs / "
                       f"{nbytes} bytes = {expected:.6g}.", fix)
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'global_index': [
        ("Try a tiny grid by hand: blocks of 4 threads. Block 0 covers elements 0 to 3, block 1 "
         "elements 4 to 7. Which element does thread 3 of block 2 own? Now write that count with "
         "the three arguments: i = ___ * ___ + ___."),
        ("Use only * and + (no loops, no int()), so that the same line works element by element "
         "on NumPy arrays. Where to look: section 2, the paragraph before exercise 1 (threads are "
         "numbered block by block, from 0)."),
    ],
    'grid_size': [
        ("Write n = q * block + r with 0 <= r < block. How many blocks does r = 0 need, and how "
         "many does r > 0 need? Integer division (//) alone gives q in both cases."),
        ("blocks = (n + ___) // block: the blank is the largest number you can add without pushing "
         "an exact multiple of block up to the next block. Try n = 0, 256 and 257 with block = "
         "256. Where to look: the text of exercise 2 (rounded up, never down; integers only)."),
    ],
    'warp_transactions': [
        ("Turn the 32 byte addresses into the 32 segment numbers they fall in (integer division "
         "by the segment size works on the whole array at once); threads that share a segment "
         "share its transaction."),
        ("Count the different values in that array of segment numbers: NumPy has a function that "
         "returns each value once (np.___); the length of its result is the count. Where to look: "
         "the paragraph above exercise 3 (the segment of an address)."),
    ],
    'tiled_matmul': [
        ("At step k0 the block needs the piece of A in its own rows (from i0, tile of them) and "
         "the columns from k0, and the piece of B in the rows from k0 and its own columns (from "
         "j0). A slice that runs past the matrix is simply shorter: copy it into the top-left "
         "corner of a zero (tile, tile) array, as large as the slice itself is."),
        ("Pseudo-code for one step: As = a zero tile; the top-left of As = the piece of A; the "
         "same for Bs and B; then acc ___= ___ @ ___. Replacing acc instead of adding to it keeps "
         "only the last step. Where to look: the picture above the exercise (tiles (bi, k) of A "
         "and (k, bj) of B, one pair per step) and section 1's description of rung 3."),
    ],
    'arithmetic_intensity': [
        ("FLOPs: the tile holds tile_m x tile_n outputs, each a dot product of length K, and each "
         "product term costs a multiply and an add. Bytes: the strip of A has tile_m rows of K "
         "elements, the strip of B K rows of tile_n, and each element is itemsize bytes."),
        ("flops = ___ x tile_m x tile_n x K (how many FLOPs per product term?); bytes = itemsize x "
         "(elements of A's strip + elements of B's strip); return their ratio. Check: a 1 x 1 "
         "tile, K = 2048, itemsize 4 gives 0.25 FLOP/byte. Where to look: section 2, the "
         "paragraph on arithmetic intensity above exercise 5."),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'global_index': ['block_idx * block_dim', 'block_idx*block_dim', '* block_dim + thread_idx'],
    'grid_size': ['block - 1', 'block-1', 'ceil', '-(-n', '(n + block'],
    'warp_transactions': ['np.unique', 'unique(', 'len(set(', '// segment_bytes'],
    'tiled_matmul': ['acc +=', 'acc += As @ Bs', 'As @ Bs', 'A[i0:i0 + tile'],
    'arithmetic_intensity': ['2 * tile_m * tile_n * K', '2*tile_m', '(tile_m + tile_n) * K',
        'tile_m * K + K * tile_n', 'itemsize * (tile_m'],
}
