"""Knowledge distillation (train.distill_from): a trained model teaches the one being trained.

At each target position the teacher's distribution over the characters the loss softmaxes over (each
syllable's candidates with train.loss=candidates, every character with full) carries more than the
reference alone: which wrong characters are near misses. The student's loss becomes

    (1 - w) * cross-entropy(reference) + w * T^2 * KL(p_teacher || p_student)

with both distributions softened by the temperature T (logits / T) and w = train.distill_weight (Hinton,
Vinyals and Dean 2015; for sequence models, word-level distillation in Kim and Rush 2016). The use here: a
network with a shallower decoder, which decodes faster, taught by the shipped model. Teacher and student
may have different vocabularies (the shipped model's grew over its training stages): tokens are matched by
name, and a character the teacher lacks is left out of the divergence. Validation measures the
cross-entropy alone, comparable with any other run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from pinyin_hanzi import checkpoint
from pinyin_hanzi.data.vocab import PAD_ID, UNK_ID, Vocab
from pinyin_hanzi.models.transformer import Transformer

# Softmax inputs of the characters left out: not -inf, so that a position with none left stays finite (it is
# then left out of the sum) and no gradient of 0 x inf appears.
_LEFT_OUT = -1e9


@dataclass(frozen=True)
class Teacher:
    model: Transformer  # frozen, in eval mode, on the training device
    pinyin_ids: torch.Tensor  # (student pinyin vocab,): the teacher's id of each token, UNK where it has none
    hanzi_ids: torch.Tensor  # (student hanzi vocab,): likewise
    known: torch.Tensor  # (student hanzi vocab,) bool: the teacher has this character
    weight: float
    temperature: float

    def loss_sum(self, source: torch.Tensor, target: torch.Tensor, logits: torch.Tensor,
                 columns: torch.Tensor | None, allowed: torch.Tensor | None) -> torch.Tensor:
        """The divergence term summed over real target tokens, for the student's teacher-forced ``logits``:
        (b, t, v) over every character (``columns`` None), or (b, t, c) over ``columns`` with the softmax
        over ``allowed`` (see loss.candidate_columns)."""
        with torch.no_grad():
            source, teacher_target = self.pinyin_ids[source], self.hanzi_ids[target]
            if columns is None:
                taught = self.model(source, teacher_target)[..., self.hanzi_ids]  # (b, t, v) in the student's ids
                shared = self.known.expand_as(taught)
            else:
                taught = self.model(source, teacher_target, self.hanzi_ids[columns])  # (b, t, c)
                shared = allowed & self.known[columns]
        return distillation_sum(logits, taught, shared, target != PAD_ID, self.temperature)


def distillation_sum(student: torch.Tensor, teacher: torch.Tensor, shared: torch.Tensor, real: torch.Tensor,
                     temperature: float) -> torch.Tensor:
    """T^2 * KL(p_teacher || p_student) summed over the ``real`` positions (b, t), both softmaxes at
    ``temperature`` over the ``shared`` columns (b, t, c) of the logits (b, t, c); a position without a
    shared column counts 0."""
    student_log = (student.float() / temperature).masked_fill(~shared, _LEFT_OUT).log_softmax(dim=-1)
    teacher_log = (teacher.float() / temperature).masked_fill(~shared, _LEFT_OUT).log_softmax(dim=-1)
    divergence = (teacher_log.exp() * (teacher_log - student_log)).masked_fill(~shared, 0.0).sum(dim=-1)  # (b, t)
    counted = real & shared.any(dim=-1)
    return temperature**2 * divergence.masked_fill(~counted, 0.0).sum()


def load_teacher(state: dict, where: str | Path, pinyin_vocab: Vocab, hanzi_vocab: Vocab, weight: float,
                 temperature: float, device: torch.device) -> Teacher:
    """The teacher whose checkpoint ``state`` (:func:`pinyin_hanzi.checkpoint.load_checkpoint`'s, read from
    ``where``) holds, over the student's vocabularies. CheckpointError (one line) as
    :func:`pinyin_hanzi.checkpoint.model_from_checkpoint` raises it."""
    model, teacher_pinyin, teacher_hanzi, _ = checkpoint.model_from_checkpoint(state, str(where))
    model.requires_grad_(False)
    model.eval()

    def ids(tokens: list[str], teacher: Vocab) -> torch.Tensor:
        return torch.tensor([teacher.ids.get(token, UNK_ID) for token in tokens], dtype=torch.long)

    hanzi_ids = ids(hanzi_vocab.tokens, teacher_hanzi)
    known = torch.tensor([token in teacher_hanzi.ids for token in hanzi_vocab.tokens])
    return Teacher(model.to(device), ids(pinyin_vocab.tokens, teacher_pinyin).to(device), hanzi_ids.to(device),
                   known.to(device), weight, temperature)
