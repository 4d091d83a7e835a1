"""Load test of the HTTP service: starts it (``python -m pinyin_hanzi.cli.serve``) on 127.0.0.1 in each mode
asked for, drives each from N concurrent closed-loop clients (each sends its next request when its last one
is answered) and reports sentences/s, p50 and p99 latency and failed requests at each N, the modes side by side.

    python bench/serve_load.py                                   # 1, 8, 32, 128 clients, 20 s each, beam 5
    python bench/serve_load.py --clients 32 --seconds 300 --max-requests 10000 --modes process  # a long run

Modes: ``process`` (the default service: model processes of their own, two on two or more cores, dynamic
batching), ``process-x1`` and ``process-x2`` (one or two model processes, ``--workers N``), ``thread`` (the
model on a thread of the server's process, batching), ``unbatched`` (one model process, each request decoded
alone). All the services asked for run at once, idle but one, and the modes take turns at each level, so a
comparison sees the same machine even when other work loads it.

Every request converts one 10-syllable line (16 sentences, cycled). Each level stops after ``--seconds`` or
``--max-requests``, whichever comes first; traffic goes to 127.0.0.1 only. The clients run in this process,
on the same CPU as the service: on a 2-core machine they take a share of it, so the figures are a lower bound
(the clients are plain HTTP/1.1 over asyncio streams, :class:`Connection`, to keep that share small).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi.cli import check_bounds  # noqa: E402
from pinyin_hanzi.serving.schemas import MAX_BEAM, MAX_REQUEST_NBEST  # noqa: E402
from pinyin_hanzi.text.pinyin import hanzi_to_tokens  # noqa: E402

# Ten characters each, so ten syllables typed.
SENTENCES = ["我们明天早上八点见面", "今天的天气非常好啊", "他每天骑自行车上班去", "这本书对我很有帮助",
             "请问火车站应该怎么走", "中国人民勤劳又勇敢", "妈妈在超市买了苹果", "学生们在教室里读书",
             "我想去北京看看长城", "春天来了花都开了吧", "你吃过饭了没有呢啊", "上海是一个大城市啊",
             "她喜欢唱歌也爱跳舞", "银行就在长安街上面", "谢谢你昨天的帮助啊", "我们一起去公园散步"]


def typed_lines() -> list[str]:
    lines = []
    for sentence in SENTENCES:
        tokens = hanzi_to_tokens(sentence)
        if tokens is None or len(tokens) != len(sentence):
            raise SystemExit(f"cannot read {sentence} as syllables")
        lines.append(" ".join(tokens))
    return lines


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Service:
    """The service in a child process, stopped with SIGTERM."""

    def __init__(self, *args: str, timeout_s: float = 300):
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.process = subprocess.Popen([sys.executable, "-m", "pinyin_hanzi.cli.serve", "--port",
                                         self.url.rsplit(":", 1)[1], *args], cwd=ROOT, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the service exited with {self.process.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:  # not listening yet, or 503 while the model loads (HTTPError is an OSError)
                pass
            time.sleep(0.3)
        self.stop()
        raise SystemExit(f"the service did not answer within {timeout_s} s")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (fraction 0-1); NaN where there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


class Connection:
    """One keep-alive HTTP/1.1 connection, written out on asyncio streams: a request is one write, its answer
    a status line, headers and a Content-Length (or chunked) body. The load generator shares the CPU with the
    service it measures, so it is kept cheap: a general client (httpx) spent about 3.5 ms of CPU per request
    here, half a core of the two at 32 clients; this one spends a fraction of that."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: dict) -> tuple[int, bytes]:
        """(status, body) of a JSON POST; ConnectionError when the connection fails or its answer cannot be
        read (it is then closed, and the next call opens a new one)."""
        body = json.dumps(payload, ensure_ascii=False).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        try:
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.writer.write(head + body)
            status = int((await self.reader.readline()).split(b" ", 2)[1])
            headers = {}
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if headers.get("transfer-encoding", "").lower() == "chunked":
                chunks = []
                while size := int((await self.reader.readline()).strip().split(b";")[0], 16):
                    chunks.append(await self.reader.readexactly(size + 2))
                await self.reader.readline()
                answer = b"".join(chunk[:-2] for chunk in chunks)
            else:
                answer = await self.reader.readexactly(int(headers.get("content-length", 0)))
            if headers.get("connection", "").lower() == "close":
                await self.close()
            return status, answer
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as error:  # ConnectionError is an OSError
            await self.close()
            raise ConnectionError(f"{type(error).__name__}: {error}") from error

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


async def drive(url: str, clients: int, lines: list[str], seconds: float, max_requests: int, body: dict) -> dict:
    """Closed-loop clients, one connection each, for ``seconds`` or ``max_requests`` requests in all:
    throughput and latencies."""
    latencies: list[float] = []
    failures: list[str] = []
    issued = 0
    host, port = url.removeprefix("http://").rsplit(":", 1)
    start = time.perf_counter()
    deadline = start + seconds

    async def one_client(index: int) -> None:
        nonlocal issued
        connection, turn = Connection(host, int(port)), index
        try:
            while issued < max_requests and time.perf_counter() < deadline:
                issued += 1
                line = lines[turn % len(lines)]
                turn += 1
                sent = time.perf_counter()
                try:
                    status, answer = await connection.post("/convert", {**body, "text": line})
                    ok = status == 200 and json.loads(answer)["input"] == line
                    if not ok:
                        failures.append(f"{status}: {answer[:200].decode(errors='replace')}")
                except ConnectionError as error:
                    ok = False
                    failures.append(str(error))
                if ok:
                    latencies.append(time.perf_counter() - sent)
        finally:
            await connection.close()

    await asyncio.gather(*(one_client(index) for index in range(clients)))
    elapsed = time.perf_counter() - start
    return {"clients": clients, "requests": issued, "failed": len(failures), "seconds": elapsed,
            "latencies": latencies, "failures": failures[:5]}


def summary(parts: list[dict]) -> dict:
    """Several runs of one level as one: sentences/s over their total time, percentiles over all requests."""
    latencies = [latency for part in parts for latency in part["latencies"]]
    seconds = sum(part["seconds"] for part in parts)
    return {"clients": parts[0]["clients"], "requests": sum(part["requests"] for part in parts),
            "failed": sum(part["failed"] for part in parts), "seconds": seconds,
            "sentences_per_s": len(latencies) / seconds, "p50_ms": 1000 * percentile(latencies, 0.50),
            "p99_ms": 1000 * percentile(latencies, 0.99),
            "failures": [failure for part in parts for failure in part["failures"]][:5]}


MODES = {"process": [], "process-x1": ["--workers", "1"], "process-x2": ["--workers", "2"],
         "thread": ["--worker", "thread"], "unbatched": ["--no-batching", "--workers", "1"]}


def measure(modes: list[str], common: list[str], args, lines: list[str]) -> dict[str, list[dict]]:
    """Every mode's service at once; at each level of clients, the modes take turns, ``args.rounds`` times
    each (a share of the level's requests and seconds per turn), so a change in the machine's load falls on
    all of them."""
    services: dict[str, Service] = {}
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    body = {"nbest": args.nbest} | ({"beam": args.beam} if args.beam else {})
    try:
        for mode in modes:
            services[mode] = Service(*common, *MODES[mode])
            asyncio.run(drive(services[mode].url, 4, lines, 5, 40, body))  # warm-up: first calls are slower
        for clients in args.clients:
            parts: dict[str, list[dict]] = {mode: [] for mode in modes}
            for _ in range(args.rounds):
                for mode in modes:
                    parts[mode].append(asyncio.run(drive(services[mode].url, clients, lines,
                                                         args.seconds / args.rounds,
                                                         -(-args.max_requests // args.rounds), body)))
            for mode in modes:
                result = summary(parts[mode]) | {"mode": mode}
                results[mode].append(result)
                print(f"  {mode:>10}  {clients:4d} clients: {result['sentences_per_s']:7.1f} sentences/s  "
                      f"p50 {result['p50_ms']:7.1f} ms  p99 {result['p99_ms']:7.1f} ms  "
                      f"{result['requests']} requests, {result['failed']} failed", file=sys.stderr, flush=True)
        for mode, service in services.items():
            with urllib.request.urlopen(f"{service.url}/health", timeout=30) as answer:
                results[mode].append({"mode": mode, "health": json.loads(answer.read())})
    finally:
        for mode, service in services.items():
            status = service.stop()
            if status != 0:
                print(f"note: the {mode} service exited with {status}:\n{service.output()[-2000:]}",
                      file=sys.stderr)
    return results


def table(results: dict[str, list[dict]]) -> str:
    """One row per level and mode; "x 1 client": throughput over the same mode's with one client."""
    rows = ["| clients | mode | sentences/s | x 1 client | p50 ms | p99 ms | failed |",
            "|---:|---|---:|---:|---:|---:|---:|"]
    levels = sorted({r["clients"] for found in results.values() for r in found if "clients" in r})
    for clients in levels:
        for mode, found in results.items():
            by_clients = {r["clients"]: r for r in found if "clients" in r}
            result, one = by_clients.get(clients), by_clients.get(1)
            if result is None:
                continue
            ratio = f"{result['sentences_per_s'] / one['sentences_per_s']:.1f}" if one and one["sentences_per_s"] \
                else "-"
            rows.append(f"| {clients} | {mode} | {result['sentences_per_s']:.1f} | {ratio} | {result['p50_ms']:.0f} "
                        f"| {result['p99_ms']:.0f} | {result['failed']}/{result['requests']} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=20, help="at most this long per level (default 20)")
    parser.add_argument("--max-requests", type=int, default=5000, help="at most this many requests per level")
    parser.add_argument("--beam", type=int, default=5, help="beam size of every request (default 5, the shipped "
                                                            "model's)")
    parser.add_argument("--nbest", type=int, default=1)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--max-batch-lines", type=int, default=64)
    parser.add_argument("--modes", nargs="+", default=["process", "thread"], choices=list(MODES),
                        help="services to compare (default: process thread)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the model (default 1)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="turns each mode takes at each level (default 1; more: fairer on a loaded machine)")
    parser.add_argument("--checkpoint", help="served model (default: the shipped one)")
    parser.add_argument("--json", help="also write every result to this file")
    args = parser.parse_args(argv)
    check_bounds(parser, [*(("--clients", clients, 1, 10_000) for clients in args.clients),
                          ("--seconds", args.seconds, 0.1, 3600), ("--max-requests", args.max_requests, 1, 10**7),
                          ("--beam", args.beam, 1, MAX_BEAM), ("--nbest", args.nbest, 1, MAX_REQUEST_NBEST),
                          ("--max-wait-ms", args.max_wait_ms, 0, 10_000), ("--max-batch-lines", args.max_batch_lines, 1, 4096),
                          ("--rounds", args.rounds, 1, 1000)])
    lines = typed_lines()
    common = ["--max-wait-ms", str(args.max_wait_ms), "--max-batch-lines", str(args.max_batch_lines),
              "--threads", str(args.threads)]
    common += ["--checkpoint", args.checkpoint] if args.checkpoint else []
    print(f"beam {args.beam}, nbest {args.nbest}, 10-syllable lines, {os.cpu_count()} CPUs, "
          f"{args.threads} torch thread(s), load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
          file=sys.stderr)
    results = measure(list(dict.fromkeys(args.modes)), common, args, lines)
    print(table(results))
    for mode, found in results.items():
        health = next(r["health"] for r in found if "health" in r)
        print(f"{mode}: {health['calls']} decoding calls for {health['lines']} lines, at most "
              f"{health['largest_call']} in one")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    summary = {mode: [{key: round(r[key], 1) if isinstance(r[key], float) else r[key]
                       for key in ("clients", "sentences_per_s", "p50_ms", "p99_ms", "requests", "failed")}
                      for r in found if "clients" in r] for mode, found in results.items()}
    print(json.dumps({"benchmark": "serve_load", "beam": args.beam, "nbest": args.nbest, "threads": args.threads,
                      "cpus": os.cpu_count(), "modes": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
