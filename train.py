#!/usr/bin/env python3
"""Train a pinyin -> hanzi Transformer: python train.py --config configs/quickstart.yaml [section.key=value ...]"""

import sys

from pinyin_hanzi.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
