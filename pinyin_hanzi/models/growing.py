"""Model surgery for ``train.py --init-from``: a trained model carried over into a new one whose vocabularies
have grown by new tokens and whose encoder and decoder may have more layers, or fewer.

Known tokens keep their ids and their rows; new rows start as a fresh model's do. Extra layers go on top
and start as identities: in a pre-norm layer every sublayer adds its output to the residual stream, so with
the projections that write into it (:data:`RESIDUAL_OUTPUTS`) zero the layer is x -> x, and the grown model
converts exactly as the trained one did until training moves them. A stack with fewer layers keeps the
trained model's first ones (the top ones are dropped): the start of a shallower network that the trained
one then teaches (``train.distill_from``). For the shipped model's decoder, 2 -> 1 layers, keeping the
first layer converts far better before any training than keeping the second (docs/training.md).
"""

from __future__ import annotations

from typing import Iterable

import torch

from pinyin_hanzi.config import ModelConfig
from pinyin_hanzi.data.vocab import Vocab, grown
from pinyin_hanzi.errors import CheckpointError
from pinyin_hanzi.models.transformer import RESIDUAL_OUTPUTS, Transformer

DEPTHS = ("n_encoder_layers", "n_decoder_layers")  # the settings a trained model may grow in


def check_growable(config: ModelConfig, saved: dict, path: str) -> str:
    """Whether a model of ``config`` may start from the weights of checkpoint ``path``, whose model
    settings are ``saved`` (its config's model section): every setting equal, except that the encoder and
    decoder may have more layers (a pre-norm model only: its zero-output layers are exact identities, a
    post-norm layer normalises even then) or fewer (at least one). Returns what changes ("encoder 2 -> 3
    layers, decoder 2 -> 1 layers") or "". CheckpointError ("cannot start from PATH ...", one line) naming the
    first setting that differs."""
    changes = []
    for key in DEPTHS:
        now, before = getattr(config, key), saved.get(key)
        if isinstance(before, int) and now != before and now >= 1:
            if now > before and config.norm != "pre":
                raise CheckpointError(f"cannot start from {path} with model.{key}={now} (it has {before}): "
                                      f"only a pre-norm model grows deeper (model.norm is {config.norm!r})")
            changes.append(f"{key.split('_')[1]} {before} -> {now} layers")
            saved = {**saved, key: now}
    for key, value in config.__dict__.items():
        if saved.get(key) != value:
            raise CheckpointError(f"cannot start from {path}: model.{key} is {value!r} now but "
                                  f"{saved.get(key)!r} in the checkpoint")
    return ", ".join(changes)


def grow(trained: Transformer, pinyin_vocab: Vocab, hanzi_vocab: Vocab, config: ModelConfig, *,
         pinyin_tokens: Iterable[str], hanzi_tokens: Iterable[str]) -> tuple[Transformer, Vocab, Vocab]:
    """(model of ``config``, pinyin vocabulary, hanzi vocabulary): ``trained``'s vocabularies grown by the
    tokens they lack (:func:`pinyin_hanzi.data.vocab.grown`: ids never move), and a new model over them
    that holds ``trained``'s weights. Vocabulary-sized matrices (embeddings, an untied output projection)
    keep the known rows and take the new model's fresh ones after them; layers beyond ``trained``'s start
    as identities, and ``trained``'s layers beyond the new model's are left out. ``config`` must pass
    :func:`check_growable` against ``trained.config``."""
    pinyin_vocab, hanzi_vocab = grown(pinyin_vocab, pinyin_tokens), grown(hanzi_vocab, hanzi_tokens)
    model = Transformer(config, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    state, trained_state = model.state_dict(), trained.state_dict()
    for name, old in trained_state.items():
        if name not in state:  # a layer above a shallower stack's top
            continue
        if old.shape == state[name].shape:
            state[name] = old
        else:  # a vocabulary-sized matrix: the known rows, then the fresh ones
            state[name] = torch.cat([old, state[name][old.shape[0]:]])
    for name in state:
        if name not in trained_state and name.endswith(RESIDUAL_OUTPUTS):
            state[name] = torch.zeros_like(state[name])
    model.load_state_dict(state)
    return model, pinyin_vocab, hanzi_vocab
