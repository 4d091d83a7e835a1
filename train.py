#!/usr/bin/env python3
"""Train a pinyin -> hanzi Transformer: python train.py --config configs/quickstart.yaml [section.key=value ...]"""

import sys

from pinyin_hanzi.startup import command_main

main = command_main("pinyin_hanzi.cli.train")  # Ctrl-C meanwhile: one line, status 130

if __name__ == "__main__":
    sys.exit(main())
