"""Command-line tools, one module each, sharing one error path (:func:`run`).

    python train.py / python -m pinyin_hanzi.cli.train            train a model (train.py calls this)
    python translate.py / python -m pinyin_hanzi.cli.translate    convert pinyin, evaluate, draw attention
    python serve.py / python -m pinyin_hanzi.cli.serve            the HTTP service and web IME page
    python -m pinyin_hanzi.cli.char_lm CHECKPOINT OUT             count a character n-gram model into a checkpoint
    python -m pinyin_hanzi.cli.word_lm CHECKPOINT OUT             add a word model (word frequencies) to a checkpoint
    python -m pinyin_hanzi.cli.export SOURCE TARGET               an inference-only copy of a checkpoint
    python -m pinyin_hanzi.cli.positional_encoding OUT.png        the book's positional-encoding picture
    python -m pinyin_hanzi.cli.config_reference                   the config reference (docs/config.md)

Library modules never print usage or exit: they raise the project's errors (errors.py), which :func:`run`
turns into one line on stderr and exit status 2 (an OSError too: a full or read-only disk); Ctrl-C is one
line and exit status 130.
"""

from __future__ import annotations

import os
import sys

from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.files import os_error_reason

EXIT_USER_ERROR = 2


def run(main, argv=None) -> int:
    """Run ``main(argv)``; user errors become one line on stderr and exit status 2, never a traceback."""
    try:
        return main(argv) or 0
    except PinyinHanziError as error:
        rank = os.environ.get("RANK", "0")  # under torchrun every process reports; say which
        print(f"{'' if rank == '0' else f'[rank {rank}] '}error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as interrupt:  # errors.Interrupted says what was kept and how to go on
        print(str(interrupt) or "interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:  # a file the tool writes: disk full, read-only, no permission
        where = f": {error.filename}" if error.filename else ""
        print(f"error: {os_error_reason(error)}{where}", file=sys.stderr)
        return EXIT_USER_ERROR
