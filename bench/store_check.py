"""What the token store's checks cost at start (data/store.py: :func:`split_problem` and the hashes), on a synthetic
training split of ``--tokens`` tokens (examples of 1-32, source ids below 1,500, target ids below 11,000, uint16;
copies of 1 or 2), written once into ``--work`` and reused.

    python bench/store_check.py                                   # --tokens 100000000: 450 MB in /tmp/store_check
    python bench/store_check.py --tokens 10000000 --work /tmp/small_check

Times ``TokenStore(folder).split("train")`` (open, hashes, every check) ``--repeats`` times with the files in the
page cache, then once with their pages dropped from it (posix_fadvise DONTNEED, this benchmark's files only), and
the peak RSS the checks added (they read a block at a time, not through the mapping).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pinyin_hanzi.data.store import INTEGRITY_KEY, TokenStore, integrity_hashes  # noqa: E402
from pinyin_hanzi.data.vocab import SPECIALS, Vocab, save_vocab  # noqa: E402

VOCAB_SIZES = {"source": 1500, "target": 11000}


def write_store(folder: Path, tokens: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(1, 33, tokens // 16 + 1, dtype=np.int64))])
    offsets = np.append(offsets[offsets < tokens], tokens)
    offsets.tofile(folder / "train.offsets.bin")
    for side, size in VOCAB_SIZES.items():
        rng.integers(len(SPECIALS) - 1, size, tokens, dtype=np.uint16).tofile(folder / f"train.{side}.bin")
    rng.integers(1, 3, len(offsets) - 1, dtype=np.uint8).tofile(folder / "train.copies.bin")
    for side, name in (("source", "pinyin_vocab.txt"), ("target", "hanzi_vocab.txt")):
        tokens_of = [f"{side[0]}{i}" for i in range(VOCAB_SIZES[side] - len(SPECIALS))]
        save_vocab(Vocab(list(SPECIALS) + tokens_of), folder / name)
    stats = {"store": {"source_dtype": "uint16", "target_dtype": "uint16", "examples": {"train": len(offsets) - 1},
                       "files": {path.name: path.stat().st_size for path in sorted(folder.iterdir())}}}
    stats[INTEGRITY_KEY] = integrity_hashes(folder, stats)
    (folder / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")


def opened_and_checked(folder: Path) -> float:
    started = time.perf_counter()
    TokenStore(folder).split("train")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=100_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/store_check"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    folder = args.work / f"tokens-{args.tokens}"
    if not (folder / "stats.json").is_file():
        write_store(folder, args.tokens)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    warm = [opened_and_checked(folder) for _ in range(args.repeats)]
    for path in folder.iterdir():
        handle = os.open(path, os.O_RDONLY)
        os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(handle)
    cold = opened_and_checked(folder)
    added = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps({"tokens": args.tokens, "warm_s": [round(t, 3) for t in warm], "warm_best_s": round(min(warm), 3),
                      "cold_s": round(cold, 3), "peak_rss_added_mb": round(added, 1)}))


if __name__ == "__main__":
    main()
