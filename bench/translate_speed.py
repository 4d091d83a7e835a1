"""Conversion speed through the Python API: batched sentences/s (greedy and beam search), in-process latency
(p50/p95) of single 10-syllable sentences, and the cold start of ``translate.py`` (its first start, which
keeps the n-gram lookup tables in a cache, and the median of those after it).

    python bench/translate_speed.py                       # the shipped model, sentences this script carries
    python bench/translate_speed.py --checkpoint checkpoints/quickstart/best.pt --split data/prepared/pd1998/test.tsv
                                    [--beam 5] [--threads N] [--latency-threads 1] [--lm-weight 0]
    python bench/translate_speed.py --checkpoint NEW.pt --baseline pinyin_hanzi/pretrained/model.pt
    python bench/translate_speed.py --abbreviate 0.3     # lines with 30% of syllables typed as their initial
                                    [--abbreviate-as letter]  # ... or as their first letter (z for zhong)

Inputs: the sentences below, typed as their pinyin (pypinyin's readings, via ``pinyin.hanzi_to_tokens``),
or a prepared ``tokens<TAB>hanzi`` file (``--split``); with ``--abbreviate P`` the share P of syllables
typed as their initial (``metrics.typed``, the syllables ``translate.py --evaluate --abbreviate`` picks),
converted as typed lines, which decoding reads with prefixes and its wider ``decode.prefix_beam``. Batched
conversion runs with ``--threads`` (0: PyTorch's default, one per core), single sentences with
``--latency-threads`` (1, what ``translate.py`` uses for text typed on the command line or at the prompt). Greedy decoding and beam search take turns
sentence by sentence, so that their medians stand side by side on a noisy machine.

With a character n-gram model in the checkpoint, beam search uses it and greedy decoding does not (as in
``translate.py``); ``lm_weight`` in the summary is the beam search's. ``--baseline`` loads a second
checkpoint with its own defaults and measures it in the same run, taking turns with the first batch by
batch and sentence by sentence, and prints each figure's ratio (model / baseline). The last line printed is
a one-line JSON summary.
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
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi import Converter
from pinyin_hanzi.cli import check_bounds, max_threads
from pinyin_hanzi.config import LIMITS
from pinyin_hanzi.evaluation.metrics import ABBREVIATION_STYLES, typed
from pinyin_hanzi.text.pinyin import hanzi_to_tokens, syllables

SENTENCES = """\
我们明天早上八点在学校门口见面。
这个问题我们已经讨论了很长时间了。
他每天骑自行车去公司上班。
今年夏天的天气特别热，大家都不想出门。
请问去火车站应该坐几路公共汽车？
妈妈在厨房里准备今天的晚饭。
这本书的作者是一位很有名的历史学家。
我们公司明年打算在上海开一家新的分店。
孩子们在公园里放风筝，玩得非常开心。
医生说他需要多休息，少喝咖啡。
这家饭馆的菜又便宜又好吃。
你能不能帮我把这封信寄出去？
经济发展必须和环境保护结合起来。
他从小就喜欢画画，现在成了一名设计师。
会议的时间改到下星期三下午两点。
我觉得这部电影的故事情节有点复杂。
图书馆周末的开放时间是上午九点到下午五点。
政府决定增加对农村教育的投入。
他们两个人是大学时候的同班同学。
冬天来了，山上的树叶都落光了。
这个城市的交通问题越来越严重。
我昨天晚上看书看到很晚才睡觉。
请大家把手机关掉，考试马上就要开始了。
她说话的声音很小，我几乎听不清楚。
科学家们正在研究一种新的治疗方法。
春节期间很多人都要回老家看望父母。
这条河的水以前很清，现在被污染了。
老师让我们每天写一篇日记。
这次比赛我们队终于赢了。
银行的工作人员耐心地回答了我的问题。
""".split()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def carried_sentences() -> list[tuple[list[str], str]]:
    """(model tokens, hanzi) of each sentence this script carries: one token per character."""
    return [(tokens, sentence) for sentence in SENTENCES if (tokens := hanzi_to_tokens(sentence))]


def split_sentences(path: str) -> list[tuple[list[str], str]]:
    from pinyin_hanzi.data.corpus import read_examples

    return [(example.tokens, example.hanzi) for example in read_examples(path, trusted=True)]


def ten_syllable_lines(sentences: list[tuple[list[str], str]], count: int, abbreviate: float = 0.0,
                       abbreviate_as: str = "initial") -> list[str]:
    """Up to ``count`` typed lines of 10 syllables: each sentence's first ten, where all are syllables,
    cycling through the sentences (then starting one syllable later) until there are enough; ``abbreviate``:
    the share of syllables typed abbreviated, as their initial or first letter (``abbreviate_as``)."""
    lines: list[str] = []
    for offset in range(0, 40):
        for tokens, hanzi in sentences:
            window = tokens[offset : offset + 10]
            if len(window) == 10 and all(token in syllables() for token in window):
                lines.append(typed(window, hanzi[offset : offset + 10], abbreviate=abbreviate,
                                   abbreviate_as=abbreviate_as))
            if len(lines) == count:
                return lines
    return lines


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="default: $PINYIN_HANZI_CHECKPOINT, else the shipped model")
    parser.add_argument("--split", help="a prepared tokens<TAB>hanzi file (default: the sentences this script carries)")
    parser.add_argument("--beam", type=int, default=5, help="the beam search measured beside greedy (default 5)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--latency-sentences", type=int, default=200)
    parser.add_argument("--cold-starts", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="threads for batched conversion (0: default)")
    parser.add_argument("--latency-threads", type=int, default=1, help="threads for single sentences")
    parser.add_argument("--lm-weight", type=float, help="the character n-gram model's weight (default: the "
                        "checkpoint's decode.lm_weight; 0: the Transformer alone)")
    parser.add_argument("--word-weight", type=float, help="the word model's weight (default: the checkpoint's "
                        "decode.word_weight; 0: none)")
    parser.add_argument("--baseline", help="a second checkpoint measured in the same run with its own defaults")
    parser.add_argument("--abbreviate", type=float, default=0.0, metavar="P",
                        help="type this share (0-1) of syllables as their initial (default 0: full pinyin)")
    parser.add_argument("--abbreviate-as", choices=ABBREVIATION_STYLES, default="initial",
                        help="an abbreviated syllable typed as its initial (zh for zhong, default) or first letter")
    args = parser.parse_args()
    check_bounds(parser, [("--beam", args.beam, 2, LIMITS["decode.beam"][1]),  # greedy is measured anyway
                          ("--batch-size", args.batch_size, *LIMITS["decode.batch_sentences"]),
                          ("--latency-sentences", args.latency_sentences, 1, 100_000), ("--cold-starts", args.cold_starts, 0, 100),
                          ("--threads", args.threads, 0, max_threads()), ("--latency-threads", args.latency_threads, 1, max_threads()),
                          ("--lm-weight", args.lm_weight, *LIMITS["decode.lm_weight"]),
                          ("--word-weight", args.word_weight, *LIMITS["decode.word_weight"]),
                          ("--abbreviate", args.abbreviate, 0, 1)])
    return args


def load_converters(args: argparse.Namespace) -> dict:
    """"model" (the checkpoint, --lm-weight and --word-weight applied) and, with --baseline, "baseline" (its
    own defaults): the converters measured, by name."""
    converters = {"model": Converter.from_checkpoint(args.checkpoint, lm_weight=args.lm_weight,
                                                     word_weight=args.word_weight, log=print)}
    print(f"model: {converters['model'].checkpoint}", flush=True)
    if args.baseline:
        print(f"baseline: {args.baseline}", flush=True)
        converters["baseline"] = Converter.from_checkpoint(args.baseline, log=print)
    converter = converters["model"]
    decode = converter.decode  # what it converts with: the checkpoint's, --lm-weight and --word-weight applied
    lm = f"{decode.lm_order}-gram model at weight {decode.lm_weight}" if converter.char_lm and decode.lm_weight else "none"
    print(f"character n-gram model: {lm}", flush=True)
    return converters


def measure_batched(args: argparse.Namespace, converters: dict, runs: list[tuple[str, str, int]],
                    batched: list[tuple[list[str], str]]) -> dict[tuple[str, str], float]:
    """Sentences/s of each run (converter, search name, beam) over ``batched``, converted in batches: the
    median of three rounds taking turns with a baseline, else one round."""
    batched_lines = [typed(tokens, hanzi, abbreviate=args.abbreviate, abbreviate_as=args.abbreviate_as)
                     for tokens, hanzi in batched]

    def convert_batch(who: str, count: int, beam: int) -> None:
        """The first ``count`` sentences of ``batched``: full pinyin as tokens, abbreviated input as typed
        lines, which the converter must read."""
        if args.abbreviate:
            converters[who].convert_lines(batched_lines[:count], beam=beam, batch_size=args.batch_size)
        else:
            converters[who].convert_tokens([tokens for tokens, _ in batched[:count]], beam=beam,
                                           batch_size=args.batch_size)

    rounds = 3 if args.baseline else 1
    rates: dict[tuple[str, str], list[float]] = {(who, name): [] for who, name, _ in runs}
    for who, _, beam in runs:
        convert_batch(who, args.batch_size, beam)  # warm-up
    for _ in range(rounds):
        for who, name, beam in runs:
            started = time.perf_counter()
            convert_batch(who, len(batched), beam)
            rates[who, name].append(len(batched) / (time.perf_counter() - started))
    throughput = {key: statistics.median(values) for key, values in rates.items()}
    for (who, name), rate in throughput.items():
        print(f"{who} batched {name}: {rate:,.0f} sentences/s ({len(batched)} sentences, median of {rounds})",
              flush=True)
    return throughput


def measure_latency(args: argparse.Namespace, converters: dict, runs: list[tuple[str, str, int]],
                    lines: list[str]) -> dict[tuple[str, str], tuple[float, float]]:
    """(p50, p95) milliseconds of each run (converter, search name, beam) converting single ``lines`` on
    --latency-threads threads, the runs taking turns line by line."""
    torch.set_num_threads(args.latency_threads)
    times: dict[tuple[str, str], list[float]] = {(who, name): [] for who, name, _ in runs}
    for who, _, beam in runs:
        converters[who].convert_lines(lines[:5], beam=beam)  # warm-up
    for line in lines:
        for who, name, beam in runs:
            started = time.perf_counter()
            converters[who].convert_lines([line], beam=beam)
            times[who, name].append((time.perf_counter() - started) * 1000)
    latency = {key: (statistics.median(values), percentile(values, 0.95)) for key, values in times.items()}
    for (who, name), (p50, p95) in latency.items():
        print(f"{who} single 10-syllable sentence, {name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms "
              f"({len(lines)} sentences, alternating)", flush=True)
    return latency


def baseline_ratios(beams: dict[str, int], throughput: dict, latency: dict) -> dict[str, dict[str, float]]:
    """Per search name, the model's single-sentence p50 and batched time over the baseline's, printed."""
    ratios = {}
    for name in beams:
        ratios[name] = {"p50_ratio": round(latency["model", name][0] / latency["baseline", name][0], 3),
                        "batched_time_ratio": round(throughput["baseline", name] / throughput["model", name], 3)}
        print(f"model / baseline, {name}: single-sentence p50 x{ratios[name]['p50_ratio']}, "
              f"batched time x{ratios[name]['batched_time_ratio']}", flush=True)
    return ratios


def cold_starts(checkpoint, count: int) -> tuple[list[float], float | None]:
    """Seconds of ``count`` cold starts of translate.py after a first one, and the first's (None for no starts).
    They have an n-gram lookup cache of their own (lm/lookup_cache.py): the first start derives the tables and
    keeps them, as the first start after installing does; the others map them."""
    cold, first = [], None
    with tempfile.TemporaryDirectory(prefix="translate-speed-cache-") as cache:
        environment = dict(os.environ, PINYIN_HANZI_CACHE=cache)
        for number in range(count + 1 if count else 0):
            started = time.perf_counter()
            subprocess.run([sys.executable, str(ROOT / "translate.py"), "--checkpoint", str(checkpoint), "ni hao"],
                           capture_output=True, check=True, env=environment)
            if number == 0:
                first = time.perf_counter() - started
            else:
                cold.append(time.perf_counter() - started)
    if cold:
        print(f"translate.py cold start: median {statistics.median(cold):.2f} s over {len(cold)} runs "
              f"(the first, which keeps the n-gram lookup tables: {first:.2f} s)")
    return cold, first


def main() -> int:
    args = parse_arguments()
    if args.threads:
        torch.set_num_threads(args.threads)
    batch_threads = torch.get_num_threads()
    converters = load_converters(args)
    converter = converters["model"]
    checkpoint, decode = converter.checkpoint, converter.decode
    sentences = split_sentences(args.split) if args.split else carried_sentences()
    batched = sentences if args.split else sentences * max(1, 1024 // len(sentences))  # enough for full batches
    beams = {"greedy": 1, f"beam {args.beam}": args.beam}
    runs = [(who, name, beam) for name, beam in beams.items() for who in converters]  # turns, side by side
    throughput = measure_batched(args, converters, runs, batched)
    lines = ten_syllable_lines(sentences, args.latency_sentences, args.abbreviate, args.abbreviate_as)
    latency = measure_latency(args, converters, runs, lines)
    ratios = baseline_ratios(beams, throughput, latency) if args.baseline else {}
    cold, first = cold_starts(checkpoint, args.cold_starts)
    greedy, beam_name = "greedy", f"beam {args.beam}"
    print(json.dumps({
        "benchmark": "translate_speed", "checkpoint": str(checkpoint), "inputs": args.split or "carried sentences",
        "threads": batch_threads, "lm_weight": decode.lm_weight if converter.char_lm else 0.0,
        "word_weight": decode.word_weight if converter.word_lm else 0.0,
        "latency_threads": args.latency_threads, "beam": args.beam, "abbreviate": args.abbreviate,
        "abbreviate_as": args.abbreviate_as,
        "greedy_sentences_per_s": round(throughput["model", greedy], 1),
        "beam_sentences_per_s": round(throughput["model", beam_name], 1),
        "greedy_p50_ms": round(latency["model", greedy][0], 2), "greedy_p95_ms": round(latency["model", greedy][1], 2),
        "beam_p50_ms": round(latency["model", beam_name][0], 2), "beam_p95_ms": round(latency["model", beam_name][1], 2),
        "baseline": args.baseline, "ratios_to_baseline": ratios or None,
        "cold_start_s": round(statistics.median(cold), 2) if cold else None,
        "first_start_s": round(first, 2) if first is not None else None,
        "batched_sentences": len(batched), "latency_sentences": len(lines),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
