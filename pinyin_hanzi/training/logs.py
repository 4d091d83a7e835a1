"""What rank 0 records of a run: TensorBoard scalars, texts and pictures, ``train_log.jsonl`` (every step),
``eval_log.jsonl`` (every evaluation), the resolved config, the progress bar on stderr (plain lines where stderr
is no terminal), and the setup summary printed when training starts."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TextIO

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from pinyin_hanzi import visualize
from pinyin_hanzi.config import save_config
from pinyin_hanzi.progress import bar_on, duration
from pinyin_hanzi.runtime import resolve_precision
from pinyin_hanzi.training.run import Parts, Run


class Logs:
    """Where rank 0 records the run: TensorBoard, ``train_log.jsonl``, ``eval_log.jsonl`` and the progress
    bar; on the other processes the writers are None and the bar is silent."""

    def __init__(self, run: Run, writer: SummaryWriter | None, train_log: TextIO | None):
        self.run, self.writer, self.train_log = run, writer, train_log
        self.progress: tqdm | None = None
        self.first_step = 0  # the step this process's bar started at (a resumed run's checkpoint step)
        self.window_tokens, self.window_start = 0, time.time()  # tokens/s since the last log_every step

    def start_progress(self) -> None:
        """The bar on stderr, on rank 0, and only when stderr is a terminal: in a log file its redraws would
        bury the messages, and a plain line every train.log_every steps stands in for it (:meth:`record_step`)."""
        t = self.run.config.train
        self.first_step = self.run.step
        self.progress = tqdm(total=t.max_steps, initial=self.run.step, desc=t.name, unit="step", dynamic_ncols=True,
                             file=sys.stderr, mininterval=1.0,
                             disable=not (self.run.process.is_main and bar_on(sys.stderr)))

    def last_step(self) -> int:
        """The step the run will stop at: train.max_steps, or with train.max_minutes the step that the time cap
        reaches first at the pace so far (evaluations included)."""
        t, run = self.run.config.train, self.run
        spent, done = time.time() - run.started, run.step - self.first_step
        if t.max_minutes <= 0 or done < 1 or spent <= 0:
            return t.max_steps
        reachable = run.step + int(done / spent * max(t.max_minutes * 60 - spent, 0.0))
        return min(t.max_steps, max(reachable, run.step))

    def aim_at_the_last_step(self) -> None:
        """The bar's total is :meth:`last_step`, so that the bar's ETA is the time left, not that of steps the
        run will never take."""
        t = self.run.config.train
        if t.max_minutes <= 0 or self.progress.disable:
            return
        last_step = self.last_step()
        if last_step != self.progress.total:
            self.progress.total = last_step
            capped = f"{t.name} (stops at max_minutes={t.max_minutes:g})" if last_step < t.max_steps else t.name
            self.progress.set_description(capped, refresh=False)

    def progress_line(self, loss: float, tokens_per_second: float) -> str:
        """What the bar shows, as a line for a log file: step, loss, tokens/s, time trained, time left (at the
        pace of this process's steps so far, evaluations included)."""
        t, run = self.run.config.train, self.run
        last_step, done = self.last_step(), run.step - self.first_step
        left = (last_step - run.step) * (time.time() - run.started) / done if done > 0 else float("nan")
        capped = f" (stops at max_minutes={t.max_minutes:g})" if last_step < t.max_steps else ""
        return (f"step {run.step:,}/{last_step:,}{capped}: loss {loss:.3f}, {tokens_per_second:,.0f} tokens/s, "
                f"{duration(run.elapsed())} elapsed, {duration(left)} left")

    def say(self, message: str) -> None:
        """A message for the user (run.log: stderr, like every message; stdout holds only the result), printed
        above the progress bar rather than through it."""
        with tqdm.external_write_mode(file=sys.stderr):
            self.run.log(message)

    def restart_window(self) -> None:
        """Tokens/s measure training alone: the clock restarts after an evaluation."""
        self.window_tokens, self.window_start = 0, time.time()

    def record_step(self, loss: float, lr: float, grad_norm: float, tokens: int, scheduler) -> None:
        """A step's record: every step in train_log.jsonl, every log_every steps in TensorBoard and, off a
        terminal, as a plain line (:meth:`progress_line`)."""
        step = self.run.step
        self.window_tokens += tokens
        self.aim_at_the_last_step()
        self.progress.update(1)
        if self.train_log is not None:
            self.train_log.write(json.dumps({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                                             "tokens": tokens}) + "\n")
            self.train_log.flush()  # a killed run keeps its record up to the step it reached
        if step % self.run.config.train.log_every == 0 and self.writer is not None:
            tokens_per_second = self.window_tokens / max(time.time() - self.window_start, 1e-9)
            self.restart_window()
            self.writer.add_scalar("train/loss", loss, step)
            self.writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
            self.writer.add_scalar("train/grad_norm", grad_norm, step)
            self.writer.add_scalar("train/tokens_per_second", tokens_per_second, step)
            self.progress.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_second:,.0f}", refresh=False)
            if self.progress.disable:  # stderr is no terminal (nohup, a scheduler's log, CI): a line in its place
                self.say(self.progress_line(loss, tokens_per_second))

    def record_evaluation(self, result: dict, parts: Parts) -> None:
        """An evaluation's scalars, samples and pictures in TensorBoard (rank 0 only evaluates)."""
        step, writer = self.run.step, self.writer
        writer.add_scalar("valid/loss", result["loss"], step)
        writer.add_scalar("valid/char_accuracy", result["char_accuracy"], step)
        writer.add_text("valid/samples", "\n\n".join(result["samples"]), step)
        log_pictures(writer, parts.model, parts.valid_sample[: self.run.config.train.attention_sentences],
                     parts.pinyin_vocab, parts.hanzi_vocab, step)

    def append_evaluation_record(self, result: dict, elapsed: float) -> None:
        with open(self.run.run_dir / "eval_log.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": self.run.step, "minutes": round(elapsed / 60, 2),
                                     "valid_loss": round(result["loss"], 4),
                                     "valid_char_accuracy": round(result["char_accuracy"], 4)}) + "\n")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        if self.writer is not None:
            self.writer.close()
            self.train_log.close()


def setup_logging(run: Run, resume: bool) -> Logs:
    """Rank 0's run folder: the logs a resumed run repeats are cut back to its checkpoint's step, a new run
    starts new ones (TensorBoard's event files included, or old and new curves would merge); the resolved
    config is written next to them."""
    if not run.process.is_main:
        return Logs(run, None, None)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train_log.jsonl", "eval_log.jsonl"):
        if resume:  # the steps after the checkpoint are trained again: their records go
            _truncate_log(run.run_dir / name, run.step)
        else:  # a new run starts new curves
            (run.run_dir / name).unlink(missing_ok=True)
    if not resume:
        for events in run.run_dir.glob("events.out.tfevents.*"):
            events.unlink()
    save_config(run.config, run.run_dir / "config.yaml")
    writer = SummaryWriter(str(run.run_dir), purge_step=run.step + 1 if resume else None)
    train_log = open(run.run_dir / "train_log.jsonl", "a", encoding="utf-8")  # noqa: SIM115 (Logs.close)
    return Logs(run, writer, train_log)


def log_setup(run: Run, parts: Parts, logs: Logs) -> None:
    """What this run trains, on what, where: for the user, and the positional encoding for TensorBoard."""
    config, model, t = run.config, parts.model, run.config.train
    run.log(f"device {run.device}, {torch.get_num_threads()} threads, {resolve_precision(t.precision, run.device)} | "
            f"{count_parameters(model) / 1e6:.2f}M parameters | "
            f"vocab {len(parts.pinyin_vocab)} pinyin, {len(parts.hanzi_vocab)} hanzi | "
            f"{len(parts.stream.split)} train, {len(parts.valid)} valid examples")
    if run.process.world_size > 1:
        run.log(f"{run.process.world_size} processes, {t.grad_accum_steps // run.process.world_size} batch(es) "
                f"each per step: global batch {t.grad_accum_steps} x {t.batch_tokens} tokens")
    mean_length = parts.stream.mean_length()
    run.log(visualize.model_summary(model, t.batch_tokens, mean_length))
    if run.step == 0 and logs.writer is not None:  # once per run: the positional-encoding matrix the embeddings add
        logs.writer.add_image("model/positional_encoding", visualize.positional_encoding_pixels(
            config.model.d_model, min(config.model.max_positions, 2 * config.data.max_len)), 0, dataformats="HWC")


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
