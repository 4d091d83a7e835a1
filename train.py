#!/usr/bin/env python3
"""Train a pinyin -> hanzi Transformer: python train.py --config configs/quickstart.yaml [section.key=value ...]"""

import os
import sys

try:
    from pinyin_hanzi.cli.train import main
except KeyboardInterrupt:  # Ctrl-C while the imports run (a second or more): what it says at any later moment
    if sys.stderr is not None:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    os._exit(130)  # no teardown of half-imported modules (which could report errors of their own)

if __name__ == "__main__":
    sys.exit(main())
