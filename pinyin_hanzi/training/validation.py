"""Validation during training: the teacher-forced loss on the whole valid split, and the greedy conversions
of its first examples, scored.

The conversions come from the search itself (:func:`pinyin_hanzi.decoding.search.beam_search` with the
lexicon's :class:`~pinyin_hanzi.decoding.search.Constraint`), not from the inference ``Converter``: training
sits below the inference API and needs none of its planning, fusion or typed-input reading, only the model's
own greedy choice for corpus tokens. The outputs are those ``Converter.convert_tokens`` gives for the same
tokens (a test holds the two together).
"""

from __future__ import annotations

from typing import Sequence

import torch

from pinyin_hanzi.config import Config
from pinyin_hanzi.data.batches import pad, split_batch
from pinyin_hanzi.data.corpus import Example
from pinyin_hanzi.data.store import StoredSplit
from pinyin_hanzi.decoding.search import Constraint, beam_search
from pinyin_hanzi.evaluation.metrics import conversion_scores
from pinyin_hanzi.models.transformer import Transformer
from pinyin_hanzi.runtime import autocast_for, resolve_precision
from pinyin_hanzi.text.lexicon import PAD_ROW, Lexicon, token_key
from pinyin_hanzi.training.loss import model_loss

LOSS_BATCH = 256  # valid examples per teacher-forced batch


@torch.no_grad()
def validate(model: Transformer, valid: StoredSplit, valid_sample: Sequence[Example], lexicon: Lexicon,
             config: Config, device: torch.device, candidates: tuple[torch.Tensor, torch.Tensor] | None = None
             ) -> dict:
    """Teacher-forced validation loss on the whole valid split (the training loss without smoothing), and
    greedy character accuracy (constrained as decode.constrained says) on its first ``eval_sentences``
    examples (a fixed sample, so numbers are comparable across steps). On CUDA in the training's precision;
    on a CPU in fp32, as translate.py runs there, so that fp32 and bf16 runs are measured alike.

    ``valid`` is the split encoded in the model's vocabularies (:func:`pinyin_hanzi.data.batches.encode_split`)
    and ``valid_sample`` its first examples as text, at least ``eval_sentences`` of them where the split has
    as many; ``lexicon`` is over the model's hanzi vocabulary; ``candidates`` as in
    :func:`pinyin_hanzi.training.loss.model_loss`. Returns
    {"loss": mean per target token (nats), the scores of
    :func:`pinyin_hanzi.evaluation.metrics.conversion_scores` (char_accuracy, cer, exact, sentences,
    characters), "samples": the first five conversions as readable lines}."""
    model.eval()
    precision = resolve_precision(config.train.precision, device) if device.type == "cuda" else "fp32"
    total_loss, total_tokens = 0.0, 0
    for begin in range(0, len(valid), LOSS_BATCH):
        batch = split_batch(valid, range(begin, min(begin + LOSS_BATCH, len(valid)))).to(device)
        with autocast_for(device, precision):
            loss, n_tokens = model_loss(model, batch, 0.0, candidates)
        total_loss, total_tokens = total_loss + float(loss) * n_tokens, total_tokens + n_tokens
    sample = valid_sample[: config.train.eval_sentences]
    with autocast_for(device, precision):
        hypotheses = greedy_conversions(model, [valid.example(index)[0] for index in range(len(sample))],
                                        [e.tokens for e in sample], lexicon, constrained=config.decode.constrained,
                                        batch_size=config.decode.batch_sentences)
    scores = conversion_scores(hypotheses, [e.hanzi for e in sample])
    samples = [f"{' '.join(e.tokens)}  →  {h}  (reference {e.hanzi})" for e, h in zip(sample[:5], hypotheses)]
    return {"loss": total_loss / max(total_tokens, 1), **scores, "samples": samples}


def greedy_conversions(model: Transformer, sources: Sequence[Sequence[int]], token_lists: Sequence[Sequence[str]],
                       lexicon: Lexicon, *, constrained: bool = True, batch_size: int = 256) -> list[str]:
    """The greedy conversion of each list of corpus tokens (``sources``: their pinyin ids), constrained by
    the lexicon rows of their keys (:func:`pinyin_hanzi.text.lexicon.token_key`), decoded ``batch_size`` at
    a time in order of length (little padding). A constrained position whose key has no character in the
    vocabulary becomes the key's fallback character, as the converter writes it. An empty list gives "".
    Lists are not cut into windows: validation examples are at most data.max_len <= model.max_positions
    tokens long."""
    outputs = [""] * len(token_lists)
    order = sorted((i for i, tokens in enumerate(token_lists) if tokens), key=lambda i: len(token_lists[i]))
    device = next(model.parameters()).device
    for begin in range(0, len(order), batch_size):
        indices = order[begin : begin + batch_size]
        keys = [[token_key(token) for token in token_lists[i]] for i in indices]
        length = max(map(len, keys))
        rows = torch.tensor([[lexicon.row(key) for key in row] + [PAD_ROW] * (length - len(row)) for row in keys])
        source = pad([sources[i] for i in indices]).to(device)
        found = beam_search(model, source, Constraint(lexicon, rows, constrained), beam=1)
        for i, row, hypotheses in zip(indices, keys, found):
            outputs[i] = "".join(_characters(hypotheses[0][0], row, lexicon, constrained))
    return outputs


def _characters(ids: Sequence[int], keys: Sequence[str], lexicon: Lexicon, constrained: bool) -> list[str]:
    """The characters of hanzi ``ids``, one per key, a constrained key without a character in the vocabulary
    written as its fallback (the model could only choose <unk> there)."""
    fallbacks = [lexicon.fallback(key) if constrained else None for key in keys]
    return [lexicon.hanzi_vocab.tokens[index] if fallback is None else fallback
            for index, fallback in zip(ids, fallbacks)]
