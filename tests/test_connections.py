"""The service's connections and its front door (pinyin_hanzi/serving/connections.py; the Host check and the listening
socket of serve.py), probed as hostile or careless clients probe them: raw sockets on 127.0.0.1 against the real
service, its timeouts set to a second so that each probe ends within a few seconds by itself."""

from __future__ import annotations

import json
import resource
import select
import socket
import subprocess
import time
from types import SimpleNamespace

import pytest

from conftest import ROOT
from serving import free_port, output, serve_command, start_service, stop_service

TIMEOUT_S = 1.0  # the guarded service's header, body, keep-alive and send timeouts
SLACK_S = 2.5  # how late after its timeout a close may come on a busy 2-core machine
MAX_CONNECTIONS = 8


@pytest.fixture(scope="module")
def guarded(trained):
    """The service on the tests' tiny model (64 positions), with one-second timeouts, at most 8 connections,
    and ime.example allowed as a Host besides the loopback names."""
    _, _, checkpoint = trained
    timeouts = [f"--{name}-timeout" for name in ("header", "body", "keep-alive", "send")]
    process, url = start_service("--checkpoint", str(checkpoint), *[arg for option in timeouts
                                                                    for arg in (option, str(TIMEOUT_S))],
                                 "--max-connections", str(MAX_CONNECTIONS), "--allow-host", "ime.example")
    yield SimpleNamespace(process=process, url=url, port=int(url.rsplit(":", 1)[1]))
    stop_service(process)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _read_until_closed(sock: socket.socket, within_s: float) -> tuple[bytes, float | None]:
    """What the server sends until it closes the connection, and after how many seconds it closed it (None:
    still open after ``within_s``)."""
    start, data = time.monotonic(), b""
    sock.settimeout(0.1)
    while time.monotonic() - start < within_s:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return data, time.monotonic() - start
        if not chunk:
            return data, time.monotonic() - start
        data += chunk
    return data, None


def _exchange(port: int, request: bytes, within_s: float = 30) -> tuple[int, bytes]:
    """Send one raw request (with Connection: close); the status and body of the answer."""
    with _connect(port) as sock:
        sock.sendall(request)
        data, closed = _read_until_closed(sock, within_s)
    assert closed is not None, f"no answer to {request[:60]!r} within {within_s} s"
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _answered(port: int) -> bool:
    """Whether a GET /health gets any answer (not a connection closed at once)."""
    with _connect(port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        return bool(_read_until_closed(sock, 30)[0])


def _status(port: int, host: bytes | None, path: bytes = b"/health") -> tuple[int, bytes]:
    """GET ``path`` with Host ``host``; None: an HTTP/1.0 request without one (HTTP/1.1 requires it)."""
    if host is None:
        return _exchange(port, b"GET " + path + b" HTTP/1.0\r\n\r\n")
    return _exchange(port, b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")


def _post(body: bytes, close: bool = True) -> bytes:
    """A raw POST /convert of ``body`` declared JSON."""
    return (b"POST /convert HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"%s\r\n" % (len(body), b"Connection: close\r\n" if close else b"") + body)


def _json_error(body: bytes) -> str:
    answer = json.loads(body)
    assert set(answer) == {"error", "field"} and answer["field"] is None
    return answer["error"]


# ------------------------------------------------------------------------------------------- Host header

@pytest.mark.parametrize("host", [b"localhost", b"LocalHost:8000", b"127.0.0.1", b"127.0.0.1:1", b"[::1]",
                                  b"[::1]:8000", b"ime.example", b"IME.example:80"])
def test_loopback_names_and_allowed_hosts_are_answered(guarded, host):
    assert _status(guarded.port, host)[0] == 200


@pytest.mark.parametrize("host", [b"evil.example", b"evil.example:8000", b"127.0.0.1.nip.io", b"localhost.evil.example",
                                  b"ime.example.evil.example", b"localhost:http", b"[::1", None])
def test_a_foreign_host_gets_421_naming_what_is_served(guarded, host):
    """A page of evil.example whose DNS name resolves to 127.0.0.1 (DNS rebinding) must not read the answers."""
    for path in (b"/health", b"/", b"/convert"):
        status, body = _status(guarded.port, host, path)
        assert status == 421, (host, path, body)
        message = _json_error(body)
        assert "localhost" in message and "ime.example" in message and "--allow-host" in message
    assert _status(guarded.port, b"localhost")[0] == 200


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")  # newest starlette's advice
def test_allow_host_star_answers_any_host():
    from fastapi.testclient import TestClient

    from pinyin_hanzi.serving.service import create_app

    from conftest import untrained_converter

    for allowed, status in ((["*"], 200), (["localhost"], 421)):
        with TestClient(create_app(untrained_converter(), allowed_hosts=allowed),
                        base_url="http://anything.example:8000") as client:
            assert client.get("/health").status_code == status


# ------------------------------------------------------------------------------------------ slow clients

def test_slow_request_heads_are_answered_408_and_closed_however_they_dribble(guarded):
    """Slowloris: each connection sends a byte of its head every 0.2 s; the head timeout counts from the
    connection's start, so the dribble does not extend it."""
    socks = [_connect(guarded.port) for _ in range(MAX_CONNECTIONS // 2)]
    head = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 1000
    received = {index: b"" for index in range(len(socks))}
    closed_after: dict[int, float] = {}
    start = time.monotonic()
    try:
        for step in range(int((TIMEOUT_S + SLACK_S) / 0.2)):
            for index, sock in enumerate(socks):
                if index not in closed_after and _dribble(sock, head[step: step + 1], received, index):
                    closed_after[index] = time.monotonic() - start
            if len(closed_after) == len(socks):
                break
            time.sleep(0.2)
    finally:
        for sock in socks:
            sock.close()
    assert len(closed_after) == len(socks), f"still open after {TIMEOUT_S + SLACK_S} s: {received}"
    for index, data in received.items():
        assert data.startswith(b"HTTP/1.1 408 ") and b"request head did not arrive within 1 s" in data
        assert closed_after[index] >= TIMEOUT_S - 0.1


def _dribble(sock: socket.socket, byte: bytes, received: dict[int, bytes], index: int) -> bool:
    """Read what the server sent, then send one more byte unless it has answered; whether it has closed."""
    sock.setblocking(False)
    try:
        while chunk := sock.recv(65536):
            received[index] += chunk
        return True  # recv gave b"": closed
    except BlockingIOError:
        pass
    except ConnectionResetError:
        return True
    if not received[index]:
        sock.send(byte)
    return False


def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout(guarded):
    with _connect(guarded.port) as sock:
        data, closed = _read_until_closed(sock, TIMEOUT_S + SLACK_S)
    assert closed is not None and data.startswith(b"HTTP/1.1 408 ")


@pytest.mark.parametrize("name, request_bytes", [
    ("a body shorter than its Content-Length",
     b"POST /convert HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
     b'{"text": "ni'),
    ("a chunk of 2^64 bytes announced", b"POST /convert HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                                       b"\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n"),
    ("an unfinished chunked body", b"POST /convert HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                                  b"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"tex\r\n"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_a_body_that_does_not_arrive_is_answered_408_after_the_body_timeout(guarded, name, request_bytes):
    with _connect(guarded.port) as sock:
        sock.sendall(request_bytes)
        data, closed = _read_until_closed(sock, TIMEOUT_S + SLACK_S)
    assert closed is not None, f"{name}: still open"
    assert data.startswith(b"HTTP/1.1 408 ") and b"request body did not arrive within 1 s" in data


def test_a_next_request_whose_head_stops_short_on_a_kept_alive_connection_is_answered_408(guarded):
    with _connect(guarded.port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        sock.settimeout(5)
        first = sock.recv(65536)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: loc")  # within the keep-alive time, then nothing
        data, closed = _read_until_closed(sock, TIMEOUT_S + SLACK_S)
    assert first.startswith(b"HTTP/1.1 200 ") and closed is not None
    assert (first + data).count(b"HTTP/1.1 408 ") == 1 and b"request head did not arrive within 1 s" in data


def test_an_idle_kept_alive_connection_is_closed_after_the_keep_alive_timeout(guarded):
    with _connect(guarded.port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data, closed = _read_until_closed(sock, TIMEOUT_S + SLACK_S)
    assert data.startswith(b"HTTP/1.1 200 ") and data.count(b"HTTP/1.1") == 1  # closed quietly: no 408
    assert closed is not None and closed >= TIMEOUT_S - 0.1


def test_a_client_that_does_not_read_its_responses_is_dropped_after_the_send_timeout(guarded):
    """Many pipelined requests whose responses the client never reads: once the server's buffers are full it
    waits at most the send timeout, then drops the connection (seen here as a hang-up, without reading)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", guarded.port))
        sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: localhost\r\n\r\n" * 2000)  # ~16 MB of answers
        poller = select.poll()
        poller.register(sock, select.POLLERR | select.POLLHUP | select.POLLRDHUP)
        deadline, events = time.monotonic() + TIMEOUT_S + 3 * SLACK_S, []
        while not events and time.monotonic() < deadline:
            events = poller.poll(100)
    assert events, "the server still holds a connection whose client reads nothing"


# -------------------------------------------------------------------------------------- connection limit

def test_at_the_connection_limit_the_longest_waiting_connection_makes_room(guarded):
    """8 connections that send nothing fill the limit; a ninth, a health probe, is answered at once, and the
    idle connection that waited longest got 503."""
    socks = [_connect(guarded.port) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # all opened on the server's side
        assert _status(guarded.port, b"localhost")[0] == 200
        data, closed = _read_until_closed(socks[0], 0.5)
        assert closed is not None and data.startswith(b"HTTP/1.1 503 ")  # made room (a head timeout is a 408)
        assert b"too many connections (8)" in data
    finally:
        for sock in socks:
            sock.close()


def test_out_of_file_descriptors_health_is_answered_and_the_log_stays_short(trained):
    """With the open-file limit at 64, 100 slow clients: the service keeps its connections below the limit
    (so it never fails to accept() and log a traceback on every retry), and /health is answered throughout,
    once the burst is counted (until then the listener may close a new connection at once: Listener)."""
    def lower_file_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    _, _, checkpoint = trained
    process, url = start_service("--checkpoint", str(checkpoint), preexec_fn=lower_file_limit)
    port = int(url.rsplit(":", 1)[1])
    socks = []
    try:
        for _ in range(100):
            socks.append(_connect(port))
            socks[-1].sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")  # and never the rest
        deadline = time.monotonic() + 30  # a loaded machine's server may still be accepting the burst
        while not _answered(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        for _ in range(5):
            assert _status(port, b"localhost")[0] == 200
    finally:
        for sock in socks:
            sock.close()
        status, log = stop_service(process)
    assert status == 0, log
    assert "note: at most" in log and "the open-file limit (ulimit -n) is 64" in log
    assert "Traceback" not in log and "Too many open files" not in log, log
    assert len(log.splitlines()) < 10, log


def test_a_request_head_still_incomplete_past_16_kib_is_answered_400(guarded):
    """h11 buffers at most 16 KiB of an unfinished head (a head that comes whole in one read is parsed)."""
    with _connect(guarded.port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 17_000)
        data, closed = _read_until_closed(sock, 5)
    assert closed is not None and data.startswith(b"HTTP/1.1 400 ")


# ------------------------------------------------------------------------------------- model positions

def test_attention_past_the_models_positions_is_413_naming_the_limit(guarded):
    """The tiny model attends over 64 positions: 64 characters are answered, 65 are refused (not a 500)."""
    import httpx

    for length, status in ((64, 200), (65, 413)):
        answer = httpx.post(f"{guarded.url}/attention", json={"text": "你" * length, "syllables": ["ni"] * length},
                            timeout=60)
        assert answer.status_code == status, answer.text
    assert answer.json() == {"error": "65 syllables; this model attends over at most 64 positions",
                             "field": "syllables"}


# ---------------------------------------------------------------------------------------------- the log

def test_answered_requests_log_at_most_a_line_each_and_no_traceback(guarded):
    """Requests that get an answer (or whose client leaves) write at most one log line each, and never a
    traceback: clients that disconnect mid-body or while converting, odd bodies, odd paths, odd HTTP."""
    before = len(output(guarded.process).splitlines())
    leaving = [_post(json.dumps({"text": ["ni hao"] * 64, "beam": 16, "nbest": 10}).encode(), close=False),
               _post(b'{"text": "ni hao"}')[:-5]]  # gone while its text converts; gone mid-body
    for request in leaving:
        with _connect(guarded.port) as sock:
            sock.sendall(request)
    answered = [
        b"GET /web/../serve.py HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        b"GET /web/ime.js HTTP/1.1\r\nHost: localhost\r\nRange: bytes=999999-\r\nConnection: close\r\n\r\n",
        b"GET /web/ime.js HTTP/1.1\r\nHost: localhost\r\nRange: bytes=abc\r\nConnection: close\r\n\r\n",
        b"HEAD /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        _post(b'{"text": "ni"}').replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n"),
        _post(b'{"text": "ni", "beam": ' + b"9" * 5000 + b"}"),  # an integer Python will not parse
        _post(b'{"text": ' + b"[" * 2000 + b"]" * 2000 + b"}"),  # nested past the parser's depth
        _post(b'{"text": "ni", "beam": NaN}'),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 100,  # TLS to a plain HTTP port
        b"GET /health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    ]
    for request in answered:
        with _connect(guarded.port) as sock:
            sock.sendall(request)
            _, closed = _read_until_closed(sock, 30)
        assert closed is not None
    time.sleep(1)  # the conversion whose client left ends
    assert _status(guarded.port, b"localhost")[0] == 200
    added = output(guarded.process).splitlines()[before:]
    assert "Traceback" not in "\n".join(added)
    assert len(added) <= len(leaving) + len(answered), added


# ---------------------------------------------------------------------------------------- the address

@pytest.mark.parametrize("case", ["port in use", "no such address", "not this machine's address"])
def test_an_address_it_cannot_listen_on_is_one_error_line_and_status_2(case):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        host, port = {"port in use": ("127.0.0.1", taken.getsockname()[1]),
                      "no such address": ("256.1.1.1", free_port()),
                      "not this machine's address": ("192.0.2.1", free_port())}[case]  # 192.0.2.1: TEST-NET-1
        command, env = serve_command("--host", host, "--port", str(port))
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert {"port in use": "the port is in use", "no such address": "--host 256.1.1.1: neither an address",
            "not this machine's address": "192.0.2.1 is not an address of this machine"}[case] in done.stderr
    assert time.monotonic() - started < 60  # before loading the model
