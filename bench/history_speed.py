"""What learning from the user costs (issue #50): ``Converter.learn`` per clause, one 10-syllable conversion
with an empty history and with one of ``--clauses`` committed clauses (side by side, taking turns), a
history of ``--file-clauses`` clauses on disk and loaded, and one conversion through the API on a busy
machine, its search on one thread (what the converter does now) and on two (what it did before: every
thread of the process), side by side, quiet and with ``--load`` busy processes beside it.

    python bench/history_speed.py [--clauses 10000] [--file-clauses 100000] [--sentences 200] [--load 2] \\
        [--busy-sentences 50]

The history's text: clauses of the documents bench/typing_session.py types (novels, LibreOffice help, man
pages; extracted once into data/bench/sessions/, fetching the packages on first use), in order, cycled
where there are fewer. The conversions: the 10-syllable lines of bench/translate_speed.py. Conversions
run as an application calls the API, with PyTorch's default threads (one per core), except where the
thread policy is the thing measured. The last line printed is a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import typing_session  # the documents and their extraction
from translate_speed import carried_sentences, percentile, ten_syllable_lines

from pinyin_hanzi import Converter
from pinyin_hanzi.cli import run
from pinyin_hanzi.decoding import threads
from pinyin_hanzi.lm.history import History
from pinyin_hanzi.lm.history_lm import HistoryLM

TEXT_KINDS = ("novels", "libreoffice", "manpages")  # not pd2013: evaluation text, typed, never learned
SPIN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"  # ends when the benchmark does


def committed_clauses(count: int, raw_dir: Path, cache_dir: Path) -> list[str]:
    clauses = [clause.hanzi for kind in TEXT_KINDS
               for _, document in typing_session.cached_documents(kind, raw_dir, cache_dir) for clause in document]
    return list(itertools.islice(itertools.cycle(clauses), count))


def timed(function, *args) -> float:
    started = time.perf_counter()
    function(*args)
    return (time.perf_counter() - started) * 1000


def summary(values: list[float]) -> dict:
    return {"p50_ms": round(statistics.median(values), 3), "p99_ms": round(percentile(values, 0.99), 3)}


def learning_costs(converter: Converter, clauses: list[str], lines: list[str]) -> dict:
    """learn() per clause while the history grows to ``clauses``; then one conversion with that history and
    with an empty one, taking turns line by line (two converters over the same model)."""
    learn = [timed(converter.learn, clause) for clause in clauses]
    empty = Converter(converter.model, converter.pinyin_vocab, converter.hanzi_vocab, window=converter.planner.window,
                      syllable_lm=converter.planner.syllable_lm, char_lm=converter.char_lm, config=converter.config)
    times: dict[str, list[float]] = {"empty": [], "history": []}
    for line in lines:
        for name, which in (("empty", empty), ("history", converter)):
            times[name].append(timed(which.convert, line))
    return {"learn": summary(learn), "learn_mean_ms": round(statistics.fmean(learn), 3),
            "convert_empty_history": summary(times["empty"]), "convert_with_history": summary(times["history"])}


def file_costs(converter: Converter, clauses: list[str]) -> dict:
    """The file of a history of ``clauses``: its size, and loading it (the file read and counted, as a
    converter made with decode.history does), median of 3."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "history.txt"
        history = History(path, max_clauses=len(clauses))
        history.extend(clauses)
        history.close()
        loads = []
        for _ in range(3):
            started = time.perf_counter()
            loaded = History(path, max_clauses=len(clauses))
            loaded.listen(HistoryLM(converter.hanzi_vocab, reference=converter.char_lm))
            loads.append(time.perf_counter() - started)
            kept = len(loaded)
            loaded.close()
        return {"clauses": kept, "file_mb": round(path.stat().st_size / 2**20, 2),
                "load_s": round(statistics.median(loads), 3)}


def busy_costs(converter: Converter, lines: list[str], load: int) -> dict:
    """One conversion at the API's default threads with its search on one thread and on two (the policy
    before), taking turns, quiet and beside ``load`` spinning processes."""
    results = {}
    for busy in (0, load):
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
        try:
            time.sleep(0.5 if busy else 0)
            times: dict[int, list[float]] = {1: [], 2: []}
            for line in lines:
                for share in (1, 2):
                    threads.FEW_LINES_THREADS = share
                    times[share].append(timed(converter.convert, line))
        finally:
            for spinner in spinners:
                spinner.kill()
            threads.FEW_LINES_THREADS = 1
        label = f"{busy}_busy_processes"
        results[label] = {f"{share}_thread{'s' * (share > 1)}": summary(values) for share, values in times.items()}
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clauses", type=int, default=10_000, help="history for the conversion timing")
    parser.add_argument("--file-clauses", type=int, default=100_000, help="history for the file's size and load")
    parser.add_argument("--sentences", type=int, default=200, help="10-syllable conversions per measurement")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy processes (default: one a core)")
    parser.add_argument("--busy-sentences", type=int, default=50, help="conversions per thread count and load "
                        "(two threads beside busy processes take seconds each)")
    parser.add_argument("--raw-dir", default="data/raw")
    parser.add_argument("--cache-dir", default="data/bench/sessions")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clauses = committed_clauses(max(args.clauses, args.file_clauses), Path(args.raw_dir), Path(args.cache_dir))
    lines = ten_syllable_lines(carried_sentences(), args.sentences)
    converter = Converter.from_pretrained()
    for line in lines[:5]:
        converter.convert(line)  # warm-up
    result = {"cpu_threads": os.cpu_count(), "history_clauses": args.clauses, "sentences": len(lines)}
    result.update(learning_costs(converter, clauses[: args.clauses], lines))
    print(f"learn: {result['learn']}, convert: empty {result['convert_empty_history']}, "
          f"with {args.clauses:,} clauses {result['convert_with_history']}", flush=True)
    converter.forget()
    result["file"] = file_costs(converter, clauses[: args.file_clauses])
    print(f"file: {result['file']}", flush=True)
    result["busy"] = busy_costs(converter, lines[: args.busy_sentences], args.load)
    print(f"busy: {result['busy']}", flush=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
