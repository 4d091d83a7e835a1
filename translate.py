#!/usr/bin/env python3
"""Convert pinyin into hanzi: python translate.py "ni hao"  |  --input FILE  |  --evaluate test"""

import gc
import os
import sys

gc.disable()  # until the converter is loaded: see pinyin_hanzi/runtime.py, startup_done

try:
    from pinyin_hanzi.cli.translate import main  # noqa: E402 - after the collector is paused
except KeyboardInterrupt:  # Ctrl-C while the imports run (a second or more): what it says at any later moment
    if sys.stderr is not None:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    os._exit(130)  # no teardown of half-imported modules (which could report errors of their own)

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
