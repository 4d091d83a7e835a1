"""``python serve.py [--checkpoint PATH] [--host 127.0.0.1] [--port 8000]``: serve conversion over HTTP with
the web IME page at / (the app itself is pinyin_hanzi/serve.py)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Sequence

from pinyin_hanzi.cli import check_bounds, max_threads, run


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
                        help="torch intra-op threads of the model worker (default 1: the event loop needs a core "
                             "for HTTP, and OpenMP threads that wait spinning slow every call down many times "
                             "over when the CPU is shared)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0,
                        help="how long a request waits for others to share its batch (default 5)")
    parser.add_argument("--max-batch-lines", type=int, default=64, help="most texts decoded in one call")
    parser.add_argument("--no-batching", action="store_true", help="convert each request alone (for comparison)")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--access-log", action="store_true", help="log every request (costs time under load)")
    return parser


def load_converter(checkpoint: str | None, device: str = "cpu"):
    """The Converter to serve: ``checkpoint``, else $PINYIN_HANZI_CHECKPOINT, else the shipped model."""
    from pinyin_hanzi import Converter

    return Converter.from_checkpoint(checkpoint, device=device, log=lambda note: print(note, file=sys.stderr))


def _main(argv: Sequence[str] | None = None) -> int:
    """Load the model once, then serve until SIGINT/SIGTERM (uvicorn finishes the requests in flight)."""
    import torch
    import uvicorn

    from pinyin_hanzi.serve import create_app

    parser = _parser()
    args = parser.parse_args(argv)
    check_bounds(parser, [("--port", args.port, 0, 65535), ("--threads", args.threads, 1, max_threads()),
                          ("--max-wait-ms", args.max_wait_ms, 0, 10_000), ("--max-batch-lines", args.max_batch_lines, 1, 4096)])
    torch.set_num_threads(args.threads)
    converter = load_converter(args.checkpoint, args.device)
    app = create_app(converter, batching=not args.no_batching, max_wait_ms=args.max_wait_ms,
                     max_batch_lines=args.max_batch_lines)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    print(f"serving {getattr(converter, 'checkpoint', None) or 'the shipped model'} on http://{args.host}:{args.port}"
          f" (API: /docs)", file=sys.stderr, flush=True)
    # uvicorn turns SIGINT/SIGTERM into a graceful shutdown (requests in flight finish, then the app's
    # lifespan ends), restores the handlers it found and raises the signal again; these handlers turn that
    # last signal into a normal return, exit status 0.
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # Requests in flight get up to 30 s to finish (a batch of long beam-search lines can take seconds).
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log,
                    timeout_graceful_shutdown=30)
    except _Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
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
