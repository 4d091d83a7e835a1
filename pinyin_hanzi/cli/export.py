"""``python -m pinyin_hanzi.cli.export SOURCE TARGET [--float32] [--set decode.KEY=VALUE ...]``: an
inference-only copy of a training checkpoint (no optimizer state; float16 weights unless --float32), as
shipped in pinyin_hanzi/pretrained/, optionally with other default decode settings."""

from __future__ import annotations

import argparse
import sys

from pinyin_hanzi.cli import run


def _main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m pinyin_hanzi.cli.export",
                                     description="Export a training checkpoint for inference (float16 weights).")
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--float32", action="store_true", help="keep float32 weights")
    parser.add_argument("--set", action="append", default=[], metavar="decode.KEY=VALUE",
                        help="a decode setting the copy uses by default (repeatable; docs/config.md lists them)")
    args = parser.parse_args(argv)
    # torch and the package load only now: --help and usage errors answer in a fraction of a second, not ~2 s
    from pinyin_hanzi.checkpoint_copies import export_checkpoint

    result = export_checkpoint(args.source, args.target, half=not args.float32, decode_overrides=args.set)
    settings = f", {' '.join(args.set)}" if args.set else ""
    print(f"{args.target}: {result['parameters']:,} parameters, {result['bytes'] / 2**20:.1f} MiB{settings}")
    return 0


def main(argv=None) -> int:
    return run(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
