"""The service-backed IBus engine (pinyin_hanzi/ime/remote.py and the conversions over it): on a stand-in
service (a small http.server speaking serve.py's JSON) the rules: typing options sent, learning posted on a
commit, a service that is down passes the letters with one notice and no busy retrying, and conversion again
once it is back; then the real thing, serve.py with the shipped model under a real ibus-daemon, killed and
restarted while the engine runs."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pinyin_hanzi.ime import composer as keys
from pinyin_hanzi.ime import conversion
from pinyin_hanzi.ime.composer import Composer
from pinyin_hanzi.ime.conversion import Conversions
from pinyin_hanzi.ime.engine import load_converter
from pinyin_hanzi.ime.remote import ServiceConverter
from pinyin_hanzi.ime.settings import ImeSettings

NOTICE = "the service does not convert"
FRESH = "PINYIN_HANZI_TEST_FRESH_PROCESS"  # set in the process the real-service test reruns itself in
LONGEST = 12  # letters the stand-in converts: a longer line is refused as over its work limit (413)


class StandInService:
    """serve.py's /convert (each text's candidates: the letters upper-cased, then reversed; one token a
    letter) and /learn, on a port that :meth:`stop` closes and :meth:`start` opens again."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.learned: list[str] = []
        self.port = 0
        self.start()

    def start(self) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.bodies.append(body)
                status, answer = service.answer(self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        if path == "/learn":
            self.learned.append(body["text"])
            return 200, {"learned": [body["text"]], "clauses": len(self.learned)}
        if any(len(text) > LONGEST for text in body["text"]):
            return 413, {"error": "this text would cost too much", "field": "text"}
        return 200, {"results": [{"input": text, "candidates": [
            {"text": candidate, "segmentation": list(text)} for candidate in (text.upper(), text.upper()[::-1])
        ][: body["nbest"]]} for text in body["text"]]}


def press(composer: Composer, text: str) -> None:
    for char in text:
        composer.process_key(keys.RETURN if char == "\n" else ord(char), 0)


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.01)


@pytest.fixture
def service():
    stand_in = StandInService()
    yield stand_in
    stand_in.stop()


def test_the_service_gets_the_typing_options_and_each_commit_to_learn(service):
    settings = ImeSettings(service=service.url, fuzzy=("z-zh",), shuangpin="", prefixes="on", sentences=3)
    conversions = Conversions(settings, load_converter(settings))
    composer = Composer(conversions)
    assert isinstance(conversions.converter or (conversions.wait(5) and conversions.converter), ServiceConverter)
    press(composer, "nihao")
    wait_for(lambda: composer.view().exact)  # converted on the thread, then shown with its table
    assert composer.view().candidates == ("NIHAO", "OAHIN") and composer.view().preedit == "NIHAO"
    press(composer, "2")
    assert composer.take_commits() == ["OAHIN"] and service.learned == ["OAHIN"]
    converting = [body for body in service.bodies if "nbest" in body]
    assert converting and all(body["prefixes"] == "on" and body["fuzzy"] == ["z-zh"] and body["shuangpin"] == ""
                              and body["nbest"] == 3 for body in converting)
    press(composer, "a" * (LONGEST + 1) + " ")  # a line the service refuses: its letters pass, nothing is down
    assert composer.take_commits() == ["a" * (LONGEST + 1)] and conversions.down is None
    conversions.stop()


def test_a_service_that_is_down_passes_letters_with_one_notice_then_converts_again(service, capsys, monkeypatch):
    monkeypatch.setattr(conversion, "RETRY_S", 0.5)
    settings = ImeSettings(service=service.url)
    conversions = Conversions(settings, load_converter(settings))
    composer = Composer(conversions)
    conversions.wait(5)
    press(composer, "ni ")
    assert composer.take_commits() == ["NI"]
    service.stop()
    attempts = []
    post = conversions.converter._post
    conversions.converter._post = lambda *args: attempts.append(args) or post(*args)
    press(composer, "hao")
    view = composer.view()  # the thread asks the service and finds it down
    wait_for(lambda: conversions.down is not None)
    view = composer.view()
    assert view.preedit == "hao" and not view.exact and "letters pass as typed" in view.typed
    press(composer, " ")  # Space commits the letters: the keys' thread does not ask a service that is down
    for letters in ("ma ", "ba\n", "ni "):
        press(composer, letters)
        composer.view()
    assert composer.take_commits() == ["hao", "ma", "ba", "ni"]
    assert len(attempts) == 1  # keys within RETRY_S of the failure do not ask again: no busy loop
    assert capsys.readouterr().err.count(NOTICE) == 1
    service.start()  # on the same port
    time.sleep(conversion.RETRY_S)
    press(composer, "hao")
    composer.view()  # a key after RETRY_S: the thread asks again and finds the service back
    wait_for(lambda: composer.view().exact)
    assert conversions.down is None and composer.view().preedit == "HAO"
    press(composer, " ")
    assert composer.take_commits() == ["HAO"] and service.learned[-1] == "HAO"
    err = capsys.readouterr().err
    assert "converts again" in err and NOTICE not in err
    conversions.stop()


def test_a_service_backed_engine_loads_no_model():
    """remote.py, the conversions and the engine's modules import neither torch nor the pinyin tables."""
    import subprocess
    import sys

    code = ("import sys, pinyin_hanzi.ime.__main__, pinyin_hanzi.ime.engine, pinyin_hanzi.ime.remote;"
            "print(sorted(m for m in ('torch', 'numpy', 'pypinyin') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------- serve.py and the real ibus-daemon


def engine_rss_mb(pid: int) -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())[1]) / 1024


def test_the_engine_over_the_real_service_killed_and_restarted(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    from pinyin_hanzi.ime.headless import HeadlessIBus, missing

    bus_made = "gi.repository.IBus" in sys.modules  # before missing(), which imports it
    reason = missing()
    if reason:
        pytest.skip(reason)
    if bus_made and not os.environ.get(FRESH):
        # IBus keeps one bus per process: after another module's headless session, run in a process of its own
        test = f"{__file__}::test_the_engine_over_the_real_service_killed_and_restarted"
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                             env={**os.environ, FRESH: "1"}, capture_output=True, text=True)
        assert run.returncode == 0 and " passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
        return
    import serving

    process, url = serving.start_service("--history", "none")
    port = int(url.rsplit(":", 1)[1])
    settings = tmp_path / "ime.yaml"
    settings.write_text(f"service: {url}\n")
    try:
        with HeadlessIBus(tmp_path, settings) as session:
            session.activate()
            session.type("nihao")
            session.settle()
            assert session.preedit == "你好"
            session.type(" ")
            assert session.commits == ["你好"]
            engine = session.engine_pid()
            assert "libtorch" not in Path(f"/proc/{engine}/maps").read_text() and engine_rss_mb(engine) < 150
            # nor the service's server process, whose model process converted (it only unpickles the answers)
            assert "libtorch" not in Path(f"/proc/{process.pid}/maps").read_text()
            serving.stop_service(process)  # killed: the letters pass, with one notice in the engine's log
            session.type("woxiang ")
            session.type("nihao ")
            assert session.commits == ["你好", "woxiang", "nihao"] and session.engine_alive()
            monkeypatch.setattr(serving, "free_port", lambda: port)
            process, _ = serving.start_service("--history", "none")  # back, on the same port
            time.sleep(conversion.RETRY_S)
            session.type("woxiangqu")
            session.settle()
            assert session.preedit == "我想去"
            session.type(" ")
            assert session.commits[-1] == "我想去"
            log = (tmp_path / "ibus-daemon.log").read_text(encoding="utf-8")
            assert log.count(NOTICE) == 1 and "converts again" in log and "Traceback" not in log
    finally:
        serving.stop_service(process)
