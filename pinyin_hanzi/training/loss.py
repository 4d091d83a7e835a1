"""The training objective: label-smoothed cross-entropy per target token, over all characters or over each
syllable's candidates only (train.loss). Training steps on it and validation measures it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pinyin_hanzi.data.vocab import PAD_ID


def loss_sum(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float,
             allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """Label-smoothed cross-entropy summed over real target tokens.
    logits (b, t, v), target (b, t) -> (scalar summed loss, number of target tokens).

    With ``allowed`` (b, t, c) bool, ``logits`` (b, t, c) are those of :func:`candidate_columns` — the
    reference in column 0, then the other characters of the position's syllable — and the softmax runs over
    the allowed columns only; label smoothing spreads its mass over them instead of the whole vocabulary."""
    return summed_loss(logits, target, label_smoothing, allowed), int((target != PAD_ID).sum())


def summed_loss(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float,
                allowed: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`loss_sum`'s loss alone: counting the tokens would wait for the device (a host synchronisation)
    and break a compiled graph in two, and a training step does not need the count."""
    if allowed is None:
        return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=PAD_ID,
                               label_smoothing=label_smoothing, reduction="sum")
    log_probs = logits.float().masked_fill(~allowed, float("-inf")).log_softmax(dim=-1)  # (b, t, c)
    nll = -log_probs[..., 0]  # (b, t)
    smooth = -log_probs.masked_fill(~allowed, 0.0).sum(dim=-1) / allowed.sum(dim=-1).clamp(min=1)  # (b, t)
    return ((1.0 - label_smoothing) * nll + label_smoothing * smooth).masked_fill(target == PAD_ID, 0.0).sum()


def loss_fn(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float,
            allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """:func:`loss_sum` divided by the number of target tokens: (mean loss per token, number of tokens)."""
    loss, n_tokens = loss_sum(logits, target, label_smoothing, allowed)
    return loss / max(n_tokens, 1), n_tokens


def candidate_columns(source: torch.Tensor, target: torch.Tensor, candidates: tuple[torch.Tensor, torch.Tensor],
                      *, whole_lists: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The characters the candidate loss softmaxes over: hanzi ids (b, t, 1 + c), the reference first and
    then the position's candidate list (<pad> after it), and (b, t, 1 + c) bool, True at the entries that
    count: the reference, and the list's other characters (the reference's own entry in the list is left
    out of the softmax, so each character counts once). c is the batch's longest list, not the vocabulary's:
    a prefix token's list is long, and a batch without one need not carry it. ``candidates`` (ids, real),
    each (pinyin vocab, c), from :meth:`Lexicon.for_vocab`.

    ``whole_lists``: c is the table's width instead, the same for every batch. Finding the batch's longest
    list reads a number back from the device, which on a GPU stalls the queue of kernels every step; the
    wider softmax costs a GPU less than that wait (docs/benchmarks.md, "Compiled training")."""
    ids, real = candidates
    if whole_lists:
        width = ids.shape[1]
    else:
        width = int(real.sum(dim=-1)[source].max()) if source.numel() else 0
    ids, real = ids[:, :width][source], real[:, :width][source]  # (b, t, c)
    counted = real & (ids != target[..., None])
    return (torch.cat([target[..., None], ids], dim=-1),
            torch.cat([(target != PAD_ID)[..., None], counted], dim=-1))


def model_loss_sum(model, batch, label_smoothing: float, candidates=None, teacher=None) -> tuple[torch.Tensor, int]:
    """Teacher-forced loss of ``batch`` summed over its target tokens, and their number: softmax over all
    characters, or with ``candidates`` (see :func:`candidate_columns`) over each syllable's characters,
    computing only their logits. The one place that chooses between the two. With a ``teacher``
    (distillation.Teacher, train.distill_from), its share of the loss follows the teacher's distribution."""
    columns = allowed = None
    if candidates is not None:
        columns, allowed = candidate_columns(batch.source, batch.target, candidates)
    loss = columns_loss_sum(model, batch.source, batch.target, columns, allowed, label_smoothing, teacher)
    return loss, int((batch.target != PAD_ID).sum())


def columns_loss_sum(model, source: torch.Tensor, target: torch.Tensor, columns: torch.Tensor | None,
                     allowed: torch.Tensor | None, label_smoothing: float, teacher=None, padded: bool = True
                     ) -> torch.Tensor:
    """:func:`model_loss_sum`'s loss (the token count aside) over candidate ``columns`` and ``allowed``
    already gathered (None: all characters): the part a training step compiles (training/speed.py).
    ``padded=False``: no row of ``source`` is padded, and the model attends without a mask."""
    logits = model(source, target, columns, padded)
    loss = summed_loss(logits, target, label_smoothing, allowed)
    if teacher is None:
        return loss
    taught = teacher.loss_sum(source, target, logits, columns, allowed)
    return (1.0 - teacher.weight) * loss + teacher.weight * taught


def model_loss(model, batch, label_smoothing: float, candidates=None) -> tuple[torch.Tensor, int]:
    """:func:`model_loss_sum` divided by the number of target tokens: (mean loss per token, tokens)."""
    loss, n_tokens = model_loss_sum(model, batch, label_smoothing, candidates)
    return loss / max(n_tokens, 1), n_tokens
