"""The lesson 08c exercise checks (08c_bank_conflicts_occupancy_and_tensor_cores): a right
answer passes, and each common wrong answer gets the message that names its mistake.

Each wrong answer is a small function named after its mistake, written as a learner would."""

import numpy as np

import dlcourse.check as C
from support.expect import expect_fail


# ---- bank_conflicts
def bc_good(addresses, n_banks=32, bank_bytes=4):
    words = np.unique(np.asarray(addresses) // bank_bytes)
    return int(np.bincount(words % n_banks, minlength=n_banks).max())


def bc_loop(addresses, n_banks=32, bank_bytes=4):    # the same, with a dict of sets
    banks = {}
    for a in addresses:
        w = int(a) // bank_bytes
        banks.setdefault(w % n_banks, set()).add(w)
    return max(len(ws) for ws in banks.values())


def bc_no_broadcast(addresses, n_banks=32, bank_bytes=4):
    return int(np.bincount(np.asarray(addresses) // bank_bytes % n_banks).max())


def bc_bytes_as_words(addresses, n_banks=32, bank_bytes=4):
    words = np.unique(np.asarray(addresses))
    return int(np.bincount(words % n_banks).max())


def bc_quotient(addresses, n_banks=32, bank_bytes=4):
    words = np.unique(np.asarray(addresses) // bank_bytes)
    return int(np.bincount(words // n_banks).max())


def bc_fixed_32(addresses, n_banks=32, bank_bytes=4):
    return bc_good(addresses, 32, bank_bytes)


def bc_fixed_4(addresses, n_banks=32, bank_bytes=4):
    return bc_good(addresses, n_banks, 4)


def bc_mod_16(addresses, n_banks=32, bank_bytes=4):
    return bc_good(addresses, 16, bank_bytes)


def bc_extra_passes(addresses, n_banks=32, bank_bytes=4):
    return bc_good(addresses, n_banks, bank_bytes) - 1


def bc_fewest(addresses, n_banks=32, bank_bytes=4):
    return -(-len(np.unique(np.asarray(addresses) // bank_bytes)) // n_banks)


def bc_sorts(addresses, n_banks=32, bank_bytes=4):
    addresses.sort()
    return bc_good(addresses, n_banks, bank_bytes)


def test_bank_conflicts():
    C.bank_conflicts(bc_good)
    C.bank_conflicts(bc_loop)
    expect_fail(C.bank_conflicts, bc_no_broadcast, "byte 4096", "THREADS", "broadcast")
    expect_fail(C.bank_conflicts, bc_bytes_as_words, "4 * t", "BYTES")
    expect_fail(C.bank_conflicts, bc_quotient, "4 * t", "REMAINDER")
    expect_fail(C.bank_conflicts, bc_fixed_32, "n_banks=16", "n_banks argument")
    expect_fail(C.bank_conflicts, bc_fixed_4, "bank_bytes=8", "bank_bytes argument")
    expect_fail(C.bank_conflicts, bc_mod_16, "4 * t", "not modulo 16")
    expect_fail(C.bank_conflicts, bc_extra_passes, "4 * t", "not the extra ones")
    expect_fail(C.bank_conflicts, bc_fewest, "every other float", "spread evenly")
    expect_fail(C.bank_conflicts, bc_sorts, "changed its input addresses in place")
    expect_fail(C.bank_conflicts, lambda a, n_banks=32, bank_bytes=4: bc_good(a) / 1.5,
                "a fraction")


# ---- occupancy
def oc_good(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    blocks = min(sm["threads_per_sm"] // threads_per_block,
                 sm["blocks_per_sm"],
                 sm["registers_per_sm"] // (registers_per_thread * threads_per_block),
                 sm["shared_memory_per_sm"]
                 // (shared_bytes_per_block + sm["reserved_shared_memory_per_block"]))
    return blocks, blocks * threads_per_block / sm["threads_per_sm"]


def _without(name):
    def occupancy(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
        limits = {"threads": sm["threads_per_sm"] // threads_per_block,
                  "blocks": sm["blocks_per_sm"],
                  "registers": sm["registers_per_sm"] // (registers_per_thread * threads_per_block),
                  "shared": sm["shared_memory_per_sm"]
                            // (shared_bytes_per_block + sm["reserved_shared_memory_per_block"])}
        limits.pop(name)
        blocks = min(limits.values())
        return blocks, blocks * threads_per_block / sm["threads_per_sm"]
    occupancy.__name__ = f"oc_without_{name}"
    return occupancy


def oc_max(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    blocks = max(sm["threads_per_sm"] // threads_per_block,
                 sm["blocks_per_sm"],
                 sm["registers_per_sm"] // (registers_per_thread * threads_per_block),
                 sm["shared_memory_per_sm"]
                 // (shared_bytes_per_block + sm["reserved_shared_memory_per_block"]))
    return blocks, blocks * threads_per_block / sm["threads_per_sm"]


def oc_no_reserve(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    shared = (sm["shared_memory_per_sm"] // shared_bytes_per_block if shared_bytes_per_block
              else sm["blocks_per_sm"])
    blocks = min(sm["threads_per_sm"] // threads_per_block, sm["blocks_per_sm"],
                 sm["registers_per_sm"] // (registers_per_thread * threads_per_block), shared)
    return blocks, blocks * threads_per_block / sm["threads_per_sm"]


H100 = {"threads_per_sm": 2048, "blocks_per_sm": 32, "registers_per_sm": 65536,
        "shared_memory_per_sm": 228 * 1024, "reserved_shared_memory_per_block": 1024}


def oc_h100_always(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    return oc_good(threads_per_block, registers_per_thread, shared_bytes_per_block, H100)


def oc_percent(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    blocks, occ = oc_good(threads_per_block, registers_per_thread, shared_bytes_per_block, sm)
    return blocks, 100 * occ


def oc_block_slots(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    blocks, _ = oc_good(threads_per_block, registers_per_thread, shared_bytes_per_block, sm)
    return blocks, blocks / sm["blocks_per_sm"]


def oc_one_block(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    blocks, _ = oc_good(threads_per_block, registers_per_thread, shared_bytes_per_block, sm)
    return blocks, threads_per_block / sm["threads_per_sm"]


def oc_float_blocks(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    blocks = min(sm["threads_per_sm"] / threads_per_block, sm["blocks_per_sm"],
                 sm["registers_per_sm"] / (registers_per_thread * threads_per_block),
                 sm["shared_memory_per_sm"]
                 / (shared_bytes_per_block + sm["reserved_shared_memory_per_block"]))
    return blocks, blocks * threads_per_block / sm["threads_per_sm"]


def oc_writes_sm(threads_per_block, registers_per_thread, shared_bytes_per_block, sm):
    sm["shared_memory_per_sm"] -= sm["reserved_shared_memory_per_block"]
    sm["shared_memory_per_sm"] += sm["reserved_shared_memory_per_block"]
    sm["used"] = True
    return oc_good(threads_per_block, registers_per_thread, shared_bytes_per_block, sm)


def test_occupancy():
    C.occupancy(oc_good)
    expect_fail(C.occupancy, oc_max, "LARGEST", "smallest")
    expect_fail(C.occupancy, _without("blocks"), "threads_per_block=32,", "blocks_per_sm blocks")
    expect_fail(C.occupancy, _without("registers"), "registers are missing")
    expect_fail(C.occupancy, _without("shared"), "shared memory is missing")
    expect_fail(C.occupancy, _without("threads"), "threads are missing")
    expect_fail(C.occupancy, oc_no_reserve, "shared_bytes_per_block=58368", "reserved")
    expect_fail(C.occupancy, oc_h100_always, "RTX 30", "an H100's limits")
    expect_fail(C.occupancy, oc_percent, "not as a percentage")
    expect_fail(C.occupancy, oc_block_slots, "block slots")
    expect_fail(C.occupancy, oc_one_block, "one block's threads")
    expect_fail(C.occupancy, oc_float_blocks, "a fraction")
    expect_fail(C.occupancy, oc_writes_sm, "changed the dict sm")
