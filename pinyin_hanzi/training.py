"""The training loop: plain functions, no framework.

    prepare data -> vocabularies from train -> model -> AdamW with warm-up + cosine decay
    -> for each global batch (grad_accum_steps token-budget batches, shared among torchrun's processes):
       train_step (label-smoothed cross-entropy per target token of the global batch, clipped; a batch
       with a non-finite loss or gradient is skipped, max_bad_steps in a row stop the run)
    -> every eval_every steps: evaluate (valid loss, constrained-greedy character accuracy, samples),
       save last.pt (and best.pt when the accuracy improves)

TensorBoard logs, ``train_log.jsonl`` (every step) and ``eval_log.jsonl`` go to ``runs/<name>/``,
checkpoints to ``checkpoints/<name>/``; under torchrun only rank 0 writes them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from pinyin_hanzi import distributed, visualize
from pinyin_hanzi.char_lm import count_for
from pinyin_hanzi.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from pinyin_hanzi.config import Config, TrainConfig, save_config
from pinyin_hanzi.corpus import phrase_texts, prepare, read_examples
from pinyin_hanzi.data import Batch, BatchStream, collate, encode_examples
from pinyin_hanzi.converter import Converter
from pinyin_hanzi.errors import CheckpointError, ConfigError, TrainingError
from pinyin_hanzi.lexicon import Lexicon
from pinyin_hanzi.metrics import conversion_scores
from pinyin_hanzi.model import Transformer
from pinyin_hanzi.syllable_lm import SyllableBigrams
from pinyin_hanzi.vocab import PAD_ID, load_vocab


def select_device(name: str) -> torch.device:
    """'auto' picks CUDA, then Apple's MPS, then the CPU."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device=cuda but no CUDA device is available (use train.device=auto)")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("train.device=mps but MPS is not available (use train.device=auto)")
    return torch.device(name)


@functools.cache  # asked at every training step; the answer never changes
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX). There bf16 products run
    2-2.5x faster than fp32 (measured 430 vs 165-195 GFLOP/s on 2 Zen 4 cores); elsewhere oneDNN emulates
    them and they are slower than fp32."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def resolve_precision(precision: str, device: torch.device) -> str:
    """train.precision -> "bf16" or "fp32" on ``device``: "auto" is bf16 on CUDA and on CPUs with native
    bf16 (see :func:`cpu_has_native_bf16`), fp32 elsewhere (MPS included)."""
    if precision != "auto":
        return precision
    if device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16()):
        return "bf16"
    return "fp32"


def autocast_for(device: torch.device, precision: str = "fp32"):
    """bf16 autocast for the forward pass where ``precision`` (resolved) is bf16: matrix products run in
    bf16, while weights, gradients, optimizer state, softmax and the loss stay fp32. A no-op for fp32."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def lr_at(step: int, config: TrainConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio`` at
    ``max_steps``. ``step`` counts optimizer steps from 0."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def loss_sum(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float,
             allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """Label-smoothed cross-entropy summed over real target tokens.
    logits (b, t, v), target (b, t) -> (scalar summed loss, number of target tokens).

    With ``allowed`` (b, t, c) bool, ``logits`` (b, t, c) are those of :func:`candidate_columns` — the
    reference in column 0, then the other characters of the position's syllable — and the softmax runs over
    the allowed columns only; label smoothing spreads its mass over them instead of the whole vocabulary."""
    real = target != PAD_ID
    n_tokens = int(real.sum())
    if allowed is None:
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=PAD_ID,
                               label_smoothing=label_smoothing, reduction="sum")
        return loss, n_tokens
    log_probs = logits.float().masked_fill(~allowed, float("-inf")).log_softmax(dim=-1)  # (b, t, c)
    nll = -log_probs[..., 0]  # (b, t)
    smooth = -log_probs.masked_fill(~allowed, 0.0).sum(dim=-1) / allowed.sum(dim=-1).clamp(min=1)  # (b, t)
    loss = ((1.0 - label_smoothing) * nll + label_smoothing * smooth).masked_fill(~real, 0.0).sum()
    return loss, n_tokens


def loss_fn(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float,
            allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """:func:`loss_sum` divided by the number of target tokens: (mean loss per token, number of tokens)."""
    loss, n_tokens = loss_sum(logits, target, label_smoothing, allowed)
    return loss / max(n_tokens, 1), n_tokens


def candidate_columns(source: torch.Tensor, target: torch.Tensor, candidates: tuple[torch.Tensor, torch.Tensor]
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The characters the candidate loss softmaxes over: hanzi ids (b, t, 1 + c), the reference first and
    then the other candidates of the position's syllable, and (b, t, 1 + c) bool, True at real entries.
    ``candidates`` (ids, real), each (pinyin vocab, c), from :meth:`CandidateTable.for_vocab`."""
    ids, real = candidates[0][source], candidates[1][source]  # (b, t, c)
    real = real & (ids != target[..., None])  # the reference once, in column 0
    ids = torch.where(real, ids, PAD_ID)  # each list first, <pad> after it (see Transformer.logits)
    order = (~real).int().argsort(dim=-1, stable=True)
    ids, real = ids.gather(-1, order), real.gather(-1, order)
    return torch.cat([target[..., None], ids], dim=-1), torch.cat([(target != PAD_ID)[..., None], real], dim=-1)


def model_loss_sum(model, batch, label_smoothing: float, candidates=None) -> tuple[torch.Tensor, int]:
    """Teacher-forced loss of ``batch`` summed over its target tokens, and their number: softmax over all
    characters, or with ``candidates`` (see :func:`candidate_columns`) over each syllable's characters,
    computing only their logits. The one place that chooses between the two."""
    if candidates is None:
        return loss_sum(model(batch.source, batch.target), batch.target, label_smoothing)
    columns, allowed = candidate_columns(batch.source, batch.target, candidates)
    return loss_sum(model(batch.source, batch.target, columns), batch.target, label_smoothing, allowed)


def model_loss(model, batch, label_smoothing: float, candidates=None) -> tuple[torch.Tensor, int]:
    """:func:`model_loss_sum` divided by the number of target tokens: (mean loss per token, tokens)."""
    loss, n_tokens = model_loss_sum(model, batch, label_smoothing, candidates)
    return loss / max(n_tokens, 1), n_tokens


def train_step(model, batches: list[Batch], total_tokens: int, optimizer, scheduler, config: TrainConfig, device,
               candidates: tuple[torch.Tensor, torch.Tensor] | None = None, world_size: int = 1
               ) -> tuple[float, float, bool]:
    """One optimizer step on this process's batches of a global batch of ``total_tokens`` target tokens.

    Each batch's summed loss is divided by the global batch's token count, so the accumulated gradient is
    exactly that of the mean loss over the whole global batch, not an average of per-batch averages. Under
    DDP (``world_size`` > 1) gradients are averaged over processes, hence the division by
    ``total_tokens / world_size``; they are synchronised once, on the last batch. ``candidates`` (ids, real),
    each (pinyin vocab, c), from :meth:`CandidateTable.for_vocab`, restricts the softmax
    (train.loss=candidates).

    Returns (mean loss of the global batch, gradient norm before clipping, stepped). A non-finite loss or
    gradient norm does not step: the gradients are dropped, stepped is False, the weights are untouched."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    precision = resolve_precision(config.precision, device)
    local_loss = 0.0
    for index, batch in enumerate(batches):
        is_last = index == len(batches) - 1
        no_sync = getattr(model, "no_sync", None)  # DDP: all-reduce the gradients once, after the last batch
        with no_sync() if no_sync is not None and not is_last else contextlib.nullcontext():
            batch = batch.to(device)
            with autocast_for(device, precision):
                summed, _ = model_loss_sum(model, batch, config.label_smoothing, candidates)
            (summed / (total_tokens / world_size)).backward()
        local_loss += (summed.detach() / total_tokens).item()
    loss = distributed.sum_over_processes([local_loss], device)[0]
    max_norm = config.grad_clip if config.grad_clip > 0 else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        return loss, grad_norm, False
    optimizer.step()
    scheduler.step()
    return loss, grad_norm, True


@torch.no_grad()
def evaluate(model, valid_encoded, valid_examples, converter: Converter, config: Config, device,
             candidates: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """Teacher-forced validation loss on the whole valid split (the training loss without smoothing), and
    constrained-greedy character accuracy on its first ``eval_sentences`` examples (a fixed sample, so
    numbers are comparable across steps). On CUDA in the training's precision; on a CPU in fp32, as
    translate.py runs there, so that fp32 and bf16 runs are measured alike."""
    model.eval()
    precision = resolve_precision(config.train.precision, device) if device.type == "cuda" else "fp32"
    total_loss, total_tokens = 0.0, 0
    for begin in range(0, len(valid_encoded), 256):
        batch = collate(valid_encoded[begin : begin + 256]).to(device)
        with autocast_for(device, precision):
            loss, n_tokens = model_loss(model, batch, 0.0, candidates)
        total_loss, total_tokens = total_loss + float(loss) * n_tokens, total_tokens + n_tokens
    sample = valid_examples[: config.train.eval_sentences]
    with autocast_for(device, precision):
        hypotheses = converter.convert_tokens([e.tokens for e in sample], batch_size=config.decode.batch_sentences,
                                              constrained=config.decode.constrained)
    scores = conversion_scores(hypotheses, [e.hanzi for e in sample])
    samples = [f"{' '.join(e.tokens)}  →  {h}  (reference {e.hanzi})" for e, h in zip(sample[:5], hypotheses)]
    return {"loss": total_loss / max(total_tokens, 1), **scores, "samples": samples}


def log_pictures(writer, model, examples, pinyin_vocab, hanzi_vocab, step: int) -> None:
    """TensorBoard pictures at an evaluation: cross-attention of a few fixed validation sentences (watch the
    alignment emerge) and a histogram of the weights of each layer."""
    for index, example in enumerate(examples):
        figure, _ = visualize.sentence_attention(model, pinyin_vocab.encode(example.tokens),
                                                 hanzi_vocab.encode(example.hanzi), example.tokens, example.hanzi)
        writer.add_figure(f"attention/cross_{index}", figure, step)
    for prefix, stack in (("encoder", model.encoder_layers), ("decoder", model.decoder_layers)):
        for index, layer in enumerate(stack):
            weights = torch.cat([p.detach().flatten().float().cpu() for p in layer.parameters() if p.dim() >= 2])
            try:
                writer.add_histogram(f"weights/{prefix}_layer_{index + 1}", weights, step)
            except ValueError:  # TensorBoard cannot bin some degenerate tensors (all equal and huge): a picture
                continue  # less is no reason to stop training


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]) + [random.getstate()[2]]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    python = state["python"]
    random.setstate((3, tuple(python[:-1]), python[-1]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _check_same(config: Config, saved: dict, section: str, path: Path) -> None:
    for key, value in getattr(config, section).__dict__.items():
        if section == "data" and key in ("prepared_dir", "raw_dir"):
            continue
        if saved[section].get(key) != value:
            raise CheckpointError(f"cannot resume from {path}: {section}.{key} is {value!r} now but "
                                  f"{saved[section].get(key)!r} in the checkpoint")


def count_parameters(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def _truncate_log(path: Path, last_step: int) -> None:
    """Keep the records of a JSONL log up to ``last_step``: a resumed run repeats the steps after its
    checkpoint, and a killed run may have left a half-written last line."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] <= last_step:
                kept.append(line + "\n")
        except (ValueError, KeyError, TypeError):
            continue
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text("".join(kept), encoding="utf-8")
    temporary.replace(path)


def train(config: Config, *, resume: bool = False, init_from: str | None = None, overwrite: bool = False,
          log=print) -> Path:
    """Train as configured; returns the path of the best checkpoint.

    resume: continue ``checkpoints/<name>/last.pt`` exactly (weights, optimizer, scheduler, data position,
    RNG); init_from: start a new run from another checkpoint's weights (its vocabularies are kept).
    Launched by torchrun, each process trains on its share of every global batch (see distributed.py).

    Raises TrainingError if a new run would replace an existing run's checkpoints (unless ``overwrite``) or
    the loss or gradient is not finite for ``train.max_bad_steps`` batches in a row; CheckpointError,
    ConfigError, DataError for unusable checkpoints, settings or data."""
    process = distributed.from_environment()
    t = config.train
    if t.grad_accum_steps % process.world_size:
        raise ConfigError(f"train.grad_accum_steps={t.grad_accum_steps} must be a multiple of the number of "
                          f"processes ({process.world_size}): it counts the batches of one optimizer step over all")
    try:
        return _train(config, process, resume=resume, init_from=init_from, overwrite=overwrite,
                      log=log if process.is_main else lambda message: None)
    finally:
        distributed.stop()


def _train(config: Config, process: distributed.Process, *, resume: bool, init_from: str | None, overwrite: bool,
           log) -> Path:
    t = config.train
    random.seed(t.seed)
    torch.manual_seed(t.seed)  # the same on every process: rank 0's saved RNG state then resumes them all
    if t.threads:
        torch.set_num_threads(t.threads)
    device = distributed.start(process, select_device(t.device))
    checkpoint_dir, run_dir = Path(t.checkpoint_dir) / t.name, Path(t.runs_dir) / t.name
    last_path, best_path = checkpoint_dir / "last.pt", checkpoint_dir / "best.pt"
    if not resume and not overwrite and (last_path.exists() or best_path.exists()):
        raise TrainingError(f"{checkpoint_dir} already holds a run named {t.name!r}: continue it with --resume, "
                            f"name a new one with train.name=..., or replace it with --overwrite")
    if resume and not last_path.is_file():  # before the data: say it at once
        raise CheckpointError(f"checkpoint not found: {last_path} (nothing to resume: start without --resume)")

    if not process.is_main:
        distributed.barrier()  # rank 0 prepares the data; the others then find it ready
    data_dir = prepare(config.data)
    if process.is_main:
        distributed.barrier()
    train_examples = read_examples(data_dir / "train.tsv", trusted=True)
    valid_examples = read_examples(data_dir / "valid.tsv", trusted=True)

    saved = None
    if resume:
        saved = load_checkpoint(last_path)
        for section in ("data", "model"):
            _check_same(config, saved["config"], section, last_path)
        model, pinyin_vocab, hanzi_vocab, _ = model_from_checkpoint(saved, str(last_path))
    elif init_from:
        source = load_checkpoint(init_from)
        model, pinyin_vocab, hanzi_vocab, _ = model_from_checkpoint(source, init_from)
        _check_same(config, source["config"], "model", Path(init_from))
    else:
        pinyin_vocab, hanzi_vocab = load_vocab(data_dir / "pinyin_vocab.txt"), load_vocab(data_dir / "hanzi_vocab.txt")
        model = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    model.to(device)

    syllable_lm = SyllableBigrams.count(example.tokens for example in train_examples)  # for decoding
    char_lm_state = {}  # the checkpoint's "char_lm" entry, computed once
    if config.decode.lm_weight > 0:  # a character n-gram model for decoding, counted in seconds (char_lm.py)
        started_counting = time.time()
        dec = config.decode
        phrases = phrase_texts(config.data.raw_dir) if dec.lm_phrases > 0 else []
        char_lm = count_for(train_examples, hanzi_vocab, dec.lm_order, dec.lm_min_count, phrases, dec.lm_phrases)
        with_phrases = (f", with the phrase table x {dec.lm_phrases}: {len(phrases):,} entries, "
                        f"those with characters outside the vocabulary left out" if phrases else "")
        log(f"character {dec.lm_order}-gram model: {char_lm.size():,} n-grams counted in "
            f"{time.time() - started_counting:.1f} s (decode.lm_weight={dec.lm_weight}{with_phrases})")
        char_lm_state = {"char_lm": char_lm.state_dict()}
    train_encoded = encode_examples(train_examples, pinyin_vocab, hanzi_vocab)
    valid_encoded = encode_examples(valid_examples, pinyin_vocab, hanzi_vocab)
    stream = BatchStream(train_encoded, t.batch_tokens, t.seed)  # the same stream on every process
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": t.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=t.lr, betas=(t.beta1, t.beta2))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_at(step, t) / t.lr)
    step, best_accuracy = 0, -1.0
    if saved is not None:
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        stream.load_state_dict(saved["batches"])
        step, best_accuracy = int(saved["step"]), float(saved["best_accuracy"])
        set_rng_state(saved["rng"])
        log(f"resumed {last_path} at step {step}")
    if step >= t.max_steps:
        log(f"nothing to do: step {step} >= train.max_steps={t.max_steps}")
        return best_path
    last_saved_step = step if saved is not None else None

    # Rank 0 alone writes logs and checkpoints; the other processes only train.
    writer, train_log = None, None
    if process.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if resume:  # the steps after the checkpoint are trained again: their records go
            _truncate_log(run_dir / "train_log.jsonl", step)
            _truncate_log(run_dir / "eval_log.jsonl", step)
        else:  # a new run starts new curves
            (run_dir / "train_log.jsonl").unlink(missing_ok=True)
            (run_dir / "eval_log.jsonl").unlink(missing_ok=True)
        save_config(config, run_dir / "config.yaml")
        writer = SummaryWriter(str(run_dir), purge_step=step + 1 if resume else None)
        train_log = open(run_dir / "train_log.jsonl", "a", encoding="utf-8")  # noqa: SIM115 (closed below)
    trained_model = model
    if process.world_size > 1:
        trained_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    compiled = torch.compile(trained_model) if t.compile else trained_model
    converter = Converter(model, pinyin_vocab, hanzi_vocab, device)
    candidates = None
    if t.loss == "candidates":
        candidates = tuple(part.to(device) for part in Lexicon(hanzi_vocab).for_vocab(pinyin_vocab))
    log(f"device {device}, {torch.get_num_threads()} threads, {resolve_precision(t.precision, device)} | "
        f"{count_parameters(model) / 1e6:.2f}M parameters | "
        f"vocab {len(pinyin_vocab)} pinyin, {len(hanzi_vocab)} hanzi | "
        f"{len(train_examples)} train, {len(valid_examples)} valid examples")
    if process.world_size > 1:
        log(f"{process.world_size} processes, {t.grad_accum_steps // process.world_size} batch(es) each per step: "
            f"global batch {t.grad_accum_steps} x {t.batch_tokens} tokens")
    mean_length = sum(len(e.hanzi) for e in train_examples) / max(len(train_examples), 1)
    log(visualize.model_summary(model, t.batch_tokens, mean_length))
    if step == 0 and writer is not None:  # once per run: the positional-encoding matrix the embeddings add
        writer.add_figure("model/positional_encoding", visualize.positional_encoding_figure(
            config.model.d_model, min(config.model.max_positions, 2 * config.data.max_len)), 0)

    def checkpoint_state(accuracy: float) -> dict:
        return {"config": config.to_dict(), "pinyin_vocab": pinyin_vocab.tokens, "hanzi_vocab": hanzi_vocab.tokens,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "step": step, "best_accuracy": best_accuracy,
                "valid_char_accuracy": accuracy, "batches": stream.state_dict(), "rng": rng_state(),
                "syllable_lm": syllable_lm.state_dict(), **char_lm_state}

    def last_good() -> str:
        if last_saved_step is None:
            return "no checkpoint was written yet"
        return f"the last good checkpoint is {last_path} (step {last_saved_step})"

    def evaluate_and_save() -> None:
        nonlocal best_accuracy, last_saved_step
        result = evaluate(model, valid_encoded, valid_examples, converter, config, device, candidates)
        if not (math.isfinite(result["loss"]) and all(torch.isfinite(p).all() for p in model.parameters())):
            # Finite weights give a finite loss; these weights are broken and must not replace a checkpoint.
            raise TrainingError(f"stopped at step {step}: the weights or the validation loss ({result['loss']}) "
                                f"are no longer finite; {last_good()}; lower train.lr")
        writer.add_scalar("valid/loss", result["loss"], step)
        writer.add_scalar("valid/char_accuracy", result["char_accuracy"], step)
        writer.add_text("valid/samples", "\n\n".join(result["samples"]), step)
        log_pictures(writer, model, valid_examples[: t.attention_sentences], pinyin_vocab, hanzi_vocab, step)
        elapsed = time.time() - started + elapsed_before
        with open(run_dir / "eval_log.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": step, "minutes": round(elapsed / 60, 2), "valid_loss": round(result["loss"], 4),
                                     "valid_char_accuracy": round(result["char_accuracy"], 4)}) + "\n")
        improved = result["char_accuracy"] > best_accuracy
        best_accuracy = max(best_accuracy, result["char_accuracy"])
        state = checkpoint_state(result["char_accuracy"])
        state["elapsed_seconds"] = elapsed
        save_checkpoint(last_path, state)
        last_saved_step = step
        if improved:
            save_checkpoint(best_path, state)
        progress.write(f"step {step}: valid loss {result['loss']:.3f}, char accuracy {result['char_accuracy']:.2%}"
                       f"{' (best)' if improved else ''}, {elapsed / 60:.1f} min | {result['samples'][0]}")

    elapsed_before = float(saved.get("elapsed_seconds", 0.0)) if saved is not None else 0.0
    started = time.time()
    window_tokens, window_start = 0, time.time()
    progress = tqdm(total=t.max_steps, initial=step, desc=t.name, unit="step", dynamic_ncols=True,
                    file=sys.stderr, mininterval=1.0, disable=not process.is_main)
    bad_in_a_row = 0
    try:
        while step < t.max_steps:
            # The global batch: the next grad_accum_steps batches of the stream every process walks in step;
            # process r takes batches r, r + N, r + 2N, ... of them.
            global_batch = [stream.next_indices() for _ in range(t.grad_accum_steps)]
            total_tokens = sum(stream.n_target_tokens(indices) for indices in global_batch)
            mine = [stream.batch(indices) for indices in global_batch[process.rank :: process.world_size]]
            lr = optimizer.param_groups[0]["lr"]
            loss, grad_norm, stepped = train_step(compiled, mine, total_tokens, optimizer, scheduler, t, device,
                                                  candidates, process.world_size)
            if not stepped:  # every process sees the same summed loss and gradient norm: all skip together
                bad_in_a_row += 1
                log(f"warning: skipped a batch at step {step + 1}: loss {loss}, gradient norm {grad_norm} "
                    f"({bad_in_a_row} in a row, train.max_bad_steps={t.max_bad_steps})")
                if bad_in_a_row >= t.max_bad_steps:
                    raise TrainingError(f"stopped at step {step}: loss or gradient not finite for {bad_in_a_row} "
                                        f"batches in a row; {last_good()}; lower train.lr or check the data")
                continue
            bad_in_a_row = 0
            step += 1
            window_tokens += total_tokens
            progress.update(1)
            if train_log is not None:
                train_log.write(json.dumps({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                                            "tokens": total_tokens}) + "\n")
                train_log.flush()  # a killed run keeps its record up to the step it reached
            if step % t.log_every == 0 and writer is not None:
                tokens_per_second = window_tokens / max(time.time() - window_start, 1e-9)
                window_tokens, window_start = 0, time.time()
                writer.add_scalar("train/loss", loss, step)
                writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
                writer.add_scalar("train/grad_norm", grad_norm, step)
                writer.add_scalar("train/tokens_per_second", tokens_per_second, step)
                progress.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_second:,.0f}", refresh=False)
            out_of_time = t.max_minutes > 0 and time.time() - started >= t.max_minutes * 60
            if t.max_minutes > 0 and process.world_size > 1:  # clocks differ: stop when any process is out
                out_of_time = distributed.sum_over_processes([float(out_of_time)], device)[0] > 0
            if step % t.eval_every == 0 or step == t.max_steps or out_of_time:
                if process.is_main:
                    evaluate_and_save()
                distributed.barrier()  # the others wait for the evaluation and the checkpoint
                window_tokens, window_start = 0, time.time()  # tokens/s measures training alone
            if out_of_time:
                progress.write(f"stopping: train.max_minutes={t.max_minutes} reached at step {step}")
                break
    except KeyboardInterrupt:
        progress.write(f"interrupted at step {step}; the last checkpoint is {last_path}")
        raise
    finally:
        progress.close()
        if writer is not None:
            writer.close()
            train_log.close()
    log(f"best valid char accuracy {best_accuracy:.2%}; checkpoints in {checkpoint_dir}")
    return best_path
