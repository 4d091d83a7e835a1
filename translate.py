#!/usr/bin/env python3
"""Convert pinyin into hanzi: python translate.py "ni hao"  |  --input FILE  |  --evaluate test"""

import sys

from pinyin_hanzi.cli.translate import main

if __name__ == "__main__":
    sys.exit(main())
