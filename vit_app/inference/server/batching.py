"""A bounded queue that runs concurrent requests through the model in batches.

Requests wait in an `asyncio.Queue` of fixed size; a full queue is refused at once (the server
answers 503) rather than letting latency grow without bound. One loop takes the first waiting
job, then more until `max_batch` images are gathered or `batch_timeout_ms` has passed, and runs
jobs of the same kind and image shape as one batch on a single model thread. A batch that fails
is retried job by job, so one bad request never fails the others. A job may carry a deadline:
one still waiting when it passes fails with `Expired` instead of running late.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np


POLL_S = 0.0005  # how often a gathering batch looks for more jobs


class QueueFull(Exception):
    """The queue holds `queue_size` requests already; the caller should retry later."""


class ShuttingDown(Exception):
    """The batcher stopped before this job was answered."""


class Expired(Exception):
    """The job's deadline passed before its model call started."""


@dataclasses.dataclass
class _Job:
    kind: str
    inputs: np.ndarray
    future: asyncio.Future
    deadline: float  # time.monotonic() seconds; inf for none
    on_start: Callable[[], None] | None = None
    started: bool = False  # its model call has begun

    @property
    def group(self) -> tuple:
        return self.kind, self.inputs.shape[1:], self.inputs.dtype.str


class Batcher:
    """Batches jobs for `run(kind, inputs) -> {name: array [batch, ...]}` on one thread.

    Args:
        run: the blocking model call; its outputs are split back per job along axis 0.
        max_batch: most inputs (images) per model call; a larger job runs alone.
        batch_timeout_ms: how long the first job of a batch waits for others.
        queue_size: most jobs waiting; `submit` raises `QueueFull` beyond it.
    """

    def __init__(self, run: Callable[[str, np.ndarray], dict], max_batch: int = 16,
                 batch_timeout_ms: float = 5.0, queue_size: int = 64):
        for name, value in (("max_batch", max_batch), ("queue_size", queue_size)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if batch_timeout_ms < 0:
            raise ValueError(f"batch_timeout_ms must be >= 0, got {batch_timeout_ms}")
        self._run, self.max_batch = run, max_batch
        self._timeout_s, self.queue_size = batch_timeout_ms / 1000.0, queue_size
        self._queue: asyncio.Queue | None = None
        self._loop_task: asyncio.Task | None = None
        self._in_flight: list[_Job] = []  # taken from the queue, not answered yet
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="vit-serve-model")
        # Inputs per model call, the latest 1024 (for tests and the load benchmark).
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=1024)

    async def start(self) -> None:
        """Starts the batching loop on the running event loop."""
        self._queue = asyncio.Queue(self.queue_size)
        self._loop_task = asyncio.create_task(self._serve_forever())

    @property
    def running(self) -> bool:
        """Whether the batching loop is alive (it answers queued jobs)."""
        return self._loop_task is not None and not self._loop_task.done()

    async def stop(self) -> None:
        """Stops the loop; jobs waiting or in flight fail with `ShuttingDown`."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        waiting = []
        while self._queue is not None and not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        for job in self._in_flight + waiting:
            if not job.future.done():
                job.future.set_exception(ShuttingDown("the server is shutting down"))
        self._executor.shutdown(wait=True)

    async def submit(self, kind: str, inputs: np.ndarray, deadline: float = float("inf"),
                     on_start: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        """Queues `inputs` ([n, ...]) and waits for their outputs ({name: [n, ...]}).

        Args:
            kind: what `run` is asked to do; only jobs of one kind share a batch.
            inputs: the job's inputs, [n, ...].
            deadline: `time.monotonic()` seconds by which the model call must start.
            on_start: called (on the event loop) when the model call starts.

        Raises:
            QueueFull: `queue_size` jobs are waiting already.
            Expired: the deadline passed while the job waited.
            Exception: what `run` raised for this job alone.
        """
        if self._queue is None:
            raise RuntimeError("the batcher is not started")
        job = _Job(kind, inputs, asyncio.get_running_loop().create_future(), deadline,
                   on_start)
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFull(f"{self.queue_size} requests are waiting already") from None
        if deadline != float("inf"):  # answered when its time is up, not after the model
            await asyncio.wait([job.future], timeout=max(deadline - time.monotonic(), 0.0))
            if not job.future.done() and not job.started:
                job.future.set_exception(Expired())
        return await job.future

    async def _serve_forever(self) -> None:
        while True:
            jobs = await self._gather()
            groups: dict[tuple, list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.group, []).append(job)
            for group in groups.values():
                try:
                    await self._run_group(group)
                except Exception as error:  # never let one batch end the loop
                    _fail(group, error)
            self._in_flight = []

    async def _gather(self) -> list[_Job]:
        """The first waiting job, then others until the batch is full or the time is up.

        Jobs taken are kept in `_in_flight` at once, so a stop in between still answers them;
        the wait polls `get_nowait` (no cancelled `get`, which could drop a job).
        """
        jobs = self._in_flight = [await self._queue.get()]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        while sum(len(job.inputs) for job in jobs) < self.max_batch:
            try:
                jobs.append(self._queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.sleep(min(remaining, POLL_S))
        return jobs

    async def _run_group(self, jobs: list[_Job]) -> None:
        now = time.monotonic()
        for job in jobs:
            if now > job.deadline and not job.started and not job.future.done():
                job.future.set_exception(Expired())
        jobs = [job for job in jobs if not job.future.done()]  # e.g. its handler was cancelled
        if not jobs:
            return
        loop = asyncio.get_running_loop()
        inputs = np.concatenate([job.inputs for job in jobs])
        for job in jobs:
            job.started = True
            if job.on_start is not None:
                job.on_start()
        try:
            outputs = await loop.run_in_executor(self._executor, self._run, jobs[0].kind, inputs)
        except Exception as error:
            if len(jobs) > 1:  # find the job that failed; the others still get answers
                for job in jobs:
                    await self._run_group([job])
            else:
                _fail(jobs, error)
            return
        self.batch_sizes.append(len(inputs))
        start = 0
        for job in jobs:
            end = start + len(job.inputs)
            if not job.future.done():
                job.future.set_result({name: value[start:end] for name, value in outputs.items()})
            start = end


def _fail(jobs: list[_Job], error: Exception) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(error)
