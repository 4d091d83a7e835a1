"""``python -m pinyin_hanzi.cli.char_lm CHECKPOINT OUT [--order 3] [--min-count 1] [--max-ngrams 0] [--phrases 0]
[--weight W]``:
a copy of a checkpoint with a character n-gram model counted from its training split (lm/char_ngram.py)."""

from __future__ import annotations

import argparse
import sys

from pinyin_hanzi.cli import check_bounds, run
from pinyin_hanzi.config import LIMITS


def _main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m pinyin_hanzi.cli.char_lm",
                                     description="Count a character n-gram model from a checkpoint's training split "
                                                 "into a copy of the checkpoint.")
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    parser.add_argument("--order", type=int, default=3)
    parser.add_argument("--min-count", type=int, default=1)
    parser.add_argument("--max-ngrams", type=int, default=0, metavar="N",
                        help="keep at most N n-grams, the rarest left out first (decode.lm_max_ngrams; 0: no cap)")
    parser.add_argument("--phrases", type=int, default=0, metavar="N",
                        help="count each entry of pypinyin-dict's phrase table N more times (decode.lm_phrases)")
    parser.add_argument("--weight", type=float, default=0.6, help="decode.lm_weight stored with it (default 0.6)")
    args = parser.parse_args(argv)
    check_bounds(parser, [("--order", args.order, *LIMITS["decode.lm_order"]),
                          ("--min-count", args.min_count, *LIMITS["decode.lm_min_count"]),
                          ("--max-ngrams", args.max_ngrams, *LIMITS["decode.lm_max_ngrams"]),
                          ("--phrases", args.phrases, *LIMITS["decode.lm_phrases"]),
                          ("--weight", args.weight, *LIMITS["decode.lm_weight"])])
    # torch and the package load only now: --help and usage errors answer in a fraction of a second, not ~2 s
    from pinyin_hanzi.checkpoint_copies import count_char_lm

    lm, train = count_char_lm(args.checkpoint, args.out, order=args.order, min_count=args.min_count,
                              phrases=args.phrases, weight=args.weight, max_ngrams=args.max_ngrams)
    with_phrases = f" and the phrase table x {args.phrases}" if args.phrases else ""
    print(f"{args.out}: {args.order}-gram model of {train}{with_phrases} ({lm.size():,} n-grams), "
          f"decode.lm_weight={args.weight}")
    return 0


def main(argv=None) -> int:
    return run(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
