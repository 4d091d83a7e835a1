"""The HTTP service: the Python API (``Converter``) behind FastAPI + uvicorn, and the web IME page.

Endpoints: ``POST /convert`` (one text, or a list of texts), ``POST /attention`` (the cross-attention of one
conversion, for the page's learner panel), ``GET /health``, ``GET /`` (the page, ``pinyin_hanzi/serving/web/``) and
the framework's OpenAPI pages (``/docs``, ``/openapi.json``).

The model runs in a process of its own (:class:`~pinyin_hanzi.serving.worker.ModelProcess`), so the event loop
that parses and answers requests never waits for the interpreter lock the search holds; it is loaded once and
takes one call at a time. A :class:`DynamicBatcher` feeds it: conversion requests that arrive while it is
busy, or within ``max_wait_ms`` of each other, are decoded in one ``convert_lines`` call, so throughput grows
with the number of clients instead of requests queueing one sentence at a time. Each request's decoding work
is estimated first (:mod:`pinyin_hanzi.serving.request_cost`): one over the budget is refused, and a large one is
decoded in slices with the requests that arrive meanwhile decoded between them. A model process that dies
costs the requests it held a 503 and is restarted; ``/health`` reports its state, looking at the process
when asked.

Errors are JSON ``{"error": message, "field": name-or-null}``: 413 for a body, a line or a batch over the
limits, a request over the work budget or an /attention text longer than the model's positions, 415 for a
body not declared JSON, 421 for a Host header that names no name of this service (DNS rebinding), 422 for
malformed JSON and wrong types or values (naming the field), 400 for a body that is not UTF-8, JSON nested
too deep to parse, and input the converter rejects, 404 and 405 for unknown paths and methods, 503 (with
Retry-After) while the model process restarts, 500 (logged in one line) for anything else; none of them
stops the service. The connections below the app (timeouts, their number) are pinyin_hanzi/serving/connections.py's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from pinyin_hanzi import __version__
from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.serving.request_cost import CostModel
from pinyin_hanzi.serving.worker import ModelThread, WorkerDied
from pinyin_hanzi.text.pinyin import syllables as known_syllables

WEB_DIR = Path(__file__).resolve().parent / "web"
MAX_BEAM = 16  # beyond this a request costs seconds of the shared worker for no gain in accuracy
MAX_NBEST = 10
RETRY_AFTER_S = 5  # a 503's Retry-After: about what restarting the model process takes
WATCH_INTERVAL_S = 1.0  # how often the batcher looks for a model process that died while idle
LOG = logging.getLogger("pinyin_hanzi.serving.service")


@dataclass(frozen=True)
class Limits:
    """What one request may hold; a request over a limit gets 413 naming it. Decoding work is counted in
    the units of :mod:`pinyin_hanzi.serving.request_cost` (about a millisecond of one core of the development
    machine each): the budget keeps the worst request to a few seconds of the model, and ``slice_cost``
    bounds one decoding call, so a request that costs more is decoded in slices with other requests'
    lines decoded between them."""

    max_body_bytes: int = 256 * 1024
    max_line_chars: int = 256  # characters of one text (longer ones are converted window by window)
    max_lines: int = 256  # texts in one batch request
    max_request_cost: float = 5000.0  # estimated decoding work of one /convert request
    max_line_cost: float = 1000.0  # of one text: a text is decoded in one call, and others wait behind it
    slice_cost: float = 500.0  # estimated work of one decoding call, at least one line


class RequestError(Exception):
    """A request the service refuses: HTTP ``status``, a one-line ``message``, the ``field`` at fault."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


# ------------------------------------------------------------------------------------------- batching

@dataclass(eq=False)
class _Job:
    """One conversion request: its lines, each line's estimated cost (request_cost.py), the options the lines
    are decoded with (only jobs with equal options share a call), and how far its decoding has got."""

    lines: list[str]
    costs: list[float]
    options: tuple  # (beam, nbest, chinese_punctuation)
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
    """

    def __init__(self, model, *, max_wait_ms: float = 5.0, max_lines: int = 64, enabled: bool = True,
                 slice_cost: float = 500.0, max_restarts: int = 3, restart_window_s: float = 60.0,
                 on_fatal: Callable[[str], None] | None = None):
        models = model if isinstance(model, (list, tuple)) else [model]
        if not models:
            raise ValueError("no model to serve")
        self.models = [ModelThread(m) if hasattr(m, "convert_lines") else m for m in models]  # a converter
        self.info = self.models[0].info
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
        for index in range(len(self.models)):
            self._idle.put_nowait(index)
        self._arrived = asyncio.Event()
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

    async def _call(self, index: int, kind: str, *args) -> Any:
        """On model ``index``, which the caller holds (took from the idle ones) and gives back, unless this
        raises _ModelLost: then its process died, and it is given back once restarted."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executors[index],
                                                                     self.models[index].call, kind, *args)
        except WorkerDied as error:
            self._died(index, str(error))
            raise _ModelLost(503, f"{error}; it is being restarted: try again in a few seconds") from None

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
                      costs: Sequence[float] | None = None) -> list[list]:
        """Up to ``nbest`` Candidates per line, best first (``Converter.convert_lines``); ``costs``: each
        line's estimated cost (default 1), which decides how the lines are sliced."""
        reason = self.unavailable()
        if reason:
            raise RequestError(503, reason)
        if not lines:
            return []
        future = asyncio.get_running_loop().create_future()
        costs = list(costs) if costs is not None else [1.0] * len(lines)
        self._pending.append(_Job(list(lines), costs, (beam, nbest, chinese_punctuation), future))
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
        try:
            await asyncio.get_running_loop().run_in_executor(self._executors[index], self.models[index].restart)
        except PinyinHanziError as error:
            self._give_up(f"the model process could not be restarted: {error}")
            return
        LOG.warning("the model process is back (pid %s)", self.models[index].state()["pid"])
        self._last_death = None
        self._idle.put_nowait(index)

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


# ------------------------------------------------------------------------------------- request models

class _Strict(BaseModel):
    # strict: "5" is not a beam and 1 is not a text; forbid: a misspelled field is an error, not ignored
    model_config = ConfigDict(extra="forbid", strict=True)


def _check_unicode(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text holds a lone surrogate (\\ud800-\\udfff escape): not Unicode text") from None
    return text


class ConvertRequest(_Strict):
    text: str | list[str] = Field(description="typed pinyin (e.g. 'ni hao', 'nihao', 'ni3hao3'), or a list of "
                                              "such texts, converted as one batch")
    beam: int | None = Field(None, ge=1, le=MAX_BEAM, description="beam size; default: the model's decode.beam")
    nbest: int = Field(5, ge=1, le=MAX_NBEST, description="how many distinct candidates to return per text")
    chinese_punctuation: bool = Field(False, description="ASCII , . ? ! after a hanzi become ，。？！")

    @field_validator("text")
    @classmethod
    def _unicode(cls, text: str | list[str]) -> str | list[str]:
        for line in [text] if isinstance(text, str) else text:
            _check_unicode(line)
        return text


class AttentionRequest(_Strict):
    text: str = Field(description="a conversion's characters, one per syllable")
    syllables: list[str] = Field(description="the syllables (model tokens) that text was read as")

    @field_validator("text")
    @classmethod
    def _unicode(cls, text: str) -> str:
        return _check_unicode(text)


class Piece(BaseModel):
    reading: str = Field(description="the syllable (model token) this character converts")
    text: str = Field(description="the character it became")
    passthrough: bool = Field(description="true where the input passed through (letters, digits, "
                                          "punctuation, hanzi typed as they are), not a syllable converted")


class CandidateOut(BaseModel):
    text: str
    score: float = Field(description="log-probability under the model (higher is better)")
    syllables: list[str] = Field(description="the syllable each character was read as (an abbreviation or a "
                                             "fuzzy syllable as the full syllable it became)")
    segmentation: list[str] = Field(description="the model tokens of the reading it converts (what /attention "
                                                "takes as syllables)")
    pieces: list[Piece] = Field(description="syllable -> character, one per syllable")
    notes: list[str] = Field(description="fallbacks the converter used, if any")


class Conversion(BaseModel):
    input: str
    output: str = Field(description="the best candidate's text")
    candidates: list[CandidateOut] = Field(description="best first")


class BatchConversion(BaseModel):
    results: list[Conversion] = Field(description="one per input text, in order")


class Attention(BaseModel):
    chars: list[str] = Field(description="rows: the characters (decoder queries)")
    syllables: list[str] = Field(description="columns: the syllables (encoder keys)")
    layers: list[list[list[float]]] = Field(description="per decoder layer, heads averaged: chars x syllables, "
                                                        "each row sums to 1")


class WorkerState(BaseModel):
    kind: str = Field(description="process: the model runs in a process of its own; thread: in the server's")
    state: str = Field(description="ready, starting, dead (restarting after a crash) or stopped")
    pid: int | None = Field(description="the model process's id")
    restarts: int = Field(description="times the model process was restarted after a crash")


class Health(BaseModel):
    status: str = Field(description="ok, or unavailable (HTTP 503) while the model is not ready")
    error: str | None = Field(None, description="why the model is unavailable")
    checkpoint: str | None
    beam: int
    batching: bool
    workers: list[WorkerState] = Field(description="the model processes (or the one model thread)")
    calls: int = Field(description="convert_lines calls made so far (all workers)")
    lines: int = Field(description="texts converted so far")
    largest_call: int = Field(description="most texts converted in one call")
    decoding: int = Field(description="texts in the calls in progress")


# ----------------------------------------------------------------------------------------- the app

def _pieces(candidate) -> list[dict]:
    """One piece per syllable: what it was read as, the character it became, and whether the input passed
    through as itself; none where text and readings do not pair up one to one."""
    readings = candidate.read_as or candidate.syllables
    if len(candidate.text) != len(readings):
        return []
    return [{"reading": reading, "text": char, "passthrough": reading == char or reading not in known_syllables()}
            for reading, char in zip(readings, candidate.text)]


def _conversion(line: str, candidates: Sequence) -> dict:
    return {"input": line, "output": candidates[0].text if candidates else "",
            "candidates": [{"text": c.text, "score": float(c.score), "syllables": list(c.read_as or c.syllables),
                            "segmentation": list(c.syllables), "pieces": _pieces(c), "notes": list(c.notes)}
                           for c in candidates]}


def _check_lines(lines: list[str], limits: Limits) -> None:
    if len(lines) > limits.max_lines:
        raise RequestError(413, f"{len(lines)} texts in one request; at most {limits.max_lines}", "text")
    for index, line in enumerate(lines):
        if len(line) > limits.max_line_chars:
            where = "text" if len(lines) == 1 else f"text.{index}"
            raise RequestError(413, f"{len(line)} characters in one text; at most {limits.max_line_chars}", where)


def _check_cost(costs: list[float], lines: list[str], limits: Limits) -> None:
    """413 for a request whose estimated decoding work (``costs``: per line, as far as the estimate went
    before it passed the budget) is over ``limits.max_request_cost``, or holds a text over
    ``limits.max_line_cost``."""
    for index, cost in enumerate(costs):
        if cost > limits.max_line_cost:
            raise RequestError(413, f"this text would cost {cost:.0f} units of decoding work; at most "
                                    f"{limits.max_line_cost:.0f} per text (abbreviated syllables cost the most): "
                                    f"split it", "text" if len(lines) == 1 else f"text.{index}")
    total = sum(costs)
    if total > limits.max_request_cost:
        at_least = "at least " if len(costs) < len(lines) else ""
        raise RequestError(413, f"this request would cost {at_least}{total:.0f} units of decoding work; the budget "
                                f"is {limits.max_request_cost:.0f} per request (texts x syllables x beam; "
                                f"abbreviated syllables cost more): send fewer or shorter texts, or a smaller "
                                f"beam or nbest", "text")


def _check_attention(text: str, syllables: Sequence[str], limits: Limits, max_positions: int | None) -> None:
    """413 for a text longer than the service takes, or than the model's attention spans (its
    max_positions: a longer sequence has no positional encoding), 422 for text and syllables that do not
    pair up one to one."""
    _check_lines([text], limits)
    if len(syllables) > limits.max_line_chars:
        raise RequestError(413, f"{len(syllables)} syllables; at most {limits.max_line_chars}", "syllables")
    if max_positions is not None and max(len(text), len(syllables)) > max_positions:
        raise RequestError(413, f"{max(len(text), len(syllables))} syllables; this model attends over at most "
                                f"{max_positions} positions", "syllables")
    if not text or len(text) != len(syllables):
        raise RequestError(422, f"text has {len(text)} characters and syllables {len(syllables)} entries: "
                                f"they must pair up one to one (and not be empty)", "syllables")


def _field(error: dict) -> str:
    """``beam``, ``text.3``: a validation error's place in the body (``body`` for malformed JSON, whose
    location is a character offset)."""
    if error.get("type") == "json_invalid":
        return "body"
    # pydantic names the member of a union it tried (text: str | list[str] -> "str", "list[str]"): not a field
    parts = [str(part) for part in error["loc"] if part not in ("body", "str") and "[" not in str(part)]
    return ".".join(parts) or "body"


def _error(status: int, message: str, field: str | None) -> JSONResponse:
    return JSONResponse({"error": message, "field": field}, status_code=status)


def _is_json(content_type: bytes | None) -> bool:
    media = (content_type or b"").split(b";")[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class BodyCheck:
    """ASGI middleware, before any parsing: a POST body must be declared JSON (415), fit in ``max_bytes``
    (413, whether or not a Content-Length announced it) and be UTF-8 (400)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if not _is_json(headers.get(b"content-type")):
            return await _error(415, "send the body as JSON, with Content-Type: application/json",
                                "body")(scope, receive, send)
        too_large = _error(413, f"request body over {self.max_bytes} bytes", "body")
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await too_large(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await too_large(scope, receive, send)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as error:
            return await _error(400, f"request body is not UTF-8 (byte {error.start})", "body")(scope, receive, send)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")  # the Host names answered unless the operator names others


def host_name(header: str) -> str | None:
    """The host a Host header names, lower case, without its port or an IPv6 address's brackets
    (``LocalHost:8000`` -> ``localhost``, ``[::1]:8000`` -> ``::1``); None for a header that is no
    ``host[:port]``."""
    header = header.strip().lower()
    if header.startswith("["):
        address, bracket, rest = header[1:].partition("]")
        return address if bracket and (not rest or (rest[:1] == ":" and rest[1:].isdigit())) else None
    name, colon, port = header.partition(":")
    return name if name and (not colon or port.isdigit()) else None


class HostCheck:
    """ASGI middleware, first of all: a request is answered only if its Host header names this service: a
    loopback name (:data:`LOCAL_HOSTS`), the address the service is bound to, or a name the operator allowed
    (``"*"``: any), with or without a port. Anything else gets 421: else a web page open in the user's browser
    could reach the service through a DNS name of its own that resolves to 127.0.0.1 (DNS rebinding) and read
    its answers as its own."""

    def __init__(self, app, allowed: Iterable[str]):
        allowed = list(allowed)
        self.app, self.any = app, "*" in allowed
        self.allowed = {host_name(name) or name.lower() for name in allowed if name != "*"}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.any:
            return await self.app(scope, receive, send)
        values = [value.decode("latin-1") for key, value in scope.get("headers") or [] if key == b"host"]
        if len(values) == 1 and host_name(values[0]) in self.allowed:
            return await self.app(scope, receive, send)
        served = ", ".join(f"[{name}]" if ":" in name else name for name in sorted(self.allowed))
        asked = f"Host {values[0][:100]!r}" if len(values) == 1 else f"{len(values)} Host headers"
        message = (f"{asked} is not a name of this service (it answers {served}); start serve.py with "
                   f"--allow-host NAME to serve another name")
        return await _error(421, message, None)(scope, receive, send)


class InternalErrors:
    """ASGI middleware, outermost: an exception no handler turned into a response is a JSON 500 and one log
    line (the traceback too at log level debug), and a request cancelled (a shutdown that ran out of time)
    a 503. The framework's own last resort answers 500 but re-raises, and the server logs a traceback of
    it; every request it answers logs at most a line."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            return await self.app(scope, receive, tracking_send)
        except Exception as error:
            LOG.error("%s %s failed: %s: %s", scope["method"], scope["path"], type(error).__name__, error,
                      exc_info=LOG.isEnabledFor(logging.DEBUG))
            answer = _error(500, f"internal error: {type(error).__name__}", None)
        except asyncio.CancelledError:  # answered, not re-raised: the server would log its traceback
            LOG.warning("%s %s cancelled: the service is stopping", scope["method"], scope["path"])
            answer = _error(503, "the service is stopping", None)
        if not started:
            await answer(scope, receive, send)


def create_app(model, *, limits: Limits = Limits(), batching: bool = True, max_wait_ms: float = 5.0,
               max_batch_lines: int = 64, allowed_hosts: Iterable[str] = LOCAL_HOSTS,
               on_fatal: Callable[[str], None] | None = None) -> FastAPI:
    """The FastAPI app serving ``model``: a list of started :class:`ModelProcess` (what serve.py runs; its
    owner stops them), or a ``Converter`` (run on a thread of this process), loaded once and shared by all
    requests. It answers requests whose Host is one of ``allowed_hosts`` (see :class:`HostCheck`).
    Its batcher starts and stops with the app's lifespan (uvicorn, or ``with TestClient(app)``)."""
    batcher = DynamicBatcher(model, max_wait_ms=max_wait_ms, max_lines=max_batch_lines, enabled=batching,
                             slice_cost=limits.slice_cost, on_fatal=on_fatal)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        asyncio.get_running_loop().set_exception_handler(_loop_exception)
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="pinyin_hanzi", summary="Pinyin to Chinese characters with a Transformer",
                  version=__version__, lifespan=lifespan)
    app.state.batcher, app.state.limits = batcher, limits
    _add_error_handlers(app)
    _add_conversion_routes(app, batcher, limits)
    _add_service_routes(app, batcher)
    app.add_middleware(BodyCheck, max_bytes=limits.max_body_bytes)
    app.add_middleware(HostCheck, allowed=allowed_hosts)
    app.add_middleware(InternalErrors)
    return app


def _loop_exception(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The event loop's errors as one line each (asyncio's own handler logs a traceback: for a failed accept()
    when the process is out of file descriptors, one on every retry); serve.py's log filter holds back
    repeats."""
    error = context.get("exception")
    LOG.error("%s%s", context.get("message", "event loop error"),
              f": {type(error).__name__}: {error}" if error is not None else "")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def request_error(request: Request, error: RequestError):
        answer = _error(error.status, error.message, error.field)
        if error.status == 503:
            answer.headers["Retry-After"] = str(RETRY_AFTER_S)
        return answer

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError):
        detail = [{"field": _field(e), "message": e["msg"]} for e in error.errors()] or [
            {"field": "body", "message": "invalid request"}]
        detail = [entry for i, entry in enumerate(detail) if entry not in detail[:i]]
        first = detail[0]
        return JSONResponse({"error": f"{first['field']}: {first['message']}", "field": first["field"],
                             "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException):  # 404, 405, unparseable bodies
        return JSONResponse({"error": str(error.detail), "field": None}, status_code=error.status_code,
                            headers=error.headers)

    @app.exception_handler(PinyinHanziError)
    async def converter_error(request: Request, error: PinyinHanziError):
        return _error(400, str(error), "text")


def _add_conversion_routes(app: FastAPI, batcher: DynamicBatcher, limits: Limits) -> None:
    info, cost_model = batcher.info, CostModel.for_model(batcher.info)

    @app.post("/convert", response_model=Conversion | BatchConversion,
              responses={413: {"description": "body, text or batch over the limits, or over the work budget"},
                         422: {"description": "malformed JSON, wrong type or value (names the field)"},
                         415: {"description": "body not declared JSON"},
                         400: {"description": "body not UTF-8, or input the converter rejects"}})
    async def convert(request: ConvertRequest):
        """Convert one text (``{"text": "ni hao"}`` -> one result) or a list of texts (-> ``results``)."""
        lines = [request.text] if isinstance(request.text, str) else request.text
        _check_lines(lines, limits)
        beam = request.beam or info["beam"]
        costs = cost_model.line_costs(lines, max(beam, request.nbest), limits.max_request_cost)
        _check_cost(costs, lines, limits)
        found = await batcher.convert(lines, beam=beam, nbest=request.nbest,
                                      chinese_punctuation=request.chinese_punctuation, costs=costs)
        results = [_conversion(line, candidates) for line, candidates in zip(lines, found)]
        return results[0] if isinstance(request.text, str) else {"results": results}

    @app.post("/attention", response_model=Attention)
    async def attention(request: AttentionRequest):
        """Cross-attention of one conversion (a candidate's ``text`` and ``syllables`` from /convert)."""
        _check_attention(request.text, request.syllables, limits, info.get("max_positions"))
        layers = await batcher.call("attention", request.text, request.syllables)
        return {"chars": list(request.text), "syllables": list(request.syllables), "layers": layers}


def _add_service_routes(app: FastAPI, batcher: DynamicBatcher) -> None:
    info = batcher.info

    @app.get("/health", response_model=Health, responses={503: {"model": Health, "description": "the model is "
                                                                "restarting after a crash, or gone"}})
    async def health():
        reason = batcher.unavailable()
        body = {"status": "unavailable" if reason else "ok", "error": reason, "checkpoint": info["checkpoint"],
                "beam": info["beam"], "batching": batcher.enabled, "workers": batcher.workers(),
                "calls": batcher.calls, "lines": batcher.lines, "largest_call": batcher.largest_call,
                "decoding": batcher.decoding}
        return JSONResponse(body, status_code=503 if reason else 200)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8")

    app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")
