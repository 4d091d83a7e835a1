#!/usr/bin/env python3
"""Serve pinyin -> hanzi conversion over HTTP, with a web IME page at / (see pinyin_hanzi/serving/service.py).

    python serve.py                               # the shipped model on http://127.0.0.1:8000
    python serve.py --checkpoint checkpoints/quickstart/best.pt --port 8080
"""

import sys

from pinyin_hanzi.startup import command_main

main = command_main("pinyin_hanzi.cli.serve")  # Ctrl-C meanwhile: one line, status 130

if __name__ == "__main__":
    sys.exit(main())
