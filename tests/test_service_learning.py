"""The service learns from its user (issue #50): ``POST /learn`` and ``POST /forget`` change the server's user
history (pinyin_hanzi/serving/learning.py), every model converts with what it holds, and ``serve.py --history
FILE`` loads it at start and saves it. The batcher's side first, with stand-in models (milliseconds); then the
real service with the shipped model in two model processes: ``he wu qi`` is 和武器 until 核武器 is learned once."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import httpx
import pytest

from pinyin_hanzi.lm.history import HEADER, History
from pinyin_hanzi.serving.batcher import DynamicBatcher
from pinyin_hanzi.serving.worker import WorkerDied, update_history

from serving import start_service, stop_service


class Learner:
    """A converter stand-in with a history in memory, as a model process's: each call records the clauses it
    held when the call began, and converts a line to itself."""

    beam, constrained, checkpoint = 5, True, None

    def __init__(self, delay_s: float = 0.0):
        self.history, self.delay_s, self.seen = History(), delay_s, []

    def convert_lines(self, lines, *, beam, nbest, constrained=True, chinese_punctuation=False):
        self.seen.append(list(self.history.clauses))
        time.sleep(self.delay_s)
        return [[SimpleNamespace(text=line, score=-1.0, syllables=[], notes=[], read_as=[])] for line in lines]


class RestartingProcess:
    """A model process stand-in whose process dies on a line "die" and comes back, after ``restart_s``, with
    an empty history (as a new process does); a line converts to the clauses its history holds."""

    kind = "process"
    info = {"beam": 5, "constrained": True, "checkpoint": None}

    def __init__(self, restart_s: float = 0.0):
        self.history, self.restart_s, self.dead, self.restarts = History(), restart_s, False, 0

    def call(self, kind, *args):
        if kind == "history":
            return update_history(self, *args)
        if self.dead or "die" in args[0]:
            self.dead = True
            raise WorkerDied("the model process was killed by SIGKILL")
        return [[SimpleNamespace(text=" ".join(self.history.clauses))] for _ in args[0]]

    def state(self):
        return {"kind": self.kind, "state": "dead" if self.dead else "ready", "pid": 1, "restarts": self.restarts}

    def exited(self):
        return None

    def restart(self):
        time.sleep(self.restart_s)
        self.history, self.dead, self.restarts = History(), False, self.restarts + 1


async def _settle(batcher: DynamicBatcher) -> None:
    while batcher._tasks:  # restarts
        await asyncio.gather(*list(batcher._tasks))


def test_every_model_learns_before_its_next_call_also_one_busy_when_it_was_learned():
    models = [Learner(delay_s=0.2), Learner(delay_s=0.2)]

    async def scenario():
        batcher = DynamicBatcher(models, max_wait_ms=0, max_lines=1)
        await batcher.start()
        try:
            in_flight = asyncio.ensure_future(batcher.convert(["a"], beam=5, nbest=1))
            await asyncio.sleep(0.1)  # one model is decoding "a"
            assert batcher.history.learn("核武器，好") == ["核武器，", "好"]
            await batcher.convert(["b"], beam=5, nbest=1)  # on the other, while the first is busy
            await in_flight
            await asyncio.gather(*(batcher.convert([line], beam=5, nbest=1) for line in "cd"))  # one on each
            assert batcher.history.forget("核") == 1
            await asyncio.gather(*(batcher.convert([line], beam=5, nbest=1) for line in "ef"))
        finally:
            await batcher.stop()

    asyncio.run(scenario())
    learned = ["核武器，", "好"]
    # the busy one began "a" before the learning, and had it at its next call
    assert sorted(model.seen for model in models) == [[[], learned, ["好"]], [learned, learned, ["好"]]]
    assert [list(model.history.clauses) for model in models] == [["好"], ["好"]]


def test_models_start_with_the_history_loaded_and_a_restarted_one_gets_all_of_it_once():
    history = History()
    history.extend(["我们"])  # as loaded from a file
    model = RestartingProcess(restart_s=0.3)

    async def scenario():
        batcher = DynamicBatcher(model, history=history, max_wait_ms=0)
        await batcher.start()
        try:
            at_start = list(model.history.clauses)  # before any conversion
            batcher.history.learn("核武器")
            died = await asyncio.gather(batcher.convert(["die"], beam=5, nbest=1), return_exceptions=True)
            await asyncio.sleep(0.1)  # restarting
            batcher.history.learn("北京")
            await _settle(batcher)
            found = await batcher.convert(["ok"], beam=5, nbest=1)
            return at_start, died[0], found[0][0].text
        finally:
            await batcher.stop()

    at_start, died, after = asyncio.run(scenario())
    assert at_start == ["我们"] and died.status == 503 and model.restarts == 1
    assert after == "我们 核武器 北京"  # everything learned, each clause once


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")  # newest starlette's advice
def test_learn_and_forget_through_the_app_with_the_model_on_a_thread():
    from fastapi.testclient import TestClient

    from pinyin_hanzi.serving.service import create_app

    converter = Learner()
    with TestClient(create_app(converter), base_url="http://localhost") as client:
        answer = client.post("/learn", json={"text": "我们去北京吧。好吗"})
        assert answer.status_code == 200 and answer.json() == {"learned": ["我们去北京吧。", "好吗"], "clauses": 2}
        assert client.post("/learn", json={"text": "ni hao"}).json() == {"learned": [], "clauses": 2}  # no hanzi
        client.post("/convert", json={"text": "x"})
        assert converter.seen == [["我们去北京吧。", "好吗"]]
        assert client.post("/forget", json={"text": "北京"}).json() == {"forgotten": 1, "clauses": 1}
        assert client.get("/health").json()["learned"] == 1
        refused = client.post("/learn", json={"text": "核武器"}, headers={"Host": "evil.example:8000"})
        assert refused.status_code == 421  # the Host check applies: a web page elsewhere cannot teach it
        assert client.post("/forget", json={}).json() == {"forgotten": 1, "clauses": 0}
        client.post("/convert", json={"text": "y"})
    assert converter.seen[-1] == [] and len(converter.history) == 0


# ------------------------------------------------------------------------------- the real service

@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """The shipped model in two model processes, learning into a history file that holds 核武器 already."""
    history = tmp_path_factory.mktemp("learning") / "history.txt"
    history.write_text(f"{HEADER}\n{WRITTEN_BY_THE_TEST}\n核武器\n", encoding="utf-8")
    process, url = start_service("--workers", "2", "--history", str(history))
    with httpx.Client(base_url=url, timeout=60) as client:
        client.process, client.history = process, history
        yield client
    stop_service(process)


WRITTEN_BY_THE_TEST = "# written by the test"  # gone once the service has saved the file


def _outputs(service, text: str, times: int = 4) -> set[str]:
    """What ``text`` converts to, asked ``times`` times one after the other: the free model processes take
    turns, so both answer."""
    return {service.post("/convert", json={"text": text, "nbest": 1}).json()["output"] for _ in range(times)}


def _clauses(text: str) -> list[str]:
    """The clauses of a history file's ``text``."""
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_the_history_file_is_loaded_at_start_into_every_model_process(service):
    assert service.get("/health").json()["learned"] == 1
    assert _outputs(service, "he wu qi") == {"核武器"}


def test_forget_forgets_it(service):
    assert service.post("/forget", json={"text": "核武器"}).json() == {"forgotten": 1, "clauses": 0}
    assert _outputs(service, "he wu qi") == {"和武器"}


def test_a_word_learned_once_is_converted_right_the_next_time_by_every_model_process(service):
    answer = service.post("/learn", json={"text": "核武器"})
    assert answer.status_code == 200 and answer.json() == {"learned": ["核武器"], "clauses": 1}
    assert _outputs(service, "he wu qi") == {"核武器"}
    batch = service.post("/convert", json={"text": ["ta men you he wu qi", "hewuqi"], "nbest": 1}).json()
    assert [result["output"] for result in batch["results"]] == ["他们有核武器", "核武器"]


def test_the_history_file_is_saved_as_it_grows_and_at_shutdown(service):
    """Last in this module: it stops the module's service."""
    deadline = time.monotonic() + 10  # saved in the background, about a second after a change
    while WRITTEN_BY_THE_TEST in (text := service.history.read_text(encoding="utf-8")) or _clauses(text) != ["核武器"]:
        assert time.monotonic() < deadline, text
        time.sleep(0.2)
    service.post("/learn", json={"text": "我们去北京吧。"})
    status, output = stop_service(service.process)
    assert status == 0 and "learning into" in output and ", 1 clause)" in output, output
    assert _clauses(service.history.read_text(encoding="utf-8")) == ["核武器", "我们去北京吧。"]
