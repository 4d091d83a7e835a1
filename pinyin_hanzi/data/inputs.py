"""A user's own text as corpus sources: files, folders and globs of plain text (``.txt``: running text, a
document or a sentence a line) or ``pinyin<TAB>hanzi`` pairs (``.tsv``), each also gzip-compressed (``.gz``).

Files are read line by line as preparation needs them, never whole, so a corpus may be larger than memory.
Every file a source names is checked before any work starts (:func:`check_user_source`): a missing or
unreadable one is a one-line DataError then, not after an hour of preparation.
"""

from __future__ import annotations

import glob
import gzip
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pinyin_hanzi.errors import DataError
from pinyin_hanzi.files import bounded_lines, open_input

SUFFIXES = (".txt", ".tsv", ".txt.gz", ".tsv.gz")
MAX_LINE_BYTES = 1 << 20  # a text line is a sentence or a paragraph; a longer one is no text to learn from
_GLOB_CHARACTERS = frozenset("*?[")


def is_text_file_name(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def is_glob(name: str) -> bool:
    """Whether a source name is read as a glob: it has glob characters and names no existing file or folder
    as it is (``bracket[1].txt`` is that file where there is one, not a pattern that matches ``bracket1.txt``)."""
    return bool(_GLOB_CHARACTERS & set(name)) and not os.path.lexists(name)


def names_user_text(name: str) -> bool:
    """Whether a ``data.sources`` entry that is no named source names the user's own text: a text file
    (:data:`SUFFIXES`), a glob, or a folder (a path with a slash, or an existing folder). A bare unknown word
    is more likely a misspelt source name, and is not."""
    return is_text_file_name(name) or bool(_GLOB_CHARACTERS & set(name)) or "/" in name or os.sep in name or (
        Path(name).is_dir())


def kind_of(path: Path) -> str:
    """How a file's lines are read: "tsv" (``pinyin<TAB>hanzi``) for .tsv and .tsv.gz, else "text"."""
    return "tsv" if path.name.lower().removesuffix(".gz").endswith(".tsv") else "text"


def user_files(name: str) -> list[Path]:
    """The files a ``data.sources`` entry that is not a named source stands for, in a fixed order: the file
    itself, a folder's text files (:data:`SUFFIXES`, recursively, sorted by path), or a glob's matches (sorted).
    DataError (one line) when it names nothing usable."""
    if is_glob(name):
        matches = sorted(Path(match) for match in glob.glob(name, recursive=True))
        files = [path for path in matches if path.is_file() and is_text_file_name(path.name)]
        if not files:
            raise DataError(f"corpus source {name!r} matches no file ending in {', '.join(SUFFIXES)}, and no file "
                            f"has that very name (*, ? and [ make it a glob; to match them literally put each "
                            f"in brackets: {glob.escape(name)!r})")
        return files
    path = Path(name)
    if path.is_dir():
        files = sorted(found for found in path.rglob("*") if found.is_file() and is_text_file_name(found.name))
        if not files:
            raise DataError(f"corpus folder {path} holds no file ending in {', '.join(SUFFIXES)}")
        return files
    if not is_text_file_name(path.name):
        raise DataError(f"corpus source {name!r} is not a named source, and not a file, folder or glob of files "
                        f"ending in {', '.join(SUFFIXES)}")
    return [path]


def tag_of(name: str) -> str:
    """A user source's short name, for file names: a file's name without its suffixes (``my_text`` for
    ``my_text.txt.gz``), a folder's name, or a glob's last folder without glob characters."""
    if is_glob(name):
        fixed = [part for part in Path(name).parts if not _GLOB_CHARACTERS & set(part)]
        return fixed[-1] if fixed else "text"
    path = Path(name)
    if path.is_dir():
        return path.resolve().name or "text"
    lower = path.name.lower()
    return path.name[: len(path.name) - len(next(s for s in SUFFIXES if lower.endswith(s)))] if is_text_file_name(
        path.name) else path.name


def approximate_bytes(path: Path) -> int:
    """About how many bytes of text a file holds: its size, or for gzip the size its trailer records (modulo
    4 GiB, as gzip writes it); 0 where it cannot be read (the read itself then says why)."""
    try:
        if not path.name.lower().endswith(".gz"):
            return path.stat().st_size
        with open(path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            return int.from_bytes(handle.read(4), "little")
    except OSError:
        return 0


def check_user_source(name: str) -> list[Path]:
    """:func:`user_files` of ``name``, each opened and its first line read, so that a missing, unreadable,
    non-UTF-8 or corrupt (gzip) file is reported now, in one line (DataError)."""
    files = user_files(name)
    for path in files:
        next(iter(TextLines(path)), None)
    return files


@dataclass(frozen=True)
class TextLines:
    """The lines of a UTF-8 text file, gzip-compressed or not, read one at a time each time it is iterated (a
    byte-order mark dropped; lines end as ``str.splitlines`` ends them). DataError (one line) naming the file
    if it is missing, unreadable, not a regular file (nor a named pipe, with ``pipes``), not UTF-8, a broken
    gzip stream, or has a line longer than :data:`MAX_LINE_BYTES`."""

    path: Path
    what: str = "corpus file"
    pipes: bool = False  # a named pipe is read too (once: preparation reads a corpus file more than once)

    def __iter__(self) -> Iterator[str]:
        why = "" if self.pipes else (": preparation reads a corpus more than once (to fingerprint it, then to "
                                     "annotate it), so name a file")
        with open_input(self.path, self.what, DataError, pipes=self.pipes, why=why) as raw:
            handle = gzip.GzipFile(fileobj=raw) if self.path.name.lower().endswith(".gz") else raw
            try:
                yield from self._decoded(handle)
            except (OSError, EOFError, zlib.error) as error:  # an I/O error, or a broken gzip stream
                reason = getattr(error, "strerror", None) or error
                raise DataError(f"cannot read {self.what} {self.path}: {reason}") from None

    def _decoded(self, handle) -> Iterator[str]:
        def too_long(number: int) -> DataError:
            return DataError(f"{self.what} {self.path}: line {number} is longer than {MAX_LINE_BYTES >> 20} MiB: "
                             f"a line should be a sentence or a paragraph (is it a text file?)")

        offset = 0
        for number, raw in enumerate(bounded_lines(handle, MAX_LINE_BYTES, too_long), 1):
            try:
                yield from raw.decode("utf-8-sig" if number == 1 else "utf-8").splitlines()
            except UnicodeDecodeError as error:
                if error.reason == "unexpected end of data":  # only the last line can end without its newline
                    raise DataError(f"{self.what} {self.path} ends in the middle of a character (byte "
                                    f"{offset + error.start}): was it cut short? copy it again") from None
                raise DataError(f"{self.what} {self.path} is not UTF-8 (byte {offset + error.start}): convert it "
                                f"to UTF-8") from None
            offset += len(raw)
