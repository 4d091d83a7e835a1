"""Where and how the arithmetic runs: device selection, precision (bf16 autocast) and CPU threads.

Training, the benchmarks and conversion ask these questions alike; the answers live here so that each of
them picks the same device and precision for the same settings.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
from pathlib import Path

import torch

from pinyin_hanzi.errors import ConfigError


def select_device(name: str) -> torch.device:
    """``name`` ("auto", "cpu", "cuda", "mps") -> the device: "auto" picks CUDA, then Apple's MPS, then the
    CPU. ConfigError if the named device is not available here."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device=cuda but no CUDA device is available (use train.device=auto)")
    if name == "mps" and not _mps_available():
        raise ConfigError("train.device=mps but MPS is not available (use train.device=auto)")
    return torch.device(name)


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and bool(torch.backends.mps.is_available())


@functools.cache  # asked at every training step; the answer never changes
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX). There bf16 products run
    faster than fp32; elsewhere oneDNN emulates them and they are slower than fp32."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def resolve_precision(precision: str, device: torch.device) -> str:
    """train.precision ("auto", "fp32", "bf16") -> "bf16" or "fp32" on ``device``: "auto" is bf16 on CPUs
    with native bf16 (see :func:`cpu_has_native_bf16`), fp32 elsewhere, GPUs included. A GPU step of models
    this size is bound by kernel launches, not arithmetic, and autocast adds a cast kernel to every product:
    on an H100 the quickstart and base models trained 1.15-4.5x faster in fp32 (docs/benchmarks.md). Larger
    models may gain from train.precision=bf16 there."""
    if precision == "auto":
        return "bf16" if device.type == "cpu" and cpu_has_native_bf16() else "fp32"
    return precision


def inference_precision(precision: str, device: torch.device) -> str:
    """How conversion multiplies for decode.precision ("auto", "fp32", "bf16", "int8") on ``device``: "fp32",
    "bf16" (bf16 copies of the weights for products large enough to gain), or "int8" (bf16, and int8 weights
    for a single sentence's few rows: see models/inference.py). "auto" is int8 on CPUs with native bf16 (see
    :func:`cpu_has_native_bf16`; the held-out splits converted one line at a time score within 0.05 points of
    bf16's) but bf16 on Windows, whose PyTorch builds (MSVC) have only a scalar loop for int8 weights; fp32
    elsewhere. On a GPU, fp32 (bf16 conversion there is unmeasured)."""
    if device.type != "cpu":
        return "fp32"
    if precision == "auto":
        if not cpu_has_native_bf16():
            return "fp32"
        return "bf16" if sys.platform == "win32" else "int8"
    return precision


def autocast_for(device: torch.device, precision: str = "fp32"):
    """bf16 autocast for the forward pass where ``precision`` (resolved) is bf16: matrix products run in
    bf16, while weights, gradients, optimizer state, softmax and the loss stay fp32. A no-op for fp32."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def set_threads(threads: int) -> None:
    """Use ``threads`` CPU threads for torch's operators; 0 keeps PyTorch's default (one per core)."""
    if threads:
        torch.set_num_threads(threads)


# Where a container's memory limit is written (cgroup v2, then v1): below the machine's RAM, it is what counts.
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


@functools.cache  # the machine does not change while a process runs
def memory_bytes() -> int | None:
    """The memory this process may use, in bytes: the machine's RAM, or a container's smaller limit; None
    where neither can be read (then nothing is refused for its size)."""
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        limit = None
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text.isdigit() and (limit is None or int(text) < limit):  # "max": no limit
            limit = int(text)
    return limit


def size_text(n_bytes: float) -> str:
    """A size for people: ``700.0 GiB``, ``1.4 TiB``, ``12.3 MiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes / 2**10:,.1f} KiB"


# Loading a converter makes a few hundred thousand objects that live as long as the process (modules,
# pypinyin's tables, the reading tables, vocabularies). Python's cyclic collector walks every tracked object
# again at each full collection, and while they are being made it runs hundreds of times: 0.3 s of
# translate.py's 1.6 s start. So loading runs with it paused, and a tool's start-up may pause it from its
# first line (translate.py does) and call startup_done() once loaded.


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off inside the block, as it was after it (see above)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def startup_done() -> None:
    """The end of a start-up that paused the collector (``gc.disable()`` at a tool's first line): what it
    loaded is frozen out of the collector's walks (``gc.freeze``: it lives as long as the process), and the
    collector runs again. Nothing where the collector is on: a caller that did not pause it keeps its own."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
