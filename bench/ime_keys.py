"""The IBus engine typed through a real ibus-daemon (issue #52): first-keystroke time, per-keystroke latency,
memory, whether it commits what ``Converter`` converts, and a random-key fuzz.

Starts its own D-Bus session and ibus-daemon (pinyin_hanzi/ime/headless.py: nothing of the user's IBus is
touched, nothing is left running), switches an input context to the engine (ibus-daemon starts its process
from the component), and types a document clause by clause, each clause's syllables run together and then
Space, as a user types it: People's Daily of 5 June 2013 (``data/bench/sessions/pd2013.tsv``, which
``bench/typing_session.py`` extracts; evaluation text, never trained on), else any other kind extracted there,
else the Chinese of this repository's documents annotated with pypinyin (so that it runs out of the box).
Clauses of 2 to ``--max-syllables`` syllables, the first ``--clauses`` of them.

- ``first_key_s``: from the engine's start (the input context asks for it) to the first key's candidate table
  (the model loads meanwhile; ``ready_s`` when the engine joined the bus);
- ``p50_ms`` / ``p99_ms`` / ``max_ms``: each later key press as the application waits for it (the engine
  answers with a preview and converts on a thread of its own), typed back to back as fast as the bench can,
  so that the engine's thread is converting while most keys arrive; Space and its commit included;
- ``exact_p50_ms`` / ``exact_p99_ms`` / ``exact_max_ms``: from a clause's last letter to the engine showing
  that line's conversion (its candidate table), which the bench waits for before Space, as a typist looks
  before committing; it includes finishing the conversion of earlier letters that was under way;
- ``rss_mb``: the engine process's peak resident memory (VmHWM), ``uss_mb`` its private memory at the end;
- ``mismatches``: clauses whose commit differs from ``Converter.convert`` of the same letters in this process
  (with the same settings, learning the same commits in the same order; a fresh history on both sides);
- the fuzz: ``--fuzz`` random keys (letters, ', Space, digits, Backspace, Enter, Escape, pages, arrows,
  punctuation, Shift alone), checking after each Escape that no preedit is left and at the end that the
  engine still runs; ``fuzz_p99_ms`` its latency (with no pause: Space, digits and pages there wait for the
  conversion of the letters if it is not there yet).

- with ``--with-service`` (serve.py started here, one model process, no history file, then the engine started
  once it answers, as after a login) or ``--service URL`` (one running already; its history must be empty for
  ``mismatches`` to mean anything), the engine converts through the service (the setting ``service``):
  ``rss_mb`` is then the engine's alone and ``service_rss_mb`` / ``service_pss_mb`` the service's processes'
  (the server and its model processes: peak resident summed, and proportional set size at the end).

    python bench/ime_keys.py [--clauses 500] [--fuzz 20000] [--max-syllables 20] [--threads 2] [--seed 0]
                             [--with-service | --service URL]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi.ime import composer as keys  # noqa: E402
from pinyin_hanzi.ime.headless import HeadlessIBus, missing  # noqa: E402

SESSIONS = ROOT / "data" / "bench" / "sessions"
FUZZ_KEYS = ([ord(c) for c in "abcdefghijklmnopqrstuvwxyz"] * 6 + [ord("'"), ord(" "), ord(" "), ord(" ")]
             + [ord(c) for c in "1234567890,.?!;:\"-="] + [keys.BACKSPACE] * 4
             + [keys.RETURN, keys.ESCAPE, keys.ESCAPE, keys.PAGE_DOWN, keys.PAGE_UP, keys.UP, keys.DOWN, keys.TAB,
                keys.LEFT, keys.SHIFT_L])


def clauses(limit: int, max_syllables: int) -> tuple[str, list[tuple[str, str]]]:
    """(where they came from, [(letters typed, hanzi)]) of the document to type."""
    kinds = ["pd2013"] + sorted(p.stem for p in SESSIONS.glob("*.tsv") if p.stem != "pd2013")
    for kind in kinds:
        path = SESSIONS / f"{kind}.tsv"
        if path.exists():
            found = []
            for line in path.read_text(encoding="utf-8").splitlines():
                _, pinyin, hanzi = line.split("\t")
                if 2 <= len(pinyin.split()) <= max_syllables:
                    found.append(("".join(pinyin.split()), hanzi))
            if len(found) >= limit:
                return str(path.relative_to(ROOT)), found[:limit]
    return "this repository's documents", _repository_clauses(limit, max_syllables)


def _repository_clauses(limit: int, max_syllables: int) -> list[tuple[str, str]]:
    from pinyin_hanzi.text.pinyin import hanzi_to_tokens

    runs = []
    for path in sorted(ROOT.glob("**/*.md")):
        runs += re.findall(r"[\u4e00-\u9fff]{2,%d}" % max_syllables, path.read_text(encoding="utf-8"))
    found = []
    for run in dict.fromkeys(runs):
        tokens = hanzi_to_tokens(run)
        if len(tokens) == len(run) and all(t.isalpha() for t in tokens):
            found.append(("".join(tokens), run))
    return (found * (limit // max(len(found), 1) + 1))[:limit]


def rss_mb(pid: int) -> tuple[float, float]:
    """(peak resident, private) memory of a process in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    peak = int(re.search(r"VmHWM:\s+(\d+)", status)[1]) / 1024
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    private = sum(int(n) for n in re.findall(r"Private_(?:Clean|Dirty):\s+(\d+)", rollup)) / 1024
    return round(peak, 1), round(private, 1)


def service_memory(port: int) -> dict:
    """The memory of the process listening on ``port`` and of its children (the model processes), in MB."""
    inode = next((line.split()[9] for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
                  if line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"), None)
    server = next((int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
                   and _holds_socket(entry, inode)), None) if inode else None
    if server is None:
        return {}
    children = [int(c) for c in Path(f"/proc/{server}/task/{server}/children").read_text().split()]
    peaks, pss = 0.0, 0.0
    for pid in [server, *children]:
        peaks += rss_mb(pid)[0]
        pss += int(re.search(r"Pss:\s+(\d+)", Path(f"/proc/{pid}/smaps_rollup").read_text())[1]) / 1024
    return {"service_rss_mb": round(peaks, 1), "service_pss_mb": round(pss, 1), "service_processes": 1 + len(children)}


def _holds_socket(entry: Path, inode: str) -> bool:
    try:
        return any(os.readlink(fd) == f"socket:[{inode}]" for fd in (entry / "fd").iterdir())
    except OSError:
        return False


def start_service() -> tuple[subprocess.Popen, str]:
    """serve.py with the shipped model, one model process and no history, on a free port, once it answers."""
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(ROOT / "serve.py"), "--port", str(port), "--workers", "1",
                                "--history", "none"], stdout=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return process, url
        except OSError:
            time.sleep(0.3)
    os.killpg(process.pid, signal.SIGTERM)
    sys.exit("error: serve.py did not start")


INTERRUPTED: list[int] = []  # the SIGINTs received; the loops below stop at their next key


def _note_interrupt(*_) -> None:
    # A KeyboardInterrupt raised while GLib runs a Python callback (the engine's signals, a timeout) is caught
    # and dropped by PyGObject, and the bench ran on: the signal is only noted, and the loops raise it
    INTERRUPTED.append(1)


def check_interrupt() -> None:
    if INTERRUPTED:
        raise KeyboardInterrupt


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 2)


def type_document(session: HeadlessIBus, document: list[tuple[str, str]]) -> tuple[list[float], list[float], list[str]]:
    """Type every clause, wait for its conversion to be shown, and Space; the latency of each key (ms), the
    wait from each clause's last letter to its conversion (ms), and each clause's commit."""
    latencies, exact, commits = [], [], []
    for letters, _ in document:
        before = len(session.commits)
        for char in letters:
            check_interrupt()
            start = time.perf_counter()
            session.key(ord(char))
            latencies.append((time.perf_counter() - start) * 1000)
        session.settle()
        exact.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        session.key(ord(" "))
        latencies.append((time.perf_counter() - start) * 1000)
        commits.append("".join(session.commits[before:]))
    return latencies, exact, commits


def fuzz(session: HeadlessIBus, count: int, seed: int) -> dict:
    generator = random.Random(seed)
    latencies, stuck = [], 0
    for _ in range(count):
        check_interrupt()
        keyval = generator.choice(FUZZ_KEYS)
        start = time.perf_counter()
        if keyval == keys.SHIFT_L:
            session.toggle_english()
        else:
            session.key(keyval, keys.SHIFT_MASK if generator.random() < 0.02 else 0)
        latencies.append((time.perf_counter() - start) * 1000)
        stuck += keyval == keys.ESCAPE and bool(session.preedit or session.candidates)
    session.key(keys.ESCAPE)
    stuck += bool(session.preedit or session.candidates)
    return {"fuzz_keys": count, "fuzz_p50_ms": percentile(latencies, 0.5), "fuzz_p99_ms": percentile(latencies, 0.99),
            "fuzz_stuck_preedit": stuck, "fuzz_engine_alive": session.engine_alive()}


def reference_commits(document: list[tuple[str, str]], threads: int) -> list[str]:
    """What Converter.convert gives for the same letters, learning each commit as the engine does."""
    import torch

    torch.set_num_threads(threads)
    from pinyin_hanzi.decoding.converter import Converter

    converter = Converter.from_checkpoint(None, history="")
    commits = []
    for letters, _ in document:
        check_interrupt()
        commits.append(converter.convert(letters))
        converter.learn(commits[-1])
    return commits


def main() -> None:
    signal.signal(signal.SIGINT, _note_interrupt)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clauses", type=int, default=500)
    parser.add_argument("--fuzz", type=int, default=20_000)
    parser.add_argument("--max-syllables", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--with-service", action="store_true", help="start serve.py and convert through it")
    where.add_argument("--service", metavar="URL", help="convert through this running serve.py")
    args = parser.parse_args()
    reason = missing()
    if reason:
        sys.exit(f"error: {reason}")
    service, url = start_service() if args.with_service else (None, args.service)
    try:
        measured = measure(args, url)
    finally:
        if service is not None:
            os.killpg(service.pid, signal.SIGTERM)
            service.wait()
    print(json.dumps(measured, ensure_ascii=False))


def measure(args: argparse.Namespace, url: str | None) -> dict:
    """Type the document and the fuzz through a headless session (the engine converting through the service at
    ``url``, if given); the figures of the module's docstring."""
    source, document = clauses(args.clauses, args.max_syllables)
    print(f"typing {len(document)} clauses from {source}", flush=True)
    with tempfile.TemporaryDirectory() as work:
        settings = Path(work) / "ime.yaml"
        settings.write_text(f"history: {work}/history.txt\nthreads: {args.threads}\n"
                            + (f"service: {url}\n" if url else ""), encoding="utf-8")
        with HeadlessIBus(work, settings) as session:
            start = time.perf_counter()
            session.activate()
            ready = time.perf_counter() - start
            session.key(ord(document[0][0][0]))
            session.settle(timeout=120)  # the first key's conversion waits for the model
            first = time.perf_counter() - start
            session.key(keys.ESCAPE)
            latencies, exact, commits = type_document(session, document)
            pid = session.engine_pid()
            peak, private = rss_mb(pid)
            print(f"typed {len(latencies)} keys; fuzzing {args.fuzz} keys", flush=True)
            fuzzed = fuzz(session, args.fuzz, args.seed) if args.fuzz else {}
            peak_after, private_after = rss_mb(pid)
            served = service_memory(int(url.rsplit(":", 1)[1].split("/")[0])) if url else {}
    expected = reference_commits(document, args.threads)
    mismatches = [(letters, got, want) for (letters, _), got, want in zip(document, commits, expected) if got != want]
    for letters, got, want in mismatches[:5]:
        print(f"mismatch: {letters}: engine {got!r}, Converter {want!r}")
    hanzi_right = sum(got == hanzi for (_, hanzi), got in zip(document, commits))
    return {"source": source, "service": bool(url), "clauses": len(document), "keys": len(latencies),
            "ready_s": round(ready, 2), "first_key_s": round(first, 2), "p50_ms": percentile(latencies, 0.5),
            "p99_ms": percentile(latencies, 0.99), "max_ms": round(max(latencies), 1),
            "mean_ms": round(statistics.mean(latencies), 2), "exact_p50_ms": percentile(exact, 0.5),
            "exact_p99_ms": percentile(exact, 0.99), "exact_max_ms": round(max(exact), 1),
            "rss_mb": peak, "uss_mb": private, "rss_after_fuzz_mb": peak_after, "uss_after_fuzz_mb": private_after,
            "mismatches": len(mismatches), "clauses_exact": hanzi_right, "threads": args.threads,
            "cpus": os.cpu_count(), **served, **fuzzed}


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the session's daemons are stopped on the way out (HeadlessIBus.__exit__)
        sys.exit("interrupted: nothing measured")
