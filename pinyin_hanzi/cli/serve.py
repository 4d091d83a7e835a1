"""``python serve.py [--checkpoint PATH] [--host 127.0.0.1] [--port 8000]``: serve conversion over HTTP with
the web IME page at / (the app itself is pinyin_hanzi/serve.py)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Sequence

from pinyin_hanzi.cli import check_bounds, load_converter, max_threads, run
from pinyin_hanzi.errors import PinyinHanziError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serve.py", description="Serve pinyin -> hanzi conversion over HTTP, "
                                     "with a web IME page at / and the API documented at /docs.")
    parser.add_argument("--checkpoint", help="checkpoint to serve (default: $PINYIN_HANZI_CHECKPOINT, else the "
                                             "shipped model)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; another address, e.g. "
                             "0.0.0.0, exposes the service to the network)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads of the model process (default 1: the server needs a core "
                             "for HTTP, and OpenMP threads that wait spinning slow every call down many times "
                             "over when the CPU is shared)")
    parser.add_argument("--workers", type=int, default=1,
                        help="model processes, each with the model loaded, decoding batches side by side "
                             "(default 1)")
    parser.add_argument("--worker", choices=["process", "thread"], default="process",
                        help="where the model runs: process (default: processes of their own, restarted if one "
                             "dies) or thread (one, in the server's process, sharing its interpreter lock: for "
                             "comparison)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0,
                        help="how long a request waits for others to share its batch (default 5)")
    parser.add_argument("--max-batch-lines", type=int, default=64, help="most texts decoded in one call")
    parser.add_argument("--no-batching", action="store_true", help="convert each request alone (for comparison)")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--access-log", action="store_true", help="log every request (costs time under load)")
    return parser


def _main(argv: Sequence[str] | None = None) -> int:
    """Load the model once, then serve until SIGINT/SIGTERM (uvicorn finishes the requests in flight, then
    the model processes are stopped). Model processes that keep dying stop the service: `error: ...`."""
    from pinyin_hanzi.model_worker import ModelProcess

    parser = _parser()
    args = parser.parse_args(argv)
    check_bounds(parser, [("--port", args.port, 0, 65535), ("--threads", args.threads, 1, max_threads()),
                          ("--max-wait-ms", args.max_wait_ms, 0, 10_000), ("--max-batch-lines", args.max_batch_lines, 1, 4096),
                          ("--workers", args.workers, 1, 16)])
    if args.workers > 1 and args.worker == "thread":
        parser.error(f"--workers {args.workers}: 1 with --worker thread")
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    fatal: list[str] = []

    def give_up(message: str) -> None:  # the batcher gave up on the model process: stop as SIGTERM does
        fatal.append(message)
        os.kill(os.getpid(), signal.SIGTERM)

    # uvicorn turns SIGINT/SIGTERM into a graceful shutdown (requests in flight finish, then the app's
    # lifespan ends), restores the handlers it found and raises the signal again; these handlers turn that
    # last signal (or one while the model loads) into a normal return, exit status 0.
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    model = None
    try:
        if args.worker == "process":
            model = [ModelProcess(args.checkpoint, device=args.device, threads=args.threads)
                     for _ in range(args.workers)]
            for process in model:
                process.launch()  # it loads the model while this process imports the web stack
            import pinyin_hanzi.serve  # noqa: F401

            for process in model:
                process.wait_ready()
            checkpoint = model[0].info["checkpoint"]
        else:
            import torch

            torch.set_num_threads(args.threads)
            model = load_converter(args.checkpoint, device=args.device)
            checkpoint = getattr(model, "checkpoint", None)
        import uvicorn

        from pinyin_hanzi.serve import create_app

        app = create_app(model, batching=not args.no_batching, max_wait_ms=args.max_wait_ms,
                         max_batch_lines=args.max_batch_lines, on_fatal=give_up)
        print(f"serving {checkpoint or 'the shipped model'} on http://{args.host}:{args.port} (API: /docs)",
              file=sys.stderr, flush=True)
        # Requests in flight get up to 30 s to finish (a batch of long beam-search lines can take seconds).
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log,
                    timeout_graceful_shutdown=30)
    except _Stopped:
        pass
    finally:
        for process in model if isinstance(model, list) else []:
            process.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if fatal:
        raise PinyinHanziError(f"stopped: {fatal[0]}")
    print("stopped", file=sys.stderr, flush=True)
    return 0


class _Stopped(Exception):
    pass


def _raise_stopped(signum, frame):
    raise _Stopped(signum)


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
