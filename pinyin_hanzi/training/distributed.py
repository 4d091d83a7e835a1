"""Multi-process training with PyTorch's DistributedDataParallel, launched by ``torchrun``.

``torchrun --nproc_per_node N train.py --config ...`` starts N copies of train.py and tells each its place
through the environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). A plain ``python train.py``
has none of these and runs as the single process of a world of one: nothing here is initialised then, and
every helper is a no-op, so single-process training is unchanged.

Every process builds the same batch stream from the same seed and takes its own share of each global
batch (see ``loop.py``); rank 0 alone evaluates, logs and writes checkpoints while the others wait.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from pinyin_hanzi.errors import ConfigError


@dataclass(frozen=True)
class Process:
    """This process's place among the training processes."""

    rank: int = 0  # 0 .. world_size - 1, unique over all machines
    world_size: int = 1
    local_rank: int = 0  # index on this machine: picks the GPU

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_environment() -> Process:
    """The process torchrun describes in RANK / WORLD_SIZE / LOCAL_RANK, or the only one. ConfigError if
    those variables are malformed."""
    try:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise ConfigError("RANK, WORLD_SIZE and LOCAL_RANK must be integers (they are set by torchrun)") from None
    if world_size < 1 or not 0 <= rank < world_size or local_rank < 0:
        raise ConfigError(f"RANK={rank}, WORLD_SIZE={world_size}: expected 0 <= RANK < WORLD_SIZE")
    return Process(rank, world_size, local_rank)


def start(process: Process, device: torch.device) -> torch.device:
    """Join the process group (nccl on CUDA, gloo on CPU) when there is more than one process, and return
    the device this process trains on (its own GPU on CUDA). ConfigError for MPS, which has no backend."""
    if process.world_size == 1:
        return device
    if device.type == "mps":
        raise ConfigError("multi-process training needs CUDA (nccl) or the CPU (gloo), not MPS")
    if device.type == "cuda":
        # One GPU per process: a LOCAL_RANK past the last GPU would fail deep inside CUDA, with a traceback.
        if process.local_rank >= (count := torch.cuda.device_count()):
            raise ConfigError(f"LOCAL_RANK={process.local_rank}, but this machine has {count} CUDA device(s): "
                              f"start at most {count} process(es) per machine (torchrun --nproc_per_node {count})")
        device = torch.device("cuda", process.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo",
                                rank=process.rank, world_size=process.world_size)
    return device


def stop() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    """Wait for every process (no-op for a single process)."""
    if dist.is_initialized():
        dist.barrier()


def sum_over_processes(values: list[float], device: torch.device) -> list[float]:
    """Each value summed over all processes (the values themselves for a single process)."""
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()
