"""What keeps a training step at the hardware's speed, beside the book's loop: the batch loss compiled
(train.compile), batches built ahead on a thread (train.prefetch), and the device's fast settings.

A step of these small models on a GPU is bound by the host: each of a few thousand kernels is launched
from Python, and every number read back (a loss, a list width) drains the GPU's queue. So on a GPU:
  - :class:`BatchLoss` can compile the forward pass and the loss into a few fused kernels (the backward pass
    with them), and with ``reduce-overhead`` replay them as CUDA graphs, one launch a batch (opt-in:
    train.compile=on; see :func:`compile_mode`);
  - nothing is read back inside a step but the loss and gradient norm, together, once (loop.train_step);
  - :class:`Prefetcher` reads, pads and abbreviates the next batches from the token store on a thread and
    copies them to pinned memory, so the GPU never waits on the store;
  - fused AdamW and TF32 matrix products (:func:`fast_device`).
Figures: docs/benchmarks.md, "Compiled training".
"""

from __future__ import annotations

import queue
import threading

import torch

from pinyin_hanzi.data.batches import Batch, BatchStream
from pinyin_hanzi.data.vocab import PAD_ID
from pinyin_hanzi.training.loss import candidate_columns, columns_loss_sum


def fast_device(device: torch.device) -> None:
    """TF32 matrix products on GPUs that have them (Ampere and later): fp32 weights and sums, products at
    tensor-core speed, the usual choice for training (PyTorch leaves it off for exactness)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def compile_mode(setting: str, device: torch.device) -> str | None:
    """train.compile ("auto", "on", "off", or a torch.compile mode) -> the torch.compile mode, or None for eager.
    on: ``reduce-overhead`` (CUDA graphs) on a GPU, ``default`` elsewhere. auto is eager for now: on an H200
    (torch 2.11) the compiled backward pass crashed the process, in both modes, and on the development CPU
    compiling measured no faster (docs/benchmarks.md, "Compiled training")."""
    if setting in ("off", "auto"):
        return None
    if setting == "on":
        return "reduce-overhead" if device.type == "cuda" else "default"
    return setting


class BatchLoss:
    """A batch's label-smoothed loss summed over its target tokens, through ``model`` (the model, or its DDP
    wrapper), with the candidate softmax (``candidates``) and a distillation ``teacher`` as configured:
    eager, or compiled in ``mode`` (:func:`compile_mode`).

    The candidate columns are gathered outside the compiled part: on a CPU their width is the batch's
    longest list (read back, free there); on a GPU it is the table's, so that no step reads back from the
    device. Shapes are left dynamic (rows and length vary by batch): one compilation serves every batch;
    with ``buckets`` (the number of length buckets the batches come in, train.length_bucket) they are static,
    one compilation a bucket, and the columns take the table's width on a CPU too."""

    def __init__(self, model: torch.nn.Module, label_smoothing: float, candidates=None, teacher=None,
                 mode: str | None = None, device: torch.device | None = None, buckets: int = 0):
        self.candidates = candidates
        self.static = mode is not None and buckets > 0
        self.whole_lists = device is not None and device.type == "cuda" or self.static

        def loss(source, target, columns, allowed, padded):
            return columns_loss_sum(model, source, target, columns, allowed, label_smoothing, teacher, padded)

        if self.static:  # each bucket's shape compiled on its own: none left to eager by dynamo's limit
            from torch._dynamo import config  # (not `import torch._dynamo`: that would make torch local here)

            limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
            setattr(config, limit, max(getattr(config, limit), buckets + 2))
        self._loss = loss if mode is None else torch.compile(loss, mode=mode, dynamic=not self.static)
        self._graphs = mode is not None and "reduce-overhead" in mode

    def __call__(self, batch: Batch, padded: bool = True) -> torch.Tensor:
        """``padded=False``: no row of the batch is padded (known on the CPU: see :func:`padded_rows`), so the
        model attends without a padding mask."""
        columns = allowed = None
        if self.candidates is not None:
            columns, allowed = candidate_columns(batch.source, batch.target, self.candidates,
                                                 whole_lists=self.whole_lists)
        if self._graphs:  # a new forward pass: the last one's graph outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        # static shapes: a bucket's batches all take the padding mask, one graph whether or not a row is padded
        return self._loss(batch.source, batch.target, columns, allowed, padded or self.static)


def padded_rows(batch: Batch) -> bool:
    """Whether any source row of ``batch`` is padded. Asked of the batch on the CPU, before its copy to the
    device, where the answer costs no read-back: training's batches hold examples of one length and have none,
    and attention without a mask may take faster kernels (flash attention on a GPU)."""
    return bool((batch.source == PAD_ID).any())


def global_batch(stream: BatchStream, accumulate: int, rank: int, world_size: int) -> tuple[int, list[Batch]]:
    """The next global batch of ``stream``, the ``accumulate`` batches of one optimizer step that every process
    walks in step: (its target tokens, this process's batches of it: ``rank``'s r, r + N, r + 2N, ...)."""
    drawn = [stream.next_indices() for _ in range(accumulate)]  # (epoch, indices) each
    tokens = sum(stream.n_target_tokens(indices) for _, indices in drawn)
    return tokens, [stream.batch(epoch, indices) for epoch, indices in drawn[rank::world_size]]


class Prefetcher:
    """The next global batches of a :class:`BatchStream`, built ``depth`` ahead on a thread: this process's
    share of each (``rank`` of ``world_size``, ``accumulate`` batches a step), pinned when the device is a
    GPU so that the copy is asynchronous.

    The stream runs ahead of training; :meth:`state_dict` is its position after the last batch handed out,
    which a checkpoint keeps, so a resumed run sees the batches the uninterrupted one would have. An error
    reading the store (OSError) is raised where the batch is taken, as without the thread."""

    def __init__(self, stream: BatchStream, *, accumulate: int, rank: int, world_size: int, pin: bool,
                 depth: int = 4):
        self.stream, self.accumulate, self.rank, self.world_size, self.pin = stream, accumulate, rank, world_size, pin
        self._taken_state = stream.state_dict()
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="batch-prefetch", daemon=True)
        self._thread.start()

    def _global_batch(self) -> tuple[int, list[Batch]]:
        tokens, mine = global_batch(self.stream, self.accumulate, self.rank, self.world_size)
        if self.pin:
            mine = [Batch(batch.source.pin_memory(), batch.target.pin_memory()) for batch in mine]
        return tokens, mine

    def _fill(self) -> None:
        while not self._stop.is_set():
            try:
                item = (*self._global_batch(), self.stream.state_dict(), None)
            except Exception as error:  # noqa: BLE001 (handed to the training thread, which raises it)
                item = (0, [], None, error)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item[3] is not None:
                return

    def next(self) -> tuple[int, list[Batch]]:
        """(target tokens of the global batch, this process's batches of it, on the CPU)."""
        tokens, batches, state, error = self._queue.get()
        if error is not None:
            raise error
        self._taken_state = state
        return tokens, batches

    def state_dict(self) -> dict:
        return dict(self._taken_state)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
