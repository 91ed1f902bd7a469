"""One timing rule for every lesson: warm up, repeat, take the median; synchronize on a GPU.

Introduced in notebook ``00_setup_and_gpu_arrays`` (built there by hand as ``time_it``); used in
``05_gpu_batching``, ``06_convolution`` and the GPU lessons ``08a``, ``08b`` and ``08d``.

    seconds = dl.timeit(lambda: a @ b)                       # CPU or GPU, wall clock
    seconds = dl.timeit(kernel, A, B, cuda_events=True)       # GPU time from CUDA events

GPU calls return before their work is done, so every timed call is followed by
``dl.synchronize()`` (or, with ``cuda_events=True``, timed between two events the GPU records in
its own stream). Warm-up calls are not timed: the first call compiles a kernel or fills a
memory pool. The median of the repeats is robust to the odd slow run of a busy machine.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

from .backend import require_cupy, synchronize

__all__ = ["timeit"]


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
