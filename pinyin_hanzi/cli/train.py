"""``python train.py --config configs/X.yaml [section.key=value ...]``: train a model (see training/recipe.py)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys

from pinyin_hanzi.cli import check_bounds, max_threads, run
from pinyin_hanzi.config import load_config
from pinyin_hanzi.data.corpus import (
    MAX_SHARDS,
    data_fingerprint,
    merge_shards,
    prepare,
    prepare_shard,
)
from pinyin_hanzi.data.prepare import default_workers, export_train_tsv
from pinyin_hanzi.data.store import TokenStore


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
    data = parser.add_argument_group("preparing the data (python train.py --config X --prepare-only ...)")
    data.add_argument("--workers", type=int, metavar="N",
                      help=f"processes that annotate the corpus when it is prepared "
                           f"(default: all {default_workers()} cores)")
    data.add_argument("--shard", metavar="I/N", type=_shard,
                      help=f"with --prepare-only: annotate this machine's share of the corpus files (1/2, 2/2, ...; "
                           f"N at most {MAX_SHARDS:,}) into <prepared_dir>/<name>.parts/; then --merge")
    data.add_argument("--merge", action="store_true",
                      help="with --prepare-only: write the prepared data from every shard's part")
    data.add_argument("--export-tsv", action="store_true",
                      help="with --prepare-only: also write train.tsv (tokens<TAB>hanzi), to read the training split")
    # Intermixed: overrides may stand before, between or after the flags (`--overwrite train.max_steps=4`).
    args = parser.parse_intermixed_args(argv)
    if args.resume and args.overwrite:
        parser.error("--resume and --overwrite exclude each other: --resume continues the run, --overwrite "
                     "replaces it")
    if (args.shard or args.merge or args.export_tsv) and not args.prepare_only:
        parser.error("--shard, --merge and --export-tsv go with --prepare-only")
    if args.shard and args.merge:
        parser.error("--shard annotates one machine's part, --merge joins the parts: run them one after the other")
    check_bounds(parser, [("--workers", args.workers, 1, max_threads())])

    config = load_config(args.config, args.overrides)
    if args.prepare_only:
        return _prepare(config, args)
    from pinyin_hanzi.training.recipe import train  # torch and the model: after the config's errors

    # What messages name as the way to go on (--resume, or the same command again).
    command = shlex.join(["python", "train.py", "--config", args.config, *args.overrides])
    best = train(config, resume=args.resume, init_from=args.init_from, overwrite=args.overwrite, log=log,
                 command=command, workers=args.workers)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for all
        print(best)
    return 0


def _shard(text: str) -> tuple[int, int]:
    """``I/N`` (1 <= I <= N <= MAX_SHARDS, ASCII digits) as the zero-based (I - 1, N)."""
    match = re.fullmatch(r"([0-9]{1,9})/([0-9]{1,9})", text)
    if not (match and 1 <= int(match[1]) <= int(match[2]) <= MAX_SHARDS):
        shown = text if len(text) <= 40 else text[:40] + "..."  # the line stays short, whatever was typed
        raise argparse.ArgumentTypeError(f"{shown!r} is not I/N with 1 <= I <= N <= {MAX_SHARDS:,} (e.g. 1/4)")
    return int(match[1]) - 1, int(match[2])


def _prepare(config, args) -> int:
    """--prepare-only: prepare the data (or one shard's part of it, or merge the parts) and print its stats."""
    if args.shard:
        part = prepare_shard(config.data, args.shard, workers=args.workers, log=log)
        log(f"part {args.shard[0] + 1}/{args.shard[1]} written to {part}; once every part is there: "
            f"--prepare-only --merge")
        return 0
    out = merge_shards(config.data, log=log) if args.merge else prepare(config.data, log=log, workers=args.workers)
    if args.export_tsv:
        log(f"wrote {export_train_tsv(out)}")
    # The language models a new run of this config counts, counted now with the store, so that training
    # starts without counting (training/language_models.py keeps them beside the store).
    from pinyin_hanzi.training.language_models import (
        setup_language_models,  # torch: not for --help or errors
    )

    store = TokenStore(out)
    setup_language_models(config, store, data_fingerprint(out), store.hanzi_vocab, log)
    print((out / "stats.json").read_text(encoding="utf-8"), end="")
    return 0


def log(message: str) -> None:
    print(message, file=sys.stderr)


def main(argv=None) -> int:
    return run(_train, argv)


if __name__ == "__main__":
    sys.exit(main())
