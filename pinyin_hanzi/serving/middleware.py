"""The HTTP service's ASGI middleware, which answers before any route does: :class:`InternalErrors`
(outermost: a JSON 500 and one log line for an exception no handler took), :class:`HostCheck` (421 for a
Host header that names no name of the service: DNS rebinding), :class:`BodyCheck` (415, 413, 400 for a
POST body, before it is parsed); and :func:`error_response`, the JSON body of every refusal."""

from __future__ import annotations

import asyncio
import logging
from typing import Iterable

from fastapi.responses import JSONResponse

LOG = logging.getLogger("pinyin_hanzi.serving.service")  # one logger for the whole service


def error_response(status: int, message: str, field: str | None) -> JSONResponse:
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
            return await error_response(415, "send the body as JSON, with Content-Type: application/json",
                                "body")(scope, receive, send)
        too_large = error_response(413, f"request body over {self.max_bytes} bytes", "body")
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
            not_utf8 = error_response(400, f"request body is not UTF-8 (byte {error.start})", "body")
            return await not_utf8(scope, receive, send)
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
        return await error_response(421, message, None)(scope, receive, send)


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
            answer = error_response(500, f"internal error: {type(error).__name__}", None)
        except asyncio.CancelledError:  # answered, not re-raised: the server would log its traceback
            LOG.warning("%s %s cancelled: the service is stopping", scope["method"], scope["path"])
            answer = error_response(503, "the service is stopping", None)
        if not started:
            await answer(scope, receive, send)
