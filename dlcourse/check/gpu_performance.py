"""Checks for the GPU lessons 08c-08d: bank conflicts and occupancy, fusion and launches.

Like the checks of 08a-08b (``cuda.py``), every exercise here is a small NumPy function that
reasons about a kernel without a GPU; each check runs it on several cases and either prints one
line saying that all pass, or raises :class:`ExerciseError` naming the case, what was expected,
what your function gave and, for the common mistakes, the likely fix::

    dl.check.occupancy(occupancy)

======  ==========================  ==========================================================
lesson  check                       your function
======  ==========================  ==========================================================
08c     :func:`bank_conflicts`      ``(addresses, n_banks=32, bank_bytes=4) -> int``: the
                                    passes one warp's shared-memory request takes
08c     :func:`occupancy`           ``(threads_per_block, registers_per_thread,
                                    shared_bytes_per_block, sm) -> (blocks, occupancy)``: the
                                    blocks of a kernel one SM holds at once
08d     :func:`bias_relu_backward`  ``(dout, y) -> (dx, db)``: the fused backward of
                                    ``y = max(x + b, 0)`` that ``bias_relu.cu`` computes
08d     :func:`launches_per_step`   ``(layers, per_call, loss, update) -> int``: the kernel
                                    launches of one training step of a Sequential
======  ==========================  ==========================================================

(08c: ``08c_bank_conflicts_occupancy_and_tensor_cores``; 08d: ``08d_fusion_and_graphs``.)

While a check runs the learner's function the library is closed (the fused kernel, its NumPy
reference and the rest: ``seal.py``). The shared machinery
(``call``, ``fail``, ``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import math

import numpy as np

from .harness import (call, expect_close, expect_shape, expect_tuple, expect_unchanged, fail,
                      passed, rng, to_array, to_integer, to_number)

__all__ = ["bank_conflicts", "occupancy", "bias_relu_backward", "launches_per_step"]



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
        got = to_integer(call(fn, given, n_banks, bank_bytes, case=case), fn, case,
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
        got = expect_tuple(call(fn, threads, registers, shared, sm_given, case=case),
                           2, fn, case, "blocks, occupancy")
        if sm_given != sm:
            fail(fn, case, "your function changed the dict sm it was given.",
                 "read the limits from sm; never write into it.")
        got_blocks = to_integer(got[0], fn, case, "the number of blocks",
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


# ======================================================================================
# Fusion: the bias-ReLU backward in one pass (lesson 08d)
# ======================================================================================
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
        got = expect_tuple(call(fn, dout_given, y_given, case=case), 2, fn, case, "dx, db")
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
        got = to_integer(call(fn, *given, loss, update, case=case,
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

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'bank_conflicts': ['% n_banks', 'np.unique', 'np.bincount', 'bincount', '// bank_bytes'],
    'occupancy': ['min(', 'the minimum of', 'the smallest of the four', '// threads_per_block'],
    'bias_relu_backward': ['y > 0', '(y > 0)', 'dout * (y', 'sum(axis=0)', 'axis=0', 'axis 0',
        'sum over the rows', 'sum over the batch'],
    'launches_per_step': ['sum(per_call', 'per_call[name]', 'backward - 1', 'minus one for'],
}
