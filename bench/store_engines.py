"""Two engines for the token store, side by side on the same synthetic token data: numpy memory-mapped files
(the project's :mod:`pinyin_hanzi.data.store`, as nanoGPT's ``train.bin``) and Hugging Face ``datasets`` (Arrow
files, memory-mapped).

    python bench/store_engines.py                       # --examples 1000000
    python bench/store_engines.py --examples 3000000 --work /tmp/store_bench/work   # about 4 minutes on 2 busy cores

``datasets`` is not a requirement of the project: install it in a virtual environment of its own, so that the
system's numpy and torch stay as they are, and run the benchmark with that environment's python:

    python3 -m venv --system-site-packages /tmp/store_bench/venv
    /tmp/store_bench/venv/bin/pip install datasets "numpy==$(python3 -c 'import numpy; print(numpy.__version__)')"
    /tmp/store_bench/venv/bin/python bench/store_engines.py

Without ``datasets`` it says so and measures numpy alone. The data: ``--examples`` training examples of 2-32
tokens (source and target ids below 11,000, uint16), a quarter of them trained twice an epoch (``copies``), drawn
with a fixed seed. Each measurement runs in a child process of its own, which reports its own peak RSS (VmHWM),
so that the engines share no memory; RSS added is given with its anonymous part (RssAnon): the rest is pages of
the mapped files, which the kernel drops and reads again as it needs. The files are read warm (just written, in
the page cache), as training reads a store it has read before.

- write: numpy through the project's ``SplitWriter``; ``datasets`` two ways, chunks of Arrow list arrays through
  ``Dataset.from_dict`` + ``concatenate_datasets`` + ``save_to_disk`` (its fastest public path; the blocks stay
  in memory until saved) and ``Dataset.from_generator`` one example at a time + ``save_to_disk`` (its streaming
  path; it writes a cache copy first, whose size is reported). Time, size on disk (the engine's files: the
  vocabularies, which either needs, left out), peak RSS over the process's before writing (the data, held
  aside, and the modules).
  Each is written twice: whether the two writes are byte-identical (sha256 of every file) is the determinism check.
- open: ``TokenStore(folder).split("train")`` vs ``datasets.load_from_disk``: the engine's import time (numpy is
  loaded already), open time, RSS added.
- random access: ``--reads`` examples at random indices, one at a time (``StoredSplit.example(i)`` vs
  ``dataset[i]``, its fastest format, Python lists), as batching reads them.
- batches: ``--batches`` token-budget batches of ``--batch-tokens`` tokens: the project's ``BatchStream`` vs the
  same index lists (``token_budget_batches``, the same seed) read with ``dataset[indices]`` (Python lists and numpy
  format) and padded by the same ``pad``; a checksum over the batches shows both engines built the same ones.
- dependency weight: installed size of ``datasets`` and everything it requires, and the part of it that the
  project's requirements.txt does not already bring; numpy's size for comparison.

The last line is one JSON object: ``{"benchmark": "store_engines", "examples", "tokens", "numpy": {...},
"datasets": {...}, "datasets_generator": {...}, "dependencies": {...}, "versions": {...}}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata, util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from store_engine_tasks import CHILD_TASKS, MB, synthetic_chunks  # noqa: E402  (bench/ is the script's folder)


def in_child(task: dict) -> dict:
    """Run one measurement in a process of its own; its result (the child's last stdout line)."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                   "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                   "HF_DATASETS_CACHE": task.get("cache", ""), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, __file__, "--child", json.dumps(task)], capture_output=True,
                            text=True, cwd=ROOT, env=environment, check=False)
    if result.returncode != 0:
        raise SystemExit(f"error: the {task['task']} measurement of {task['engine']} failed:\n"
                         f"{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- the parent: files, dependencies, the table -------------------------------------------------------------------

def engine_files(folder: Path) -> list[Path]:
    """The files an engine wrote: all but the vocabularies, which a store needs whatever the engine."""
    return sorted(path for path in folder.rglob("*") if path.is_file() and not path.name.endswith("_vocab.txt"))


def folder_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in engine_files(folder)) / MB


def file_hashes(folder: Path) -> dict[str, str]:
    hashes = {}
    for path in engine_files(folder):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        hashes[str(path.relative_to(folder))] = digest.hexdigest()
    return hashes


def requirement_closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``names`` require, themselves included, extras left out, by canonical name."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found, waiting = {}, list(names)
    while waiting:
        name = canonicalize_name(waiting.pop())
        if name in found:
            continue
        try:
            found[name] = distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                waiting.append(requirement.name)
    return found


def installed_mb(distribution: metadata.Distribution) -> float:
    """The size of the files the distribution installed (its RECORD), compiled bytecode included."""
    total = 0
    for file in distribution.files or []:
        path = Path(distribution.locate_file(file))
        total += path.stat().st_size if path.is_file() else 0
    return total / MB


def dependency_weight() -> dict:
    """Installed MB of numpy, of datasets with all it requires, and of the part of that the project's
    requirements.txt does not already bring (what adopting datasets adds to an installation)."""
    from packaging.requirements import Requirement

    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    project = requirement_closure([Requirement(line.split("#")[0]).name for line in lines
                                   if line.split("#")[0].strip()])
    weight = {"numpy_mb": installed_mb(metadata.distribution("numpy")), "numpy_in_requirements": "numpy" in project}
    if util.find_spec("datasets") is None:
        return weight
    closure = requirement_closure(["datasets"])
    added = {name: installed_mb(d) for name, d in closure.items() if name not in project}
    weight.update(datasets_closure_mb=sum(installed_mb(d) for d in closure.values()),
                  datasets_added_mb=sum(added.values()), datasets_added={n: round(mb, 1) for n, mb in
                                                                          sorted(added.items(), key=lambda i: -i[1])})
    return weight


def written_twice(engine: str, args, work: Path) -> dict:
    """Write the split twice with ``engine``: times, size, RSS, and whether the two writes are byte-identical."""
    writes, hashes, result = [], [], {}
    for attempt in ("a", "b"):
        folder, cache = work / engine / attempt, work / engine / f"cache-{attempt}"
        shutil.rmtree(folder, ignore_errors=True)
        writes.append(in_child({"task": "write", "engine": engine, "folder": str(folder), "cache": str(cache),
                                "examples": args.examples, "seed": args.seed}))
        hashes.append(file_hashes(folder))
        if cache.exists():  # from_generator's own copy, written before save_to_disk copies it again
            result["cache_mb"] = folder_mb(cache)
            shutil.rmtree(cache)
    differing = sorted(name for name in hashes[0].keys() | hashes[1].keys()
                       if hashes[0].get(name) != hashes[1].get(name))
    shutil.rmtree(work / engine / "b")
    result.update(write_seconds=[w["seconds"] for w in writes], disk_mb=folder_mb(work / engine / "a"),
                  files=len(hashes[0]), write_rss_added_mb=max(w["rss_added_mb"] for w in writes),
                  peak_rss_mb=max(w["peak_rss_mb"] for w in writes), deterministic=not differing,
                  differing_files=differing)
    return result


def measured_engine(engine: str, args, work: Path) -> dict:
    """Every measurement of one engine, each in a child process of its own."""
    result = written_twice(engine, args, work)
    if engine == "datasets_generator":  # the same Arrow files as "datasets": reading them is measured there
        return result
    common = {"engine": engine, "folder": str(work / engine / "a"), "seed": args.seed, "cache": str(work / "cache")}
    opening = in_child({**common, "task": "open"})
    reading = in_child({**common, "task": "random", "reads": args.reads})
    batching = {"task": "batches", "batches": args.batches, "batch_tokens": args.batch_tokens}
    batches = in_child({**common, **batching})
    result.update(import_seconds=opening["import_seconds"], open_seconds=opening["open_seconds"],
                  open_rss_added_mb=opening["rss_added_mb"], reads_per_second=reading["per_second"],
                  reads_rss_added_mb=reading["rss_added_mb"], reads_checksum=reading["checksum"],
                  batch_setup_seconds=batches["setup_seconds"], batches_per_second=batches["per_second"],
                  tokens_per_batch=batches["tokens_per_batch"], batches_rss_added_mb=batches["rss_added_mb"],
                  batches_checksum=batches["checksum"],
                  peak_rss_mb=max(result["peak_rss_mb"], *(r["peak_rss_mb"] for r in (opening, reading, batches))))
    if engine == "datasets":  # its numpy format, which a numpy/torch pipeline would ask for
        numpy_format = in_child({**common, **batching, "format": "numpy"})
        result.update(batches_per_second_numpy_format=numpy_format["per_second"],
                      batches_checksum_numpy_format=numpy_format["checksum"])
    return result


def added_cell(added: dict[str, float]) -> str:
    return f"{added['total']:.0f} ({added['anonymous']:.0f})"


ROWS = (  # (label, key, format)
    ("write, s (1st, 2nd)", "write_seconds", lambda v: " / ".join(f"{s:.1f}" for s in v)),
    ("size on disk, MB", "disk_mb", "{:.1f}"),
    ("  + from_generator cache, MB", "cache_mb", "{:.1f}"),
    ("write: RSS added (data held aside), MB", "write_rss_added_mb", "{:.0f}"),
    ("2nd write byte-identical", "deterministic", lambda v: "yes" if v else "no"),
    ("  files that differ", "differing_files", lambda v: ", ".join(v) or "-"),
    ("import (numpy already loaded), s", "import_seconds", "{:.2f}"),
    ("open, ms", "open_seconds", lambda v: f"{v * 1000:.1f}"),
    ("open: RSS added (anonymous), MB", "open_rss_added_mb", added_cell),
    ("random reads, examples/s", "reads_per_second", "{:,.0f}"),
    ("random reads: RSS added (anon.), MB", "reads_rss_added_mb", added_cell),
    ("batches: setup (lengths, plan), s", "batch_setup_seconds", "{:.2f}"),
    ("batches/s", "batches_per_second", "{:,.0f}"),
    ("batches/s, numpy format", "batches_per_second_numpy_format", "{:,.0f}"),
    ("batches: RSS added (anonymous), MB", "batches_rss_added_mb", added_cell),
    ("peak RSS of any child, MB", "peak_rss_mb", "{:.0f}"),
)


def table(results: dict[str, dict]) -> str:
    names = list(results)
    lines = [f"{'':40}" + "".join(f"{name:>20}" for name in names)]
    for label, key, style in ROWS:
        if not any(key in r for r in results.values()):
            continue
        cells = []
        for name in names:
            value = results[name].get(key)
            cells.append("" if value is None else style(value) if callable(style) else style.format(value))
        lines.append(f"{label:40}" + "".join(f"{cell:>20}" for cell in cells))
    return "\n".join(lines)


def rounded(value):
    """``value`` with its floats, at any depth, rounded to 4 places (for the JSON line)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    return [rounded(item) for item in value] if isinstance(value, list) else value


def versions() -> dict[str, str]:
    found = {}
    for name in ("numpy", "torch", "datasets", "pyarrow", "pandas"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1_000_000, help="training examples (default 1,000,000)")
    parser.add_argument("--reads", type=int, default=200_000, help="random single-example reads (default 200,000)")
    parser.add_argument("--batches", type=int, default=2000, help="token-budget batches built (default 2,000)")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="tokens a batch holds at most (default 2048)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--work", type=Path, help="folder for the written stores (default: a temporary one); "
                                                   "needs about 300 MB per million examples; emptied at the end")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.examples, args.reads, args.batches, args.batch_tokens) < 1:
        parser.error("--examples, --reads, --batches and --batch-tokens must be at least 1")
    return args


def measured_engines(engines: list[str], args: argparse.Namespace) -> dict[str, dict]:
    """Every engine's measurements, one engine after another; the written stores are removed at the end."""
    work = args.work or Path(tempfile.mkdtemp(prefix="store_engines-"))
    try:
        results = {}
        for engine in engines:
            print(f"measuring {engine} ...", file=sys.stderr, flush=True)
            results[engine] = measured_engine(engine, args, work)
        return results
    finally:
        for folder in engines + ["cache"]:
            shutil.rmtree(work / folder, ignore_errors=True)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def report(args: argparse.Namespace, results: dict[str, dict]) -> None:
    """The table, the checks, the dependency weight and the JSON line."""
    tokens = sum(int(chunk[2].sum()) for chunk in synthetic_chunks(args.examples, args.seed))
    print(f"{args.examples:,} examples, {tokens:,} tokens a side; {args.reads:,} random reads; {args.batches:,} "
          f"batches of {args.batch_tokens} tokens; files read warm (page cache)")
    print(table(results))
    if "datasets" in results:
        numpy, arrow = results["numpy"], results["datasets"]
        same = (numpy["reads_checksum"] == arrow["reads_checksum"]
                and numpy["batches_checksum"] == arrow["batches_checksum"] == arrow["batches_checksum_numpy_format"])
        print(f"same examples read and same batches built by both engines: {'yes' if same else 'NO'}")
    weight = dependency_weight()
    line = (f"installed size: numpy {weight['numpy_mb']:.0f} MB (brought by requirements.txt already: "
            f"{'yes' if weight['numpy_in_requirements'] else 'no'})")
    if "datasets_closure_mb" in weight:
        line += (f"; datasets with all it requires {weight['datasets_closure_mb']:.0f} MB, of which "
                 f"{weight['datasets_added_mb']:.0f} MB not brought by requirements.txt: "
                 + ", ".join(f"{name} {mb:.0f}" for name, mb in weight["datasets_added"].items()))
    print(line)
    print(json.dumps(rounded({"benchmark": "store_engines", "examples": args.examples, "tokens": tokens, **results,
                              "dependencies": weight, "versions": versions()})))


def main() -> None:
    args = arguments()
    if args.child:  # one measurement, in a process of its own (in_child)
        task = json.loads(args.child)
        print(json.dumps(CHILD_TASKS[task["task"]](task)))
        return
    engines = ["numpy"]
    if util.find_spec("datasets") is None:
        print("datasets is not installed: pip install datasets (in a virtual environment) is needed for the "
              "comparison; measuring numpy alone", flush=True)
    else:
        engines += ["datasets", "datasets_generator"]
    report(args, measured_engines(engines, args))


if __name__ == "__main__":
    main()
