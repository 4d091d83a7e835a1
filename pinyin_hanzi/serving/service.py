"""The HTTP service: the Python API (``Converter``) behind FastAPI + uvicorn, and the web IME page.

Endpoints: ``POST /convert`` (one text, or a list of texts), ``POST /attention`` (the cross-attention of one
conversion, for the page's learner panel), ``POST /learn`` and ``POST /forget`` (the user history:
serving/learning.py), ``GET /health``, ``GET /`` (the page, ``pinyin_hanzi/serving/web/``) and
the framework's OpenAPI pages (``/docs``, ``/openapi.json``).

The model runs in a process of its own (:class:`~pinyin_hanzi.serving.worker.ModelProcess`), so the event loop
that parses and answers requests never waits for the interpreter lock the search holds; it is loaded once and
takes one call at a time. A :class:`~pinyin_hanzi.serving.batcher.DynamicBatcher` feeds it: conversion
requests that arrive while it is busy, or within ``max_wait_ms`` of each other, are decoded in one
``convert_lines`` call, so throughput grows with the number of clients instead of requests queueing one
sentence at a time. Each request's decoding work
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

This module builds the app (:func:`create_app`: routes and error handlers) from its parts: the request and
response bodies (schemas.py), what a request may hold and how one is refused (limits.py), the checks made
before any route (middleware.py), the work estimate (request_cost.py), the batcher (batcher.py), the user
history it shares with the models (learning.py) and the model process (worker.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path
from typing import Callable, Iterable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from pinyin_hanzi import __version__
from pinyin_hanzi.config import search_beam
from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.lm.history import History
from pinyin_hanzi.serving.batcher import DynamicBatcher
from pinyin_hanzi.serving.limits import Limits, RequestError, check_attention, check_cost, check_lines
from pinyin_hanzi.serving.middleware import LOCAL_HOSTS, BodyCheck, HostCheck, InternalErrors, error_response
from pinyin_hanzi.serving.request_cost import CostModel
from pinyin_hanzi.serving.worker import WARM_UP
from pinyin_hanzi.serving.schemas import (
    Attention,
    AttentionRequest,
    BatchConversion,
    Conversion,
    ConvertRequest,
    ForgetRequest,
    Forgotten,
    Health,
    Learned,
    LearnRequest,
    conversion_body,
)

WEB_DIR = Path(__file__).resolve().parent / "web"
RETRY_AFTER_S = 5  # a 503's Retry-After: about what restarting the model process takes
LOG = logging.getLogger("pinyin_hanzi.serving.service")  # one logger for the whole service


def create_app(model, *, limits: Limits = Limits(), batching: bool = True, max_wait_ms: float = 5.0,
               max_batch_lines: int = 64, allowed_hosts: Iterable[str] = LOCAL_HOSTS,
               on_fatal: Callable[[str], None] | None = None, history: History | None = None) -> FastAPI:
    """The FastAPI app serving ``model``: a list of started :class:`ModelProcess` (what serve.py runs; its
    owner stops them), or a ``Converter`` (run on a thread of this process), loaded once and shared by all
    requests. It answers requests whose Host is one of ``allowed_hosts`` (see :class:`HostCheck`), and learns
    into ``history`` (default: one in memory; its owner closes it), which the models made with a history in
    memory are given. Its batcher starts and stops with the app's lifespan (uvicorn, or ``with TestClient(app)``)."""
    batcher = DynamicBatcher(model, max_wait_ms=max_wait_ms, max_lines=max_batch_lines, enabled=batching,
                             slice_cost=limits.slice_cost, on_fatal=on_fatal, history=history)

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
    _add_learning_routes(app, batcher, limits)
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
        answer = error_response(error.status, error.message, error.field)
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
        return error_response(400, str(error), "text")


def _add_conversion_routes(app: FastAPI, batcher: DynamicBatcher, limits: Limits) -> None:
    info, cost_model = batcher.info, CostModel.for_model(batcher.info)
    # reading typed text first builds pypinyin's and the syllables' tables (seconds): on a thread now, so that a
    # first request (an input method's first key) does not wait for them
    threading.Thread(target=cost_model.line_costs, args=(WARM_UP, 1), name="cost-warm-up", daemon=True).start()

    @app.post("/convert", response_model=Conversion | BatchConversion,
              responses={413: {"description": "body, text or batch over the limits, or over the work budget"},
                         422: {"description": "malformed JSON, wrong type or value (names the field)"},
                         415: {"description": "body not declared JSON"},
                         400: {"description": "body not UTF-8, or input the converter rejects"}})
    async def convert(request: ConvertRequest):
        """Convert one text (``{"text": "ni hao"}`` -> one result) or a list of texts (-> ``results``)."""
        lines = [request.text] if isinstance(request.text, str) else request.text
        check_lines(lines, limits)
        beam = search_beam(request.beam, request.nbest, info["beam"])  # as the converter resolves it
        typing = request.typing()
        reading = cost_model.for_request(dict(typing)) if typing else cost_model
        costs = reading.line_costs(lines, beam, limits.max_request_cost)
        check_cost(costs, lines, limits)
        found = await batcher.convert(lines, beam=beam, nbest=request.nbest,
                                      chinese_punctuation=request.chinese_punctuation, costs=costs, typing=typing)
        results = [conversion_body(line, candidates) for line, candidates in zip(lines, found)]
        return results[0] if isinstance(request.text, str) else {"results": results}

    @app.post("/attention", response_model=Attention)
    async def attention(request: AttentionRequest):
        """Cross-attention of one conversion (a candidate's ``text`` and ``syllables`` from /convert)."""
        check_attention(request.text, request.syllables, limits, info.get("max_positions"))
        layers = await batcher.call("attention", request.text, request.syllables)
        return {"chars": list(request.text), "syllables": list(request.syllables), "layers": layers}


def _add_learning_routes(app: FastAPI, batcher: DynamicBatcher, limits: Limits) -> None:
    history = batcher.history  # changed here, on the event loop's thread only (see SharedHistory)

    @app.post("/learn", response_model=Learned, responses={413: {"description": "a text over the limit"},
                                                          422: {"description": "no text, or not a string"}})
    async def learn(request: LearnRequest):
        """Learn text the user committed: conversions asked for from now on prefer it."""
        check_lines([request.text], limits)
        return {"learned": history.learn(request.text), "clauses": len(history)}

    @app.post("/forget", response_model=Forgotten, responses={413: {"description": "a text over the limit"},
                                                             422: {"description": "text empty or not a string"}})
    async def forget(request: ForgetRequest):
        """Forget the learned clauses holding ``text``, or (no text) everything learned."""
        if request.text is not None:
            check_lines([request.text], limits)
        return {"forgotten": history.forget(request.text), "clauses": len(history)}


def _add_service_routes(app: FastAPI, batcher: DynamicBatcher) -> None:
    info = batcher.info

    @app.get("/health", response_model=Health, responses={503: {"model": Health, "description": "the model is "
                                                                "restarting after a crash, or gone"}})
    async def health():
        reason = batcher.unavailable()
        body = {"status": "unavailable" if reason else "ok", "error": reason, "checkpoint": info["checkpoint"],
                "beam": info["beam"], "batching": batcher.enabled, "workers": batcher.workers(),
                "calls": batcher.calls, "lines": batcher.lines, "largest_call": batcher.largest_call,
                "decoding": batcher.decoding, "learned": len(batcher.history)}
        return JSONResponse(body, status_code=503 if reason else 200)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8")

    app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")


def _field(error: dict) -> str:
    """``beam``, ``text.3``: a validation error's place in the body (``body`` for malformed JSON, whose
    location is a character offset)."""
    if error.get("type") == "json_invalid":
        return "body"
    # pydantic names the member of a union it tried (text: str | list[str] -> "str", "list[str]"; prefixes: "bool"):
    # not a field
    parts = [str(part) for part in error["loc"] if part not in ("body", "str", "bool") and "[" not in str(part)]
    return ".".join(parts) or "body"
