"""``python -m pinyin_hanzi.cli.config_reference > docs/config.md``: the configuration reference, generated from
the field comments of config.py."""

from __future__ import annotations

import sys

from pinyin_hanzi.cli import run


def _main(argv) -> int:
    from pinyin_hanzi.config_docs import config_reference  # not needed for --help

    sys.stdout.buffer.write(config_reference().encode("utf-8"))
    return 0


def main(argv=None) -> int:
    return run(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
