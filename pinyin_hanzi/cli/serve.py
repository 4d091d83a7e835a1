"""``python serve.py [--checkpoint PATH] [--host 127.0.0.1] [--port 8000]``: serve conversion over HTTP with
the web IME page at / (the app itself is pinyin_hanzi/serving/service.py, its connections
pinyin_hanzi/serving/connections.py)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import uvicorn

from pinyin_hanzi.cli import check_bounds, load_converter, max_threads, run
from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.serving.connections import (
    HEAD_MAX_BYTES,
    MIN_CONNECTIONS,
    ConnectionLimits,
    connection_capacity,
    listen,
    protocol_class,
)
from pinyin_hanzi.serving.limits import Limits
from pinyin_hanzi.serving.worker import ModelProcess, checkpoint_history, describe

if TYPE_CHECKING:
    from pinyin_hanzi.lm.history import History

LOG_REPEAT_INTERVAL_S = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serve.py", description="Serve pinyin -> hanzi conversion over HTTP, "
                                     "with a web IME page at / and the API documented at /docs.")
    parser.add_argument("--checkpoint", help="checkpoint to serve (default: $PINYIN_HANZI_CHECKPOINT, else the "
                                             "shipped model)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; another address, e.g. "
                             "0.0.0.0, exposes the service to the network)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free one)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer requests whose Host header is NAME (repeatable; '*': any). By default "
                             "only localhost, 127.0.0.1, [::1] and the --host address are answered, so that a "
                             "web page cannot reach the service through a DNS name of its own")
    parser.add_argument("--user-words", metavar="FILE",
                        help="a user dictionary (one word a line, optionally its pinyin and a weight): its words "
                             "are preferred where the syllables allow them ('none': none; default: the "
                             "checkpoint's decode.user_words)")
    parser.add_argument("--history", metavar="FILE",
                        help="a user history: what POST /learn (and the web page, on every commit) learns is "
                             "preferred from then on, loaded from FILE at start and saved there as it grows "
                             "('none': none; default: the checkpoint's decode.history, else in memory only)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads of the model process (default 1: the server needs a core "
                             "for HTTP, and OpenMP threads that wait spinning slow every call down many times "
                             "over when the CPU is shared)")
    parser.add_argument("--workers", type=int,
                        help="model processes, each with the model loaded, decoding batches side by side "
                             "(default: 2 on a CPU of two or more cores, else 1; each holds about 0.35 GB with "
                             "the shipped model)")
    parser.add_argument("--worker", choices=["process", "thread"], default="process",
                        help="where the model runs: process (default: processes of their own, restarted if one "
                             "dies) or thread (one, in the server's process, sharing its interpreter lock: for "
                             "comparison)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0,
                        help="how long a request waits for others to share its batch (default 5)")
    parser.add_argument("--max-batch-lines", type=int, default=64, help="most texts decoded in one call")
    parser.add_argument("--no-batching", action="store_true", help="convert each request alone (for comparison)")
    _limit_options(parser)
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--access-log", action="store_true", help="log every request (costs time under load)")
    return parser


def _limit_options(parser: argparse.ArgumentParser) -> None:
    """The limits of docs/serving.md; None where not given, so that the dataclasses' defaults hold."""
    group = parser.add_argument_group("limits (docs/serving.md)")
    group.add_argument("--max-request-cost", type=float, help="estimated decoding work one /convert request may "
                       "ask for, in units of about 1 ms of one core (default 5000)")
    group.add_argument("--max-connections", type=int, help="connections open at once (default 256, less where "
                       "the open-file limit, ulimit -n, leaves room for fewer)")
    group.add_argument("--header-timeout", type=float, help="seconds a client has to send a request's head "
                       "(default 10)")
    group.add_argument("--body-timeout", type=float, help="seconds a client has to send a request's body (default 10)")
    group.add_argument("--keep-alive-timeout", type=float, help="seconds an idle connection is kept open between "
                       "requests (default 5)")
    group.add_argument("--send-timeout", type=float, help="seconds a client may leave a response unread "
                       "(default 10)")


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    check_bounds(parser, [("--port", args.port, 0, 65535), ("--threads", args.threads, 1, max_threads()),
                          ("--max-wait-ms", args.max_wait_ms, 0, 10_000),
                          ("--max-batch-lines", args.max_batch_lines, 1, 4096), ("--workers", args.workers, 1, 16),
                          ("--max-request-cost", args.max_request_cost, 1, 1e7),
                          ("--max-connections", args.max_connections, 1, 1_000_000),
                          ("--header-timeout", args.header_timeout, 0.05, 3600),
                          ("--body-timeout", args.body_timeout, 0.05, 3600),
                          ("--keep-alive-timeout", args.keep_alive_timeout, 0.05, 3600),
                          ("--send-timeout", args.send_timeout, 0.05, 3600)])
    for name in ("user_words", "history"):
        if getattr(args, name) == "none":
            setattr(args, name, "")
    if args.workers is not None and args.workers > 1 and args.worker == "thread":
        parser.error(f"--workers {args.workers}: 1 with --worker thread")
    if args.workers is None:
        args.workers = default_model_processes(args.worker, args.device)
    for name in args.allow_host:
        if name != "*" and (not name.strip() or any(char.isspace() or char in "/@?#" for char in name)):
            parser.error(f"--allow-host {name!r}: a host name or address, as a browser sends it in Host "
                         f"(example.com, 192.168.1.5, [::1]), or '*'")


def default_model_processes(worker: str, device: str) -> int:
    """Model processes when --workers is not given: two on a CPU where this process may run on two or more
    cores, else one. One process decodes on one core (one torch thread); a second decodes the next batch
    meanwhile: at 32 clients on two cores 247 -> 365 sentences/s, p99 224 -> 145 ms (docs/serving.md). With
    the n-gram tables mapped from the lookup cache, shared by both, two hold about what one held before."""
    if worker != "process" or device != "cpu":
        return 1
    # the cores counted as data.prepare.default_workers counts them, spelt here: importing the data layer
    # would load numpy and tqdm into the HTTP server's process for one line
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 if cores >= 2 else 1


def _main(argv: Sequence[str] | None = None) -> int:
    """Bind the address, load the model once, then serve until SIGINT/SIGTERM (uvicorn finishes the requests
    in flight, then the model processes are stopped). An address it cannot listen on, or model processes
    that keep dying, are `error: ...`."""
    parser = _parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    listener = listen(args.host, args.port)  # before the model loads: a port in use fails at once
    fatal: list[str] = []

    def give_up(message: str) -> None:  # the batcher gave up on the model process: stop as SIGTERM does
        fatal.append(message)
        os.kill(os.getpid(), signal.SIGTERM)

    # uvicorn turns SIGINT/SIGTERM into a graceful shutdown (requests in flight finish, then the app's
    # lifespan ends), restores the handlers it found and raises the signal again; these handlers turn that
    # last signal (or one while the model loads) into a normal return, exit status 0.
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    model = history = None
    try:
        if args.history is not None:  # before the model loads: a damaged file, or one in use, fails at once
            history = _open_history(args.history)
        model, checkpoint = _load_model(args)
        history = _model_history(args, model, history)
        _serve(args, model, checkpoint, listener, give_up, history)
    except _Stopped:
        pass
    finally:
        listener.close()
        for process in model if isinstance(model, list) else []:
            process.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if history is not None:
            history.close()  # saves what is left, and gives the file up
    if fatal:
        raise PinyinHanziError(f"stopped: {fatal[0]}")
    print("stopped", file=sys.stderr, flush=True)
    return 0


def _load_model(args: argparse.Namespace):
    """The started model processes (or, with --worker thread, the converter) and the checkpoint's path."""
    if args.worker == "thread":
        import torch  # only here: with model processes (the default) the server process never loads torch

        torch.set_num_threads(args.threads)
        model = load_converter(args.checkpoint, device=args.device, user_words=args.user_words, history="")
        return model, getattr(model, "checkpoint", None)
    model = [ModelProcess(args.checkpoint, device=args.device, threads=args.threads, user_words=args.user_words)
             for _ in range(args.workers)]
    try:
        for process in model:
            process.launch()  # it loads the model while this process imports the web stack
        import pinyin_hanzi.serving.service  # noqa: F401 - fastapi and pydantic: ~1 s, spent while the model loads

        for process in model:
            process.wait_ready()
    except BaseException:
        for process in model:
            process.stop()
        raise
    return model, model[0].info["checkpoint"]


def _open_history(path: str | Path | None, max_clauses: int | None = None) -> History:
    """The user history in the file ``path`` ("" or None: in memory), which this process then owns. DataError
    or OutputError (one line) for a file that is no history or that another process holds."""
    from pinyin_hanzi.lm.history import MAX_CLAUSES, History  # not before the port is bound: pypinyin, ~0.5 s

    return History(path or None, max_clauses=max_clauses or MAX_CLAUSES)


def _model_history(args: argparse.Namespace, model, given: History | None) -> History:
    """The user history the service learns into: ``given`` (--history), else the checkpoint's decode.history,
    else one in memory, keeping as many clauses as the models keep theirs (their decode.history_clauses). The
    models were made with a history in memory: the service hands them what this one holds and learns."""
    thread = not isinstance(model, list)
    keep = (describe(model) if thread else model[0].info)["history_clauses"]
    if given is not None:
        if given.max_clauses == (keep or given.max_clauses):
            return given
        given.close()  # opened before the model said how many clauses it keeps: again, with that bound
        return _open_history(given.path, keep)
    # asked of the model, which has the checkpoint (and torch) at hand: this process has neither
    path = checkpoint_history(model) if thread else model[0].call("checkpoint_history")
    return _open_history(path, keep)


def _serve(args: argparse.Namespace, model, checkpoint, listener, give_up, history: History) -> None:
    """Run uvicorn on ``listener`` with the limits of the command line until it is stopped."""
    # the web stack loads once the model is loading (see _load_model), not before the port is bound
    from pinyin_hanzi.serving.middleware import LOCAL_HOSTS
    from pinyin_hanzi.serving.service import create_app

    limits = Limits() if args.max_request_cost is None else Limits(max_request_cost=args.max_request_cost)
    given = {"max_connections": args.max_connections, "header_timeout_s": args.header_timeout,
             "body_timeout_s": args.body_timeout, "keep_alive_s": args.keep_alive_timeout,
             "send_timeout_s": args.send_timeout}
    connections = ConnectionLimits(**{key: value for key, value in given.items() if value is not None})
    capacity = connection_capacity(connections.max_connections)
    if capacity.connections < MIN_CONNECTIONS:
        raise PinyinHanziError(f"the open-file limit (ulimit -n) is {capacity.file_limit}: with {capacity.in_use} "
                               f"files open it leaves room for {capacity.connections} connections, and the service "
                               f"needs {MIN_CONNECTIONS}; raise it")
    if capacity.connections < connections.max_connections:
        print(f"note: at most {capacity.connections} connections at once, not {connections.max_connections}: the "
              f"open-file limit (ulimit -n) is {capacity.file_limit}", file=sys.stderr, flush=True)
        connections = ConnectionLimits(**{**connections.__dict__, "max_connections": capacity.connections})
    listener.keep_free(capacity)
    host, port = listener.getsockname()[:2]
    app = create_app(model, limits=limits, batching=not args.no_batching, max_wait_ms=args.max_wait_ms,
                     max_batch_lines=args.max_batch_lines, on_fatal=give_up, history=history,
                     allowed_hosts=[*LOCAL_HOSTS, args.host, *args.allow_host])
    # Requests in flight get up to 30 s to finish at shutdown (a slice of a large request takes about one).
    config = uvicorn.Config(app, log_level=args.log_level, access_log=args.access_log, timeout_graceful_shutdown=30,
                            http=protocol_class(connections), timeout_keep_alive=connections.keep_alive_s,
                            h11_max_incomplete_event_size=HEAD_MAX_BYTES, backlog=capacity.backlog)
    _hold_back_repeats()
    if args.host in ("0.0.0.0", "::", "") and not args.allow_host:
        print("note: requests are answered only when their Host names localhost, 127.0.0.1 or [::1]: name the "
              "addresses or names other machines use with --allow-host NAME (or --allow-host '*')",
              file=sys.stderr, flush=True)
    shown = f"[{host}]" if ":" in host else host
    decoding = "the model on a thread" if args.worker == "thread" else (
        f"{args.workers} model process{'es' if args.workers > 1 else ''}")
    clauses = f"{len(history)} clause{'' if len(history) == 1 else 's'}"
    learning = f"learning into {history.path}, {clauses}" if history.path else "learning in memory"
    print(f"serving {checkpoint or 'the shipped model'} on http://{shown}:{port} (API: /docs; {decoding}; "
          f"{learning})", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[listener])


class _RepeatsHeldBack(logging.Filter):
    """Lets a log message (by logger and text) through once per ``interval_s``; the next one after says how
    many were held back. A flood of one condition (hundreds of slow clients timing out, the process out of
    file descriptors) is a line every interval, not a line each."""

    def __init__(self, interval_s: float):
        super().__init__()
        self.interval_s = interval_s
        self.seen: dict[tuple[str, str], list] = {}  # (logger, message) -> [when let through, held back since]

    def filter(self, record: logging.LogRecord) -> bool:
        key, now = (record.name, record.getMessage()), time.monotonic()
        entry = self.seen.get(key)
        if entry is not None and now - entry[0] < self.interval_s:
            entry[1] += 1
            return False
        if len(self.seen) > 1000:  # forget the quiet ones
            self.seen = {k: v for k, v in self.seen.items() if now - v[0] < self.interval_s}
        self.seen[key] = [now, 0]
        if entry is not None and entry[1]:
            record.msg, record.args = f"{key[1]} ({entry[1]} more like it held back)", ()
        return True


def _hold_back_repeats() -> None:
    """One filter on each way a log record leaves (the root logger's handler, uvicorn's own), not on the
    access log, whose lines differ only in their arguments."""
    repeats = _RepeatsHeldBack(LOG_REPEAT_INTERVAL_S)
    for handler in logging.getLogger().handlers + logging.getLogger("uvicorn").handlers:
        handler.addFilter(repeats)


class _Stopped(Exception):
    pass


def _raise_stopped(signum, frame):
    raise _Stopped(signum)


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
