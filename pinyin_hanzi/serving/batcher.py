"""The service's dynamic batcher (:class:`DynamicBatcher`): it feeds the model, a process of its own
(:class:`~pinyin_hanzi.serving.worker.ModelProcess`) or a thread, with the lines of the requests that
arrive together, in slices of bounded cost, hands each model the changes of the user history before its next
call (:class:`~pinyin_hanzi.serving.learning.SharedHistory`), and restarts a model process that dies."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.lm.history import MAX_CLAUSES, History
from pinyin_hanzi.serving.learning import SharedHistory
from pinyin_hanzi.serving.limits import RequestError
from pinyin_hanzi.serving.worker import ModelThread, WorkerDied

WATCH_INTERVAL_S = 1.0  # how often the batcher looks for a model process that died while idle
LOG = logging.getLogger("pinyin_hanzi.serving.service")  # one logger for the whole service


@dataclass(eq=False)
class _Job:
    """One conversion request: its lines, each line's estimated cost (request_cost.py), the options the lines
    are decoded with (only jobs with equal options share a call), and how far its decoding has got."""

    lines: list[str]
    costs: list[float]
    options: tuple  # (beam, nbest, chinese_punctuation[, typing options]): worker.convert's arguments
    future: asyncio.Future
    taken: int = 0  # lines handed to a model so far
    results: list = field(default_factory=list)  # candidate lists of the lines decoded so far


class DynamicBatcher:
    """Feeds the model: one or more :class:`ModelProcess` (each with the model loaded), a
    :class:`ModelThread`, or a converter (run as one). Each model takes one call at a time, from a thread
    of its own; jobs that arrive together are decoded in one call.

    When a model is free, the feeder waits up to ``max_wait_ms`` for more jobs (unless ``max_lines`` lines
    are waiting already), then takes lines from the waiting jobs with the first one's options, in arrival
    order, up to ``max_lines`` lines and ``slice_cost`` of estimated cost (at least one line), and decodes
    them in one ``convert_lines`` call. A job that does not fit is decoded in slices: after each slice it
    waits behind the jobs that arrived meanwhile, so a large request never holds the model for more than
    one slice while a small one waits. With ``enabled=False`` each call takes lines of one job only, in
    arrival order (the baseline the load benchmark compares against). If a shared call fails, its jobs are
    retried one by one, so one bad input fails only its own request.

    If a model process dies (during a call, or while idle: :meth:`unavailable` and a watchdog look every
    second), the requests it held get 503, and so do those arriving while no model is ready; it is
    restarted, unless model processes died more than ``max_restarts`` times within ``restart_window_s`` or
    one cannot load the model again: then ``fatal`` says why, every request gets 503 and
    ``on_fatal(message)`` is called (the command line stops the service with that message).

    ``history`` (default: an empty one in memory) is the user history the service learns into
    (``self.history``, a :class:`SharedHistory`): a model takes calls only once it holds what the history
    holds (at start, and after a restart), and each call on a model first applies the changes made since its
    last one, in the same job on the model's thread.
    """

    def __init__(self, model, *, max_wait_ms: float = 5.0, max_lines: int = 64, enabled: bool = True,
                 slice_cost: float = 500.0, max_restarts: int = 3, restart_window_s: float = 60.0,
                 on_fatal: Callable[[str], None] | None = None, history: History | None = None):
        models = model if isinstance(model, (list, tuple)) else [model]
        if not models:
            raise ValueError("no model to serve")
        self.models = [ModelThread(m) if hasattr(m, "convert_lines") else m for m in models]  # a converter
        self.info = self.models[0].info
        if history is None:
            history = History(max_clauses=self.info.get("history_clauses") or MAX_CLAUSES)
        self.history = SharedHistory(history, len(self.models))
        self.max_wait_s, self.max_lines, self.enabled = max_wait_ms / 1000, max_lines, enabled
        self.slice_cost = slice_cost
        self.max_restarts, self.restart_window_s, self.on_fatal = max_restarts, restart_window_s, on_fatal
        self.calls = 0  # convert_lines calls made
        self.lines = 0  # lines converted
        self.largest_call = 0  # most lines in one call
        self.decoding = 0  # lines in the calls in progress
        self.fatal: str | None = None
        self._last_death: str | None = None  # why a model process ended, until it is back
        self._crashes: list[float] = []
        self._executors: list[ThreadPoolExecutor] = []
        self._idle: asyncio.Queue[int] | None = None  # models free for a call
        self._pending: collections.deque[_Job] = collections.deque()  # waiting for their (next) slice
        self._arrived: asyncio.Event | None = None  # set when a job joins _pending
        self._tasks: set[asyncio.Task] = set()  # batches being decoded, restarts
        self._workers: list[asyncio.Task] = []  # the feeder and the watchdog

    async def start(self) -> None:
        self._executors = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"model{index}")
                           for index in range(len(self.models))]
        self._idle = asyncio.Queue()
        self._arrived = asyncio.Event()
        await asyncio.gather(*(self._catch_up(index) for index in range(len(self.models))))
        self._workers = [asyncio.create_task(self._run()), asyncio.create_task(self._watch())]

    async def stop(self) -> None:
        """Cancel the feeder, fail what is still queued, wait for the calls in progress to end."""
        for task in [*self._workers, *self._tasks]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fail_queued("the service is shutting down")
        for executor in self._executors:
            executor.shutdown(wait=True, cancel_futures=True)

    def workers(self) -> list[dict]:
        return [model.state() for model in self.models]

    def unavailable(self) -> str | None:
        """Why no model can take calls now, or None. A model process found dead here is restarted."""
        if self.fatal:
            return f"the model is not available: {self.fatal}"
        if self._idle is None:
            return "the service is not running"
        self._reap_idle()
        states = [model.state()["state"] for model in self.models]
        if "ready" not in states:
            why = self._last_death or f"the model process is {states[0]}"
            return f"{why}; it is being restarted: try again in a few seconds"
        return None

    async def call(self, kind: str, *args) -> Any:
        """``model.call(kind, *args)`` on the next free model. RequestError 503 where no model is
        available or the model process dies during the call."""
        reason = self.unavailable()
        if reason:
            raise RequestError(503, reason)
        index = await self._acquire()
        try:
            result = await self._call(index, kind, *args)
        except _ModelLost:
            raise
        except BaseException:
            self._idle.put_nowait(index)
            raise
        self._idle.put_nowait(index)
        return result

    async def _call(self, index: int, kind: str | None, *args) -> Any:
        """On model ``index``, which the caller holds (took from the idle ones) and gives back, unless this
        raises _ModelLost: then its process died, and it is given back once restarted. The history's changes
        the model has not applied yet go first, in the same job (``kind`` None: only they)."""
        changes = self.history.take(index)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executors[index], self._on_model,
                                                                     index, changes, kind, args)
        except WorkerDied as error:
            self._died(index, str(error))
            raise _ModelLost(503, f"{error}; it is being restarted: try again in a few seconds") from None

    def _on_model(self, index: int, changes: list, kind: str | None, args: tuple) -> Any:
        """On model ``index``'s thread: apply the history's ``changes``, then make the call."""
        model = self.models[index]
        if changes:
            try:
                model.call("history", changes)
            except WorkerDied:
                raise
            except Exception as error:  # a conversion without what was learned, rather than none
                LOG.error("the model could not learn: %s: %s", type(error).__name__, error)
        return model.call(kind, *args) if kind is not None else None

    async def _catch_up(self, index: int) -> None:
        """Give model ``index`` (started or restarted, held by no one) what the history holds, then make it
        free for calls; if its process dies meanwhile, it is restarted instead."""
        with contextlib.suppress(_ModelLost):
            await self._call(index, None)
            self._idle.put_nowait(index)

    async def _acquire(self) -> int:
        """The next free model whose process is alive (one found dead meanwhile is restarted)."""
        while True:
            index = await self._idle.get()
            death = self.models[index].exited()
            if death is None:
                return index
            self._died(index, death)

    def _reap_idle(self) -> None:
        """Restart the free models whose process has ended (killed, out of memory) while no call held it."""
        for _ in range(self._idle.qsize()):
            index = self._idle.get_nowait()
            death = self.models[index].exited()
            if death is None:
                self._idle.put_nowait(index)
            else:
                self._died(index, death)

    async def _watch(self) -> None:
        while True:  # so that a model process killed while idle is restarted before anyone asks for it
            await asyncio.sleep(WATCH_INTERVAL_S)
            if not self.fatal:
                self._reap_idle()

    async def convert(self, lines: list[str], *, beam: int, nbest: int, chinese_punctuation: bool = False,
                      costs: Sequence[float] | None = None, typing: tuple = ()) -> list[list]:
        """Up to ``nbest`` Candidates per line, best first (``Converter.convert_lines``); ``costs``: each
        line's estimated cost (default 1), which decides how the lines are sliced; ``typing``: the request's
        typing options as keyword pairs (worker.convert), () for the model's own."""
        reason = self.unavailable()
        if reason:
            raise RequestError(503, reason)
        if not lines:
            return []
        future = asyncio.get_running_loop().create_future()
        costs = list(costs) if costs is not None else [1.0] * len(lines)
        options = (beam, nbest, chinese_punctuation) + ((typing,) if typing else ())
        self._pending.append(_Job(list(lines), costs, options, future))
        self._arrived.set()
        return await future

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _died(self, index: int, message: str) -> None:
        now = time.monotonic()
        self._crashes = [t for t in self._crashes if now - t < self.restart_window_s] + [now]
        self._last_death = message
        LOG.error("%s", message)
        if len(self._crashes) > self.max_restarts:
            self._give_up(f"{message}, {len(self._crashes)} times within {self.restart_window_s:g} s")
        else:
            self._spawn(self._restart_model(index))

    async def _restart_model(self, index: int) -> None:
        LOG.warning("restarting the model process")
        self.history.restarted(index)  # the new process starts with an empty history
        try:
            await asyncio.get_running_loop().run_in_executor(self._executors[index], self.models[index].restart)
        except PinyinHanziError as error:
            self._give_up(f"the model process could not be restarted: {error}")
            return
        LOG.warning("the model process is back (pid %s)", self.models[index].state()["pid"])
        self._last_death = None
        await self._catch_up(index)

    def _give_up(self, message: str) -> None:
        self.fatal = message
        LOG.error("giving up: %s", message)
        self._fail_queued(f"the model is not available: {message}")
        if self.on_fatal is not None:
            self.on_fatal(message)

    def _fail_queued(self, message: str) -> None:
        _fail(list(self._pending), RequestError(503, message))
        self._pending.clear()

    async def _run(self) -> None:
        while True:
            await self._jobs_waiting()
            index = await self._acquire()
            try:
                await self._gather()
                batch = self._take_batch()
            except BaseException:
                self._idle.put_nowait(index)
                raise
            if batch:
                self._spawn(self._decode_batch(index, batch))
            else:
                self._idle.put_nowait(index)

    async def _jobs_waiting(self) -> None:
        while True:
            live = [job for job in self._pending if not job.future.done()]  # done: the request was cancelled
            if len(live) != len(self._pending):
                self._pending = collections.deque(live)
            if live:
                return
            self._arrived.clear()
            await self._arrived.wait()

    async def _gather(self) -> None:
        """Wait up to max_wait_ms for more jobs to share the call, unless max_lines lines wait already."""
        if not self.enabled:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while sum(len(job.lines) - job.taken for job in self._pending) < self.max_lines:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)

    def _take_batch(self) -> list[tuple[_Job, int, int]]:
        """(job, first line, end) of each job taking part in the next call (see the class docstring); the
        jobs taking part leave the queue until their lines are decoded."""
        live = [job for job in self._pending if not job.future.done()]
        if not live:
            return []
        options = live[0].options
        batch, lines, cost = [], 0, 0.0
        for job in live:
            if job.options != options:
                continue
            start = end = job.taken
            while end < len(job.lines) and lines < self.max_lines:
                if lines and cost + job.costs[end] > self.slice_cost:
                    break
                lines, cost, end = lines + 1, cost + job.costs[end], end + 1
            if end == start:
                break  # the call is full
            batch.append((job, start, end))
            job.taken = end
            self._pending.remove(job)
            if not self.enabled:
                break
        return batch

    async def _decode_batch(self, index: int, batch: list[tuple[_Job, int, int]]) -> None:
        """One call on model ``index``; then the jobs with lines left queue again, behind those that arrived
        meanwhile, and the model is free again."""
        try:
            index = await self._decode(index, batch)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the feeder must outlive any one call
            LOG.error("conversion failed: %s: %s", type(error).__name__, error,
                      exc_info=LOG.isEnabledFor(logging.DEBUG))
            _fail([job for job, _, _ in batch], error)
        finally:
            for job, _, _ in batch:
                if not job.future.done() and job.taken < len(job.lines):
                    self._pending.append(job)
                    self._arrived.set()
            if index is not None:
                self._idle.put_nowait(index)

    async def _decode(self, index: int | None, batch: list[tuple[_Job, int, int]]) -> int | None:
        """Decode ``batch`` on model ``index``, which this holds; the model it still holds (None where the
        model died: the jobs left get 503)."""
        jobs = [job for job, _, _ in batch]
        if index is None:
            _fail(jobs, RequestError(503, "the model process died during this batch; it is being restarted: "
                                          "try again in a few seconds"))
            return None
        lines = [line for job, start, end in batch for line in job.lines[start:end]]
        self.decoding += len(lines)
        try:
            found = await self._call(index, "convert", lines, *jobs[0].options)
        except _ModelLost as error:  # not the lines' fault: no retry
            _fail(jobs, error)
            return None
        except Exception as error:
            if len(batch) == 1:
                _fail(jobs, error)
                return index
            for part in batch:
                index = await self._decode(index, [part])
            return index
        finally:
            self.decoding -= len(lines)
        self.calls += 1
        self.lines += len(lines)
        self.largest_call = max(self.largest_call, len(lines))
        offset = 0
        for job, start, end in batch:
            job.results += found[offset: offset + end - start]
            offset += end - start
            if len(job.results) == len(job.lines) and not job.future.done():
                job.future.set_result(job.results)
        return index


class _ModelLost(RequestError):
    """503: the model process died during the call."""


def _fail(jobs: list[_Job], error: Exception) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(error)
