"""Conversion speed side by side with fcitx5's libime: the same everyday sentences, both engines, one run.

    bash /work/shared/peers/build.sh /tmp/peers          # builds the libime wrapper (Debian packages, root)
    python bench/speed_vs_libime.py --split data/prepared/everyday/test.pd1998.tsv \\
        --split data/prepared/everyday/test.reviews.tsv [--split ...] [--limit N] [--threads 2] [--repeats 3] \\
        [--checkpoint PATH] [--libime /tmp/peers/libime_convert] [--unsegmented]

The sentences are prepared ``tokens<TAB>hanzi`` splits (``python train.py --config configs/everyday.yaml
--prepare-only`` writes them), typed with their syllables separated (``--unsegmented``: run together), as
``bench/compare_libime.py`` types them for each engine: ours gets each whole line and converts it with the
checkpoint's default decoding (decode.beam, its n-gram model, decode.precision), libime gets each Chinese run of
a line (its wrapper's input) and the pass-through text is put back in place.

Two rates each, sentences per second, as medians over ``--repeats`` runs taking turns:
- in-process: ours ``Converter.convert_lines`` over all the lines in one call (checkpoint loaded beforehand),
  on ``--threads`` torch threads; libime one process over all runs, minus its start-up (a process given no
  input: loading its dictionary and language model). libime uses one thread.
- whole process, start-up included: ``translate.py --input FILE`` against the libime wrapper fed the same
  runs, each a fresh process.

``ratio_vs_libime`` is ours / libime in-process (above 1: we are faster), ``ratio_vs_libime_whole_process``
the same for whole processes; the ``_cpu`` figures are the same per CPU second (user + system), steadier on a
shared machine, where other jobs stretch wall time (and with two threads, our threads wait on each other).
CER of both engines on the lines is printed too, a check that both converted what they were given. The last
line printed is a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_libime import children_cpu_seconds, convert_libime, libime_startup, typed_lines  # noqa: E402

from pinyin_hanzi.cli import check_bounds, max_threads  # noqa: E402
from pinyin_hanzi.data.corpus import read_examples  # noqa: E402
from pinyin_hanzi.data.examples import Example  # noqa: E402
from pinyin_hanzi.evaluation.metrics import conversion_scores  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIN_SENTENCES = 2000  # fewer, and a rate of one run is a handful of batches: too noisy to compare


def ours_whole_process(lines_file: Path, checkpoint: str | None, threads: int) -> tuple[float, float, list[str]]:
    """Wall and CPU seconds of ``translate.py --input lines_file`` (start-up included) and its output lines."""
    command = [sys.executable, str(ROOT / "translate.py"), "--input", str(lines_file), "--threads", str(threads)]
    if checkpoint:
        command += ["--checkpoint", checkpoint]
    cpu_started, started = children_cpu_seconds(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", check=False)
    seconds, cpu_seconds = time.perf_counter() - started, children_cpu_seconds() - cpu_started
    if done.returncode != 0:
        raise SystemExit(f"error: translate.py failed: {done.stderr.strip()[-300:]}")
    return seconds, cpu_seconds, done.stdout.split("\n")[:-1]


@dataclass
class Runs:
    """Each measurement, one value per repeat (rates in sentences per second or per CPU second, whole
    processes in seconds or CPU seconds), and the last repeat's conversions by each engine."""

    ours_rates: list[float] = field(default_factory=list)
    ours_cpu_rates: list[float] = field(default_factory=list)
    libime_rates: list[float] = field(default_factory=list)
    libime_cpu_rates: list[float] = field(default_factory=list)
    ours_whole: list[float] = field(default_factory=list)
    ours_whole_cpu: list[float] = field(default_factory=list)
    libime_whole: list[float] = field(default_factory=list)
    libime_whole_cpu: list[float] = field(default_factory=list)
    ours_outputs: list[str] = field(default_factory=list)  # in-process
    whole_outputs: list[str] = field(default_factory=list)  # translate.py's
    libime_outputs: list[str] = field(default_factory=list)


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", action="append", help="a prepared tokens<TAB>hanzi file; repeatable")
    parser.add_argument("--limit", type=int, default=0, help="first N examples of each split (0: all)")
    parser.add_argument("--checkpoint", help="our model (default: $PINYIN_HANZI_CHECKPOINT, else the shipped one)")
    parser.add_argument("--libime", default="/tmp/peers/libime_convert", help="the wrapper built by build.sh")
    parser.add_argument("--threads", type=int, default=2, help="our torch CPU threads (libime uses one)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement; medians are reported")
    parser.add_argument("--unsegmented", action="store_true", help="type syllables run together")
    args = parser.parse_args()
    check_bounds(parser, [("--limit", args.limit, 0, 10**9), ("--threads", args.threads, 1, max_threads()),
                          ("--repeats", args.repeats, 1, 100)])
    if not args.split or not Path(args.libime).is_file():
        parser.error(f"needs --split FILE (a prepared tokens<TAB>hanzi split, e.g. data/prepared/everyday/test.tsv) "
                     f"and libime's wrapper at --libime (now {args.libime}: bash /work/shared/peers/build.sh /tmp/peers)")
    return args


def read_splits(paths: list[str], limit: int) -> list[Example]:
    """The first ``limit`` examples (0: all) of each split, one after another."""
    examples = []
    for path in paths:
        found = read_examples(path, trusted=True)
        examples += found[:limit] if limit > 0 else found
    if len(examples) < MIN_SENTENCES:
        print(f"note: {len(examples)} sentences; rates over fewer than {MIN_SENTENCES:,} are noisy", file=sys.stderr)
    return examples


def measure(args: argparse.Namespace, converter, examples: list[Example], lines: list[str],
            startup: tuple[float, float]) -> Runs:
    """``args.repeats`` runs of each engine in process and as whole processes; the engines take turns, so that a
    busy spell hits both alike."""
    runs = Runs()
    with tempfile.TemporaryDirectory() as folder:
        lines_file = Path(folder) / "lines.txt"
        lines_file.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        for repeat in range(args.repeats):
            began, cpu_began = time.perf_counter(), time.process_time()
            runs.ours_outputs = [found[0].text for found in converter.convert_lines(lines)]
            runs.ours_rates.append(len(lines) / (time.perf_counter() - began))
            runs.ours_cpu_rates.append(len(lines) / (time.process_time() - cpu_began))
            libime = convert_libime(args.libime, examples, unsegmented=args.unsegmented, startup=startup,
                                    split="all")
            runs.libime_outputs = libime.hypotheses
            runs.libime_rates.append(len(lines) / libime.seconds)
            runs.libime_cpu_rates.append(len(lines) / libime.cpu_seconds)
            runs.libime_whole.append(libime.seconds + startup[0])
            runs.libime_whole_cpu.append(libime.cpu_seconds + startup[1])
            seconds, cpu_seconds, runs.whole_outputs = ours_whole_process(lines_file, args.checkpoint, args.threads)
            runs.ours_whole.append(seconds)
            runs.ours_whole_cpu.append(cpu_seconds)
            print(f"run {repeat + 1}: ours {runs.ours_rates[-1]:,.0f} sentences/s in-process, {seconds:.2f} s "
                  f"whole; libime {runs.libime_rates[-1]:,.0f} sentences/s, {runs.libime_whole[-1]:.2f} s whole",
                  file=sys.stderr)
    return runs


def report(args: argparse.Namespace, runs: Runs, references: list[str], beam: int, precision: str,
           load_seconds: float, startup: tuple[float, float]) -> None:
    """The medians, ratios and CERs, and the one-line JSON summary."""
    ours_cer = conversion_scores(runs.ours_outputs, references)["cer"]
    whole_cer = conversion_scores(runs.whole_outputs, references)["cer"]
    libime_cer = conversion_scores(runs.libime_outputs, references)["cer"]
    in_process = statistics.median(runs.ours_rates), statistics.median(runs.libime_rates)
    whole = statistics.median(runs.ours_whole), statistics.median(runs.libime_whole)
    per_cpu = statistics.median(runs.ours_cpu_rates), statistics.median(runs.libime_cpu_rates)
    whole_cpu = statistics.median(runs.ours_whole_cpu), statistics.median(runs.libime_whole_cpu)
    sentences = len(references)
    print(f"{sentences:,} sentences ({'unsegmented' if args.unsegmented else 'syllables separated'}); ours: "
          f"beam {beam}, {args.threads} thread(s), precision {precision}, "
          f"checkpoint load {load_seconds:.2f} s; libime: one thread, start-up {startup[0]:.2f} s")
    print(f"in-process sentences/s: ours {in_process[0]:,.0f}, libime {in_process[1]:,.0f}, "
          f"ratio {in_process[0] / in_process[1]:.2f}x")
    print(f"whole process, start-up included: ours {whole[0]:.2f} s, libime {whole[1]:.2f} s, "
          f"ratio {whole[1] / whole[0]:.2f}x")
    print(f"per CPU second (steadier on a shared machine): in-process ours {per_cpu[0]:,.0f}, libime "
          f"{per_cpu[1]:,.0f} sentences, ratio {per_cpu[0] / per_cpu[1]:.2f}x; whole process ours {whole_cpu[0]:.2f}, "
          f"libime {whole_cpu[1]:.2f} CPU s, ratio {whole_cpu[1] / whole_cpu[0]:.2f}x")
    print(f"CER: ours {ours_cer:.2%} (translate.py: {whole_cer:.2%}), libime {libime_cer:.2%}")
    print(json.dumps({
        "benchmark": "speed_vs_libime", "sentences": sentences, "unsegmented": args.unsegmented,
        "splits": args.split, "threads": args.threads, "repeats": args.repeats, "beam": beam,
        "precision": precision, "cpu_count": os.cpu_count(),
        "ours_sentences_per_s": round(in_process[0], 1), "libime_sentences_per_s": round(in_process[1], 1),
        "ratio_vs_libime": round(in_process[0] / in_process[1], 3),
        "ours_whole_process_s": round(whole[0], 3), "libime_whole_process_s": round(whole[1], 3),
        "ratio_vs_libime_whole_process": round(whole[1] / whole[0], 3),
        "ours_sentences_per_cpu_s": round(per_cpu[0], 1), "libime_sentences_per_cpu_s": round(per_cpu[1], 1),
        "ratio_vs_libime_per_cpu_s": round(per_cpu[0] / per_cpu[1], 3),
        "ours_whole_process_cpu_s": round(whole_cpu[0], 3), "libime_whole_process_cpu_s": round(whole_cpu[1], 3),
        "ratio_vs_libime_whole_process_cpu": round(whole_cpu[1] / whole_cpu[0], 3),
        "load_average": round(os.getloadavg()[0], 2), "ours_load_s": round(load_seconds, 3),
        "libime_startup_s": round(startup[0], 3), "ours_cer": round(ours_cer, 5),
        "ours_translate_cer": round(whole_cer, 5), "libime_cer": round(libime_cer, 5),
    }, ensure_ascii=False))


def main() -> int:
    args = parse_arguments()
    examples = read_splits(args.split, args.limit)
    references = [example.hanzi for example in examples]
    lines = typed_lines(examples, args.unsegmented, 0.0, "initial")
    torch.set_num_threads(args.threads)

    from pinyin_hanzi import Converter

    started = time.perf_counter()
    converter = Converter.from_checkpoint(args.checkpoint)
    load_seconds = time.perf_counter() - started
    settings = converter.search_settings()
    converter.convert_lines(lines[:64])  # warm-up: first calls allocate
    startup = libime_startup(args.libime, args.repeats)
    runs = measure(args, converter, examples, lines, startup)
    report(args, runs, references, settings.beam, converter.decode.precision, load_seconds, startup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
