"""How fast the token store's reader builds training batches, to hold against a GPU's steps a second: a step
never waits on the store only while the reader (one thread, training/speed.py's Prefetcher) builds batches
faster than the device trains on them.

    python bench/batch_reader.py [--config configs/flagship.yaml --batches 60]

Reads the config's prepared training split (prepared first if missing, which downloads its sources once) at
train.batch_tokens, with and without data.abbreviate's abbreviations, and prints the median milliseconds a
batch, batches/s and target tokens/s of each; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi.config import load_config  # noqa: E402
from pinyin_hanzi.data.batches import BatchStream, hanzi_ids, prefix_ids  # noqa: E402
from pinyin_hanzi.data.corpus import prepare  # noqa: E402
from pinyin_hanzi.data.store import TokenStore  # noqa: E402
from pinyin_hanzi.data.vocab import load_vocab  # noqa: E402
from pinyin_hanzi.errors import PinyinHanziError  # noqa: E402


def measure(split, pinyin_vocab, hanzi_vocab, batch_tokens: int, abbreviate: float, batches: int, seed: int) -> dict:
    stream = BatchStream(split, batch_tokens, seed, abbreviate=abbreviate,
                         prefix_of=prefix_ids(pinyin_vocab) if abbreviate else None,
                         hanzi_target=hanzi_ids(hanzi_vocab) if abbreviate else None)
    seconds, tokens = [], 0
    for _ in range(batches):
        started = time.perf_counter()
        batch = stream.batch(*stream.next_indices())
        seconds.append(time.perf_counter() - started)
        tokens += batch.n_target_tokens
    median = statistics.median(seconds)
    return {"abbreviate": abbreviate, "median_ms": round(median * 1000, 1), "batches_per_s": round(1 / median, 1),
            "tokens_per_s": round(tokens / sum(seconds))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "flagship.yaml"))
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parser.parse_args()
    if not 1 <= args.batches <= 100_000:
        parser.error("--batches: expected 1 to 100000")
    try:
        config = load_config(args.config, args.overrides)
        folder = prepare(config.data)
        pinyin_vocab, hanzi_vocab = load_vocab(folder / "pinyin_vocab.txt"), load_vocab(folder / "hanzi_vocab.txt")
        split = TokenStore(folder).split("train", pinyin_vocab=pinyin_vocab, hanzi_vocab=hanzi_vocab)
    except PinyinHanziError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    t = config.train
    results = [measure(split, pinyin_vocab, hanzi_vocab, t.batch_tokens, share, args.batches, t.seed)
               for share in dict.fromkeys((0.0, config.data.abbreviate))]
    for result in results:
        print(f"abbreviate {result['abbreviate']}: {result['median_ms']} ms a batch of {t.batch_tokens:,} tokens, "
              f"{result['batches_per_s']} batches/s, {result['tokens_per_s']:,} tokens/s")
    print(json.dumps({"benchmark": "batch_reader", "config": args.config, "batch_tokens": t.batch_tokens,
                      "batches": args.batches, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
