"""Conversion speed: batched sentences/s (greedy and beam 5) on the PD test split, in-process latency
(p50/p95) for single 10-syllable sentences, and the cold start of ``translate.py``.

    python bench/translate_speed.py --checkpoint checkpoints/quickstart/best.pt [--latency-sentences 200]
                                    [--threads N] [--latency-threads 1] [--lm-weight 0]

Batched conversion runs with ``--threads`` (0: PyTorch's default, one per core), single sentences with
``--latency-threads`` (1, what ``translate.py`` uses for text typed on the command line or at the prompt).

Single sentences are also decoded through the model's modules (``Transformer.decode`` with a key/value
cache) instead of ``StepDecoder``, alternating sentence by sentence with it in the same process, so that
the ratio holds on a noisy machine; ``--no-reference`` skips that.

With a character n-gram model in the checkpoint, beam search uses it and greedy decoding does not (as in
``translate.py``); ``lm_weight`` in the summary is the beam search's.

The last line printed is a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi import decoding
from pinyin_hanzi.cli import load_converter
from pinyin_hanzi.corpus import prepared_dir, read_examples
from pinyin_hanzi.pinyin import syllables


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class ModulePath:
    """The reference for ``StepDecoder``: each step through ``Transformer.decode`` with its cache."""

    def __init__(self, model, memory, cross_mask):
        self.model, self.memory, self.cross_mask, self.cache = model, memory, cross_mask, model.new_cache()

    def step(self, previous, position, candidates=None):
        return self.model.decode(previous, self.memory, self.cross_mask, self.cache, start=position,
                                 candidates=candidates)

    def reorder(self, order):
        for layer_cache in self.cache:
            for name in ("k", "v"):
                layer_cache["self"][name] = layer_cache["self"][name].index_select(0, order)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="checkpoints/quickstart/best.pt")
    parser.add_argument("--latency-sentences", type=int, default=200)
    parser.add_argument("--cold-starts", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="threads for batched conversion (0: default)")
    parser.add_argument("--latency-threads", type=int, default=1, help="threads for single sentences")
    parser.add_argument("--no-reference", action="store_true", help="skip the module-path latency reference")
    parser.add_argument("--lm-weight", type=float, help="the character n-gram model's weight (default: the "
                        "checkpoint's decode.lm_weight; 0: the Transformer alone)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    batch_threads = torch.get_num_threads()
    converter, config = load_converter(args.checkpoint, lm_weight=args.lm_weight)
    lm = f"{config.decode.lm_order}-gram model at weight {config.decode.lm_weight}" if converter.char_lm else "none"
    print(f"character n-gram model: {lm}", flush=True)
    examples = read_examples(prepared_dir(config.data) / "test.tsv", trusted=True)
    tokens = [e.tokens for e in examples]

    throughput = {}
    for beam in (1, 5):
        converter.convert_tokens(tokens[:256], beam=beam)  # warm-up
        started = time.perf_counter()
        converter.convert_tokens(tokens, beam=beam, batch_size=256)
        throughput[beam] = len(tokens) / (time.perf_counter() - started)
        print(f"batched {'greedy' if beam == 1 else 'beam 5'}: {throughput[beam]:,.0f} sentences/s "
              f"({len(tokens)} test sentences)", flush=True)

    ten = [" ".join(t[:10]) for t in tokens if sum(token in syllables() for token in t[:10]) == 10]
    ten = ten[: args.latency_sentences]
    torch.set_num_threads(args.latency_threads)
    latency, reference = {}, {}
    paths = {"step": decoding.StepDecoder} | ({} if args.no_reference else {"modules": ModulePath})
    for beam in (1, 5):
        converter.convert(ten[:5], beam=beam)  # warm-up
        times = {name: [] for name in paths}
        for line in ten:
            for name, path in paths.items():
                decoding.StepDecoder = path
                started = time.perf_counter()
                converter.convert([line], beam=beam)
                times[name].append((time.perf_counter() - started) * 1000)
        decoding.StepDecoder = paths["step"]
        kind = "greedy" if beam == 1 else "beam 5"
        latency[beam] = (statistics.median(times["step"]), percentile(times["step"], 0.95))
        print(f"single 10-syllable sentence, {kind}: p50 {latency[beam][0]:.1f} ms, "
              f"p95 {latency[beam][1]:.1f} ms ({len(times['step'])} sentences)", flush=True)
        if "modules" in times:
            reference[beam] = statistics.median(times["modules"])
            print(f"  same sentences through the modules (alternating): p50 {reference[beam]:.1f} ms, "
                  f"{reference[beam] / latency[beam][0]:.2f}x the time", flush=True)

    cold = []
    for _ in range(args.cold_starts):
        started = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "translate.py"), "--checkpoint", args.checkpoint, "ni hao"],
                       capture_output=True, check=True)
        cold.append(time.perf_counter() - started)
    print(f"translate.py cold start: median {statistics.median(cold):.2f} s over {len(cold)} runs")
    print(json.dumps({
        "benchmark": "translate_speed", "checkpoint": args.checkpoint, "threads": batch_threads,
        "lm_weight": config.decode.lm_weight if converter.char_lm else 0.0,
        "latency_threads": args.latency_threads,
        "greedy_sentences_per_s": round(throughput[1], 1), "beam5_sentences_per_s": round(throughput[5], 1),
        "greedy_p50_ms": round(latency[1][0], 2), "greedy_p95_ms": round(latency[1][1], 2),
        "beam5_p50_ms": round(latency[5][0], 2), "beam5_p95_ms": round(latency[5][1], 2),
        "module_path_greedy_p50_ms": round(reference[1], 2) if reference else None,
        "module_path_beam5_p50_ms": round(reference[5], 2) if reference else None,
        "cold_start_s": round(statistics.median(cold), 2), "test_sentences": len(tokens), "latency_sentences": len(ten),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
