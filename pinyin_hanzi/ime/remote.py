"""The engine's converter when ``serve.py`` converts: the same calls the conversions' thread makes on a
``Converter`` (``convert_lines`` with n-best and the typing options, ``learn``), as HTTP requests to the
service's ``POST /convert`` (the batch form) and ``POST /learn``.

Standard library only (``http.client``): an engine that talks to a service imports neither torch nor the
model, so Debian's ``python3-gi`` and a small process suffice; the model's memory is the service's. One
connection is kept alive between requests (the conversions make one call at a time, under their lock), and
reopened once where the service closed it while idle (its keep-alive timeout).

Every failure is a :class:`ServiceError` with a one-line reason: ``down`` where the service cannot answer now
(connection refused, no answer within the timeout, 503 while it starts or restarts its model, an answer that is
not the service's), so that the engine passes letters through and tries again later; not ``down`` where the
service refused this request (a line over its work limit): the letters pass, later lines convert.
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass
from typing import Iterable, Sequence
from urllib.parse import urlsplit

TIMEOUT_S = 3.0  # connecting, sending, or waiting for an answer: past it the service counts as down
FIRST_TIMEOUT_S = 10.0  # the same for the first answer (the engine's warm-up): the service's first-use work


class ServiceError(Exception):
    """A request the service did not answer with a conversion; ``down``: it cannot answer now (try later)."""

    def __init__(self, message: str, *, down: bool):
        super().__init__(message)
        self.down = down


@dataclass(frozen=True)
class Candidate:
    """One conversion, as the conversions use a ``Converter``'s: its text and the model tokens it read."""

    text: str
    syllables: tuple[str, ...]


class ServiceConverter:
    """``serve.py`` at ``url`` (``http://host:port``) in the place of a ``Converter``."""

    def __init__(self, url: str, timeout: float = TIMEOUT_S, first_timeout: float = FIRST_TIMEOUT_S):
        parts = urlsplit(url)
        self.url, self.timeout = url.rstrip("/"), first_timeout  # until the service has answered once
        self._later_timeout = timeout
        self._host, self._port, self._path = parts.hostname, parts.port or 80, parts.path.rstrip("/")
        self._connection: http.client.HTTPConnection | None = None

    def convert_lines(self, lines: Sequence[str], *, nbest: int = 1, prefixes: bool | str | None = None,
                      fuzzy: Iterable[str] | None = None, shuangpin: str | None = None) -> list[list[Candidate]]:
        """Up to ``nbest`` candidates per line, best first, read with these typing options (None: the
        service's model's own). ServiceError where the service does not convert them."""
        body: dict = {"text": list(lines), "nbest": nbest}
        for name, value in (("prefixes", prefixes), ("fuzzy", fuzzy), ("shuangpin", shuangpin)):
            if value is not None:
                body[name] = list(value) if name == "fuzzy" else value
        answer = self._post("/convert", body)
        try:
            return [[Candidate(c["text"], tuple(c["segmentation"])) for c in result["candidates"]]
                    for result in answer["results"]]
        except (KeyError, TypeError) as error:
            raise ServiceError(f"{self.url} answered /convert without its candidates ({error!r})", down=True) from None

    def learn(self, text: str) -> list[str]:
        """Give what the user committed to the service's history; the clauses it kept."""
        return self._post("/learn", {"text": text}).get("learned", [])

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _post(self, path: str, body: dict) -> dict:
        """POST ``body`` as JSON and return the JSON answer; ServiceError (one line) for anything else."""
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        for attempt in (1, 2):
            reused = self._connection is not None
            try:
                status, text = self._send(path, payload)
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as error:
                self.close()  # closed while idle: a kept connection is tried once more, fresh
                if not reused or attempt == 2:
                    raise ServiceError(f"{self.url} closed the connection ({type(error).__name__})", down=True) from None
            except (TimeoutError, socket.timeout):
                self.close()
                raise ServiceError(f"{self.url} did not answer within {self.timeout:g} s", down=True) from None
            except (OSError, http.client.HTTPException) as error:
                self.close()
                reason = getattr(error, "strerror", None) or type(error).__name__
                raise ServiceError(f"no service at {self.url} ({reason})", down=True) from None
        try:
            answer = json.loads(text)
        except ValueError:
            raise ServiceError(f"{self.url} answered {status} without JSON: is it serve.py?", down=True) from None
        self._answered()
        if status != 200:
            message = answer.get("error") if isinstance(answer, dict) else None
            raise ServiceError(f"{self.url}{path}: {status} {message or ''}".rstrip(),
                               down=status >= 500 or status in (404, 405, 421))
        if not isinstance(answer, dict):
            raise ServiceError(f"{self.url} answered {path} with {type(answer).__name__}", down=True)
        return answer

    def _answered(self) -> None:
        """The service has answered: from now on the shorter timeout, on this connection too."""
        self.timeout = self._later_timeout
        connection = self._connection
        if connection is not None:
            connection.timeout = self.timeout
            if connection.sock is not None:
                connection.sock.settimeout(self.timeout)

    def _send(self, path: str, payload: bytes) -> tuple[int, bytes]:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        self._connection.request("POST", self._path + path, payload, {"Content-Type": "application/json"})
        response = self._connection.getresponse()
        text = response.read()
        if response.will_close:
            self.close()
        return response.status, text
