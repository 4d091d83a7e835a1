"""The models decoding uses besides the network, counted from the token store's training split, once.

The syllable bigrams always, the character n-gram model when ``train.language_models`` has ``char``, the
word model when it has ``word``. Each is counted block by block from the memory-mapped store (memory grows
with the distinct n-grams, not with the corpus) and its state dict kept beside the store in
``<prepared folder>/counted/``, under a name that hashes everything the counts depend on (the data's
fingerprint, the model's hanzi vocabulary, the decode settings): the next run on the same data reads it in
a fraction of a second instead of counting again. A prepared again folder is a new folder, without them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable

import torch

from pinyin_hanzi.config import Config
from pinyin_hanzi.data.prepare import phrase_texts
from pinyin_hanzi.data.store import StoredSplit, TokenStore
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.lm.char_ngram import CharNgramLM, count_store
from pinyin_hanzi.lm.syllable import SyllableBigrams
from pinyin_hanzi.lm.word import WordLexiconLM, word_model

COUNTED_DIR = "counted"


def setup_language_models(config: Config, store: TokenStore, fingerprint: str, hanzi_vocab: Vocab, log
                          ) -> tuple[SyllableBigrams, dict | None, dict | None]:
    """(the syllable bigrams, the character n-gram model's state dict or None, the word model's or None),
    each read from the store's counted folder or counted there now. A note when decode asks for a model
    that is not counted (a config written when a weight > 0 counted it)."""
    dec, counted = config.decode, config.train.language_models
    for name, weight, key, tool in (("char", dec.lm_weight, "lm_weight", "char_lm"),
                                    ("word", dec.word_weight, "word_weight", "word_lm")):
        if weight > 0 and name not in counted:
            log(f"note: decode.{key}={weight} but train.language_models has no {name}: this run counts no such "
                f"model (add {name} to train.language_models, or later: python -m pinyin_hanzi.cli.{tool})")
    cache = _Counted(store.folder / COUNTED_DIR, fingerprint, log)
    # The hanzi read in the model's ids; the syllables, counted as strings, in the store's own.
    split = store.split("train", hanzi_vocab=hanzi_vocab)
    syllable_state = cache.get("syllables", {}, lambda: SyllableBigrams.count_blocks(
        split.blocks("source"), store.pinyin_vocab.tokens).state_dict(), SyllableBigrams.state_problem)
    syllable_lm = SyllableBigrams.from_state_dict(syllable_state)
    char_lm_state = _char_lm(config, split, hanzi_vocab, cache, log) if "char" in counted else None
    word_lm_state = _word_lm(config, store, hanzi_vocab, cache, log) if "word" in counted else None
    return syllable_lm, char_lm_state, word_lm_state


def _char_lm(config: Config, split: StoredSplit, hanzi_vocab: Vocab, cache: _Counted, log) -> dict:
    """The character n-gram model's state dict, counted from the training split (and the phrase table,
    decode.lm_phrases times)."""
    dec, started = config.decode, time.time()
    settings = {"order": dec.lm_order, "min_count": dec.lm_min_count, "phrases": dec.lm_phrases,
                "vocab": _tokens_hash(hanzi_vocab)}
    if dec.lm_max_ngrams:  # (no cap: the key of the models kept before there was one)
        settings["max_ngrams"] = dec.lm_max_ngrams

    def count() -> dict:
        phrases = phrase_texts(config.data.raw_dir) if dec.lm_phrases > 0 else []
        lm = count_store(split, hanzi_vocab, dec.lm_order, dec.lm_min_count, phrases, dec.lm_phrases,
                         max_ngrams=dec.lm_max_ngrams, spill_dir=cache.folder)
        if note := _pruning_note(lm, dec.lm_min_count, dec.lm_max_ngrams):
            log(note)
        return lm.state_dict()

    state = cache.get("char_lm", settings, count, lambda state: CharNgramLM.state_problem(state, len(hanzi_vocab)))
    how = cache.how
    with_phrases = (f", with the phrase table x {dec.lm_phrases} (entries with characters outside the vocabulary "
                    f"left out)" if dec.lm_phrases > 0 else "")
    log(f"character {dec.lm_order}-gram model: {CharNgramLM.stored_size(state):,} n-grams {how} in "
        f"{time.time() - started:.1f} s (decode.lm_weight={dec.lm_weight}{with_phrases})")
    return state


def _pruning_note(lm: CharNgramLM, min_count: int, max_ngrams: int) -> str | None:
    """The line that says which n-grams the cap left out (the effective min counts it raised), or None."""
    raised = sorted((k for k, minimum in lm.min_counts.items() if minimum > (min_count if k == lm.order else 1)),
                    reverse=True)
    if not raised:
        return None
    kept = [f"{k}-grams seen {lm.min_counts[k]}+ times" if k == lm.order else
            f"{k}-grams after {lm.min_counts[k]}+ different characters" for k in raised]
    return (f"character {lm.order}-gram model capped by decode.lm_max_ngrams={max_ngrams:,}: it keeps only the "
            f"{', '.join(kept)} ({lm.size():,} n-grams)")


def _word_lm(config: Config, store: TokenStore, hanzi_vocab: Vocab, cache: _Counted, log) -> dict:
    """The word model's state dict, from decode.word_table (contrasted with the training split's words at
    decode.word_contrast)."""
    dec, started = config.decode, time.time()
    settings = {"table": dec.word_table, "min_frequency": dec.word_min_frequency, "contrast": dec.word_contrast,
                "vocab": _tokens_hash(hanzi_vocab)}

    def count() -> dict:
        texts = (hanzi for _, hanzi in store.texts("train", with_copies=True))
        return word_model(dec, config.data.raw_dir, hanzi_vocab, texts).state_dict()

    state = cache.get("word_lm", settings, count, lambda state: WordLexiconLM.state_problem(state, len(hanzi_vocab)))
    how = cache.how
    contrast = f", contrasted with the training split at {dec.word_contrast}" if dec.word_contrast > 0 else ""
    log(f"word model: {WordLexiconLM.stored_size(state):,} words of {dec.word_table}{contrast} {how} in "
        f"{time.time() - started:.1f} s (decode.word_weight={dec.word_weight})")
    return state


def _tokens_hash(vocab: Vocab) -> str:
    return hashlib.sha256("\n".join(vocab.tokens).encode("utf-8")).hexdigest()[:16]


class _Counted:
    """State dicts kept in ``folder``, each under a name hashed from what it was counted from."""

    def __init__(self, folder: Path, fingerprint: str, log: Callable[[str], None]):
        self.folder, self.fingerprint, self.log = folder, fingerprint, log
        self.how = ""  # how the last get came by its state: "read" (kept from an earlier run) or "counted"

    def get(self, kind: str, settings: dict, count: Callable[[], dict],
            problem: Callable[[dict], str | None]) -> dict:
        """The kept state of ``kind`` for these ``settings``, else ``count()``'s, kept for the next run. A kept
        file that cannot be read, or whose state the model's own check (``problem``: its ``state_problem``)
        refuses, is counted again; one that cannot be written is only a note (read-only data on shared storage
        trains as well, counting at each start)."""
        key = json.dumps({"kind": kind, "data": self.fingerprint, **settings}, sort_keys=True)
        path = self.folder / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"
        try:
            state = torch.load(path, weights_only=True)
            reason = problem(state) if isinstance(state, dict) else "not a state dict"
            if reason is None:
                self.how = "read (counted once with the store)"
                return state
            self.log(f"note: {path} holds no usable {kind} ({reason}); counting again")
        except FileNotFoundError:
            pass
        except Exception:  # noqa: BLE001 (a damaged or foreign file: any reader error means count again)
            self.log(f"note: {path} could not be read; counting again")
        state, self.how = count(), "counted"
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.folder.mkdir(exist_ok=True)
            torch.save(state, temporary)
            os.replace(temporary, path)  # all or nothing: a concurrent run reads the old file or the whole new one
        except OSError as error:  # a full disk or read-only data: training goes on, the next run counts again
            self.log(f"note: could not keep the counted {kind} in {self.folder} ({error.strerror or error}); "
                     f"the next run counts it again")
        finally:
            temporary.unlink(missing_ok=True)  # after os.replace there is none; after a failure or Ctrl-C, half a file
        return state
