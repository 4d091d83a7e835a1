"""``python -m pinyin_hanzi.cli.word_lm CHECKPOINT OUT [--table wordfreq-zh] [--min-frequency 1e-7] [--weight W]
[--contrast C]``: a copy of a checkpoint with a word model (lm/word.py) built from a word-frequency table
(data/sources.py), with ``--contrast`` divided by its words' frequencies in the checkpoint's training split;
``--remove`` writes a copy without one."""

from __future__ import annotations

import argparse
import sys

from pinyin_hanzi.cli import check_bounds, run
from pinyin_hanzi.config import LIMITS, DecodeConfig
from pinyin_hanzi.data.sources import WORD_TABLES

WEIGHT = 0.5  # the decode.word_weight stored with a new word model (the config's default, 0, would turn it off)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pinyin_hanzi.cli.word_lm",
                                     description="Add a word model, built from a word-frequency table, to a copy "
                                                 "of a checkpoint (or remove it).")
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    # Defaults are None so that --remove can tell options given with it (an error) from options left out.
    parser.add_argument("--table", choices=sorted(WORD_TABLES),
                        help=f"decode.word_table (default {DecodeConfig.word_table})")
    parser.add_argument("--min-frequency", type=float,
                        help=f"decode.word_min_frequency (default {DecodeConfig.word_min_frequency:g})")
    parser.add_argument("--weight", type=float, help=f"decode.word_weight stored with it (default {WEIGHT:g})")
    parser.add_argument("--contrast", type=float,
                        help="decode.word_contrast in [0, 1): divide by the words' frequencies in the checkpoint's "
                             "training split (needs its prepared data), mixed this much with the table's "
                             "(default 0: a plain word model)")
    parser.add_argument("--remove", action="store_true",
                        help="write a copy without a word model (decode.word_weight 0) instead")
    return parser


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for options that do not go together or lie out of range; the defaults of those left out."""
    if args.remove:
        given = [name for name in ("table", "min_frequency", "weight", "contrast") if getattr(args, name) is not None]
        if given:
            parser.error(f"--remove takes no --{given[0].replace('_', '-')}: it writes a copy without a word model")
        return
    args.table = args.table or DecodeConfig.word_table
    args.min_frequency = DecodeConfig.word_min_frequency if args.min_frequency is None else args.min_frequency
    args.weight = WEIGHT if args.weight is None else args.weight
    check_bounds(parser, [("--weight", args.weight, *LIMITS["decode.word_weight"])])
    args.contrast = args.contrast or 0.0
    for option, value in (("--min-frequency", args.min_frequency), ("--contrast", args.contrast)):
        if not 0 <= value < 1:  # (also rejects nan)
            parser.error(f"{option} must lie in [0, 1)")


def _main(argv) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    # torch and the package load only now: --help and usage errors answer in a fraction of a second, not ~2 s
    from pinyin_hanzi.checkpoint_copies import add_word_lm, remove_word_lm

    if args.remove:
        had = remove_word_lm(args.checkpoint, args.out)
        print(f"{args.out}: {'word model removed' if had else 'had no word model'}, decode.word_weight=0")
        return 0
    lm = add_word_lm(args.checkpoint, args.out, table=args.table, min_frequency=args.min_frequency,
                     weight=args.weight, contrast=args.contrast)
    contrast = f", contrasted with its training split at {args.contrast}" if args.contrast else ""
    print(f"{args.out}: word model of {args.table} ({lm.size():,} words{contrast}), decode.word_weight={args.weight}")
    return 0


def main(argv=None) -> int:
    return run(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
