"""The training loop: plain functions, no framework.

    prepare data -> vocabularies from train -> model -> AdamW with warm-up + cosine decay
    -> for each token-budget batch: train_step (label-smoothed cross-entropy per target token, clipped)
    -> every eval_every steps: evaluate (valid loss, constrained-greedy character accuracy, samples),
       save last.pt (and best.pt when the accuracy improves)

TensorBoard logs go to ``runs/<name>/``, checkpoints to ``checkpoints/<name>/``.
"""

from __future__ import annotations

import contextlib
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

from pinyin_hanzi import visualize
from pinyin_hanzi.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from pinyin_hanzi.config import Config, TrainConfig, save_config
from pinyin_hanzi.corpus import prepare, read_examples
from pinyin_hanzi.data import BatchStream, collate, encode_examples
from pinyin_hanzi.decoding import Converter
from pinyin_hanzi.errors import CheckpointError, ConfigError, TrainingError
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


def autocast_for(device: torch.device):
    """bf16 autocast on CUDA; full precision elsewhere (bf16 was slower on CPU in our trials)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def lr_at(step: int, config: TrainConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio`` at
    ``max_steps``. ``step`` counts optimizer steps from 0."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def loss_fn(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float,
            allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """Label-smoothed cross-entropy summed over real target tokens, divided by their number.
    logits (b, t, v), target (b, t) -> (scalar loss, number of target tokens).

    With ``allowed`` (b, t, c) bool, ``logits`` (b, t, c) are those of :func:`candidate_columns` — the
    reference in column 0, then the other characters of the position's syllable — and the softmax runs over
    the allowed columns only; label smoothing spreads its mass over them instead of the whole vocabulary."""
    real = target != PAD_ID
    n_tokens = int(real.sum())
    if allowed is None:
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=PAD_ID,
                               label_smoothing=label_smoothing, reduction="sum")
        return loss / max(n_tokens, 1), n_tokens
    log_probs = logits.float().masked_fill(~allowed, float("-inf")).log_softmax(dim=-1)  # (b, t, c)
    nll = -log_probs[..., 0]  # (b, t)
    smooth = -log_probs.masked_fill(~allowed, 0.0).sum(dim=-1) / allowed.sum(dim=-1).clamp(min=1)  # (b, t)
    loss = ((1.0 - label_smoothing) * nll + label_smoothing * smooth).masked_fill(~real, 0.0).sum()
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


def model_loss(model, batch, label_smoothing: float, candidates=None) -> tuple[torch.Tensor, int]:
    """Teacher-forced loss of ``batch``: softmax over all characters, or with ``candidates`` (see
    :func:`candidate_columns`) over each syllable's characters, computing only their logits."""
    if candidates is None:
        return loss_fn(model(batch.source, batch.target), batch.target, label_smoothing)
    columns, allowed = candidate_columns(batch.source, batch.target, candidates)
    return loss_fn(model(batch.source, batch.target, columns), batch.target, label_smoothing, allowed)


def train_step(model, batch, optimizer, scheduler, config: TrainConfig, device,
               candidates: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[float, float, int]:
    """One optimizer step on one batch; returns (loss, gradient norm before clipping, target tokens).
    ``candidates`` (ids, real), each (pinyin vocab, c), from :meth:`CandidateTable.for_vocab`, restricts
    the softmax (train.loss=candidates)."""
    model.train()
    batch = batch.to(device)
    with autocast_for(device):
        loss, n_tokens = model_loss(model, batch, config.label_smoothing, candidates)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    max_norm = config.grad_clip if config.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), float(grad_norm), n_tokens


@torch.no_grad()
def evaluate(model, valid_encoded, valid_examples, converter: Converter, config: Config, device,
             candidates: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """Teacher-forced validation loss on the whole valid split (the training loss without smoothing), and
    constrained-greedy character accuracy on its first ``eval_sentences`` examples (a fixed sample, so
    numbers are comparable across steps)."""
    model.eval()
    total_loss, total_tokens = 0.0, 0
    for begin in range(0, len(valid_encoded), 256):
        batch = collate(valid_encoded[begin : begin + 256]).to(device)
        with autocast_for(device):
            loss, n_tokens = model_loss(model, batch, 0.0, candidates)
        total_loss, total_tokens = total_loss + float(loss) * n_tokens, total_tokens + n_tokens
    sample = valid_examples[: config.train.eval_sentences]
    with autocast_for(device):
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
            writer.add_histogram(f"weights/{prefix}_layer_{index + 1}", weights, step)


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


def train(config: Config, *, resume: bool = False, init_from: str | None = None, overwrite: bool = False,
          log=print) -> Path:
    """Train as configured; returns the path of the best checkpoint.

    resume: continue ``checkpoints/<name>/last.pt`` exactly (weights, optimizer, scheduler, data position,
    RNG); init_from: start a new run from another checkpoint's weights (its vocabularies are kept).
    A new run never replaces an existing run's checkpoints unless ``overwrite`` (TrainingError)."""
    t = config.train
    random.seed(t.seed)
    torch.manual_seed(t.seed)
    if t.threads:
        torch.set_num_threads(t.threads)
    device = select_device(t.device)
    checkpoint_dir, run_dir = Path(t.checkpoint_dir) / t.name, Path(t.runs_dir) / t.name
    last_path, best_path = checkpoint_dir / "last.pt", checkpoint_dir / "best.pt"
    if not resume and not overwrite and (last_path.exists() or best_path.exists()):
        raise TrainingError(f"{checkpoint_dir} already holds a run named {t.name!r}: continue it with --resume, "
                            f"name a new one with train.name=..., or replace it with --overwrite")

    data_dir = prepare(config.data)
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
    train_encoded = encode_examples(train_examples, pinyin_vocab, hanzi_vocab)
    valid_encoded = encode_examples(valid_examples, pinyin_vocab, hanzi_vocab)
    stream = BatchStream(train_encoded, t.batch_tokens, t.seed)
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

    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        (run_dir / "eval_log.jsonl").unlink(missing_ok=True)  # a new run starts a new curve
    save_config(config, run_dir / "config.yaml")
    writer = SummaryWriter(str(run_dir))
    compiled = torch.compile(model) if t.compile else model
    converter = Converter(model, pinyin_vocab, hanzi_vocab, device)
    candidates = None
    if t.loss == "candidates":
        candidates = tuple(part.to(device) for part in converter.candidates.for_vocab(pinyin_vocab))
    log(f"device {device}, {torch.get_num_threads()} threads | {count_parameters(model) / 1e6:.2f}M parameters | "
        f"vocab {len(pinyin_vocab)} pinyin, {len(hanzi_vocab)} hanzi | "
        f"{len(train_examples)} train, {len(valid_examples)} valid examples")
    mean_length = sum(len(e.hanzi) for e in train_examples) / max(len(train_examples), 1)
    log(visualize.model_summary(model, t.batch_tokens, mean_length))
    if step == 0:  # once per run: the positional-encoding matrix the embeddings add
        writer.add_figure("model/positional_encoding", visualize.positional_encoding_figure(
            config.model.d_model, min(config.model.max_positions, 2 * config.data.max_len)), 0)

    def checkpoint_state(accuracy: float) -> dict:
        return {"config": config.to_dict(), "pinyin_vocab": pinyin_vocab.tokens, "hanzi_vocab": hanzi_vocab.tokens,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "step": step, "best_accuracy": best_accuracy,
                "valid_char_accuracy": accuracy, "batches": stream.state_dict(), "rng": rng_state(),
                "syllable_lm": syllable_lm.state_dict()}

    def evaluate_and_save() -> None:
        nonlocal best_accuracy
        result = evaluate(model, valid_encoded, valid_examples, converter, config, device, candidates)
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
        if improved:
            save_checkpoint(best_path, state)
        progress.write(f"step {step}: valid loss {result['loss']:.3f}, char accuracy {result['char_accuracy']:.2%}"
                       f"{' (best)' if improved else ''}, {elapsed / 60:.1f} min | {result['samples'][0]}")

    elapsed_before = float(saved.get("elapsed_seconds", 0.0)) if saved is not None else 0.0
    started = time.time()
    window_tokens, window_start = 0, time.time()
    progress = tqdm(total=t.max_steps, initial=step, desc=t.name, unit="step", dynamic_ncols=True,
                    file=sys.stderr, mininterval=1.0)
    batches = iter(stream)
    try:
        while step < t.max_steps:
            loss, grad_norm, n_tokens = train_step(compiled, next(batches), optimizer, scheduler, t, device,
                                                   candidates)
            step += 1
            window_tokens += n_tokens
            progress.update(1)
            if not math.isfinite(loss):
                raise TrainingError(f"loss became {loss} at step {step}; lower train.lr or check the data "
                                    f"(last checkpoint: {last_path})")
            if step % t.log_every == 0:
                tokens_per_second = window_tokens / max(time.time() - window_start, 1e-9)
                window_tokens, window_start = 0, time.time()
                writer.add_scalar("train/loss", loss, step)
                writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
                writer.add_scalar("train/grad_norm", grad_norm, step)
                writer.add_scalar("train/tokens_per_second", tokens_per_second, step)
                progress.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_second:,.0f}", refresh=False)
            out_of_time = t.max_minutes > 0 and time.time() - started >= t.max_minutes * 60
            if step % t.eval_every == 0 or step == t.max_steps or out_of_time:
                evaluate_and_save()
                window_tokens, window_start = 0, time.time()  # tokens/s measures training alone
            if out_of_time:
                progress.write(f"stopping: train.max_minutes={t.max_minutes} reached at step {step}")
                break
    except KeyboardInterrupt:
        progress.write(f"interrupted at step {step}; the last checkpoint is {last_path}")
        raise
    finally:
        progress.close()
        writer.close()
    log(f"best valid char accuracy {best_accuracy:.2%}; checkpoints in {checkpoint_dir}")
    return best_path
