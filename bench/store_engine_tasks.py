"""What each measured child process of bench/store_engines.py runs: the synthetic data, each engine's
writer, and the measurements (write, open, random access, batches), each reporting its own peak RSS. Kept apart
from the parent's files, dependency sizes and table; the parent runs one task per child (``--child``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

VOCAB_SIZE = 11_000  # ids below this, as a hanzi vocabulary of the project's size
CHUNK = 1 << 16  # examples per block handed to a writer (preparation appends blocks too)
MB = 2**20

# --- the synthetic data -------------------------------------------------------------------------------------------

def synthetic_chunks(examples: int, seed: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The data as blocks of (source ids, target ids) flat uint16, (lengths int64, copies uint8) per example;
    the same for the same (examples, seed)."""
    chunks = []
    for index, begin in enumerate(range(0, examples, CHUNK)):
        generator = np.random.default_rng([seed, index])
        count = min(CHUNK, examples - begin)
        lengths = generator.integers(2, 33, count, dtype=np.int64)
        total = int(lengths.sum())
        source = generator.integers(4, VOCAB_SIZE, total, dtype=np.uint16)
        target = generator.integers(4, VOCAB_SIZE, total, dtype=np.uint16)
        copies = (1 + (generator.random(count) < 0.25)).astype(np.uint8)  # a weighted source: some trained twice
        chunks.append((source, target, lengths, copies))
    return chunks


def memory_mb() -> dict[str, float]:
    """This process's RSS now (``rss``), its anonymous part (``anonymous``: not pages of mapped files, which the
    kernel can drop and read again) and its peak RSS (``peak``), in MB, from /proc (VmRSS, RssAnon, VmHWM)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    mb = lambda field: int(fields[field].split()[0]) / 1024  # the kernel counts kB
    return {"rss": mb("VmRSS"), "anonymous": mb("RssAnon"), "peak": mb("VmHWM")}


def memory_added(before: dict[str, float]) -> dict[str, float]:
    """RSS and anonymous RSS added since ``before`` (a :func:`memory_mb`), in MB."""
    now = memory_mb()
    return {"total": now["rss"] - before["rss"], "anonymous": now["anonymous"] - before["anonymous"]}


# --- writers (in a child process) ---------------------------------------------------------------------------------

def write_numpy(folder: Path, chunks: list) -> None:
    """The project's token store: SplitWriter's files, the vocabularies and the stats entry TokenStore reads."""
    from pinyin_hanzi.data.store import SplitWriter
    from pinyin_hanzi.data.vocab import SPECIALS, Vocab, save_vocab

    writer = SplitWriter(folder, "train", np.dtype(np.uint16), np.dtype(np.uint16))
    for source, target, lengths, copies in chunks:
        writer.append(source, target, lengths, copies)
    examples = writer.close()
    vocab = Vocab(list(SPECIALS) + [f"t{i}" for i in range(len(SPECIALS), VOCAB_SIZE)])
    save_vocab(vocab, folder / "pinyin_vocab.txt")
    save_vocab(vocab, folder / "hanzi_vocab.txt")
    store = {"source_dtype": "uint16", "target_dtype": "uint16", "examples": {"train": examples}}
    (folder / "stats.json").write_text(json.dumps({"store": store}) + "\n", encoding="utf-8")


def arrow_features():
    import datasets

    ids = datasets.Sequence(datasets.Value("uint16"))
    return datasets.Features({"source": ids, "target": ids, "copies": datasets.Value("uint8")})


def write_datasets_dict(folder: Path, chunks: list) -> None:
    """Each block as Arrow list arrays (no Python object per example), concatenated and saved."""
    import datasets
    import pyarrow as pa

    parts = []
    for source, target, lengths, copies in chunks:
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        parts.append(datasets.Dataset.from_dict(
            {"source": pa.ListArray.from_arrays(offsets, pa.array(source)),
             "target": pa.ListArray.from_arrays(offsets, pa.array(target)), "copies": pa.array(copies)},
            features=arrow_features()))
    datasets.concatenate_datasets(parts).save_to_disk(str(folder))


def write_datasets_generator(folder: Path, chunks: list, cache: Path) -> None:
    """One example at a time through ``from_generator`` (which streams into a cache file), then saved."""
    import datasets

    def examples() -> Iterator[dict]:
        for source, target, lengths, copies in chunks:
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            for row in range(len(lengths)):
                start, end = offsets[row], offsets[row + 1]
                yield {"source": source[start:end], "target": target[start:end], "copies": int(copies[row])}

    dataset = datasets.Dataset.from_generator(examples, features=arrow_features(), cache_dir=str(cache))
    dataset.save_to_disk(str(folder))


WRITERS = {"numpy": write_numpy, "datasets": write_datasets_dict, "datasets_generator": write_datasets_generator}


# --- measurements (each in a child process) -----------------------------------------------------------------------

def child_write(task: dict) -> dict:
    folder, chunks = Path(task["folder"]), synthetic_chunks(task["examples"], task["seed"])
    folder.mkdir(parents=True)
    imported(task["engine"])
    baseline = memory_mb()["rss"]  # the data and the modules, alike for both engines
    started = time.perf_counter()
    if task["engine"] == "datasets_generator":
        write_datasets_generator(folder, chunks, Path(task["cache"]))
    else:
        WRITERS[task["engine"]](folder, chunks)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "rss_added_mb": memory_mb()["peak"] - baseline, "peak_rss_mb": memory_mb()["peak"]}


def opened(engine: str, folder: str):
    """The training split: a StoredSplit, or a datasets.Dataset in its default format."""
    if engine == "numpy":
        from pinyin_hanzi.data.store import TokenStore

        return TokenStore(folder).split("train")
    import datasets

    return datasets.load_from_disk(folder)


def imported(engine: str) -> float:
    """Seconds to import the engine (the project's store module for numpy); then the batching module both use,
    which imports torch (not counted: training imports it anyway)."""
    started = time.perf_counter()
    if engine == "numpy":
        import pinyin_hanzi.data.store  # noqa: F401
    else:
        import datasets
        import pyarrow.compute  # noqa: F401  (read for the lengths)

        datasets.disable_progress_bars()
    seconds = time.perf_counter() - started
    from pinyin_hanzi.data.batches import token_budget_batches

    # numpy loads numpy.random and numpy.ma on first use (0.2 s here): not a cost of either engine's batch plan
    token_budget_batches(np.array([2, 3]), None, 8, 0, 0)
    return seconds


def child_open(task: dict) -> dict:
    import_seconds = imported(task["engine"])
    before = memory_mb()
    started = time.perf_counter()
    split = opened(task["engine"], task["folder"])
    seconds = time.perf_counter() - started
    return {"import_seconds": import_seconds, "open_seconds": seconds, "examples": len(split),
            "rss_added_mb": memory_added(before), "peak_rss_mb": memory_mb()["peak"]}


def child_random(task: dict) -> dict:
    imported(task["engine"])
    split = opened(task["engine"], task["folder"])
    indices = np.random.default_rng([task["seed"], 1]).integers(0, len(split), task["reads"]).tolist()
    before, checksum = memory_mb(), 0
    started = time.perf_counter()
    if task["engine"] == "numpy":
        for index in indices:
            source, target = split.example(index)
            checksum += int(source[-1]) + int(target[-1])  # touches the ids, as padding them does
    else:
        for index in indices:
            row = split[index]
            checksum += int(row["source"][-1]) + int(row["target"][-1])
    seconds = time.perf_counter() - started
    return {"per_second": len(indices) / seconds, "checksum": checksum, "rss_added_mb": memory_added(before),
            "peak_rss_mb": memory_mb()["peak"]}


def dataset_batches(split, count: int, batch_tokens: int, seed: int) -> Iterator[np.ndarray]:
    """The example indices of BatchStream's first ``count`` batches (same plan, same seed), epoch after epoch,
    with the lengths and copies read from the Arrow columns."""
    import pyarrow.compute as pc

    from pinyin_hanzi.data.batches import token_budget_batches

    lengths = pc.list_value_length(split.data.column("source")).to_numpy()
    copies = split.data.column("copies").to_numpy()
    ends, epoch = np.cumsum(copies, dtype=np.int64), 0
    while True:
        positions, bounds = token_budget_batches(lengths, copies, batch_tokens, seed, epoch)
        for start, end in bounds:
            yield np.searchsorted(ends, positions[start:end], side="right")
            count -= 1
            if count == 0:
                return
        epoch += 1


def child_batches(task: dict) -> dict:
    imported(task["engine"])
    from pinyin_hanzi.data.batches import Batch, BatchStream, pad

    split = opened(task["engine"], task["folder"])
    if task.get("format"):
        split = split.with_format(task["format"])
    before, checksum, tokens = memory_mb(), 0, 0
    started = time.perf_counter()
    if task["engine"] == "numpy":
        stream = BatchStream(split, task["batch_tokens"], task["seed"])
        setup = time.perf_counter() - started
        for _ in range(task["batches"]):
            batch = stream.batch(*stream.next_indices())
            checksum, tokens = checksum + int(batch.target.sum()), tokens + batch.target.numel()
    else:
        plan = dataset_batches(split, task["batches"], task["batch_tokens"], task["seed"])
        examples = next(plan)  # the first batch's indices: the lengths are read and the epoch planned
        setup = time.perf_counter() - started
        while examples is not None:
            rows = split[examples.tolist()]
            batch = Batch(pad(rows["source"]), pad(rows["target"]))
            checksum, tokens = checksum + int(batch.target.sum()), tokens + batch.target.numel()
            examples = next(plan, None)
    seconds = time.perf_counter() - started - setup
    return {"setup_seconds": setup, "per_second": task["batches"] / seconds, "tokens_per_batch":
            tokens / task["batches"], "checksum": checksum, "rss_added_mb": memory_added(before),
            "peak_rss_mb": memory_mb()["peak"]}


CHILD_TASKS = {"write": child_write, "open": child_open, "random": child_random, "batches": child_batches}
