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
line and exit status 130, a training stopped by SIGTERM or SIGUSR1 one line and 128 + the signal's number.
"""

from __future__ import annotations

import math
import os
import sys

from pinyin_hanzi.errors import OutputError, PinyinHanziError
from pinyin_hanzi.files import os_error_reason

EXIT_USER_ERROR = 2


def max_threads() -> int:
    """The most CPU threads a tool accepts: four per core. Far more makes OpenMP fail to create them (an
    abort) or crash, and never runs faster."""
    return 4 * (os.cpu_count() or 1)


def check_bounds(parser, bounds) -> None:
    """An argparse usage error (exit 2) for the first ``(option, value, low, high)`` of ``bounds`` whose value
    is given (not None) but not a finite number in low..high, both included: "--beam must be between 1 and 64".
    Every numeric option of every tool is checked through here, so none reaches torch out of range."""
    for option, value, low, high in bounds:
        if value is None:
            continue
        finite = isinstance(value, int) or math.isfinite(value)  # (an int of 400 digits is no float)
        if not (finite and low <= value <= high):
            kind = "a finite number " if isinstance(value, float) else ""
            parser.error(f"{option} must be {kind}between {low:g} and {high:g}")


def check_image_path(parser, option: str, name: str) -> None:
    """An argparse usage error unless ``name`` can become an image file: not a directory, and ending in an
    image extension matplotlib writes (.png, .svg, .pdf, ...); without one matplotlib would add .png to the
    name, with another it would fail."""
    from pathlib import Path

    from matplotlib.backend_bases import FigureCanvasBase  # matplotlib only for the tools that draw

    formats = FigureCanvasBase.get_supported_filetypes()
    if Path(name).is_dir():
        parser.error(f"{option} {name} is a directory: name an image file, e.g. {Path(name) / 'attention.png'}")
    if Path(name).suffix.lower().lstrip(".") not in formats:
        parser.error(f"{option} {name}: name an image file ending in one of "
                     f"{', '.join('.' + kind for kind in sorted(formats))}")


def write_output(text: str) -> None:
    """Write ``text`` to standard output and flush it. OutputError (one line) if standard output is closed or
    the write fails (a full disk, /dev/full); BrokenPipeError (a reader that went away) is left to
    :func:`run`, which ends quietly as command-line tools do."""
    if sys.stdout is None:  # started with standard output closed (`>&-`)
        raise OutputError("cannot write output: standard output is closed")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as error:
        raise OutputError(f"cannot write output: {error.strerror or error}") from None


def load_converter(checkpoint: str | None = None, *, device: str = "cpu", lm_weight: float | None = None,
                   word_weight: float | None = None, user_words: str | None = None, user_weight: float | None = None,
                   history: str | None = None):
    """The Converter every tool converts with: ``checkpoint``, else the one $PINYIN_HANZI_CHECKPOINT names,
    else the shipped model (see :func:`pinyin_hanzi.decoding.converter.resolve_checkpoint`). A default model is named
    on stderr, and so are notes about decoding (a weight given for a model the checkpoint lacks), so that
    standard output holds only results, and the user dictionary's note on what it left out. CheckpointError,
    ConfigError or DataError (one line) as :meth:`~pinyin_hanzi.decoding.converter.Converter.from_checkpoint`
    raises them."""
    from pinyin_hanzi.decoding.converter import Converter, resolve_checkpoint  # torch: after the arguments' errors

    path, origin = resolve_checkpoint(checkpoint)
    if checkpoint is None:
        print(f"using {origin}: {path}", file=sys.stderr, flush=True)
    return Converter.from_checkpoint(path, device=device, lm_weight=lm_weight, word_weight=word_weight,
                                     user_words=user_words, user_weight=user_weight, history=history,
                                     log=lambda note: print(note, file=sys.stderr, flush=True))


def run(main, argv=None) -> int:
    """Run ``main(argv)``; user errors become one line on stderr and exit status 2, never a traceback."""
    try:
        status = main(argv) or 0
        if sys.stdout is not None:
            write_output("")  # flush what print() left buffered while errors can still be reported
        return status
    except PinyinHanziError as error:
        rank = os.environ.get("RANK", "0")  # under torchrun every process reports; say which
        _say(f"{'' if rank == '0' else f'[rank {rank}] '}error: {error}")
        if isinstance(error, OutputError) and sys.stdout is not None:
            _discard_output()  # else the interpreter's own flush at exit fails again, with a traceback-like note
        return EXIT_USER_ERROR
    except KeyboardInterrupt as interrupt:  # errors.Interrupted says what was kept and how to go on
        rank = os.environ.get("RANK", "0")
        _say(f"{'' if rank == '0' else f'[rank {rank}] '}{str(interrupt) or 'interrupted'}")
        return getattr(interrupt, "exit_status", 130)  # 130 for Ctrl-C (SIGINT), 143 for SIGTERM
    except BrokenPipeError:  # output piped into `head` and the like
        _discard_output()
        return 0
    except OSError as error:  # a file the tool writes: disk full, read-only, no permission
        where = f": {error.filename}" if error.filename else ""
        _say(f"error: {os_error_reason(error)}{where}")
        return EXIT_USER_ERROR


def _say(line: str) -> None:
    """``line`` on stderr in one write: print() writes the text and its newline apart, and unbuffered (as
    under PYTHONUNBUFFERED=1) the lines of torchrun's processes, which share one stderr, run together."""
    if sys.stderr is not None:
        sys.stderr.write(f"{line}\n")
        sys.stderr.flush()


def _discard_output() -> None:
    """Point standard output at /dev/null, so that what is still buffered goes nowhere, quietly."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
