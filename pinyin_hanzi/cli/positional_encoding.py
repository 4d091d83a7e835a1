"""``python -m pinyin_hanzi.cli.positional_encoding OUT.png [--dims 0 1 20 40] [--d-model 256] [--positions 100]``:
the book's picture of the sinusoidal positional encoding (curves for chosen dimensions, and the matrix)."""

from __future__ import annotations

import argparse
import sys

from pinyin_hanzi.cli import check_bounds, check_image_path, run
from pinyin_hanzi.config import LIMITS
from pinyin_hanzi.errors import DataError


def _main(argv) -> int:
    # matplotlib and torch: after the arguments are checked
    from pinyin_hanzi.visualize import DEFAULT_PE_DIMS, positional_encoding_figure, save_figure

    parser = argparse.ArgumentParser(prog="python -m pinyin_hanzi.cli.positional_encoding",
                                     description="Draw the sinusoidal positional encoding.")
    parser.add_argument("output", help="PNG file to write")
    parser.add_argument("--dims", type=int, nargs="+", default=list(DEFAULT_PE_DIMS))
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--positions", type=int, default=100)
    args = parser.parse_args(argv)
    check_bounds(parser, [("--d-model", args.d_model, 2, LIMITS["model.d_model"][1]),
                          ("--positions", args.positions, *LIMITS["model.max_positions"])])
    if args.d_model % 2:
        parser.error("--d-model must be even")
    bad = [dim for dim in args.dims if not 0 <= dim < args.d_model]
    if bad:
        parser.error(f"--dims must lie in 0..{args.d_model - 1} (got {bad})")
    check_image_path(parser, "output", args.output)
    try:
        save_figure(positional_encoding_figure(args.d_model, args.positions, args.dims), args.output)
    except OSError as error:
        raise DataError(f"cannot write {args.output}: {error.strerror or error}") from None
    print(args.output)
    return 0


def main(argv=None) -> int:
    return run(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
