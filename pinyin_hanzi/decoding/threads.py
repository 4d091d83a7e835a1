"""How a conversion's searches share the CPU's threads (:func:`parallel_searches`).

A batch's searches run side by side on Python threads, the torch threads shared among them; a search of a
few lines, the one sentence an input method converts at each key, runs on few torch threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch

# A search of a few lines multiplies a few rows by each weight a step: intra-op threads only add OpenMP's
# synchronisation, and where another process wants the cores too, OpenMP's spinning threads wait for each
# other: one line through the API on a busy 2-core machine took 7-48 ms from one run of 100 to the next on two
# threads, a steady time on one (bench/history_speed.py; docs/benchmarks.md, "Learning from the user").
FEW_LINES, FEW_LINES_THREADS = 4, 1


def parallel_searches(jobs: list[int], device: torch.device) -> Callable:
    """How independent searches of ``jobs`` lines each run on a CPU: side by side on ``min(len(jobs), torch
    threads)`` Python threads, the torch threads shared among them, and searches of at most FEW_LINES lines on
    at most FEW_LINES_THREADS torch threads; in turn in the caller's thread on a GPU or where that leaves one
    worker. A batch's decoder step is a few small products that two threads split poorly (1.2x on two cores),
    while two searches at once use both cores: the GIL is free in most of a step (torch's and numpy's kernels)."""
    threads = torch.get_num_threads()
    workers = min(len(jobs), threads)
    share = threads // max(workers, 1)
    if max(jobs, default=0) <= FEW_LINES:
        share = min(share, FEW_LINES_THREADS)
    if device.type != "cpu" or (workers <= 1 and share == threads):
        return lambda function, items: list(map(function, items))
    if workers <= 1:
        def run(function, items):
            torch.set_num_threads(share)  # the caller's own count (per thread), given back after
            try:
                return list(map(function, items))
            finally:
                torch.set_num_threads(threads)

        return run

    def run(function, items):
        # torch's thread count is per thread: each worker sets its own share, the caller's stays as it is
        with ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(share,)) as pool:
            return list(pool.map(function, items))

    return run
