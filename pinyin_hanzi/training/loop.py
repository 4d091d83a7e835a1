"""The training loop: :func:`train_loop` takes optimizer steps (:func:`train_step` on each global batch)
until train.max_steps, train.max_minutes or a stop signal, and every train.eval_every steps validates and
saves (:func:`evaluate_and_save`)."""

from __future__ import annotations

import contextlib
import math
import time

import torch

from pinyin_hanzi.config import TrainConfig
from pinyin_hanzi.data.batches import Batch
from pinyin_hanzi.errors import Interrupted, TrainingError
from pinyin_hanzi.runtime import autocast_for, resolve_precision
from pinyin_hanzi.training import distributed
from pinyin_hanzi.training.checkpointing import save_checkpoint
from pinyin_hanzi.training.logs import Logs
from pinyin_hanzi.training.speed import BatchLoss, global_batch, padded_rows
from pinyin_hanzi.training.run import STOP_SIGNALS, Parts, Run
from pinyin_hanzi.training.validation import validate


def train_loop(run: Run, parts: Parts, logs: Logs) -> None:
    """Step until train.max_steps (or train.max_minutes): evaluate and save every train.eval_every steps
    and at the end. TrainingError after train.max_bad_steps non-finite batches in a row, or when the token
    store cannot be read; errors.Interrupted after a stop signal (Ctrl-C, SIGTERM, SIGUSR1), at the end of the
    step it came in, with last.pt saved (a second Ctrl-C raises it at once)."""
    t = run.config.train
    run.started = time.time()
    run.signals.defer(logs.say)  # from now on a stop signal ends the step first, then saves
    logs.restart_window()
    logs.start_progress()
    bad_in_a_row = 0
    try:
        while run.step < t.max_steps:
            loss, grad_norm, lr, tokens, stepped = _global_step(run, parts)
            if not stepped:  # every process sees the same summed loss and gradient norm: all skip together
                bad_in_a_row += 1
                run.log(f"warning: skipped a batch at step {run.step + 1}: loss {loss}, gradient norm {grad_norm} "
                        f"({bad_in_a_row} in a row, train.max_bad_steps={t.max_bad_steps})")
                if bad_in_a_row >= t.max_bad_steps:
                    raise TrainingError(f"stopped at step {run.step}: loss or gradient not finite for {bad_in_a_row} "
                                        f"batches in a row; {run.last_good()}; lower train.lr or check the data")
                continue
            bad_in_a_row = 0
            run.step += 1
            logs.record_step(loss, lr, grad_norm, tokens, parts.scheduler)
            out_of_time, stop_signal = _stop_requests(run)
            if run.step % t.eval_every == 0 or run.step == t.max_steps or out_of_time:
                if run.process.is_main:
                    evaluate_and_save(run, parts, logs)
                distributed.barrier()  # the others wait for the evaluation and the checkpoint
                logs.restart_window()
            if stop_signal and not out_of_time and run.step < t.max_steps:  # (a finished run just ends)
                _save_and_stop(run, parts, stop_signal)
            if out_of_time:
                logs.say(f"stopping: train.max_minutes={t.max_minutes} reached at step {run.step}")
                break
    finally:
        if parts.prefetch is not None:
            parts.prefetch.close()
        logs.close()


def _global_step(run: Run, parts: Parts) -> tuple[float, float, float, int, bool]:
    """One optimizer step on the next global batch: the next grad_accum_steps batches of the stream every
    process walks in step, of which process r takes batches r, r + N, r + 2N, ... Returns (loss, gradient
    norm, learning rate used, target tokens of the global batch, stepped) (see :func:`train_step`)."""
    t, process = run.config.train, run.process
    try:  # the examples are read from the token store's files at every step
        if parts.prefetch is not None:  # built ahead on a thread (speed.Prefetcher)
            tokens, mine = parts.prefetch.next()
        else:
            tokens, mine = global_batch(parts.stream, t.grad_accum_steps, process.rank, process.world_size)
    except OSError as error:
        raise run.data_unreadable(error) from None
    lr = parts.optimizer.param_groups[0]["lr"]
    loss, grad_norm, stepped = train_step(parts.trained_model, mine, tokens, parts.optimizer, parts.scheduler, t,
                                          run.device, parts.candidates, process.world_size, parts.teacher,
                                          batch_loss=parts.batch_loss)
    return loss, grad_norm, lr, tokens, stepped


def train_step(model, batches: list[Batch], total_tokens: int, optimizer, scheduler, config: TrainConfig, device,
               candidates: tuple[torch.Tensor, torch.Tensor] | None = None, world_size: int = 1, teacher=None, *,
               batch_loss: BatchLoss | None = None) -> tuple[float, float, bool]:
    """One optimizer step on this process's batches of a global batch of ``total_tokens`` target tokens.

    Each batch's summed loss is divided by the global batch's token count, so the accumulated gradient is
    exactly that of the mean loss over the whole global batch, not an average of per-batch averages. Under
    DDP (``world_size`` > 1) gradients are averaged over processes, hence the division by
    ``total_tokens / world_size``; they are synchronised once, on the last batch. ``candidates`` (ids, real),
    each (pinyin vocab, c), from :meth:`Lexicon.for_vocab`, restricts the softmax
    (train.loss=candidates); ``teacher`` (distillation.Teacher) mixes its distribution into the loss.

    ``batch_loss`` (speed.BatchLoss over ``model``, compiled or not) computes each batch's summed loss;
    without one, eagerly, as configured.

    Returns (mean loss of the global batch, gradient norm before clipping, stepped). A non-finite loss or
    gradient norm does not step: the gradients are dropped, stepped is False, the weights are untouched.
    The loss and the norm are read back from the device together, once a step: the only wait for it."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    precision = resolve_precision(config.precision, device)
    if batch_loss is None:
        batch_loss = BatchLoss(model, config.label_smoothing, candidates, teacher, device=device)
    local_loss = torch.zeros((), device=device)
    for index, batch in enumerate(batches):
        is_last = index == len(batches) - 1
        no_sync = getattr(model, "no_sync", None)  # DDP: all-reduce the gradients once, after the last batch
        with no_sync() if no_sync is not None and not is_last else contextlib.nullcontext():
            padded = padded_rows(batch)  # asked before the copy: on the CPU, no read-back
            batch = batch.to(device)
            with autocast_for(device, precision):
                summed = batch_loss(batch, padded)
            (summed / (total_tokens / world_size)).backward()
        local_loss = local_loss + summed.detach().float() / total_tokens
    max_norm = config.grad_clip if config.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # clipped on the device
    loss, grad_norm = torch.stack([local_loss, grad_norm.float()]).tolist()
    loss = distributed.sum_over_processes([loss], device)[0]
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        return loss, grad_norm, False
    optimizer.step()
    scheduler.step()
    return loss, grad_norm, True


def _stop_requests(run: Run) -> tuple[bool, int | None]:
    """(whether train.max_minutes is reached, the stop signal received or None), the same on every process:
    under DDP when any process's clock or signal says so (torchrun passes a signal to each process, but a
    scheduler may reach one alone, or one a step later), so that all stop after the same step."""
    t = run.config.train
    requests = [float(t.max_minutes > 0 and time.time() - run.started >= t.max_minutes * 60)]
    requests += [float(run.signals.received == number) for number in STOP_SIGNALS]
    if run.process.world_size > 1:
        requests = distributed.sum_over_processes(requests, run.device)
    received = [number for number, count in zip(STOP_SIGNALS, requests[1:]) if count > 0]
    return requests[0] > 0, received[0] if received else None


def _save_and_stop(run: Run, parts: Parts, number: int) -> None:
    """A stop signal came: rank 0 saves last.pt at this step (without an evaluation, which could take
    longer than a scheduler waits before it kills), unless this step's checkpoint is written already; then
    every process raises errors.Interrupted (see :func:`pinyin_hanzi.training.recipe.train` for its message)."""
    if run.process.is_main and run.kept_step != run.step:
        save_checkpoint(run, parts, None, run.elapsed(), improved=False)
    distributed.barrier()
    raise Interrupted("", number)


def evaluate_and_save(run: Run, parts: Parts, logs: Logs) -> None:
    """Validate (see :func:`pinyin_hanzi.training.validation.validate`), record the result, and save the checkpoints.
    TrainingError, writing nothing, if the weights or the validation loss are no longer finite."""
    model = parts.model
    result = validate(model, parts.valid, parts.valid_sample, parts.lexicon, run.config, run.device,
                      parts.candidates)
    if not (math.isfinite(result["loss"]) and all(torch.isfinite(p).all() for p in model.parameters())):
        # Finite weights give a finite loss; these weights are broken and must not replace a checkpoint.
        raise TrainingError(f"stopped at step {run.step}: the weights or the validation loss ({result['loss']}) "
                            f"are no longer finite; {run.last_good()}; lower train.lr")
    logs.record_evaluation(result, parts)
    elapsed = run.elapsed()
    logs.append_evaluation_record(result, elapsed)
    improved = result["char_accuracy"] > run.best_accuracy
    run.best_accuracy = max(run.best_accuracy, result["char_accuracy"])
    save_checkpoint(run, parts, result["char_accuracy"], elapsed, improved=improved)
    logs.say(f"step {run.step}: valid loss {result['loss']:.3f}, char accuracy {result['char_accuracy']:.2%}"
                        f"{' (best)' if improved else ''}, {elapsed / 60:.1f} min | {result['samples'][0]}")
