"""``python train.py --config configs/X.yaml [section.key=value ...]``: train a model (see training/recipe.py)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from pinyin_hanzi.cli import run


def _train(argv) -> int:
    parser = argparse.ArgumentParser(
        prog="train.py", description="Train a pinyin -> hanzi Transformer.",
        epilog="example: python train.py --config configs/quickstart.yaml train.max_steps=2000 train.lr=5e-4")
    parser.add_argument("--config", required=True, help="YAML experiment file, e.g. configs/quickstart.yaml")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="override config values")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue checkpoints/<train.name>/last.pt exactly")
    mode.add_argument("--init-from", metavar="CHECKPOINT", help="start a new run from these weights")
    mode.add_argument("--prepare-only", action="store_true", help="build data/prepared/ and stop")
    parser.add_argument("--overwrite", action="store_true",
                        help="start afresh even if checkpoints/<train.name>/ already holds a run")
    # Intermixed: overrides may stand before, between or after the flags (`--overwrite train.max_steps=4`).
    args = parser.parse_intermixed_args(argv)
    if args.resume and args.overwrite:
        parser.error("--resume and --overwrite exclude each other: --resume continues the run, --overwrite "
                     "replaces it")

    from pinyin_hanzi.config import load_config
    from pinyin_hanzi.data.corpus import prepare

    def log(message: str) -> None:
        print(message, file=sys.stderr)

    config = load_config(args.config, args.overrides)
    if args.prepare_only:
        out = prepare(config.data, log=log)
        print((out / "stats.json").read_text(encoding="utf-8"), end="")
        return 0
    from pinyin_hanzi.training.recipe import train

    # What messages name as the way to go on (--resume, or the same command again).
    command = shlex.join(["python", "train.py", "--config", args.config, *args.overrides])
    best = train(config, resume=args.resume, init_from=args.init_from, overwrite=args.overwrite, log=log,
                 command=command)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for all
        print(best)
    return 0


def main(argv=None) -> int:
    return run(_train, argv)


if __name__ == "__main__":
    sys.exit(main())
