#!/usr/bin/env python3
"""Convert pinyin into hanzi: python translate.py "ni hao"  |  --input FILE  |  --evaluate test"""

import gc
import os
import sys

gc.disable()  # until the converter is loaded: see pinyin_hanzi/runtime.py, startup_done

from pinyin_hanzi.startup import command_main  # noqa: E402 - after the collector is paused

main = command_main("pinyin_hanzi.cli.translate")  # Ctrl-C meanwhile: one line, status 130

if __name__ == "__main__":
    status = main()  # its output is written and flushed, errors reported, by the time it returns
    # The interpreter's own exit would then tear down every module and the tables they hold (pypinyin's,
    # the lexicon's, the model's): 0.4 s, a fifth of a one-line conversion's start-up, for nothing.
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: run() has reported or discarded it
            pass
    os._exit(status)
