"""Accuracy and speed side by side: our model vs fcitx5's libime on the same held-out prepared splits.

Each example (``tokens<TAB>hanzi``, one token per character) is typed two ways: syllables separated
(ours: spaces, libime: apostrophes) and run together. libime converts one Chinese run at a time, as its
wrapper expects; punctuation, digits and Latin pass through unchanged and the runs' outputs are put back
in place. Our model converts the whole typed line exactly as ``translate.py --evaluate`` does
(``metrics.typed`` + ``Converter.convert_lines``). Both are scored by ``metrics.conversion_scores``.

``--abbreviate P`` types the share P of syllables as their initial (``b`` for bei, ``zh`` for zhong; with
``--abbreviate-as letter``, their first letter only: ``z`` for zhong), the same syllables for both engines
(``metrics.abbreviated_positions``): ours reads them as prefixes, libime gets the typed letters in their
place, which it reads as abbreviations itself.

    bash /work/shared/peers/build.sh /tmp/peers          # builds the libime wrapper (Debian packages, root)
    python bench/compare_libime.py --split data/prepared/pd1998/test.tsv [--split more.tsv ...] \\
        [--checkpoint checkpoints/quickstart/best.pt] [--libime /tmp/peers/libime_convert] \\
        [--limit N] [--beam 1] [--engines ours,libime] [--threads 1] [--dump hyps.tsv] \\
        [--abbreviate 0.3 [--abbreviate-as letter]]

Our model is the shipped one unless ``--checkpoint`` (or $PINYIN_HANZI_CHECKPOINT) names another.

libime is a measuring tool only: nothing of it is part of this repository or the product. Sentences/s
exclude start-up (libime: loading its dictionary and language model, measured on empty input; ours:
loading the checkpoint). The last line printed is a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pinyin_hanzi.cli import check_bounds, max_threads
from pinyin_hanzi.config import LIMITS
from pinyin_hanzi.data.corpus import read_examples
from pinyin_hanzi.data.examples import Example
from pinyin_hanzi.evaluation.metrics import ABBREVIATION_STYLES, abbreviated_tokens, conversion_scores, typed
from pinyin_hanzi.text.pinyin import is_hanzi

ENGINES = ("ours", "libime")


@dataclass
class Result:
    """One engine's conversions of one split in one input form."""

    split: str
    engine: str
    unsegmented: bool
    hypotheses: list[str]
    seconds: float  # wall seconds of conversion, start-up excluded
    cpu_seconds: float  # CPU seconds of conversion (user + system), start-up excluded
    length_mismatches: int = 0  # libime runs whose output length differs from the run's syllable count
    runs: int = 0  # libime runs converted


def libime_syllable(token: str) -> str | None:
    """The token as libime takes it (ü as v), or None when it is not a pinyin syllable (punctuation,
    digits, Latin letters standing for themselves). libime's wrapper aborts on non-ASCII input."""
    syllable = token.replace("ü", "v")
    return syllable if syllable.isascii() and syllable.isalpha() else None


def abbreviated(example: Example, share: float, style: str = "initial") -> Example:
    """The example with the share ``share`` of its syllables replaced by their typed abbreviation (bei -> b;
    zhong -> zh, or z in the style ``letter``), exactly as ``metrics.typed`` abbreviates for our model."""
    return Example(tuple(abbreviated_tokens(example.tokens, example.hanzi, share, style)), example.hanzi)


def pieces(example: Example) -> list[str | list[str]]:
    """The example as alternating pass-through text (str) and runs of consecutive hanzi syllables
    (list of syllables); a position belongs to a run when its character is a hanzi and its token a syllable."""
    out: list[str | list[str]] = []
    for token, char in zip(example.tokens, example.hanzi):
        syllable = libime_syllable(token) if is_hanzi(char) else None
        if syllable is None:
            if out and isinstance(out[-1], str):
                out[-1] += token
            else:
                out.append(token)
        elif out and isinstance(out[-1], list):
            out[-1].append(syllable)
        else:
            out.append([syllable])
    return out


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_libime(binary: str, lines: Sequence[str]) -> tuple[list[str], float, float]:
    """Top-1 conversion of each line by one libime process fed all lines at once, and the wall and CPU
    seconds it took (start-up included). Raises RuntimeError if the process fails or answers a different
    count."""
    cpu_started, started = children_cpu_seconds(), time.perf_counter()
    done = subprocess.run([binary], input="".join(line + "\n" for line in lines), capture_output=True,
                          text=True, encoding="utf-8", check=False)
    seconds, cpu_seconds = time.perf_counter() - started, children_cpu_seconds() - cpu_started
    outputs = done.stdout.split("\n")[:-1]
    if done.returncode != 0 or len(outputs) != len(lines):
        raise RuntimeError(f"{binary} exited with {done.returncode} after {len(outputs)} of {len(lines)} lines: "
                           f"{done.stderr.strip()[:300]}")
    return [output.split("\t")[0] for output in outputs], seconds, cpu_seconds


def libime_startup(binary: str, repeats: int = 3) -> tuple[float, float]:
    """Median wall and CPU seconds of a libime process given no input: loading its dictionary and language
    model."""
    runs = [run_libime(binary, [])[1:] for _ in range(repeats)]
    return statistics.median(wall for wall, _ in runs), statistics.median(cpu for _, cpu in runs)


def convert_libime(binary: str, examples: Sequence[Example], *, unsegmented: bool,
                   startup: tuple[float, float], split: str, abbreviate: float = 0.0,
                   abbreviate_as: str = "initial") -> Result:
    """Each example's Chinese runs converted by libime (syllables joined by ' or run together, abbreviated
    ones as typed) in one process, reassembled with the pass-through text in place."""
    split_examples = [pieces(abbreviated(example, abbreviate, abbreviate_as)) for example in examples]
    runs = [run for example in split_examples for run in example if isinstance(run, list)]
    outputs, seconds, cpu_seconds = run_libime(binary, [("" if unsegmented else "'").join(run) for run in runs])
    converted = iter(outputs)
    hypotheses, mismatches = [], 0
    for example in split_examples:
        text = ""
        for piece in example:
            if isinstance(piece, str):
                text += piece
                continue
            output = next(converted)
            mismatches += len(output) != len(piece)
            text += output  # kept as it is: CER counts the extra or missing characters
        hypotheses.append(text)
    return Result(split, "libime", unsegmented, hypotheses, max(seconds - startup[0], 1e-9),
                  max(cpu_seconds - startup[1], 1e-9), mismatches, len(runs))


def convert_ours(converter, lines: Sequence[str], *, unsegmented: bool, beam: int, batch_size: int,
                 split: str, abbreviated: bool = False) -> Result:
    """The examples' ``lines`` as ``translate.py --evaluate`` types them (:func:`typed_lines`), converted by
    our model (constrained); with ``abbreviated``, abbreviations are read as prefixes."""
    prefixes = True if abbreviated else None
    converter.convert_lines(lines[:32], beam=beam, prefixes=prefixes)  # warm-up
    cpu_started, started = time.process_time(), time.perf_counter()
    found = converter.convert_lines(lines, beam=beam, nbest=1, batch_size=batch_size, prefixes=prefixes)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return Result(split, "ours", unsegmented, [conversions[0].text for conversions in found], seconds, cpu_seconds)


def typed_lines(examples: Sequence[Example], unsegmented: bool, abbreviate: float, abbreviate_as: str) -> list[str]:
    """Each example typed as ``translate.py --evaluate`` types it (``metrics.typed``)."""
    return [typed(example.tokens, example.hanzi, unsegmented, abbreviate=abbreviate, abbreviate_as=abbreviate_as)
            for example in examples]


def split_label(path: str) -> str:
    """``data/prepared/pd1998/test.tsv`` -> ``pd1998/test.tsv``."""
    return "/".join(Path(path).parts[-2:])


def summary_row(result: Result, references: Sequence[str]) -> dict:
    scores = conversion_scores(result.hypotheses, references)
    row = {"split": result.split, "engine": result.engine,
           "input": "unsegmented" if result.unsegmented else "segmented",
           "char_accuracy": round(scores["char_accuracy"], 4), "cer": round(scores["cer"], 4),
           "exact": round(scores["exact"], 4), "sentences": scores["sentences"], "characters": scores["characters"],
           "sentences_per_s": round(len(references) / result.seconds, 1),
           "sentences_per_cpu_s": round(len(references) / result.cpu_seconds, 1)}
    if result.engine == "libime":
        row.update(runs=result.runs, length_mismatches=result.length_mismatches)
    return row


def print_table(rows: Sequence[dict]) -> None:
    header = (f"{'split':<24} {'engine':<7} {'input':<12} {'char acc':>9} {'CER':>7} {'exact':>7} "
              f"{'sent/s':>8} {'sent/cpu-s':>11} {'len mismatch':>13}")
    print(header)
    print("-" * len(header))
    for row in rows:
        mismatch = f"{row['length_mismatches']}/{row['runs']}" if "runs" in row else ""
        print(f"{row['split']:<24} {row['engine']:<7} {row['input']:<12} {row['char_accuracy']:>9.2%} "
              f"{row['cer']:>7.2%} {row['exact']:>7.2%} {row['sentences_per_s']:>8,.0f} "
              f"{row['sentences_per_cpu_s']:>11,.0f} {mismatch:>13}")


def parse_arguments() -> tuple[argparse.Namespace, list[str]]:
    """The command line, checked, and the engines it names."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="our model (default: $PINYIN_HANZI_CHECKPOINT, else the shipped one)")
    parser.add_argument("--split", action="append", help="a prepared tokens<TAB>hanzi file; repeatable")
    parser.add_argument("--libime", default="/tmp/peers/libime_convert", help="the wrapper built by build.sh")
    parser.add_argument("--engines", default="ours,libime", help="comma-separated: ours, libime")
    parser.add_argument("--limit", type=int, default=0, help="first N examples of each split (0: all)")
    parser.add_argument("--beam", type=int, help="our beam size, 1 for greedy (default: the checkpoint's "
                        "decode.beam, as translate.py)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (libime uses one)")
    parser.add_argument("--dump", help="write split, engine, input form, reference, hypothesis, typed line (as our "
                        "model got it) to this TSV")
    parser.add_argument("--abbreviate", type=float, default=0.0, metavar="P",
                        help="type this share (0-1) of syllables as their initial, the same ones for both engines")
    parser.add_argument("--abbreviate-as", choices=ABBREVIATION_STYLES, default="initial",
                        help="an abbreviated syllable typed as its initial (zh for zhong, default) or its first "
                             "letter (z)")
    parser.add_argument("--lm-weight", type=float, help="our character n-gram model's weight (default: the "
                        "checkpoint's decode.lm_weight)")
    parser.add_argument("--word-weight", type=float, help="our word model's weight (default: the checkpoint's "
                        "decode.word_weight)")
    args = parser.parse_args()
    engines = [engine.strip() for engine in args.engines.split(",") if engine.strip()]
    if not engines or any(engine not in ENGINES for engine in engines):
        parser.error(f"--engines takes a comma-separated list of {', '.join(ENGINES)}")
    check_bounds(parser, [("--abbreviate", args.abbreviate, 0, 1), ("--limit", args.limit, 0, 10**9),
                          ("--beam", args.beam, *LIMITS["decode.beam"]),
                          ("--batch-size", args.batch_size, *LIMITS["decode.batch_sentences"]),
                          ("--threads", args.threads, 1, max_threads()),
                          ("--lm-weight", args.lm_weight, *LIMITS["decode.lm_weight"]),
                          ("--word-weight", args.word_weight, *LIMITS["decode.word_weight"])])
    if args.abbreviate_as != "initial" and not args.abbreviate:
        parser.error("--abbreviate-as needs --abbreviate")
    if not args.split or ("libime" in engines and not Path(args.libime).is_file()):
        parser.error(f"needs --split FILE (prepared tokens<TAB>hanzi, e.g. data/prepared/pd1998/test.tsv) and, for "
                     f"libime, its wrapper at --libime (now {args.libime}: bash /work/shared/peers/build.sh /tmp/peers)")
    return args, engines


def load_ours(args: argparse.Namespace):
    """Our converter and the seconds it took to load; ``args.beam`` becomes the checkpoint's decode.beam
    unless given."""
    from pinyin_hanzi import Converter

    started = time.perf_counter()
    converter = Converter.from_checkpoint(args.checkpoint, lm_weight=args.lm_weight, word_weight=args.word_weight,
                                          log=lambda note: print(note, file=sys.stderr))
    print(f"ours: {converter.checkpoint}", file=sys.stderr)
    load_seconds = time.perf_counter() - started
    args.beam = converter.search_settings(beam=args.beam).beam
    return converter, load_seconds


def compare(args: argparse.Namespace, engines: Sequence[str], converter,
            libime_load: tuple[float, float] | None) -> tuple[list[dict], list[tuple[str, ...]]]:
    """Every split typed both ways, converted by each engine: a summary row each (printed to stderr as it
    comes), and the dump's lines (split, engine, input form, reference, hypothesis, the line our model got)."""
    rows, dump = [], []
    for path in args.split:
        examples = read_examples(path, trusted=True)
        examples = examples[: args.limit] if args.limit > 0 else examples
        references = [example.hanzi for example in examples]
        label = split_label(path)
        for unsegmented in (False, True):
            lines = typed_lines(examples, unsegmented, args.abbreviate, args.abbreviate_as)
            for engine in engines:
                if engine == "ours":
                    result = convert_ours(converter, lines, unsegmented=unsegmented, beam=args.beam,
                                          batch_size=args.batch_size, split=label, abbreviated=args.abbreviate > 0)
                else:
                    result = convert_libime(args.libime, examples, unsegmented=unsegmented, startup=libime_load,
                                            split=label, abbreviate=args.abbreviate,
                                            abbreviate_as=args.abbreviate_as)
                rows.append(summary_row(result, references))
                print(json.dumps(rows[-1], ensure_ascii=False), file=sys.stderr, flush=True)
                dump.extend((label, engine, rows[-1]["input"], reference, hyp, line)  # line: what our model got
                            for reference, hyp, line in zip(references, result.hypotheses, lines))
    return rows, dump


def print_notes(args: argparse.Namespace, ours_load: float | None, libime_load: tuple[float, float] | None) -> None:
    """The lines under the table: the input form, and how each engine ran."""
    if args.abbreviate:
        print(f"input: {args.abbreviate:.0%} of syllables typed as their {ABBREVIATION_STYLES[args.abbreviate_as]}, "
              "the same ones for both engines")
    if ours_load is not None:
        print(f"ours: {'greedy' if args.beam == 1 else f'beam {args.beam}'}, constrained, {args.threads} torch "
              f"thread(s), checkpoint load {ours_load:.2f} s (excluded)")
    if libime_load is not None:
        print(f"libime: one process per split and input form, dictionary + LM load {libime_load[0]:.2f} s "
              f"({libime_load[1]:.2f} CPU s, excluded); "
              f"len mismatch = runs whose output length differs from the run's syllables")


def main() -> int:
    args, engines = parse_arguments()
    torch.set_num_threads(args.threads)
    converter, ours_load = load_ours(args) if "ours" in engines else (None, None)
    checkpoint = None if converter is None else converter.checkpoint
    libime_load = libime_startup(args.libime) if "libime" in engines else None
    rows, dump = compare(args, engines, converter, libime_load)
    print()
    print_table(rows)
    print_notes(args, ours_load, libime_load)
    if args.dump:
        Path(args.dump).write_text("".join("\t".join(fields) + "\n" for fields in dump), encoding="utf-8")
    print(json.dumps({
        "benchmark": "compare_libime", "checkpoint": None if checkpoint is None else str(checkpoint),
        "beam": args.beam, "threads": args.threads, "limit": args.limit, "abbreviate": args.abbreviate,
        "abbreviate_as": args.abbreviate_as,
        "ours_load_s": None if ours_load is None else round(ours_load, 2),
        "libime_load_s": None if libime_load is None else round(libime_load[0], 3), "results": rows,
    }, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
