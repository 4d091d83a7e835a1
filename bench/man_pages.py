"""Debian's Simplified-Chinese man pages (``manpages-zh``) as running text, for bench/typing_session.py's
``manpages`` kind: the package fetched once with ``apt-get download`` into ``data/raw/debian/`` (as
bench/domain_text.py fetches its own), the pages under ``usr/share/man/zh_CN/`` read from the .deb, and each
page's groff source (man or mdoc macros) stripped to its running text (:func:`groff_text`: comments, requests,
macro definitions, tables and header lines left out). Licence per the package's copyright file: GFDL-1.2+, a
few pages GPL-2.0(+).
"""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import domain_text  # bench/'s own: fetching and reading Debian packages

from pinyin_hanzi.text.pinyin import HANZI_CLASS

PACKAGE = "manpages-zh"
MAN_ROOT = "usr/share/man/zh_CN/"

_HANZI = re.compile(f"[{HANZI_CLASS}]")

_INLINE_MACROS = {"B": " ", "I": " ", "SM": " ", "SB": " ",  # font changes inside a sentence: joined to it
                  "BR": "", "RB": "", "IR": "", "RI": "", "BI": "", "IB": ""}
_TEXT_MACROS = frozenset({"SH", "SS", "IP", "Sh", "Ss", "It", "Nd", "Sx", "Em", "Tn", "Sy", "Dq", "Pq", "Ql",
                          "Pa", "Xr", "Ic", "URL"})  # headings, tags, mdoc words: their arguments are a line
_NO_FILL = {"nf": True, "EX": True, "Vb": True, "fi": False, "EE": False, "Ve": False}
_NO_BREAK = frozenset({"ft", "ps", "IX", "nr", "ds", "ta", "hy", "nh", "hw", "ne", "if", "ie", "el", "PD", "mk",
                       "ad", "na", "cs", "ss", "ul", "cu", "tr", "ev"})  # requests that do not end a paragraph
_SKIPPED_BLOCKS = {"de": "..", "am": "..", "TS": ".TE"}  # macro definitions, tables: until the end line
_ESCAPE = re.compile(r"""\\(?:(?P<comment>["#].*)
    |(?P<gone>[fn](?:\[[^\]]*\]|\(..|.)|s[-+]?(?:\(\d\d|\[\d*\]|\d)|[hvwlLxXoDbZ]'[^']*'|[&|^%:c{}/,!)])
    |(?P<special>\*?(?:\(..|\[[^\]]*\])|\*.|[ ~0])|(?P<other>.))""", re.VERBOSE)


def _unescape(text: str) -> str:
    """A groff text line as plain text: comments, font and size changes and registers removed, special
    characters and strings (mostly quotes) as spaces (no hanzi), ``\\-`` as ``-`` and ``\\e`` as a backslash."""
    def replace(match: re.Match) -> str:
        if match.group("special"):
            return " "
        other = match.group("other")
        return {"e": "\\", "\\": "\\"}.get(other, other) if other else ""
    return _ESCAPE.sub(replace, text)


def _arguments(text: str) -> list[str]:
    """A macro line's arguments: words, or "quoted words" with spaces."""
    return [quoted if quoted else word for quoted, word in re.findall(r'"([^"]*)"?|(\S+)', text)]


def _joined(paragraph: str, text: str) -> str:
    """``text`` appended to a filled paragraph: no space between two hanzi (a Chinese sentence broken over
    source lines), else one."""
    if not paragraph or not text:
        return paragraph + text
    return paragraph + ("" if _HANZI.match(paragraph[-1]) and _HANZI.match(text[0]) else " ") + text


def groff_text(source: str) -> list[str]:
    """The running text of a man page's groff source (man or mdoc macros): one string per filled paragraph,
    heading or tag, in order; each line of a no-fill block its own. Left out: comments, requests and the
    arguments of macros that are no text (.TH, .IX, conditionals, ...), macro definitions and tables."""
    lines, paragraph, fill, until, tag = [], "", True, None, False  # tag: the next text line is a .TP tag

    def flush():
        nonlocal paragraph
        if paragraph.strip():
            lines.append(paragraph.strip())
        paragraph = ""

    for raw in source.splitlines():
        if until is not None:
            until = None if raw.strip() == until else until
            continue
        control = raw[:1] in (".", "'")
        name, _, rest = raw[1:].strip().partition(" ") if control else ("", "", "")
        if control and (not name or name.startswith("\\") or name in _NO_BREAK):
            continue  # an empty request, a comment, a conditional's end, a request that leaves the text as it is
        if name in _SKIPPED_BLOCKS or name == "ig":
            until = _SKIPPED_BLOCKS.get(name) or ("." + (rest.split() or ["."])[0])
        elif not name or name in _INLINE_MACROS:
            text = _unescape(raw) if not name else _INLINE_MACROS[name].join(map(_unescape, _arguments(rest)))
            paragraph = _joined(paragraph, text.strip())
            if tag or not fill:
                flush()
            tag = False
        else:
            flush()
            fill, tag = not _NO_FILL.get(name, not fill), name == "TP"
            if name in _TEXT_MACROS:
                paragraph = " ".join(_unescape(argument) for argument in _arguments(rest))
                flush()
    flush()
    return lines


def man_pages(raw_dir: Path) -> list[tuple[str, list[str]]]:
    """(man1/ls.1, running text) of every Simplified-Chinese man page of manpages-zh (links left out), its .deb
    fetched into ``raw_dir`` first if it is not there."""
    pages = []
    with domain_text.deb_data_tar(domain_text.fetch_deb(raw_dir, PACKAGE)) as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if member.isfile() and name.startswith(MAN_ROOT) and name.endswith(".gz"):
                source = gzip.decompress(tar.extractfile(member).read()).decode("utf-8", errors="replace")
                pages.append((name[len(MAN_ROOT):-3], groff_text(source)))
    return sorted(pages)
