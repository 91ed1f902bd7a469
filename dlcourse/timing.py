"""One timing rule for every lesson: warm up, repeat, take the median; synchronize on a GPU.

Introduced in notebook ``00_setup_and_gpu_arrays`` (built there by hand as ``time_it``); used with
CUDA events in the GPU lessons ``08a``, ``08b`` and ``08d``.

    seconds = dl.timeit(lambda: a @ b)                       # CPU or GPU, wall clock
    seconds = dl.timeit(kernel, A, B, cuda_events=True)       # GPU time from CUDA events

GPU calls return before their work is done, so every timed call is followed by
``dl.synchronize()`` (or, with ``cuda_events=True``, timed between two events the GPU records in
its own stream). Warm-up calls are not timed: the first call compiles a kernel or fills a
memory pool. The median of the repeats is robust to the odd slow run of a busy machine.

To compare variants on a CPU (lessons ``00``, ``05``, ``06a``, ``08d``, ``11b``, ``12``, ``13b``,
``14b``, ``16``), ``dl.timing.compare`` times them in turns over several rounds with the BLAS
threads set explicitly, as ``benchmarks/`` does, so a busy spell of a shared machine slows every
variant alike and the figure means the same anywhere:

    t = dl.timing.compare({"loop": f, "batch": g}, threads=1)
    t["batch"].median, t["batch"].low, t["batch"].high        # seconds: median, middle half
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from .backend import require_cupy, synchronize

__all__ = ["timeit", "compare", "Timing"]


def timeit(fn: Callable, *args, repeat: int = 10, warmup: int = 2,
           cuda_events: bool = False) -> float:
    """Median seconds per call of ``fn(*args)``: ``warmup`` untimed calls, then ``repeat`` timed.

    cuda_events=False: wall clock (``time.perf_counter``) around each call, after which
    ``dl.synchronize()`` waits for queued GPU work (a no-op on the CPU).
    cuda_events=True (GPU only): the time between two CUDA events recorded on the current stream
    before and after each call, the GPU's own clock.
    """
    if not callable(fn):
        raise TypeError(f"timeit expects a function to call, got {type(fn).__name__}. "
                        "Wrap an expression in a lambda: dl.timeit(lambda: a @ b).")
    if int(repeat) < 1 or int(warmup) < 0:
        raise ValueError(f"timeit needs repeat >= 1 and warmup >= 0, got repeat={repeat}, "
                         f"warmup={warmup}.")
    for _ in range(int(warmup)):
        fn(*args)
    synchronize()
    if cuda_events:
        cp = require_cupy()
        stream = cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event()

        def once():
            start.record(stream)
            fn(*args)
            end.record(stream)
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) / 1e3      # ms -> s
    else:
        def once():
            t0 = time.perf_counter()
            fn(*args)
            synchronize()
            return time.perf_counter() - t0
    return statistics.median(once() for _ in range(int(repeat)))


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one variant: the median over the rounds, and the spread (``low``,
    ``high``: the first and third quartiles of the rounds, the middle half)."""
    median: float
    low: float
    high: float
    rounds: tuple

    def __str__(self) -> str:
        return f"{self.median * 1e3:.3f} ms ({self.low * 1e3:.3f}-{self.high * 1e3:.3f})"


def compare(variants: dict, rounds: int = 5, repeat: int = 3, warmup: int = 1,
            threads: int = 1) -> dict:
    """Time each of ``variants`` ({name: fn}, fn called with no argument) in turns: in every
    round each variant gets ``dl.timeit(fn, repeat=repeat)`` once, so the rounds interleave the
    variants. Returns {name: Timing}. NumPy's BLAS runs with ``threads`` threads meanwhile
    (threadpoolctl), set explicitly so that the figure does not depend on how many cores the
    machine has or how busy they are; ``warmup`` untimed calls of each variant come first."""
    from threadpoolctl import threadpool_limits

    if int(rounds) < 1 or int(threads) < 1:
        raise ValueError(f"compare needs rounds >= 1 and threads >= 1, got rounds={rounds}, "
                         f"threads={threads}.")
    times = {name: [] for name in variants}
    with threadpool_limits(limits=int(threads), user_api="blas"):
        for fn in variants.values():
            for _ in range(int(warmup)):
                fn()
        for _ in range(int(rounds)):
            for name, fn in variants.items():
                times[name].append(timeit(fn, repeat=repeat, warmup=0))
    out = {}
    for name, t in times.items():
        q = statistics.quantiles(t, n=4, method="inclusive") if len(t) > 1 else [t[0]] * 3
        out[name] = Timing(statistics.median(t), q[0], q[2], tuple(t))
    return out
