"""The training recipe: a short :func:`train` over named setup functions, no framework.

    train(config)
      _setup_run         seed, threads, device, where the run writes
      owned              the run's folders checked writable and locked for the whole run (one process
                         trains a run); a new run never replaces another's (run.py)
      _setup_data        prepare the splits (rank 0; the other processes wait) and read them, under the data's lock
      _setup_model       a new Transformer, the resumed last.pt's, or --init-from's weights (models/growing.py)
      setup_language_models  syllable bigrams; the character n-gram and word models train.language_models
                         names, counted once with the store (language_models.py)
      _setup_optimizer   AdamW with warm-up + cosine decay (lr_at)
      _setup_teacher     train.distill_from: a trained model whose distribution the loss also follows,
                         frozen (distillation.py)
      restore            --resume: optimizer, schedule, data position, step, best score, random state
                         (checkpointing.py)
      setup_logging      TensorBoard, train_log.jsonl, eval_log.jsonl, the progress bar (rank 0; logs.py)
      train_loop         for each global batch (grad_accum_steps token-budget batches, shared among
                         torchrun's processes): train_step (label-smoothed cross-entropy per target token of
                         the global batch, clipped; a batch with a non-finite loss or gradient is skipped,
                         max_bad_steps in a row stop the run); every eval_every steps evaluate_and_save:
                         validation (validation.py), then save_checkpoint: best.pt when the accuracy
                         improves, then last.pt (loop.py, checkpointing.py)

The run's progress (step, best score, paths) lives in one :class:`~pinyin_hanzi.training.run.Run`; what
setup builds, in :class:`~pinyin_hanzi.training.run.Parts`. TensorBoard logs, ``train_log.jsonl`` (every step)
and ``eval_log.jsonl`` go to ``runs/<name>/``, checkpoints to ``checkpoints/<name>/``; under torchrun only
rank 0 writes them.
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import threading
from pathlib import Path

import torch

from pinyin_hanzi import checkpoint
from pinyin_hanzi.config import Config, TrainConfig
from pinyin_hanzi.data.batches import BatchStream, bucket_count, encode_split, hanzi_ids, prefix_ids
from pinyin_hanzi.data.corpus import prepared_data
from pinyin_hanzi.data.store import StoredSplit
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.errors import CheckpointError, ConfigError, Interrupted
from pinyin_hanzi.models import growing
from pinyin_hanzi.models.transformer import Transformer, check_memory
from pinyin_hanzi.runtime import select_device, set_threads
from pinyin_hanzi.text.lexicon import Lexicon
from pinyin_hanzi.training import distributed
from pinyin_hanzi.training.checkpointing import load_resumable, restore
from pinyin_hanzi.training.distillation import Teacher, load_teacher
from pinyin_hanzi.training.language_models import setup_language_models
from pinyin_hanzi.training.logs import log_setup, setup_logging
from pinyin_hanzi.training.loop import train_loop
from pinyin_hanzi.training.run import Parts, Run, Splits, owned, stop_message
from pinyin_hanzi.training.speed import BatchLoss, Prefetcher, compile_mode, fast_device


def train(config: Config, *, resume: bool = False, init_from: str | None = None, overwrite: bool = False,
          log=print, command: str | None = None, workers: int | None = None) -> Path:
    """Train as configured; returns the path of the best checkpoint.

    resume: continue ``checkpoints/<name>/last.pt`` exactly (weights, optimizer, scheduler, data position,
    RNG); init_from: start a new run from another checkpoint's weights (its vocabularies keep their ids and
    grow by the new data's tokens). command: the command line that trains this run without its mode
    flags (``python train.py --config X``), which messages name as the way to go on. workers: the processes
    that prepare the data if it is not prepared yet (default: all cores).
    Launched by torchrun, each process trains on its share of every global batch (see distributed.py).

    One process at a time owns a run: its checkpoint and run folders are locked for the whole run.

    Raises TrainingError if a new run would replace an existing run's checkpoints (unless ``overwrite``),
    the loss or gradient is not finite for ``train.max_bad_steps`` batches in a row, a checkpoint cannot
    be written (a full disk) or the prepared data vanishes while training reads it; OutputError if an
    output folder is not writable or another process trains the run; CheckpointError, ConfigError,
    DataError for unusable checkpoints, settings or data (ConfigError too for a train.distill_from that is
    the run's own checkpoint); errors.Interrupted (a KeyboardInterrupt) on Ctrl-C, SIGTERM or SIGUSR1,
    saying what was kept and how to go on (see :class:`~pinyin_hanzi.training.run.StopSignals`): in the
    training loop they save last.pt at the end of the step first, and a second Ctrl-C stops at once."""
    process = distributed.from_environment()
    t = config.train
    if resume and overwrite:
        raise ConfigError("resume and overwrite exclude each other: --resume continues a run, --overwrite replaces it")
    if t.grad_accum_steps % process.world_size:
        raise ConfigError(f"train.grad_accum_steps={t.grad_accum_steps} must be a multiple of the number of "
                          f"processes ({process.world_size}): it counts the batches of one optimizer step over all")
    try:
        run = _setup_run(config, process, init_from=init_from, command=command,
                         log=log if process.is_main else lambda message: None)
        try:
            with run.signals, owned(run, resume=resume, overwrite=overwrite), _thread_write_errors_raised_later():
                return _train(run, resume=resume, workers=workers)
        except KeyboardInterrupt as interrupt:
            number = getattr(interrupt, "signal_number", signal.SIGINT)
            stopped = f"{stop_message(number)} at step {run.step}"
            if not run.process.is_main:  # only rank 0 writes checkpoints, and says which it kept
                # Exit 0: torchrun ends every other process as soon as one exits non-zero, which could cut
                # rank 0 off before it has said what it kept. Rank 0's status is the job's.
                raise Interrupted(f"{stopped} (rank 0 keeps the checkpoint)", number, exit_status=0) from None
            raise Interrupted(f"{stopped}: {run.kept()}; {run.next_step()}", number) from None
        except OSError as error:  # a log or TensorBoard write (checkpoints say so themselves)
            raise run.write_failed(error, error.filename or run.run_dir) from None
    finally:
        distributed.stop()


@contextlib.contextmanager
def _thread_write_errors_raised_later():
    """TensorBoard writes its events in a thread of its own. An OSError there (a full disk) would print
    that thread's traceback; TensorBoard raises the same error again in the training thread at its next
    write or at close, which reports it in one line (see :func:`train`), so the thread's report is left
    out while training runs."""
    previous = threading.excepthook

    def report(arguments) -> None:
        if not issubclass(arguments.exc_type, OSError):
            previous(arguments)

    threading.excepthook = report
    try:
        yield
    finally:
        threading.excepthook = previous


def _train(run: Run, *, resume: bool, workers: int | None = None) -> Path:
    config, t, log = run.config, run.config.train, run.log
    _check_trainable(config, 0, 0)  # the layers alone may be too many: say so before preparing the data
    teacher_state = checkpoint.load_checkpoint(t.distill_from) if t.distill_from else None  # likewise
    splits = _setup_data(run, workers)
    saved = load_resumable(run, splits) if resume else None
    model, pinyin_vocab, hanzi_vocab = _setup_model(config, splits, saved, run.kept_path, run.init_from, log,
                                                    read_from=run.init_source)
    _check_trainable(config, len(pinyin_vocab), len(hanzi_vocab))  # before the optimizer allocates its state
    model.to(run.device)
    syllable_lm, char_lm_state, word_lm_state = setup_language_models(config, splits.store, splits.fingerprint,
                                                                      hanzi_vocab, log)
    stream, valid = _setup_batches(config, splits, pinyin_vocab, hanzi_vocab)
    optimizer, scheduler = _setup_optimizer(model, t)
    if saved is not None:
        restore(run, saved, optimizer, scheduler, stream)
    if run.step >= t.max_steps:
        log(f"nothing to do: step {run.step} >= train.max_steps={t.max_steps}")
        return run.best_path if run.best_path.is_file() else run.kept_path

    logs = setup_logging(run, resume)
    lexicon = Lexicon(hanzi_vocab)
    candidates = None
    if t.loss == "candidates":
        candidates = tuple(part.to(run.device) for part in lexicon.for_vocab(pinyin_vocab))
    teacher = _setup_teacher(t, teacher_state, pinyin_vocab, hanzi_vocab, run.device, log) if teacher_state else None
    teacher_state = None  # the teacher's model holds its weights: the checkpoint's copy is not kept for the run
    trained_model = _wrap_for_training(model, run)
    batch_loss = BatchLoss(trained_model, t.label_smoothing, candidates, teacher, compile_mode(t.compile, run.device),
                           run.device, bucket_count(config.data.max_len, t.length_bucket))
    parts = Parts(model, trained_model, pinyin_vocab, hanzi_vocab, optimizer, scheduler, stream,
                  syllable_lm, char_lm_state, word_lm_state, lexicon, candidates, valid, splits.valid_sample,
                  teacher, batch_loss, _prefetcher(stream, run))
    log_setup(run, parts, logs)
    train_loop(run, parts, logs)
    log(f"best valid char accuracy {run.best_accuracy:.2%}; checkpoints in {run.checkpoint_dir}")
    return run.best_path


def _setup_teacher(t: TrainConfig, state: dict, pinyin_vocab: Vocab, hanzi_vocab: Vocab, device: torch.device,
                   log) -> Teacher:
    """train.distill_from's model (its checkpoint's ``state``), over this run's vocabularies (distillation.py)."""
    teacher = load_teacher(state, t.distill_from, pinyin_vocab, hanzi_vocab, t.distill_weight, t.distill_temperature,
                           device)
    shared = int(teacher.known.sum())
    log(f"distilling from {t.distill_from} ({sum(p.numel() for p in teacher.model.parameters()):,} parameters): "
        f"{t.distill_weight:g} of the loss follows it at temperature {t.distill_temperature:g}; it knows {shared:,} of "
        f"this run's {len(hanzi_vocab):,} characters")
    return teacher


def _check_trainable(config: Config, pinyin_vocab_size: int, hanzi_vocab_size: int) -> None:
    """ConfigError (one line, naming the size) unless training the configured model fits in memory: four
    float32 copies of it (weights, gradients, AdamW's two moments), activations aside."""
    check_memory(config.model, source_vocab_size=pinyin_vocab_size, target_vocab_size=hanzi_vocab_size, copies=4,
                 needed_for="to train (weights, gradients and AdamW's two moments)")


def _setup_run(config: Config, process: distributed.Process, *, init_from: str | None, command: str | None,
               log) -> Run:
    """Seed, threads and device; where the run writes."""
    t = config.train
    random.seed(t.seed)
    torch.manual_seed(t.seed)  # the same on every process: rank 0's saved RNG state then resumes them all
    set_threads(t.threads)
    device = distributed.start(process, select_device(t.device))
    fast_device(device)
    return Run(config, process, device, log, checkpoint_dir=Path(t.checkpoint_dir) / t.name,
               run_dir=Path(t.runs_dir) / t.name, command=command, init_from=init_from)


def _setup_data(run: Run, workers: int | None = None) -> Splits:
    """Prepare the splits (rank 0 prepares, the other processes wait and then find them ready) and read
    the training and validation examples and the vocabularies, holding the data's lock meanwhile so that
    they belong together."""
    process = run.process
    if not process.is_main:
        distributed.barrier()
    with prepared_data(run.config.data, log=run.log, workers=workers) as data_dir:
        t = run.config.train
        splits = Splits.read(data_dir, sample=max(t.eval_sentences, t.attention_sentences))
        run.data_fingerprint = splits.fingerprint
    if process.is_main:
        distributed.barrier()
    return splits


def _setup_batches(config: Config, splits: Splits, pinyin_vocab: Vocab, hanzi_vocab: Vocab
                   ) -> tuple[BatchStream, StoredSplit]:
    """The stream of training batches (the same on every process: each takes its share of a global batch),
    read from the token store's files, and the encoded validation split, in the model's vocabularies
    (encoded from its text, in which a character too rare for the data's vocabulary may be one the model knows)."""
    train = splits.store.split("train", pinyin_vocab=pinyin_vocab, hanzi_vocab=hanzi_vocab)
    valid = encode_split(splits.valid_examples(), pinyin_vocab, hanzi_vocab)
    abbreviate = config.data.abbreviate  # training batches only: validation measures full pinyin
    stream = BatchStream(train, config.train.batch_tokens, config.train.seed, abbreviate=abbreviate,
                         prefix_of=prefix_ids(pinyin_vocab) if abbreviate > 0 else None,
                         hanzi_target=hanzi_ids(hanzi_vocab) if abbreviate > 0 else None,
                         bucket=config.train.length_bucket)
    return stream, valid


def _setup_model(config: Config, splits: Splits, saved: dict | None, saved_path: Path | None,
                 init_from: str | None, log, *, read_from: Path | None = None) -> tuple[Transformer, Vocab, Vocab]:
    """(model on the CPU, pinyin vocabulary, hanzi vocabulary): those of the resumed checkpoint ``saved``,
    the weights of ``init_from`` over its vocabularies grown by the data's new tokens (:func:`_init_from`;
    read from ``read_from`` if given), or a new model over the prepared data's vocabularies."""
    if saved is not None:
        model, pinyin_vocab, hanzi_vocab, _ = checkpoint.model_from_checkpoint(saved, str(saved_path))
    elif init_from:
        return _init_from(config, splits, init_from, log, read_from=read_from)
    else:
        pinyin_vocab, hanzi_vocab = splits.pinyin_vocab, splits.hanzi_vocab
        model = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    return model, pinyin_vocab, hanzi_vocab


def _init_from(config: Config, splits: Splits, path: str, log, read_from: Path | None = None
               ) -> tuple[Transformer, Vocab, Vocab]:
    """--init-from: the checkpoint's weights over vocabularies grown by the prepared data's new tokens (new
    characters, the prefix tokens of data.abbreviate), and deeper if the config asks for more encoder or
    decoder layers (growing a trained model instead of training a larger one from scratch) or fewer (the
    start of a shallower one): see :mod:`pinyin_hanzi.models.growing`. CheckpointError unless the other model
    settings agree. ``read_from``: where the checkpoint is now, if not at ``path`` (run.init_source)."""
    source = checkpoint.load_checkpoint(read_from or path)
    trained, trained_pinyin, trained_hanzi, _ = checkpoint.model_from_checkpoint(source, path)
    saved_model = source[checkpoint.CONFIG_KEY].get("model")
    if not isinstance(saved_model, dict):
        raise CheckpointError(f"cannot start from {path}: its config has no model section")
    depths = growing.check_growable(config.model, saved_model, path)
    model, pinyin_vocab, hanzi_vocab = growing.grow(trained, trained_pinyin, trained_hanzi, config.model,
                                                    pinyin_tokens=splits.pinyin_vocab.tokens,
                                                    hanzi_tokens=splits.hanzi_vocab.tokens)
    log(f"initialised from {path}: {len(pinyin_vocab) - len(trained_pinyin)} pinyin and "
        f"{len(hanzi_vocab) - len(trained_hanzi)} hanzi tokens added to its vocabularies")
    if depths:  # (check_growable passed: every layer count is in saved_model, an int where it differs)
        notes = []
        if any(getattr(config.model, key) > saved_model[key] for key in growing.DEPTHS):
            notes.append("new layers sit on top and start as the identity (their attention and feed-forward output "
                         "projections are zero)")
        if any(getattr(config.model, key) < saved_model[key] for key in growing.DEPTHS):
            notes.append("a shallower stack keeps the checkpoint's first layers")
        log(f"layers: {depths}; " + "; ".join(notes))
    return model, pinyin_vocab, hanzi_vocab


def _setup_optimizer(model: Transformer, t: TrainConfig
                     ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (weight decay on matrices only) and its schedule, :func:`lr_at`."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    # Fused on a GPU: the update of every parameter in a few kernels, not several per parameter.
    fused = next(model.parameters()).is_cuda
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": t.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=t.lr, betas=(t.beta1, t.beta2), fused=fused or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_at(step, t) / t.lr)
    return optimizer, scheduler


def lr_at(step: int, config: TrainConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio`` at
    ``max_steps``. ``step`` counts optimizer steps from 0."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _wrap_for_training(model: Transformer, run: Run) -> torch.nn.Module:
    """The module train_step runs: DDP over the processes when there are several (speed.BatchLoss compiles
    the step around it with train.compile)."""
    if run.process.world_size > 1:
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[run.device.index] if run.device.type == "cuda" else None)
    return model


def _prefetcher(stream: BatchStream, run: Run) -> Prefetcher | None:
    """train.prefetch global batches built ahead on a thread (-1: 4 on a GPU, none on a CPU, whose cores the
    step itself uses); None for none."""
    t = run.config.train
    depth = t.prefetch if t.prefetch >= 0 else 4 if run.device.type == "cuda" else 0
    if depth == 0:
        return None
    return Prefetcher(stream, accumulate=t.grad_accum_steps, rank=run.process.rank,
                      world_size=run.process.world_size, pin=run.device.type == "cuda", depth=depth)
