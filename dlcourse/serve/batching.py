"""Dynamic batching for ``dlcourse serve``: requests that arrive within a short window run through
the model as ONE batch, and each caller gets its own rows back.

Introduced in notebook ``12_checkpoint_to_service``. It is lesson 05's batching one level up: a
call has a fixed cost, so one call on 16 samples costs far less than 16 calls on one. A client
with many inputs can batch them itself; sixteen clients with one input each cannot, so the
server does it for them, as inference servers do (Triton's ``max_queue_delay``, TorchServe's
``max_batch_delay``). The price is the wait: a request may wait up to the window for others.

How it runs, in the service's event loop (FastAPI on uvicorn):

1. A request is validated first (a bad one is answered at once and never joins a batch), then
   ``await batcher.submit(x)`` puts its rows and a future on an ``asyncio.Queue`` and waits.
2. One worker task takes the first waiting request, then whatever else is waiting or arrives
   until that first request has waited ``window_s`` (counted from its arrival: requests that
   queued while the model was busy have waited already), up to ``max_batch`` samples (a
   request that would pass the limit starts the next batch).
3. The model runs on the concatenated rows in a thread (:func:`run_rows`), so the event loop
   goes on accepting requests meanwhile; the rows are split back, request by request, in
   order, into the futures.

If the model fails on a batch, each request of it is run again alone, so only a request the
model cannot take gets an error. With a window of 0 the service does not batch at all: each
request calls :func:`run_rows` on its own rows.
"""
from __future__ import annotations

import asyncio

import numpy as np

__all__ = ["Batcher", "run_rows"]


def run_rows(predict, parts):
    """``(answers, calls)``: ``predict`` (rows -> (classes, probs)) run ONCE on the rows of all
    ``parts`` (a list of (n_i, ...) arrays), then split: ``answers[i]`` is part i's
    ``(classes, probs)``, in order, or the exception its rows raised. When the joined call
    fails, each part runs alone (so ``calls`` counts the model calls made)."""
    try:
        classes, probs = predict(parts[0] if len(parts) == 1 else np.concatenate(parts))
    except Exception as err:             # answered to the caller(s), never raised into the loop
        if len(parts) == 1:
            return [err], 1
        answers = [run_rows(predict, [part])[0][0] for part in parts]
        return answers, 1 + len(parts)
    ends = np.cumsum([len(part) for part in parts])
    return [(classes[end - len(part):end], probs[end - len(part):end])
            for part, end in zip(parts, ends)], 1


class Batcher:
    """Collects the requests of one event loop into batches: ``await submit(x)`` returns the
    ``(classes, probs)`` of ``x``'s rows, or the exception the model raised on them.

    ``predict``: rows (N, *shape) -> (classes (N,), probs (N, K)), run in a thread;
    ``window_s``: how long the first request of a batch waits for others (seconds, > 0);
    ``max_batch``: the most samples in one model call (a larger request runs alone).
    ``model_calls`` and ``requests`` count what it did (``/health`` shows them).
    """

    def __init__(self, predict, window_s: float, max_batch: int):
        self.predict, self.window_s, self.max_batch = predict, window_s, max_batch
        self.model_calls = self.requests = 0
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._next = None                # a request taken that did not fit the last batch

    async def submit(self, x):
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done():     # started on first use, in this loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._work())
        future = loop.create_future()
        await self._queue.put((x, future, loop.time()))
        return await future

    async def _collect(self):
        """The next batch: [(x, future, arrival), ...] of at most max_batch samples in all."""
        loop = asyncio.get_running_loop()
        first, self._next = self._next or await self._queue.get(), None
        batch, size = [first], len(first[0])
        deadline = first[2] + self.window_s
        while size < self.max_batch:
            try:
                item = self._queue.get_nowait()          # those that came while the model ran
            except asyncio.QueueEmpty:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), left)
                except asyncio.TimeoutError:
                    break
            if size + len(item[0]) > self.max_batch:
                self._next = item
                break
            batch.append(item)
            size += len(item[0])
        return batch

    async def _work(self):
        while True:
            batch = await self._collect()
            answers, calls = await asyncio.to_thread(run_rows, self.predict,
                                                     [x for x, _, _ in batch])
            self.model_calls += calls
            self.requests += len(batch)
            for (_, future, _), answer in zip(batch, answers):
                if not future.done():                     # its client may have gone
                    future.set_result(answer)
