"""Checks for the GPU lessons 08a-08d: the index arithmetic and memory counting behind kernels.

Used in notebooks ``08a_gpu_execution_and_memory`` (``global_index``, ``grid_size``,
``warp_transactions``), ``08b_tiling_and_roofline`` (``tiled_matmul``,
``arithmetic_intensity``), ``08c_bank_conflicts_occupancy_and_tensor_cores``
(``bank_conflicts``, ``occupancy``) and ``08d_fusion_and_graphs`` (``bias_relu_backward``).
Every exercise there is a small NumPy function that reasons about a kernel without a GPU; each
check runs it on several cases and either prints one line saying that all pass, or raises
:class:`ExerciseError` naming the case, what was expected, what your function gave and, for the
common mistakes, the likely fix::

    dl.check.grid_size(grid_size)

- :func:`global_index` checks ``global_index(block_idx, block_dim, thread_idx)``: the element
  a thread owns along one axis;
- :func:`grid_size` checks ``grid_size(n, block) -> int``: the blocks needed for n elements;
- :func:`warp_transactions` checks ``warp_transactions(addresses, segment_bytes=128) -> int``:
  the memory segments one warp's 32 addresses fall into;
- :func:`tiled_matmul` checks ``tiled_matmul(A, B, tile) -> C``: matmul_tiled.cu in NumPy;
- :func:`arithmetic_intensity` checks ``arithmetic_intensity(tile_m, tile_n, K, itemsize=4)``:
  FLOPs per byte loaded from global memory;
- :func:`bank_conflicts` checks ``bank_conflicts(addresses, n_banks=32, bank_bytes=4) -> int``:
  the passes one warp's shared-memory request takes (lesson 08c);
- :func:`occupancy` checks ``occupancy(threads_per_block, registers_per_thread,
  shared_bytes_per_block, sm) -> (blocks, occupancy)``: the blocks one SM holds (lesson 08c);
- :func:`bias_relu_backward` checks ``bias_relu_backward(dout, y) -> (dx, db)``: the fused
  backward of ``y = max(x + b, 0)`` that ``bias_relu.cu`` computes in one pass (lesson 08d).
- :func:`launches_per_step` checks ``launches_per_step(layers, per_call, loss, update) -> int``:
  the kernel launches of one training step of a Sequential (lesson 08d).

While a check runs the learner's function, the library's own version of what it builds (a
kernel's NumPy reference, the launch-geometry helpers) is refused (``REFUSE`` below). The
shared machinery (``call``, ``fail``, ``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .harness import (call, expect_close, expect_shape, expect_tuple, expect_unchanged, fail,
                      passed, rng, to_array, to_number)

__all__ = ["global_index", "grid_size", "warp_transactions", "tiled_matmul",
           "arithmetic_intensity", "bank_conflicts", "occupancy", "bias_relu_backward",
           "launches_per_step"]

# The library's own versions of what each exercise builds, refused while the learner's function
# runs (harness.refusing). Exercises with nothing in the library to call (global_index,
# warp_transactions, arithmetic_intensity, bank_conflicts, occupancy) refuse nothing.
REFUSE: dict[str, list[str]] = {
    "grid_size": ["dlcourse.kernels._build.ceil_div", "dlcourse.kernels._build.launch_config",
                  "dlcourse.shapes.output_size"],
    "tiled_matmul": ["dlcourse.kernels.reference.matmul", "dlcourse.kernels.reference.matmul_loops",
                     "dlcourse.kernels.matmul.matmul_tiled", "dlcourse.ops.matmul"],
    "bias_relu_backward": ["dlcourse.kernels.reference.bias_relu_backward_ref",
                           "dlcourse.kernels.reference.bias_relu_rows_backward_ref",
                           "dlcourse.kernels.fused.bias_relu_backward",
                           "dlcourse.kernels.fused.bias_relu_rows_backward",
                           "dlcourse.fusion.bias_relu_backward", "dlcourse.layers.ReLU.backward"],
    "launches_per_step": [],     # the library has no launch counter: nothing to refuse
}


def _integer(value, fn, case: str, what: str, fix: str | None = None) -> int:
    """A returned whole number as an int; fail on None, arrays, or a float with a fraction."""
    __tracebackhide__ = True
    if value is None:
        fail(fn, case, f"{what} is None.", "did your function `return` it?")
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        fail(fn, case, f"{what} should be one whole number, got {type(value).__name__} "
                       f"{value!r:.80}.", fix)
    if isinstance(value, numbers.Integral):
        return int(value)
    if float(value).is_integer():
        return int(value)
    fail(fn, case, f"{what} is {value!r}, a fraction; it should be a whole number.",
         fix or "use integer arithmetic (//), not /.")


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
        got = _integer(call(fn, b, d, t, case=case, refuse=()), fn, case, "the index")
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
        got = to_array(call(fn, bi, d, ti, case=case, refuse=(),
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
        got = _integer(call(fn, n, block, case=case, refuse=REFUSE["grid_size"]), fn, case,
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
        got = _integer(call(fn, given, seg, case=case, refuse=()), fn, case,
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
                            refuse=REFUSE["tiled_matmul"],
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
         case=case, refuse=REFUSE["tiled_matmul"])
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
        got = to_number(call(fn, tm, tn, K, itemsize, case=case, refuse=()), fn, case,
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


# ======================================================================================
# Bank conflicts and occupancy (lesson 08c)
# ======================================================================================
def _bank_passes(addresses, n_banks, bank_bytes):
    """The passes of one shared-memory request: the most different words one bank serves."""
    __tracebackhide__ = True
    words = np.unique(np.asarray(addresses) // bank_bytes)
    return int(np.bincount(words % n_banks, minlength=n_banks).max())


def _most_per_key(values, keys):
    """The most different ``values`` that share one key (a wrong way of naming the bank)."""
    __tracebackhide__ = True
    groups: dict[int, set] = {}
    for v, k in zip(np.asarray(values).tolist(), np.asarray(keys).tolist()):
        groups.setdefault(k, set()).add(v)
    return max(len(g) for g in groups.values())


def bank_conflicts(fn) -> None:
    """Check ``fn(addresses, n_banks=32, bank_bytes=4)``: the passes one warp's shared-memory
    request takes (the degree of its bank conflict). ``addresses``: the byte addresses the
    warp's threads read in one instruction (one per thread; several per thread for a wider
    load such as a float4). Word ``w = address // bank_bytes`` lives in bank ``w % n_banks``;
    one bank delivers one word per pass, a word wanted by several threads is delivered once (a
    broadcast), so the request takes as many passes as the most different words in one bank."""
    __tracebackhide__ = True
    lane = np.arange(32)
    half = np.where(lane < 16, 0, 128)
    float4_b = np.array([4 * ((t % 16) * 8 + j) for t in range(32) for j in range(4)])
    cases = [   # (case, byte addresses, n_banks, bank_bytes)
        ("thread t reads float t (4 * t)", 4 * lane, 32, 4),
        ("every other float (8 * t)", 8 * lane, 32, 4),
        ("down a column of a 32 x 32 float tile (128 * t)", 128 * lane, 32, 4),
        ("down a column of the same tile padded to 33 floats a row (132 * t)", 132 * lane, 32, 4),
        ("all 32 threads read the float at byte 4096", np.full(32, 4096), 32, 4),
        ("threads 0-15 read the float at byte 0, threads 16-31 the one at byte 128", half, 32, 4),
        ("a float4 per thread, 4 floats each, thread t starting at float 8 * (t % 16) "
         "(128 addresses)", float4_b, 32, 4),
        ("floats at stride 3 (12 * t)", 12 * lane, 32, 4),
        ("thread t reads float t, on a shared memory of 16 banks (n_banks=16)", 4 * lane, 16, 4),
        ("thread t reads double t (8 * t), with banks 8 bytes wide (bank_bytes=8)", 8 * lane, 32,
         8),
    ]
    for case, addresses, n_banks, bank_bytes in cases:
        case = f"addresses = {case}, n_banks={n_banks}, bank_bytes={bank_bytes}"
        expected = _bank_passes(addresses, n_banks, bank_bytes)
        given = addresses.astype(np.int64)
        got = _integer(call(fn, given, n_banks, bank_bytes, case=case, refuse=()), fn, case,
                       "the number of passes")
        expect_unchanged(fn, case, [("addresses", addresses, given)])
        if got == expected:
            continue
        words = addresses // bank_bytes
        mistakes = [
            (_most_per_key(np.arange(len(words)), words % n_banks),
             "that counts the THREADS (addresses) that fall in one bank. Threads that read the "
             "same word share it: a bank delivers each different word once (a broadcast), so "
             "count the different words in a bank, each once."),
            (_most_per_key(addresses, addresses % n_banks),
             "the addresses are in BYTES, and a bank serves a word of bank_bytes bytes: turn "
             "each address into the number of its word first, then find that word's bank."),
            (_most_per_key(words, words // n_banks),
             "that groups the words by the QUOTIENT of the word number by n_banks (a row of "
             "banks). Word n_banks lands in bank 0 again: the bank is the REMAINDER."),
            (_bank_passes(addresses, 32, bank_bytes),
             "use the n_banks argument, not a fixed 32."),
            (_bank_passes(addresses, n_banks, 4), "use the bank_bytes argument, not a fixed 4."),
            (-(-len(np.unique(words)) // n_banks),
             "that is the fewest passes these words would take spread evenly over the banks. "
             "The banks they actually fall in decide: the bank that must deliver the most "
             "different words sets the count."),
            (len(np.unique(words % n_banks)),
             "that counts the banks the warp touches. What matters is the busiest bank: how "
             "many different words must it deliver, one per pass?"),
            (expected - 1, "a request without any conflict still takes one pass: count the "
                           "passes, not the extra ones a conflict adds."),
        ] + [(_bank_passes(addresses, m, bank_bytes),
              f"the bank of a word is its number modulo n_banks = {n_banks}, not modulo {m}.")
             for m in (4, 8, 16, 64, 128) if m != n_banks]
        fix = next((text for value, text in mistakes if value == got and value != expected), None)
        fail(fn, case, f"the request takes {expected} pass(es); your function says {got}.", fix)
    passed(fn, len(cases))


# Published per-SM limits (CUDA C++ Programming Guide, "Features and Technical Specifications"):
# compute capability 9.0 (H100) and 8.6 (an RTX 30-series GPU), under the keys the lesson uses.
_SM_90 = {"threads_per_sm": 2048, "blocks_per_sm": 32, "registers_per_sm": 65536,
          "shared_memory_per_sm": 228 * 1024, "reserved_shared_memory_per_block": 1024}
_SM_86 = {"threads_per_sm": 1536, "blocks_per_sm": 16, "registers_per_sm": 65536,
          "shared_memory_per_sm": 100 * 1024, "reserved_shared_memory_per_block": 1024}


def _occupancy_limits(threads, registers, shared, sm, reserve=True):
    """Each resource's limit on the resident blocks (the reference's terms, and its mistakes)."""
    __tracebackhide__ = True
    per_block = shared + (sm["reserved_shared_memory_per_block"] if reserve else 0)
    return {"threads": sm["threads_per_sm"] // threads,
            "blocks": sm["blocks_per_sm"],
            "registers": sm["registers_per_sm"] // (registers * threads),
            "shared memory": sm["shared_memory_per_sm"] // per_block if per_block else math.inf}


def occupancy(fn) -> None:
    """Check ``fn(threads_per_block, registers_per_thread, shared_bytes_per_block, sm) ->
    (blocks, occupancy)``: the blocks of a kernel one SM holds at once (each of its limits --
    threads, blocks, registers, shared memory with the per-block reservation -- caps them) and
    the occupancy, resident threads over the SM's ``threads_per_sm``. ``sm`` is a dict of the
    SM's limits, as in the lesson; checked with an H100's (compute capability 9.0) and an RTX
    30-series GPU's (8.6). The register allocator's rounding (256 registers per warp) is not
    modelled: every case uses a multiple of 8 registers per thread, where it changes nothing."""
    __tracebackhide__ = True
    cases = [(256, 32, 0, "H100"), (1024, 16, 0, "H100"), (1024, 64, 8192, "H100"),
             (1024, 72, 8192, "H100"), (256, 128, 8192, "H100"), (32, 16, 0, "H100"),
             (128, 32, 57 * 1024, "H100"), (512, 40, 16384, "H100"),
             (256, 48, 20 * 1024, "RTX 30"), (64, 32, 0, "RTX 30")]
    for threads, registers, shared, gpu in cases:
        sm = _SM_90 if gpu == "H100" else _SM_86
        case = (f"threads_per_block={threads}, registers_per_thread={registers}, "
                f"shared_bytes_per_block={shared}, sm = the limits of an {gpu} "
                f"({', '.join(f'{k}={v}' for k, v in sm.items())})")
        limits = _occupancy_limits(threads, registers, shared, sm)
        blocks = min(limits.values())
        expected = blocks * threads / sm["threads_per_sm"]
        sm_given = dict(sm)
        got = expect_tuple(call(fn, threads, registers, shared, sm_given, case=case, refuse=()),
                           2, fn, case, "blocks, occupancy")
        if sm_given != sm:
            fail(fn, case, "your function changed the dict sm it was given.",
                 "read the limits from sm; never write into it.")
        got_blocks = _integer(got[0], fn, case, "the number of blocks",
                              "whole blocks only: use integer division (//).")
        if got_blocks != blocks:
            mistakes = [] if gpu == "H100" else [
                (min(_occupancy_limits(threads, registers, shared, _SM_90).values()),
                 "those are an H100's limits: read every limit from the sm argument, which here "
                 "describes another GPU.")]
            mistakes.append((max(limits.values()),
                             "that is the LARGEST of the limits. Every limit must hold at once, "
                             "so the resource that runs out first decides: take the smallest."))
            for name, text in (
                    ("blocks", "the SM also holds at most blocks_per_sm blocks, however small "
                               "they are: that limit is missing."),
                    ("registers", "the registers are missing: a block needs registers_per_thread "
                                  "for each of its threads, out of registers_per_sm."),
                    ("shared memory", "the shared memory is missing: each block takes its "
                                      "shared_bytes_per_block out of shared_memory_per_sm."),
                    ("threads", "the threads are missing: an SM holds at most threads_per_sm "
                                "threads, so at most that many over threads_per_block blocks.")):
                mistakes.append((min(v for k, v in limits.items() if k != name), text))
            mistakes.append((min(_occupancy_limits(threads, registers, shared, sm,
                                                   reserve=False).values()),
                             "each block also takes reserved_shared_memory_per_block (1 KB) of "
                             "shared memory for the system, on top of its own: add it to the "
                             "block's shared memory before dividing."))
            fix = next((text for value, text in mistakes if value == got_blocks), None)
            fail(fn, case, f"{blocks} block(s) fit on one SM; your function says {got_blocks}. "
                           f"(The limits: {', '.join(f'{k} {v}' for k, v in limits.items())}.)",
                 fix)
        got_occ = to_number(got[1], fn, case, "the occupancy")
        if np.isclose(got_occ, expected, rtol=1e-9, atol=1e-12):
            continue
        fix = None
        if np.isclose(got_occ, 100 * expected) and expected:
            fix = "return the occupancy as a fraction between 0 and 1, not as a percentage."
        elif np.isclose(got_occ, blocks / sm["blocks_per_sm"]):
            fix = ("that is the share of the SM's block slots. Occupancy counts THREADS (warps): "
                   "the resident blocks' threads over threads_per_sm.")
        elif np.isclose(got_occ, threads / sm["threads_per_sm"]):
            fix = ("that is one block's threads over threads_per_sm; all the resident blocks' "
                   "threads count.")
        elif np.isclose(got_occ, blocks * threads / _SM_90["threads_per_sm"]):
            fix = "divide by the threads_per_sm of the sm argument, not an H100's 2048."
        fail(fn, case, f"the occupancy is {expected:.6g} ({blocks} block(s) x {threads} threads "
                       f"/ {sm['threads_per_sm']}); your function says {got_occ:.6g}.", fix)
    passed(fn, len(cases))


def bias_relu_backward(fn) -> None:
    """Check ``fn(dout, y) -> (dx, db)``: the backward of ``y = max(x + b, 0)`` computed from
    its output y alone; dout, y: (N, F), dx: (N, F), db: (F,)."""
    __tracebackhide__ = True
    r = rng(16)
    y0 = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 0.5]])
    cases = [("dout = [[1, 2, 3], [4, 5, 6]], y = [[0, 1.5, 0], [2, 0, 0.5]] (note the zeros in y)",
              np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), y0),
             ("dout, y of shape (6, 4), random (y >= 0, as a ReLU gives it)",
              r.standard_normal((6, 4)), np.maximum(r.standard_normal((6, 4)), 0)),
             ("dout, y of shape (1, 5): a batch of one", r.standard_normal((1, 5)),
              np.maximum(r.standard_normal((1, 5)), 0))]
    for case, dout, y in cases:
        dx_ref = dout * (y > 0)
        dout_given, y_given = dout.copy(), y.copy()
        got = expect_tuple(call(fn, dout_given, y_given, case=case,
                                refuse=REFUSE["bias_relu_backward"]), 2, fn, case, "dx, db")
        dx, db = (to_array(g, fn, case, w) for g, w in zip(got, ("dx", "db")))
        expect_shape(dx, dout.shape, fn, case, "dx", "dx has the shape of dout, (N, F).")
        expect_close(dx, dx_ref, fn, case, "dx", rtol=1e-12, atol=1e-12, mistakes=[
            (dout * (dout > 0), "the mask must come from the OUTPUT y (where the ReLU let the "
                                "signal through), not from dout."),
            (dout * (y >= 0), "where y == 0 the ReLU was off: use y > 0, not y >= 0."),
            (dout * y, "where the ReLU was on, the gradient passes through UNCHANGED (its "
                       "local derivative is 1 there): scale dout by 0 or 1, not by the value y."),
        ])
        expect_shape(db, dout.shape[1:], fn, case, "db",
                     "db has one number per feature, (F,): along which axis was the bias "
                     "repeated?")
        expect_close(db, dx_ref.sum(axis=0), fn, case, "db", rtol=1e-12, atol=1e-12, mistakes=[
            (dout.sum(axis=0), "db sums the MASKED gradient dx, not dout: the bias gets no "
                               "gradient where the ReLU was off."),
            (dx_ref.mean(axis=0), "the bias is added to every row, so its gradient is the SUM over "
                                  "the batch, not the mean."),
        ])
        expect_unchanged(fn, case, [("dout", dout, dout_given), ("y", y, y_given)],
                         "return new arrays: zeroing dout in place changes the gradient the "
                         "next layer handed back.")
    passed(fn, len(cases))


# ======================================================================================
# Launches per training step (lesson 08d)
# ======================================================================================
# Launches of one call on the GPU, per kind of layer, counted on the emulated GPU
# (tests/test_check_cnn.py counts them again): forward, backward, how many of the backward's
# launches compute dL/dx, and the layer's parameter arrays.
GPU_LAUNCHES: dict[str, dict[str, int]] = {
    "Linear": dict(forward=2, backward=3, dx=1, params=2),
    "ReLU": dict(forward=1, backward=2, dx=2, params=0),
    "Conv2d": dict(forward=3, backward=4, dx=2, params=2),
    "MaxPool2d": dict(forward=1, backward=1, dx=1, params=0),
    "Flatten": dict(forward=0, backward=0, dx=0, params=0),
    "LinearReLU": dict(forward=2, backward=4, dx=1, params=2),
    "Conv2dReLU": dict(forward=3, backward=5, dx=2, params=2),
    "Identity": dict(forward=0, backward=0, dx=0, params=0),
}


def _step_launches(layers, per_call, loss, update, *, backward="first", forward=True,
                   update_per="array", with_loss=True):
    """The launches of one training step, counted right (the defaults) or with one of the
    typical mistakes: ``backward`` "first" (the right rule: the first layer with parameters
    computes no dL/dx and the layers before it do not run), "none", "all" (every layer with its
    dL/dx), "before" (the first layer with parameters skips dL/dx, the layers before it run),
    "zero" (layer 0 skips dL/dx, whatever it is); ``update_per`` "array", "layer" (one update
    per layer with parameters), "every" (per layer), "none"."""
    __tracebackhide__ = True
    costs = [per_call[name] for name in layers]
    first = next((i for i, c in enumerate(costs) if c["params"]), 0)
    n = sum(c["forward"] for c in costs) if forward else 0
    n += loss if with_loss else 0
    if backward == "first":
        n += sum(c["backward"] for c in costs[first:]) - costs[first]["dx"]
    elif backward == "all":
        n += sum(c["backward"] for c in costs)
    elif backward == "before":
        n += sum(c["backward"] for c in costs) - costs[first]["dx"]
    elif backward == "zero":
        n += sum(c["backward"] for c in costs) - costs[0]["dx"]
    n += update * {"array": sum(c["params"] for c in costs),
                   "layer": sum(bool(c["params"]) for c in costs),
                   "every": len(costs), "none": 0}[update_per]
    return n


def launches_per_step(fn) -> None:
    """Check ``fn(layers, per_call, loss, update)`` -> the kernel launches of one training step
    (forward, loss, ``backward(..., input_grad=False)``, optimizer update) of a Sequential made
    of ``layers`` (names, first to last), where ``per_call`` gives for each name the launches of one call
    (``forward``, ``backward``, how many of the backward's compute ``dx``, and the layer's
    ``params`` arrays), ``loss`` the loss's launches and ``update`` the launches per parameter
    array. Cases: the lesson's MLP and CNN (plain and fused) with the GPU's counts, and made-up
    counts that tell each mistake apart."""
    __tracebackhide__ = True
    mlp = ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    cnn = ["Conv2d", "ReLU", "MaxPool2d", "Conv2d", "ReLU", "MaxPool2d", "Flatten", "Linear"]
    fused = ["Conv2dReLU", "Identity", "MaxPool2d", "Conv2dReLU", "Identity", "MaxPool2d",
             "Flatten", "Linear"]
    made_up = {"Dropout": dict(forward=3, backward=1, dx=1, params=0),
               "Linear": dict(forward=2, backward=5, dx=3, params=2),
               "Norm": dict(forward=7, backward=11, dx=4, params=3),
               "ReLU": dict(forward=1, backward=2, dx=2, params=0)}
    cases = [
        ("the MLP 784-512-512-10 of section 4, SGD's fused update (1 launch per array)",
         mlp, GPU_LAUNCHES, 2, 1),
        ("the same MLP, SGD's update as array code (4 launches per array)", mlp,
         GPU_LAUNCHES, 2, 4),
        ("dl.CNN, SGD's fused update", cnn, GPU_LAUNCHES, 2, 1),
        ("dl.fuse(dl.CNN()), SGD's fused update", fused, GPU_LAUNCHES, 2, 1),
        ("made-up counts: [Dropout, Linear, Norm, ReLU, Linear], loss 5, update 3 per array "
         "(the first layer has no parameters)",
         ["Dropout", "Linear", "Norm", "ReLU", "Linear"], made_up, 5, 3),
        ("made-up counts: [Linear, ReLU, Norm, Linear], loss 2, update 12 per array",
         ["Linear", "ReLU", "Norm", "Linear"], made_up, 2, 12),
    ]
    for case, layers, per_call, loss, update in cases:
        given = [*layers], {k: dict(v) for k, v in per_call.items()}
        got = _integer(call(fn, *given, loss, update, case=case,
                            refuse=REFUSE["launches_per_step"],
                            on_error="layers is a list of names; per_call maps each name to a "
                                     "dict with the keys 'forward', 'backward', 'dx' and "
                                     "'params'."),
                       fn, case, "the launches per step")
        expected = _step_launches(layers, per_call, loss, update)
        if got == expected:
            continue
        count = lambda **kw: _step_launches(layers, per_call, loss, update, **kw)  # noqa: E731
        mistakes = [
            (count(backward="none"), "that leaves the backward pass out: a training step runs "
                                     "every layer forward, the loss, then the layers backward, "
                                     "then the update."),
            (count(backward="all"), "that runs every layer's backward in full; with "
                                    "input_grad=False the first layer with parameters computes "
                                    "no dL/dx, and the layers before it do not run backward at "
                                    "all."),
            (count(backward="before"), "the layers before the first layer with parameters do not "
                                       "run backward at all: nothing below them needs a "
                                       "gradient."),
            (count(backward="zero"), "the dL/dx that is skipped is the one of the first layer "
                                     "WITH PARAMETERS, not simply of layer 0; the layers before "
                                     "it do not run backward at all."),
            (count(update_per="layer"), "the optimizer launches its update once per parameter "
                                        "ARRAY (a Linear has two, W and b), not once per layer."),
            (count(update_per="every"), "only layers with parameters are updated, once per "
                                        "parameter array; a ReLU or a pooling layer has none."),
            (count(update_per="none"), "the optimizer's update is missing: update launches per "
                                       "parameter array."),
            (count(with_loss=False), "the loss is missing: its launches (forward and backward "
                                     "together) are part of the step."),
            (count(forward=False), "the forward pass is missing: every layer runs forward "
                                   "first."),
        ]
        fix = next((why for wrong, why in mistakes if got == wrong), None)
        fail(fn, case, f"it counted {got} launches per step; the step launches {expected}.", fix)
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'launches_per_step': [
        ('a step is four parts: every layer forward, the loss, the layers backward from the last '
         'down, the update. Backward stops at the first layer that has parameters: which part '
         'of its backward does input_grad=False leave out, and which layers never run?'),
        ('pseudo-code: first = the index of the first layer whose params is not 0; n = the sum '
         'of forward over all layers + loss + the sum of backward over the layers from ___ on, '
         'minus the ___ of layer first; then add update times the sum of ___ over all layers. '
         "Where to look: section 4's count of the MLP and the rule above the exercise"),
    ],
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
    'bank_conflicts': [
        ("Two steps. First the bank of every address: which word (of bank_bytes bytes) does it "
         "fall in, and which of the n_banks banks holds that word? Then, bank by bank: how many "
         "DIFFERENT words do the threads want from it? Threads wanting the same word share it."),
        ("Pseudo-code: words = the addresses turned into word numbers; keep each word once "
         "(np.___); bank of each kept word = word ___ n_banks; the answer is the largest count of "
         "words any one bank holds (NumPy can count the values in every bin at once). Check: 32 "
         "threads reading floats at stride 2 take 2 passes. Where to look: section 1, the "
         "paragraph above the exercise."),
    ],
    'occupancy': [
        ("Four limits, one per resource, each a whole number of blocks: how many blocks' threads "
         "fit in threads_per_sm? How many blocks may the SM hold at most? How many blocks' "
         "registers (registers per thread times threads per block, each) fit in registers_per_sm? "
         "How many blocks' shared memory (their own plus the reservation) fit in "
         "shared_memory_per_sm? Every limit must hold at once."),
        ("blocks = the ___ of the four limits (each an integer division //); occupancy = blocks x "
         "threads_per_block / ___. Check: 256 threads, 32 registers, no shared memory on an H100 "
         "gives 8 blocks and occupancy 1.0. Where to look: section 2, the paragraph and the "
         "limits above the exercise."),
    ],
    'bias_relu_backward': [
        ("The graph: t = x + b (b repeated along every row), y = max(t, 0). Local rules: the "
         "derivative of max(t, 0) is 1 where t > 0 and 0 where t < 0; t changes one for one with "
         "x, and with b[f] in every row n. Shapes: dx is (N, F) like dout, db is (F,)."),
        ("dx = dout times a 0/1 mask made from ___ (which of the two inputs says where the ReLU "
         "was on?); db = dx added up over the axis the bias was repeated along (axis ___). Where "
         "to look: the text of exercise 6 and lesson 03's relu_backward."),
    ],
}
