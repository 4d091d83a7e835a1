"""The HTTP service (pinyin_hanzi/serving/service.py) run as a user runs it: uvicorn on 127.0.0.1 with the shipped model,
started once for the module. Bad requests get the documented status and a JSON error naming the field, and the
service still answers /health after each; SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from pinyin_hanzi.serving.limits import Limits

from conftest import ROOT
from serving import serve_command, start_service, stop_service

LIMITS = Limits()
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def service():
    process, url = start_service()
    with httpx.Client(base_url=url, timeout=60) as client:
        client.process = process
        yield client
    stop_service(process)


def post(client: httpx.Client, path: str, body) -> httpx.Response:
    return client.post(path, json=body)


# ------------------------------------------------------------------------------------------ conversions

def test_convert_one_text_gives_nbest_with_readings(service):
    answer = post(service, "/convert", {"text": "ni hao", "nbest": 3}).json()
    assert answer["input"] == "ni hao" and answer["output"] == "你好"
    candidates = answer["candidates"]
    assert 1 <= len(candidates) <= 3 and candidates[0]["text"] == "你好"
    assert len({c["text"] for c in candidates}) == len(candidates)  # distinct
    scores = [c["score"] for c in candidates]
    assert scores == sorted(scores, reverse=True) and all(s <= 0 and math.isfinite(s) for s in scores)
    assert candidates[0]["syllables"] == ["ni", "hao"]
    assert candidates[0]["pieces"] == [{"reading": "ni", "text": "你", "passthrough": False},
                                       {"reading": "hao", "text": "好", "passthrough": False}]


def test_passthrough_pieces_are_marked(service):
    best = post(service, "/convert", {"text": "2024 nian", "nbest": 1}).json()["candidates"][0]
    assert best["text"] == "2024年"
    assert [p["passthrough"] for p in best["pieces"]] == [True] * 4 + [False]
    assert [p["reading"] for p in best["pieces"]] == ["2", "0", "2", "4", "nian"]


def test_a_request_reads_letters_with_its_own_typing_options(service):
    """prefixes, fuzzy and shuangpin per request (what the IBus engine sends), else the model's own reading."""
    def best(**options):
        answer = post(service, "/convert", {"text": options.pop("text", "wxqbj"), "nbest": 1, **options})
        assert answer.status_code == 200, answer.text
        return answer.json()["candidates"][0]

    assert best()["text"] == best(prefixes="auto")["text"] != "wxqbj"  # the shipped model reads abbreviations
    assert best(prefixes="on")["segmentation"] == ["w*", "x*", "q*", "b*", "j*"]
    assert best(prefixes="off")["text"] == best(prefixes=False)["text"] != best()["text"]
    assert best(text="zongguo")["text"] != best(text="zongguo", fuzzy=["z-zh"])["text"] == "中国"
    assert best(text="nihk", shuangpin="microsoft")["text"] == "你好" != best(text="nihk", shuangpin="")["text"]


def test_a_list_converts_as_a_batch_with_the_same_results_as_one_by_one(service):
    texts = ["wo men qu bei jing ba", "xie xie", "jin tian tian qi hen hao"]
    batch = post(service, "/convert", {"text": texts, "beam": 3, "nbest": 2}).json()["results"]
    assert [r["input"] for r in batch] == texts
    for text, result in zip(texts, batch):
        alone = post(service, "/convert", {"text": text, "beam": 3, "nbest": 2}).json()
        assert [c["text"] for c in result["candidates"]] == [c["text"] for c in alone["candidates"]]
        assert result["output"] == alone["output"]
    assert batch[0]["output"] == "我们去北京吧"


def test_requests_arriving_together_share_decoding_calls(service):
    before = service.get("/health").json()
    texts = [f"wo men ming tian zao shang {n} dian jian" for n in range(16)]
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda text: post(service, "/convert", {"text": text, "beam": 1, "nbest": 1}),
                                texts))
    assert all(answer.status_code == 200 for answer in answers)
    assert [answer.json()["input"] for answer in answers] == texts  # each client gets its own answer
    after = service.get("/health").json()
    assert after["lines"] - before["lines"] == 16
    assert after["calls"] - before["calls"] < 16  # some were decoded together
    assert after["largest_call"] > 1


def test_attention_is_characters_by_syllables_and_rows_sum_to_one(service):
    answer = post(service, "/attention", {"text": "我想去北京", "syllables": ["wo", "xiang", "qu", "bei", "jing"]})
    assert answer.status_code == 200
    body = answer.json()
    assert body["chars"] == list("我想去北京") and body["syllables"] == ["wo", "xiang", "qu", "bei", "jing"]
    assert len(body["layers"]) >= 1
    for layer in body["layers"]:
        assert len(layer) == 5 and all(len(row) == 5 for row in layer)
        assert all(abs(sum(row) - 1) < 1e-4 for row in layer)


def test_health_page_and_openapi(service):
    health = service.get("/health").json()
    assert health["status"] == "ok" and health["checkpoint"].endswith("model.pt") and health["batching"] is True
    worker, = health["workers"]
    assert worker["kind"] == "process" and worker["state"] == "ready" and worker["pid"] != service.process.pid
    assert _alive(worker["pid"])
    page = service.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="editor"' in page.text and "/web/ime.js" in page.text
    for asset in (page, service.get("/web/ime.js"), service.get("/web/ime.css")):
        assert asset.status_code == 200
        assert "http://" not in asset.text and "https://" not in asset.text  # offline: nothing from elsewhere
    assert "/convert" in service.get("/openapi.json").json()["paths"]
    assert service.get("/docs").status_code == 200


# ------------------------------------------------------------------------------------------ bad requests

TOO_LONG = "a" * (LIMITS.max_line_chars + 1)
# Each letter an abbreviation; a syllable after every 20 keeps each run a real one (a run of more than 32 letters
# passes through as typed, at no cost).
ABBREVIATIONS = ("b c d f g h j k l m n p q r s t w x y z ni " * 7)[:LIMITS.max_line_chars]


def _chunks(total: int):
    for _ in range(total // 4096 + 1):
        yield b" " * 4096


# (name, method, path, request keyword arguments, status, field named in the error)
BAD_REQUESTS = [
    ("malformed JSON", "POST", "/convert", {"content": b'{"text": "ni hao",', "headers": JSON}, 422, "body"),
    ("empty body", "POST", "/convert", {"content": b"", "headers": JSON}, 422, "body"),
    ("JSON list of numbers", "POST", "/convert", {"json": [1, 2]}, 422, "body"),
    ("JSON string", "POST", "/convert", {"json": "ni hao"}, 422, "body"),
    ("JSON null", "POST", "/convert", {"content": b"null", "headers": JSON}, 422, "body"),
    ("no text", "POST", "/convert", {"json": {"beam": 5}}, 422, "text"),
    ("text a number", "POST", "/convert", {"json": {"text": 5}}, 422, "text"),
    ("text null", "POST", "/convert", {"json": {"text": None}}, 422, "text"),
    ("text an object", "POST", "/convert", {"json": {"text": {"a": "ni"}}}, 422, "text"),
    ("a number in a batch", "POST", "/convert", {"json": {"text": ["ni hao", 3]}}, 422, "text"),
    ("beam a string", "POST", "/convert", {"json": {"text": "ni", "beam": "5"}}, 422, "beam"),
    ("beam 0", "POST", "/convert", {"json": {"text": "ni", "beam": 0}}, 422, "beam"),
    ("beam too large", "POST", "/convert", {"json": {"text": "ni", "beam": 10_000}}, 422, "beam"),
    ("beam a float", "POST", "/convert", {"json": {"text": "ni", "beam": 2.5}}, 422, "beam"),
    ("beam a boolean", "POST", "/convert", {"json": {"text": "ni", "beam": True}}, 422, "beam"),
    ("nbest 0", "POST", "/convert", {"json": {"text": "ni", "nbest": 0}}, 422, "nbest"),
    ("nbest too large", "POST", "/convert", {"json": {"text": "ni", "nbest": 1000}}, 422, "nbest"),
    ("option a string", "POST", "/convert", {"json": {"text": "ni", "chinese_punctuation": "yes"}}, 422,
     "chinese_punctuation"),
    ("unknown field", "POST", "/convert", {"json": {"text": "ni", "beam_size": 5}}, 422, "beam_size"),
    ("an unknown fuzzy pair", "POST", "/convert", {"json": {"text": "ni", "fuzzy": ["z-q"]}}, 422, "fuzzy"),
    ("an unknown shuangpin layout", "POST", "/convert", {"json": {"text": "ni", "shuangpin": "qwerty"}}, 422,
     "shuangpin"),
    ("prefixes neither a boolean nor a mode", "POST", "/convert", {"json": {"text": "ni", "prefixes": "yes"}}, 422,
     "prefixes"),
    ("lone surrogate", "POST", "/convert", {"content": b'{"text": "ni \\ud800"}', "headers": JSON}, 422, "text"),
    ("not UTF-8", "POST", "/convert", {"content": b'{"text": "\xff\xfe ni"}', "headers": JSON}, 400, "body"),
    ("Latin-1, not UTF-8", "POST", "/convert", {"content": '{"text": "café"}'.encode("latin-1"), "headers": JSON},
     400, "body"),
    ("JSON nested too deep", "POST", "/convert", {"content": b"[" * 100_000, "headers": JSON}, 400, None),
    ("body over the limit", "POST", "/convert",
     {"content": json.dumps({"text": ["ni hao"] * 40_000}).encode(), "headers": JSON}, 413, "body"),
    ("chunked body over the limit", "POST", "/convert",
     {"content": _chunks(LIMITS.max_body_bytes + 1), "headers": JSON}, 413, "body"),
    ("one text too long", "POST", "/convert", {"json": {"text": TOO_LONG}}, 413, "text"),
    ("too many texts", "POST", "/convert", {"json": {"text": ["ni"] * (LIMITS.max_lines + 1)}}, 413, "text"),
    ("a batch with one text too long", "POST", "/convert", {"json": {"text": ["ni", TOO_LONG]}}, 413, "text.1"),
    ("over the work budget: 32 texts of 256 letters read as abbreviations", "POST", "/convert",
     {"json": {"text": ["ni hao", ABBREVIATIONS[:80]] * 32}}, 413, "text"),
    ("one text over the work limit per text", "POST", "/convert", {"json": {"text": ["ni", ABBREVIATIONS]}}, 413,
     "text.1"),
    ("over the work budget at beam 16", "POST", "/convert",
     {"json": {"text": ["wo men ming tian zao shang ba dian zai xue xiao jian mian"] * 256, "beam": 16}}, 413, "text"),
    ("not declared JSON", "POST", "/convert", {"content": b'{"text": "ni"}', "headers":
                                               {"Content-Type": "text/plain"}}, 415, "body"),
    ("no content type", "POST", "/convert", {"content": b'{"text": "ni"}'}, 415, "body"),
    ("attention, lengths differ", "POST", "/attention", {"json": {"text": "你好", "syllables": ["ni"]}}, 422,
     "syllables"),
    ("attention, empty", "POST", "/attention", {"json": {"text": "", "syllables": []}}, 422, "syllables"),
    ("attention, syllables a string", "POST", "/attention", {"json": {"text": "你", "syllables": "ni"}}, 422,
     "syllables"),
    ("learn, no text", "POST", "/learn", {"json": {}}, 422, "text"),
    ("learn, text a list", "POST", "/learn", {"json": {"text": ["核武器"]}}, 422, "text"),
    ("learn, text too long", "POST", "/learn", {"json": {"text": "核" * (LIMITS.max_line_chars + 1)}}, 413, "text"),
    ("learn, unknown field", "POST", "/learn", {"json": {"text": "核武器", "weight": 2}}, 422, "weight"),
    ("learn, lone surrogate", "POST", "/learn", {"content": b'{"text": "\\ud800"}', "headers": JSON}, 422, "text"),
    ("learn, not declared JSON", "POST", "/learn", {"content": b'{"text": "x"}', "headers":
                                                   {"Content-Type": "text/plain"}}, 415, "body"),
    ("forget, empty text", "POST", "/forget", {"json": {"text": ""}}, 422, "text"),
    ("forget, text a number", "POST", "/forget", {"json": {"text": 5}}, 422, "text"),
    ("forget, text too long", "POST", "/forget", {"json": {"text": "x" * (LIMITS.max_line_chars + 1)}}, 413, "text"),
    ("GET /learn", "GET", "/learn", {}, 405, None),
    ("GET /convert", "GET", "/convert", {}, 405, None),
    ("unknown path", "GET", "/nowhere", {}, 404, None),
]


@pytest.mark.parametrize("name, method, path, kwargs, status, field", BAD_REQUESTS,
                         ids=[case[0] for case in BAD_REQUESTS])
def test_bad_request_gets_its_status_and_the_service_keeps_answering(service, name, method, path, kwargs, status,
                                                                      field):
    answer = service.request(method, path, **kwargs)
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert isinstance(body["error"], str) and body["error"]
    assert body["field"] == field, body
    assert service.get("/health").status_code == 200
    assert post(service, "/convert", {"text": "ni hao", "nbest": 1}).json()["output"] == "你好"


def test_bad_request_suite_is_at_least_thirty_cases():
    assert len(BAD_REQUESTS) >= 30


# ------------------------------------------------------------------------------ the model process dies

def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: any of its threads is not a zombie. A killed process's first thread turns
    zombie before the others have finished exiting (freeing a model's memory can take a second), and its
    files, the pipe the server watches included, stay open until the last one has."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    return True
        except FileNotFoundError:
            continue
    return False


def _wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout_s} s"
        time.sleep(0.1)


def test_a_killed_model_process_makes_health_503_at_once_costs_503s_not_hangs_and_is_restarted(service):
    before = service.get("/health").json()["workers"][0]
    os.kill(before["pid"], signal.SIGKILL)
    _wait_until(lambda: not _alive(before["pid"]), 10, "dead")
    health = service.get("/health")  # asked before any conversion finds it dead: it looks, not just remembers
    assert health.status_code == 503 and health.json()["status"] == "unavailable", health.text
    assert "SIGKILL" in health.json()["error"] and health.json()["workers"][0]["state"] in ("starting", "dead")
    answer = post(service, "/convert", {"text": "ni hao", "nbest": 1})  # answered at once, not left waiting
    assert answer.status_code == 503 and answer.headers["Retry-After"].isdigit()
    assert "SIGKILL" in answer.json()["error"] and answer.json()["field"] is None
    _wait_until(lambda: service.get("/health").status_code == 200, 120, "restarted")
    after, = service.get("/health").json()["workers"]
    assert after["state"] == "ready" and after["restarts"] == before["restarts"] + 1 and after["pid"] != before["pid"]
    assert post(service, "/convert", {"text": "ni hao", "nbest": 1}).json()["output"] == "你好"


# ------------------------------------------------------------------------------------ one request's share

def test_a_small_request_is_answered_while_a_large_one_is_decoded(service):
    """A request within the work budget but seconds long is decoded in slices, and a `ni hao` sent while it
    runs is decoded between two of them: answered long before the large one."""
    from pinyin_hanzi.serving.request_cost import CostModel

    info = {"window": 32, "prefix_beam": 16, "prefixes": True}  # the shipped model's
    line = "b c d f g h j k l m n p q r s t"
    count = 10  # within the budget, several seconds of the model, each line its own slice
    assert LIMITS.slice_cost < 2 * CostModel.for_model(info).line_costs([line], 5)[0] < 0.2 * LIMITS.max_request_cost
    large = {"text": [line] * count, "beam": 5, "nbest": 1}
    post(service, "/convert", {"text": line})  # a model process just restarted is slow at its first calls
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        in_flight = pool.submit(post, service, "/convert", large)
        _wait_until(lambda: service.get("/health").json()["decoding"] > 0, 30, "decoding the large request")
        asked = time.monotonic()
        small = post(service, "/convert", {"text": "ni hao", "nbest": 1})
        small_s = time.monotonic() - asked
        large_still_running = not in_flight.done()
        answer = in_flight.result()
        large_s = time.monotonic() - started
    assert small.json()["output"] == "你好" and answer.status_code == 200 and len(answer.json()["results"]) == count
    assert large_still_running and small_s < large_s / 2, (small_s, large_s)


# --------------------------------------------------------------------------------------------- shutdown

def test_sigterm_finishes_the_requests_in_flight_then_stops(service):
    """Last in this module: it stops the module's service, and its model process with it."""
    worker = service.get("/health").json()["workers"][0]["pid"]
    texts = [f"wo men ming tian zao shang {n} dian zai xue xiao jian mian" for n in range(24)]
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(post, service, "/convert", {"text": texts, "beam": 5, "nbest": 5})
        deadline = time.monotonic() + 30
        while service.get("/health").json()["decoding"] == 0:  # its first slice is being decoded
            assert time.monotonic() < deadline and not in_flight.done()
            time.sleep(0.05)
        status, output = stop_service(service.process, timeout=60)
        answer = in_flight.result()
    assert answer.status_code == 200 and len(answer.json()["results"]) == 24
    assert status == 0, output
    assert output.rstrip().endswith("stopped") and "Traceback" not in output
    with pytest.raises(httpx.TransportError):
        service.get("/health", timeout=2)
    assert not _alive(worker)  # no orphan


def test_a_killed_server_leaves_no_model_process_behind():
    process, url = start_service()
    worker = httpx.get(f"{url}/health").json()["workers"][0]["pid"]
    process.kill()
    stop_service(process)  # waits for it, and closes its output file
    _wait_until(lambda: not _alive(worker), 30, "gone")


def test_a_model_that_cannot_load_is_one_error_line_and_status_2(tmp_path):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint")
    command, env = serve_command("--port", "0", "--checkpoint", str(broken))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in done.stderr


# ------------------------------------------------------------------------------- the batcher on its own

class RecordingConverter:
    """Converts each line to its upper-case self and records the lines of every call; a line "boom" raises,
    as a converter bug would. What is under test is the batcher around it, not a model."""

    beam, constrained, checkpoint = 5, True, None

    def __init__(self, delay_s: float = 0.0):
        self.calls: list[list[str]] = []
        self.delay_s = delay_s

    def convert_lines(self, lines, *, beam, nbest, constrained=True, chinese_punctuation=False):
        from types import SimpleNamespace

        time.sleep(self.delay_s)
        if "boom" in lines:
            raise RuntimeError("boom")
        self.calls.append(list(lines))
        return [[SimpleNamespace(text=line.upper(), score=-1.0, syllables=list(line), notes=[], read_as=[])]
                 for line in lines]


def _run_batcher(converter, jobs, **kwargs):
    """Submit ``jobs`` ((lines, beam) pairs) at once; each job's texts or exception, in order."""
    import asyncio

    from pinyin_hanzi.serving.batcher import DynamicBatcher

    async def scenario():
        batcher = DynamicBatcher(converter, **kwargs)
        await batcher.start()
        try:
            found = await asyncio.gather(*(batcher.convert(lines, beam=beam, nbest=1) for lines, beam in jobs),
                                         return_exceptions=True)
        finally:
            await batcher.stop()
        return [f if isinstance(f, Exception) else [c[0].text for c in f] for f in found]

    return asyncio.run(scenario())


def test_batcher_decodes_jobs_arriving_together_in_one_call_and_answers_each():
    converter = RecordingConverter()
    found = _run_batcher(converter, [(["a"], 5), (["b", "c"], 5), (["d"], 5)])
    assert found == [["A"], ["B", "C"], ["D"]]
    assert converter.calls == [["a", "b", "c", "d"]]


def test_batcher_keeps_jobs_with_other_options_apart_and_respects_the_line_cap():
    converter = RecordingConverter()
    assert _run_batcher(converter, [(["a"], 5), (["b"], 1), (["c"], 5)]) == [["A"], ["B"], ["C"]]
    assert sorted(converter.calls) == [["a", "c"], ["b"]]
    converter = RecordingConverter()
    _run_batcher(converter, [([str(i)], 5) for i in range(10)], max_lines=4)
    assert [len(call) for call in converter.calls] == [4, 4, 2]


def test_batcher_without_batching_converts_each_job_alone_in_order():
    converter = RecordingConverter()
    assert _run_batcher(converter, [(["a"], 5), (["b"], 5)], enabled=False) == [["A"], ["B"]]
    assert converter.calls == [["a"], ["b"]]


def test_a_failing_job_fails_alone_and_the_batcher_goes_on():
    converter = RecordingConverter()
    found = _run_batcher(converter, [(["a"], 5), (["boom"], 5), (["c"], 5)])
    assert found[0] == ["A"] and found[2] == ["C"]
    assert isinstance(found[1], RuntimeError)


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")  # newest starlette's advice
def test_an_unexpected_error_is_a_json_500_logged_in_one_line_and_the_app_keeps_serving(caplog):
    from fastapi.testclient import TestClient

    from pinyin_hanzi.serving.service import create_app

    with (caplog.at_level(logging.WARNING, logger="pinyin_hanzi.serving.service"),
          TestClient(create_app(RecordingConverter()), base_url="http://localhost") as client):
        answer = client.post("/convert", json={"text": "boom"})
        assert answer.status_code == 500
        assert answer.json() == {"error": "internal error: RuntimeError", "field": None}
        assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
            ("ERROR", "POST /convert failed: RuntimeError: boom", False)]  # one line, no traceback
        assert client.get("/health").json()["status"] == "ok"
        assert client.post("/convert", json={"text": "ok"}).json()["output"] == "OK"


class DyingModel:
    """A model process stand-in whose process dies on a line "die" and whose restart loads again, or fails
    after ``restarts_ok`` restarts (the batcher's side of a crash, without a process)."""

    kind = "process"
    info = {"beam": 5, "constrained": True, "checkpoint": None}

    def __init__(self, restarts_ok: int = 10):
        self.restarts, self.restarts_ok, self.dead = 0, restarts_ok, False

    def call(self, kind, lines, beam, nbest, chinese_punctuation):
        from types import SimpleNamespace

        from pinyin_hanzi.serving.worker import WorkerDied

        if self.dead or "die" in lines:
            self.dead = True
            raise WorkerDied("the model process was killed by SIGKILL")
        return [[SimpleNamespace(text=line.upper())] for line in lines]

    def state(self):
        return {"kind": self.kind, "state": "dead" if self.dead else "ready", "pid": 1, "restarts": self.restarts}

    def exited(self):
        return None  # it dies only during calls

    def restart(self):
        from pinyin_hanzi.errors import CheckpointError

        self.restarts += 1
        if self.restarts > self.restarts_ok:
            raise CheckpointError("model.pt: gone")
        self.dead = False


def _crash_scenario(model, rounds: int, **kwargs):
    """``rounds`` times: a batch holding "die" and a good line, then, after the restart, a good line. Every
    answer (texts, or the exception's status and message) and what on_fatal was told."""
    import asyncio

    from pinyin_hanzi.serving.batcher import DynamicBatcher
    from pinyin_hanzi.serving.limits import RequestError

    told = []

    async def scenario():
        batcher = DynamicBatcher(model, on_fatal=told.append, **kwargs)
        await batcher.start()
        answers = []
        try:
            for _ in range(rounds):
                found = await asyncio.gather(batcher.convert(["die"], beam=5, nbest=1),
                                             batcher.convert(["ok"], beam=5, nbest=1), return_exceptions=True)
                while batcher._tasks:  # the restart
                    await asyncio.gather(*list(batcher._tasks))
                found += await asyncio.gather(batcher.convert(["after"], beam=5, nbest=1), return_exceptions=True)
                answers.append([(f.status, f.message) if isinstance(f, RequestError) else f for f in found])
        finally:
            await batcher.stop()
        return answers, batcher.fatal

    answers, fatal = asyncio.run(scenario())
    return answers, fatal, told


def test_a_dead_model_process_fails_its_batch_with_503_and_is_restarted():
    model = DyingModel()
    answers, fatal, told = _crash_scenario(model, rounds=1)
    (die, ok, after), = answers
    assert die[0] == ok[0] == 503 and "SIGKILL" in die[1] and "restarted" in die[1]  # not retried one by one
    assert after[0][0].text == "AFTER" and model.restarts == 1 and fatal is None and told == []


def test_a_model_process_that_keeps_dying_or_cannot_restart_stops_the_service():
    answers, fatal, told = _crash_scenario(DyingModel(), rounds=3, max_restarts=2)
    assert fatal and "3 times within 60 s" in fatal and told == [fatal]
    assert answers[-1][2] == (503, f"the model is not available: {fatal}")
    answers, fatal, told = _crash_scenario(DyingModel(restarts_ok=0), rounds=1)
    assert fatal == "the model process could not be restarted: model.pt: gone" and told == [fatal]
    assert answers[0][2] == (503, f"the model is not available: {fatal}")


def test_a_large_job_is_decoded_in_slices_and_a_job_arriving_meanwhile_goes_before_its_next_slice():
    import asyncio

    from pinyin_hanzi.serving.batcher import DynamicBatcher

    converter = RecordingConverter(delay_s=0.2)

    async def scenario():
        batcher = DynamicBatcher(converter, slice_cost=500, max_wait_ms=0)
        await batcher.start()
        try:
            large = asyncio.ensure_future(batcher.convert(["a", "b", "c", "d"], beam=5, nbest=1,
                                                         costs=[300, 300, 300, 100]))
            await asyncio.sleep(0.1)  # the first slice is being decoded
            small = await batcher.convert(["x"], beam=5, nbest=1, costs=[10])
            return [c[0].text for c in await large], [c[0].text for c in small]
        finally:
            await batcher.stop()

    assert asyncio.run(scenario()) == (["A", "B", "C", "D"], ["X"])
    assert converter.calls == [["a"], ["x", "b"], ["c", "d"]]  # 300 + 300 would pass 500; x goes first


def test_a_model_process_that_dies_while_idle_is_restarted_without_a_request():
    import asyncio

    from pinyin_hanzi.serving.batcher import WATCH_INTERVAL_S, DynamicBatcher

    model = DyingModel()

    async def scenario():
        batcher = DynamicBatcher(model)
        await batcher.start()
        try:
            model.dead = True
            model.exited = lambda: "the model process was killed by SIGKILL" if model.dead else None
            await asyncio.sleep(WATCH_INTERVAL_S * 1.5)  # nobody asks anything meanwhile
            while batcher._tasks:  # the restart
                await asyncio.gather(*list(batcher._tasks))
            return batcher.unavailable()
        finally:
            await batcher.stop()

    assert asyncio.run(scenario()) is None and model.restarts == 1


def test_with_two_models_batches_are_decoded_side_by_side():
    import asyncio

    from pinyin_hanzi.serving.batcher import DynamicBatcher

    first, second = RecordingConverter(delay_s=0.3), RecordingConverter(delay_s=0.3)

    async def scenario():
        batcher = DynamicBatcher([first, second], max_lines=2)
        await batcher.start()
        try:
            started = time.monotonic()
            found = await asyncio.gather(*(batcher.convert([str(i)], beam=5, nbest=1) for i in range(4)))
            return [f[0][0].text for f in found], time.monotonic() - started
        finally:
            await batcher.stop()

    found, seconds = asyncio.run(scenario())
    assert found == ["0", "1", "2", "3"]
    assert first.calls and second.calls and sorted(first.calls + second.calls) == [["0", "1"], ["2", "3"]]
    assert seconds < 0.55  # two calls of 0.3 s at once, not one after the other


def test_two_model_processes_by_default_on_two_cores_or_more(monkeypatch):
    from pinyin_hanzi.cli import serve

    for cores, expected in ((1, 1), (2, 2), (16, 2)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, cores=cores: set(range(cores)), raising=False)
        assert serve.default_model_processes("process", "cpu") == expected
        assert serve.default_model_processes("thread", "cpu") == serve.default_model_processes("process", "cuda") == 1
    parser = serve._parser()
    for argv, expected in (([], 2), (["--workers", "3"], 3), (["--worker", "thread"], 1)):
        args = parser.parse_args(argv)
        serve._check_args(parser, args)
        assert args.workers == expected
