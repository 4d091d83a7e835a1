"""What the top-level scripts (train.py, translate.py, serve.py) import first: their command's ``main``, imported
so that Ctrl-C during the imports (a second or more, torch's among them) is the one line a later Ctrl-C gives,
not a traceback through half-imported modules. This module itself imports nothing of the package."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Callable


def command_main(module: str) -> Callable[..., int]:
    """``module``'s ``main`` (e.g. ``pinyin_hanzi.cli.train``); on Ctrl-C while it is imported, the line
    ``interrupted`` and exit status 130."""
    try:
        return importlib.import_module(module).main
    except KeyboardInterrupt:
        if sys.stderr is not None:
            sys.stderr.write("interrupted\n")
            sys.stderr.flush()
        os._exit(130)  # no teardown of half-imported modules (which could report errors of their own)
