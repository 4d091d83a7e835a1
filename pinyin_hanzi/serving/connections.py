"""The HTTP service's connections, below the app: how long a client may take to send a request's head and its
body, to take a response and to sit idle between requests, and how many connections may be open at once.

uvicorn's HTTP/1.1 protocol (h11) times only the idle wait between requests: a connection that never completes
its request head, or its body, stays open for as long as the client likes, each holding a file descriptor.
:func:`protocol_class` gives uvicorn a subclass of its protocol that closes such connections. It is done in the
protocol, not in the app (an ASGI middleware): a request reaches the app only once its head is complete, and
only the protocol can close a connection and so free its descriptor.

When a new connection would pass the limit, the connection that has waited longest for its client (for a
request head, a body, or a next request) is closed to make room, so that a flood of slow clients cannot keep
out a quick one such as a /health probe; only when every connection holds a request the app is working on is
the new one refused (503). The limit is kept below the process's open-file limit (:func:`connection_capacity`),
so that the server never runs out of descriptors, which asyncio logs with a traceback on every accept it retries;
the listening socket (:class:`Listener`) closes new connections at once rather than take the last few.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import struct
from dataclasses import dataclass

try:
    import resource
except ImportError:  # Windows: no open-file limit to read
    resource = None

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from pinyin_hanzi.errors import PinyinHanziError

LOG = logging.getLogger("pinyin_hanzi.serving.service")
HEAD_MAX_BYTES = 16 * 1024  # h11's own default, stated: a longer request head is answered 400 by uvicorn
FD_RESERVE = 16  # descriptors kept free beyond connections: a model process restart's pipes, static files, logs
MIN_CONNECTIONS = 4  # fewer than this, and the service would refuse its own page's requests


@dataclass(frozen=True)
class ConnectionLimits:
    """Timeouts in seconds, each measured from the start of what it bounds (not since the last byte, which a
    slow client resets at will), and the most connections open at once."""

    header_timeout_s: float = 10.0  # from connecting, or from a next request's first byte, to its complete head
    body_timeout_s: float = 10.0  # from the head to the body's end
    keep_alive_s: float = 5.0  # idle between requests on a kept-alive connection (uvicorn's own timer)
    send_timeout_s: float = 10.0  # a response held up by a client that does not read it
    max_connections: int = 256


@dataclass(frozen=True)
class Capacity:
    """What the open-file limit leaves: ``connections`` at most, and the accept ``backlog`` (asyncio accepts
    up to that many connections in a row before the protocol sees any, so they need descriptors of their
    own): a quarter of the free descriptors, 8 to 128."""

    connections: int
    backlog: int
    file_limit: int  # RLIMIT_NOFILE's soft limit
    in_use: int  # descriptors open when it was computed


def connection_capacity(max_connections: int) -> Capacity:
    """How many connections fit under this process's open-file limit beside the descriptors open now, the
    accept backlog and :data:`FD_RESERVE`; at most ``max_connections``."""
    in_use = _open_descriptors()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if resource is not None else -1
    if soft < 0:  # RLIM_INFINITY
        return Capacity(max_connections, 128, soft, in_use)
    free = soft - in_use
    backlog = min(128, max(8, free // 4))
    return Capacity(max(0, min(max_connections, free - backlog - FD_RESERVE)), backlog, soft, in_use)


def _open_descriptors() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # less the one listdir opened
        except OSError:
            continue
    return 32  # no way to count them: a generous guess


class Listener(socket.socket):
    """The listening socket. Once :meth:`keep_free` has set a reserve, accept() closes a new connection at once
    where fewer than that many file descriptors would be left, rather than let a later accept() fail: asyncio
    logs that with a traceback and stops accepting for a second, /health probes included. The connection
    limit keeps the server away from that point; a burst of connections accepted before the protocol counts
    them (asyncio accepts up to the backlog at a time, twice before the first is counted) can reach it."""

    file_limit = reserve = 0

    def keep_free(self, capacity: Capacity) -> None:
        """Check descriptors at each accept where the open-file limit is tight for the connection limit (the
        check lists them: a fraction of a millisecond)."""
        spare = capacity.file_limit - capacity.in_use - capacity.connections
        if capacity.file_limit >= 0 and spare < 4 * capacity.backlog + FD_RESERVE:
            self.file_limit, self.reserve = capacity.file_limit, FD_RESERVE // 2

    def accept(self):
        connection, address = super().accept()
        if self.reserve and _open_descriptors() > self.file_limit - self.reserve:
            connection.close()
            LOG.warning("out of file descriptors: closing new connections as they come")
            raise BlockingIOError(errno.EMFILE, "out of file descriptors")  # asyncio: nothing to accept now
        return connection, address


def listen(host: str, port: int) -> Listener:
    """A :class:`Listener` bound to ``host``:``port`` and listening (uvicorn takes it as it is, so the command
    line reports what would stop uvicorn before the model loads). PinyinHanziError (one line) where it cannot
    be: a host that is no address and no name that resolves, an address not on this machine, a port in use or
    one that needs privileges."""
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        raise PinyinHanziError(f"--host {host}: neither an address nor a host name that resolves "
                               f"({getattr(error, 'strerror', None) or error})") from None
    failure: OSError | None = None
    for family, kind, protocol, _, address in addresses:
        listener = Listener(family, kind, protocol)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait TIME_WAIT
            listener.bind(address)
            listener.listen(128)
            return listener
        except OSError as error:
            listener.close()
            failure = failure or error
    reasons = {errno.EADDRINUSE: "the port is in use (another service listens there): choose another --port",
               errno.EADDRNOTAVAIL: f"{host} is not an address of this machine (127.0.0.1: this machine only; "
                                    f"0.0.0.0: all its addresses)",
               errno.EACCES: "permission denied (ports below 1024 need privileges): choose another --port"}
    reason = reasons.get(failure.errno, failure.strerror or str(failure)) if failure else "no address to bind"
    raise PinyinHanziError(f"cannot listen on {host}:{port}: {reason}")


def protocol_class(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``limits`` (pass it as ``uvicorn.Config(http=...)``); one class per server:
    it counts that server's connections."""
    return type("LimitedH11Protocol", (LimitedH11Protocol,), {"limits": limits, "registry": _Registry(limits)})


def _raw_response(status: int, message: str) -> bytes:
    """A complete response with the service's JSON error body, for a connection the app never sees."""
    body = json.dumps({"error": message, "field": None}).encode()
    reason = {408: b"Request Timeout", 503: b"Service Unavailable"}[status]
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n"
            b"%s\r\n" % (status, reason, len(body), b"retry-after: 1\r\n" if status == 503 else b"") + body)


class _Registry:
    """One server's open connections (in the order they opened) and its connection limit."""

    def __init__(self, limits: ConnectionLimits):
        self.limits = limits
        self.open: dict[LimitedH11Protocol, None] = {}

    def opened(self, connection: LimitedH11Protocol) -> bool:
        """Count ``connection`` in; at the limit, close the connection waiting longest for its client, or
        refuse this one (503) where every other holds a request in progress. False where refused."""
        self.open[connection] = None
        live = [other for other in self.open if not other.transport.is_closing()]
        if len(live) <= self.limits.max_connections:
            return True
        waiting = [other for other in live if other is not connection and other.waiting_for_client()]
        if waiting:
            LOG.warning("%d connections open (the limit): closing those that waited longest for their client",
                        self.limits.max_connections)
            min(waiting, key=lambda other: other.phase_since).close_for(
                503, f"too many connections ({self.limits.max_connections}): this one waited longest")
            return True
        LOG.warning("%d connections open (the limit), each with a request in progress: refusing new ones (503)",
                    self.limits.max_connections)
        connection.close_for(503, f"too many connections ({self.limits.max_connections}) with requests in "
                                  f"progress: try again shortly")
        return False

    def closed(self, connection: LimitedH11Protocol) -> None:
        self.open.pop(connection, None)


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the timeouts and the connection limit of :class:`ConnectionLimits`. Which
    wait a connection is in follows from h11's state of the client's side: IDLE with bytes buffered or no
    request yet: its head; SEND_BODY: its body; IDLE after a response: idle (uvicorn's keep-alive timer);
    otherwise the app has the request."""

    limits: ConnectionLimits
    registry: _Registry

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.phase, self.phase_since, self._had_request = "", 0.0, False
        self._read_timer = self._send_timer = None
        if self.registry.opened(self):
            self._follow_phase()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._read_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        self.registry.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow_phase()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_phase()

    def pause_writing(self) -> None:  # the transport's buffer is full: the client is not reading
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.limits.send_timeout_s, self._send_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def waiting_for_client(self) -> bool:
        """Whether the connection waits for its client (a head, a body, a next request), not for the app."""
        return self.phase in ("head", "body", "idle") and not self.transport.is_closing()

    def close_for(self, status: int, message: str) -> None:
        """Close the connection, answering ``status`` with ``message`` first unless the request it holds has
        a response begun or it is idle between requests (closing those is what keep-alive clients expect)."""
        answered = self.phase in ("body", "app") and self.cycle is not None and self.cycle.response_started
        if self.phase != "idle" and not answered:  # in "head", self.cycle is the previous request's
            self.transport.write(_raw_response(status, message))
        self.transport.close()

    def _current_phase(self) -> str:
        theirs = self.conn.their_state
        if theirs is h11.IDLE:
            return "head" if not self._had_request or self.conn.trailing_data[0] else "idle"
        self._had_request = True
        return "body" if theirs is h11.SEND_BODY else "app"

    def _follow_phase(self) -> None:
        """On entering a wait for the client's head or body, start its timer; on leaving it, stop it."""
        if self.transport.is_closing():
            return
        phase = self._current_phase()
        if phase == self.phase:
            return
        self.phase, self.phase_since = phase, self.loop.time()
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        timeout = {"head": self.limits.header_timeout_s, "body": self.limits.body_timeout_s}.get(phase)
        if timeout is not None:
            self._read_timer = self.loop.call_later(timeout, self._read_timed_out, phase, timeout)

    def _read_timed_out(self, phase: str, timeout: float) -> None:
        self._read_timer = None
        LOG.warning("closing connections whose request %s did not arrive within %g s", phase, timeout)
        self.close_for(408, f"the request {phase} did not arrive within {timeout:g} s")

    def _send_timed_out(self) -> None:
        self._send_timer = None
        LOG.warning("dropping connections whose client did not read its response for %g s",
                    self.limits.send_timeout_s)
        # Reset, not closed: a close would leave the unread response (megabytes) queued in the kernel ahead
        # of the FIN, for as long as the client keeps its window shut.
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()
