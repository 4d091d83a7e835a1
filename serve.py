#!/usr/bin/env python3
"""Serve pinyin -> hanzi conversion over HTTP, with a web IME page at / (see pinyin_hanzi/serving/service.py).

    python serve.py                               # the shipped model on http://127.0.0.1:8000
    python serve.py --checkpoint checkpoints/quickstart/best.pt --port 8080
"""

import os
import sys

try:
    from pinyin_hanzi.cli.serve import main
except KeyboardInterrupt:  # Ctrl-C while the imports run (a second or more): what it says at any later moment
    if sys.stderr is not None:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    os._exit(130)  # no teardown of half-imported modules (which could report errors of their own)

if __name__ == "__main__":
    sys.exit(main())
