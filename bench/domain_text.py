"""Text from a domain the shipped model never trained on: the Simplified-Chinese LibreOffice help pages, as
fine-tuning text and a held-out evaluation set (issue #36: fine-tune on your own domain, measured).

Debian's ``libreoffice-help-zh-cn`` package is fetched once with ``apt-get download`` into
``data/raw/debian/`` (or named with ``--deb`` where apt-get is not at hand), its help pages
(``usr/share/libreoffice/help/zh-CN/**/*.html``) are read straight from the .deb (python's own ar and tar
reading: no dpkg needed) and turned into plain text: the page's paragraphs, headings, list items and
table cells, one a line; never its scripts, navigation menus, search box, "how to get to this command"
menu paths, sections embedded from other pages, related-topic links, code listings or debug footer. One
page is one document. The pages are split by a stable hash (md5) of their path into fine-tuning pages
(about 80%) and held-out pages (about 20%), and two files are written:

- ``data/domain/libreoffice/train.txt``: the fine-tuning pages' paragraphs (those with a hanzi), one a
  line, page after page: running text for ``data.sources`` (``configs/finetune.yaml``);
- ``data/domain/libreoffice/eval.tsv``: ``pinyin<TAB>hanzi`` clauses of the held-out pages, annotated as
  training annotates a corpus (clauses cut after clause punctuation and at ``--max-len``, pypinyin with
  pypinyin-dict's phrase readings, as ``data.phrase_pinyin: true`` does), each once, none that is also a
  clause of train.txt, at most ``--max-eval`` of them (chosen by a hash of the text, kept in page order),
  for ``translate.py --evaluate``.

The same package always gives the same files. The last line printed is a one-line JSON summary.

    python bench/domain_text.py                          # fetch (once), extract, split, write
    python bench/domain_text.py --deb libreoffice-help-zh-cn_7.4.7_all.deb   # a .deb fetched by hand

Licence: the LibreOffice help is under the Mozilla Public License 2.0 (MPL-2.0), with some files
incorporating Apache-2.0 material, per the package's ``/usr/share/doc/libreoffice-help-zh-cn/copyright``.
The files written here are derived from it and stay under MPL-2.0; they are generated, never committed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.parse
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi.cli import run
from pinyin_hanzi.data.examples import Example, document_examples
from pinyin_hanzi.data.sources import Document, phrase_table
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text.pinyin import is_hanzi, phrase_readings

PACKAGE = "libreoffice-help-zh-cn"
HELP_ROOT = "usr/share/libreoffice/help/zh-CN/"
EVAL_PERCENT = 20  # pages whose path hashes below this (of 100) are held out

# Subtrees that are no running text of the page: the page frame (menus, search, script), menu paths
# ("how to get to this command"), sections other pages embed (their text belongs to the page that has
# them; kept, they would be a held-out page's text in the training pages), related-topic links, Basic code,
# the debug footer, and what the page hides (the macOS variant of a menu name beside the default one).
SKIPPED_TAGS = frozenset({"head", "script", "style", "noscript", "header", "aside", "nav", "footer", "button",
                          "pre", "code", "title", "template"})
SKIPPED_CLASSES = frozenset({"embedded", "howtoget", "relatedtopics", "debug", "bascode", "code", "noteicon"})
BLOCK_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td", "th", "dt", "dd", "caption",
                        "div", "table", "tr", "ul", "ol", "dl", "br"})
VOID_TAGS = frozenset({"br", "img", "meta", "link", "input", "hr", "base", "col", "area", "source", "wbr",
                       "embed", "param", "track"})


class _Paragraphs(HTMLParser):
    """Collects the text of a help page's blocks, one string per paragraph, heading, list item or cell."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._open: list[tuple[str, bool]] = []  # (tag, skipped) of every open non-void element
        self._text: list[str] = []

    def _skipping(self) -> bool:
        return bool(self._open) and self._open[-1][1]

    def _flush(self) -> None:
        text = " ".join("".join(self._text).split())
        if text:
            self.paragraphs.append(text)
        self._text.clear()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in BLOCK_TAGS and not self._skipping():
            self._flush()
        if tag in VOID_TAGS:
            return
        attributes = dict(attrs)
        classes = set((attributes.get("class") or "").split())
        skipped = (self._skipping() or tag in SKIPPED_TAGS or bool(classes & SKIPPED_CLASSES)
                   or "hidden" in attributes)
        self._open.append((tag, skipped))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS or all(name != tag for name, _ in self._open):
            return  # a stray end tag closes nothing
        while self._open:
            name, skipped = self._open.pop()
            if name == tag:
                break
        if tag in BLOCK_TAGS and not skipped:
            self._flush()

    def handle_data(self, data: str) -> None:
        if not self._skipping():
            self._text.append(data)


def page_paragraphs(html: str) -> list[str]:
    """The running text of one help page: a string per paragraph, heading, list item or table cell, in page
    order, whitespace collapsed; see :data:`SKIPPED_TAGS` and :data:`SKIPPED_CLASSES` for what is left out."""
    parser = _Paragraphs()
    parser.feed(html)
    parser.close()
    parser._flush()
    return parser.paragraphs


def held_out(page: str) -> bool:
    """Whether the page (its path under the help folder, ``text/swriter/guide/auto_numbering.html``) is an
    evaluation page: a stable hash of the path, so a page keeps its side when the package is updated."""
    return int(hashlib.md5(page.encode("utf-8")).hexdigest()[:8], 16) % 100 < EVAL_PERCENT


# ------------------------------------------------------------------------------------------------ fetching

def cached_deb(raw_dir: Path, package: str = PACKAGE) -> Path | None:
    """``package``'s .deb already in ``raw_dir`` (the newest, should there be several), or None."""
    debs = sorted(raw_dir.glob(f"{package}_*.deb"), key=lambda path: (path.stat().st_mtime, path.name))
    return debs[-1] if debs else None


def fetch_deb(raw_dir: Path, package: str = PACKAGE) -> Path:
    """``package``'s .deb in ``raw_dir``, downloaded with ``apt-get download`` first if it is not there.
    Raises DataError (one line) when apt-get is missing or fails."""
    deb = cached_deb(raw_dir, package)
    if deb is not None:
        return deb
    if shutil.which("apt-get") is None:
        raise DataError(f"apt-get not found: this fetches Debian's {package} package with it; elsewhere download "
                        f"its .deb (https://packages.debian.org/stable/all/{package}/download) and pass --deb FILE")
    raw_dir.mkdir(parents=True, exist_ok=True)
    # Into a folder of its own, moved into place when complete: a download cut short never passes for the cache.
    downloading = raw_dir / f".download-{os.getpid()}"
    downloading.mkdir()
    try:
        print(f"downloading {package} with apt-get into {raw_dir} ...", file=sys.stderr, flush=True)
        result = subprocess.run(["apt-get", "download", package], cwd=downloading, capture_output=True, text=True)
        fetched = sorted(downloading.glob(f"{package}_*.deb"))
        if result.returncode != 0 or not fetched:
            errors = [line for line in result.stderr.splitlines() if line.startswith("E:")]
            last = (errors or result.stderr.strip().splitlines() or ["no output"])[-1]
            raise DataError(f"apt-get download {package} failed ({last}); run apt-get update first, "
                            f"or download the .deb by hand and pass --deb FILE")
        os.replace(fetched[0], raw_dir / fetched[0].name)
    finally:
        shutil.rmtree(downloading, ignore_errors=True)
    return raw_dir / fetched[0].name


def deb_version(deb: Path) -> str:
    """The version in a .deb's file name as apt writes it (``..._4%3a7.4.7-1+deb12u14_all.deb``), or ''."""
    parts = urllib.parse.unquote(deb.name).split("_")
    return parts[1] if len(parts) == 3 else ""


def deb_data_tar(deb: Path) -> tarfile.TarFile:
    """The data archive of a .deb (an ar archive: ``debian-binary``, ``control.tar.*``, ``data.tar.*``),
    read with python's own tar reading. DataError (one line) if it is no .deb or is cut short."""
    try:
        blob = deb.read_bytes()
    except OSError as error:
        raise DataError(f"cannot read {deb}: {error.strerror or error}") from None
    if not blob.startswith(b"!<arch>\n"):
        raise DataError(f"{deb} is not a .deb (no ar archive): delete it and run again")
    offset = 8
    while offset + 60 <= len(blob):
        header = blob[offset : offset + 60]
        name, size = header[:16].decode("ascii", "replace").strip().rstrip("/"), header[48:58].strip()
        if not size.isdigit():
            break
        start, offset = offset + 60, offset + 60 + int(size) + int(size) % 2  # members are 2-byte aligned
        if name.startswith("data.tar"):
            if offset - int(size) % 2 > len(blob):
                break
            if name.endswith(".zst"):
                raise DataError(f"{deb}: data.tar.zst (zstd) cannot be read here; unpack it with dpkg-deb "
                                f"-x and pack usr/ as a .tar.xz, or use the Debian .deb (xz)")
            try:
                return tarfile.open(fileobj=io.BytesIO(blob[start : start + int(size)]), mode="r:*")
            except (tarfile.TarError, EOFError) as error:
                raise DataError(f"{deb}: cannot read its {name} ({error}): delete it and run again") from None
    raise DataError(f"{deb} has no complete data.tar member: delete it and run again")


def help_pages(deb: Path) -> list[tuple[str, str]]:
    """(path under the zh-CN help folder, HTML text) of every help page in the .deb, sorted by path.
    DataError if there is none (not the LibreOffice help package) or a page is not UTF-8."""
    pages = []
    with deb_data_tar(deb) as tar:
        try:
            for member in tar:
                name = member.name.removeprefix("./")
                if member.isfile() and name.startswith(HELP_ROOT) and name.endswith(".html"):
                    page = name[len(HELP_ROOT):]
                    pages.append((page, tar.extractfile(member).read().decode("utf-8")))
        except (tarfile.TarError, EOFError, OSError) as error:
            raise DataError(f"{deb}: its data archive is damaged ({error}): delete it and run again") from None
        except UnicodeDecodeError:
            raise DataError(f"{deb}: help page {page} is not UTF-8") from None
    if not pages:
        raise DataError(f"{deb} holds no help pages under /{HELP_ROOT}: is it {PACKAGE}?")
    return sorted(pages)


# ----------------------------------------------------------------------------------------------- splitting

def split_pages(pages: list[tuple[str, str]]) -> dict[str, list[tuple[str, list[str]]]]:
    """``{"train": [...], "eval": [...]}``: (page, its paragraphs that have a hanzi) of every page with such
    a paragraph, on the side :func:`held_out` gives it, in page order."""
    sides: dict[str, list[tuple[str, list[str]]]] = {"train": [], "eval": []}
    for page, html in tqdm(pages, desc="pages", unit="page", disable=None, mininterval=1.0, leave=False):
        paragraphs = [text for text in page_paragraphs(html) if any(is_hanzi(char) for char in text)]
        if paragraphs:
            sides["eval" if held_out(page) else "train"].append((page, paragraphs))
    return sides


def page_clauses(pages: list[tuple[str, list[str]]], max_len: int, skipped: Counter) -> list[Example]:
    """The annotated clauses of the pages, in page order, as training reads a ``.txt`` corpus."""
    return [example for _, paragraphs in pages
            for example in document_examples(Document("text", paragraphs), max_len, skipped)]


def evaluation_clauses(held: list[Example], train_texts: set[str], max_eval: int) -> tuple[list[Example], Counter]:
    """The held-out clauses, each text once, none that train.txt also has, at most ``max_eval`` (those with
    the lowest md5 of their text: a sample over all held-out pages, the same on every run) in page order;
    and the counts of what was left out, by reason."""
    left_out: Counter = Counter()
    kept, seen = [], set()
    for example in held:
        if example.hanzi in train_texts:
            left_out["also a clause of train.txt"] += 1
        elif example.hanzi in seen:
            left_out["duplicate"] += 1
        else:
            seen.add(example.hanzi)
            kept.append(example)
    if len(kept) > max_eval:
        left_out[f"beyond --max-eval {max_eval}"] = len(kept) - max_eval
        rank = sorted(range(len(kept)), key=lambda i: hashlib.md5(kept[i].hanzi.encode("utf-8")).hexdigest())
        kept = [kept[i] for i in sorted(rank[:max_eval])]
    return kept, left_out


def write_text(path: Path, lines: list[str]) -> None:
    """``lines`` into ``path``, one a line, written beside it and renamed: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


# -------------------------------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deb", help=f"read this {PACKAGE} .deb instead of fetching it with apt-get")
    parser.add_argument("--raw-dir", default="data/raw/debian", help="where the .deb is cached (default: %(default)s)")
    parser.add_argument("--out", default="data/domain/libreoffice", help="output folder (default: %(default)s)")
    parser.add_argument("--max-len", type=int, default=32,
                        help="cut clauses at this many characters, as data.max_len does (default: %(default)s)")
    parser.add_argument("--max-eval", type=int, default=3000, help="at most this many evaluation clauses "
                        "(default: %(default)s)")
    parser.add_argument("--corpus-raw-dir", default="data/raw", help="where pypinyin-dict's phrase table is "
                        "(fetched from PyPI once, as data.raw_dir; default: %(default)s)")
    parser.add_argument("--no-phrase-pinyin", action="store_true", help="annotate with pypinyin alone, without "
                        "pypinyin-dict's phrase readings (what data.phrase_pinyin: false does)")
    args = parser.parse_args(argv)
    for option, value in (("--max-len", args.max_len), ("--max-eval", args.max_eval)):
        if not 1 <= value <= 10**6:
            parser.error(f"{option} must be between 1 and 1000000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    deb = Path(args.deb) if args.deb else fetch_deb(Path(args.raw_dir))
    pages = help_pages(deb)
    sides = split_pages(pages)
    skipped: Counter = Counter()
    train_texts = {example.hanzi for example in page_clauses(sides["train"], args.max_len, Counter())}
    if args.no_phrase_pinyin:
        held = page_clauses(sides["eval"], args.max_len, skipped)
    else:
        with phrase_readings(phrase_table(args.corpus_raw_dir)):
            held = page_clauses(sides["eval"], args.max_len, skipped)
    clauses, left_out = evaluation_clauses(held, train_texts, args.max_eval)
    if not sides["train"] or not clauses:
        raise DataError(f"{deb}: {len(sides['train'])} fine-tuning pages and {len(clauses)} evaluation clauses; "
                        f"both need some text: is it {PACKAGE}?")
    out = Path(args.out)
    train_lines = [line for _, paragraphs in sides["train"] for line in paragraphs]
    write_text(out / "train.txt", train_lines)
    write_text(out / "eval.tsv", [example.to_line() for example in clauses])
    train_hanzi = sum(is_hanzi(char) for line in train_lines for char in line)
    eval_hanzi = sum(is_hanzi(char) for example in clauses for char in example.hanzi)
    print(f"read {len(pages)} help pages of {deb} (version {deb_version(deb) or 'unknown'})")
    print(f"wrote {out / 'train.txt'}: {len(sides['train'])} pages, {len(train_lines)} paragraphs, "
          f"{train_hanzi} hanzi")
    print(f"wrote {out / 'eval.tsv'}: {len(clauses)} clauses, {eval_hanzi} hanzi, from {len(sides['eval'])} "
          f"held-out pages; left out: {dict(left_out) or 'none'}")
    print(json.dumps({
        "benchmark": "domain_text", "package": PACKAGE, "version": deb_version(deb), "deb": str(deb),
        "pages": len(pages), "train_pages": len(sides["train"]), "eval_pages": len(sides["eval"]),
        "train_paragraphs": len(train_lines), "train_hanzi": train_hanzi, "eval_clauses": len(clauses),
        "eval_hanzi": eval_hanzi, "eval_left_out": dict(left_out), "eval_skipped": dict(skipped),
        "phrase_pinyin": not args.no_phrase_pinyin, "max_len": args.max_len, "seconds": round(time.time() - started, 1),
    }, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
