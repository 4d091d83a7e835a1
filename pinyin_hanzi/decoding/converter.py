"""The Python API: a :class:`Converter` turns what a user types into hanzi.

    from pinyin_hanzi import Converter
    converter = Converter.from_pretrained()          # or Converter.from_checkpoint("checkpoints/x/best.pt")
    converter.convert("ni hao")                      # "你好"
    converter.candidates("xian", n=5)                # [Candidate(text="现", score=..., syllables=["xian"]), ...]

Typed text -> pieces with alternative readings (typed_input.py) -> chunks of at most one window and their
readings (planning.py) -> each reading searched (search.py) under the lexicon's constraint (lexicon.py) -> the
n best distinct texts (planning.assemble).

Which model converts by default (:func:`resolve_checkpoint`): an explicit checkpoint path, else the one the
environment variable ``PINYIN_HANZI_CHECKPOINT`` names, else the shipped model.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from pinyin_hanzi.checkpoint import load_for_inference
from pinyin_hanzi.config import MAX_NBEST, Config, DecodeConfig, check_range, shown
from pinyin_hanzi.data.batches import pad
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.decoding import arguments
from pinyin_hanzi.decoding.planning import CLAUSE_END_MARK, Candidate, Plan, Planner, assemble
from pinyin_hanzi.decoding.search import Constraint, Hypothesis, NgramFusion, beam_search, fusion_for
from pinyin_hanzi.errors import ConfigError, DataError
from pinyin_hanzi.lm.char_ngram import CharNgramLM
from pinyin_hanzi.lm.syllable import SyllableBigrams
from pinyin_hanzi.lm.word import WordLexiconLM
from pinyin_hanzi.models.transformer import Transformer
from pinyin_hanzi.text.lexicon import PAD_ROW, Lexicon, token_key
from pinyin_hanzi.text.shuangpin import layout_named
from pinyin_hanzi.text.typed_input import PREFIX_TOKENS, fuzzy_pairs, is_literal_key, is_prefix_key

SHIPPED_MODEL = Path(__file__).resolve().parents[1] / "pretrained" / "model.pt"
CHECKPOINT_VARIABLE = "PINYIN_HANZI_CHECKPOINT"


def _check_call(*, beam: int | None = None, nbest: int = 1, batch_size: int = 1, alternatives_limit: int = 1) -> None:
    """ConfigError (one line) for a conversion call's number outside its range: beam as decode.beam,
    batch_size as decode.batch_sentences, nbest 1..MAX_NBEST, alternatives_limit 1..64."""
    if beam is not None:
        check_range("decode.beam", beam, "beam")
    check_range("decode.batch_sentences", batch_size, "batch_size")
    for value, label, high in ((nbest, "nbest", MAX_NBEST), (alternatives_limit, "alternatives_limit", 64)):
        if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high):
            raise ConfigError(f"{label}={shown(value)} is invalid: expected an integer in 1..{high}")


def resolve_checkpoint(path: str | Path | None = None) -> tuple[Path, str]:
    """The checkpoint that converts and how to name its origin to a user: ``path`` ("checkpoint"), else
    the environment variable PINYIN_HANZI_CHECKPOINT, else the shipped model. The file is not opened."""
    if path is not None:
        return Path(path), "checkpoint"
    if os.environ.get(CHECKPOINT_VARIABLE):
        return Path(os.environ[CHECKPOINT_VARIABLE]), f"the checkpoint named by {CHECKPOINT_VARIABLE}"
    return SHIPPED_MODEL, "the shipped model"


class Converter:
    """A trained model with its vocabularies: converts typed lines or token lists into hanzi.

    ``window``: the longest token sequence given to the model at once (the training examples' max length);
    longer input is cut at punctuation, or into windows, and converted piece by piece.

    Readings of ambiguous letters: log P(hanzi | syllables) of different readings condition on different
    syllables and are not comparable as they are (an extra syllable with few candidates costs almost
    nothing). With ``syllable_lm`` the score is the joint log P(hanzi, syllables) = log P(hanzi | syllables)
    + log P(syllables); ``split_penalty`` further charges each syllable beyond the fewest-syllable reading,
    and ``abbreviation_penalty`` each letter typed alone that is a syllable itself (``a``: 啊) read as an
    abbreviation (a*: 爱 安 ...), since only an abbreviating user types 爱 so.

    With ``char_lm`` and ``lm_weight`` > 0, beam search fuses the character n-gram model (search.py), and
    with ``word_lm`` and ``word_weight`` > 0 the word model (word_lm.py); then readings whose prior is more
    than ``reading_margin`` below the best one's are not decoded.

    ``beam`` and ``constrained`` are what :meth:`convert` and :meth:`candidates` use; ``config`` and
    ``checkpoint`` say where a converter loaded from a checkpoint came from (else None).

    What users type besides full pinyin (see :func:`pinyin_hanzi.text.typed_input.parse_pieces`), stored as the
    attributes of the same names and overridable per call of :meth:`convert_lines`:

    - ``prefixes``: letters that begin a syllable stand for any syllable they begin (``bei j``, ``wxqbj``);
      None = on exactly when the model was trained with abbreviations (:attr:`trained_with_prefixes`: its
      pinyin vocabulary has the prefix tokens ``b*`` ``zh*`` ...). Turned on for a model without them, a
      prefix's model token is unknown to it (``<unk>``): the constraint alone (the characters of the
      syllables the prefix begins) and the context choose the character, which works for common words
      (``bei j`` -> 北京) but is weaker than a model trained with abbreviations.
    - ``fuzzy``: names of :data:`pinyin_hanzi.text.typed_input.FUZZY_PAIRS` (``{"z-zh", "n-l"}``).
    - ``shuangpin``: a layout name of :data:`pinyin_hanzi.text.shuangpin.LAYOUTS`, or None (or "") for full pinyin.

    Raises DataError for an unknown fuzzy pair or shuangpin layout, ConfigError (one line) for a number outside
    the range of its decode.* key (config.LIMITS: beam 1..64, weights 0..100, ...) or ``nbest`` outside
    1..MAX_NBEST, here and in every method that takes one; ConfigError for a ``device`` that is not one or is
    not available here. Every public method checks its arguments' types first (:mod:`pinyin_hanzi.decoding.arguments`):
    text that is not a str (or a list of str where a list is taken) or holds a lone surrogate is a DataError,
    a flag that is not a bool a ConfigError, each naming the method and the argument."""

    def __init__(self, model: Transformer, pinyin_vocab: Vocab, hanzi_vocab: Vocab,
                 device: torch.device | str = "cpu", window: int | None = None, split_penalty: float = 3.0,
                 syllable_lm: SyllableBigrams | None = None, clause_end: bool = True,
                 char_lm: CharNgramLM | None = None, lm_weight: float = 0.0, reading_margin: float = 8.0, *,
                 beam: int = DecodeConfig.beam, constrained: bool = True, config: Config | None = None,
                 checkpoint: Path | None = None, prefixes: bool | None = None,
                 fuzzy: Iterable[str] = frozenset(), shuangpin: str | None = None,
                 word_lm: WordLexiconLM | None = None, word_weight: float = 0.0,
                 prefix_beam: int = DecodeConfig.prefix_beam,
                 abbreviation_penalty: float = DecodeConfig.abbreviation_penalty):
        for key, value, label in (("decode.beam", beam, "beam"), ("decode.prefix_beam", prefix_beam, "prefix_beam"),
                                  ("decode.lm_weight", lm_weight, "lm_weight"),
                                  ("decode.word_weight", word_weight, "word_weight"),
                                  ("decode.split_penalty", split_penalty, "split_penalty"),
                                  ("decode.abbreviation_penalty", abbreviation_penalty, "abbreviation_penalty"),
                                  ("decode.reading_margin", reading_margin, "reading_margin")):
            check_range(key, value, label)
        device = arguments.inference_device(device)
        self.model = model.to(device).eval()
        self.pinyin_vocab, self.hanzi_vocab = pinyin_vocab, hanzi_vocab
        self.device = device
        self.lexicon = Lexicon(hanzi_vocab)
        self.char_lm = char_lm if lm_weight > 0 else None
        self.lm_weight = lm_weight
        self.word_lm = word_lm if word_weight > 0 else None
        self.word_weight = word_weight
        fused = [(lm, weight) for lm, weight in ((self.char_lm, lm_weight), (self.word_lm, word_weight)) if lm is not None]
        self.fusion = NgramFusion(fused) if fused else None
        self.beam, self.constrained, self.config, self.checkpoint = beam, constrained, config, checkpoint
        self.prefix_beam = prefix_beam
        self.trained_with_prefixes = any(token in pinyin_vocab.ids for token in PREFIX_TOKENS)
        self.prefixes = self.trained_with_prefixes if prefixes is None else prefixes
        self.fuzzy = fuzzy_pairs(fuzzy)
        self.shuangpin = layout_named(shuangpin).name if shuangpin else None
        # Training clauses end with their punctuation; typed input usually has none. Without it the model
        # reads the last syllable as the middle of a clause (ba -> 八, not 吧), so a line that ends in a
        # syllable is decoded with a virtual 。 after it, which is dropped from the output.
        end = CLAUSE_END_MARK
        clause_end = clause_end and end in pinyin_vocab.ids and end in hanzi_vocab.ids
        positions = model.config.max_positions - clause_end  # room for the virtual 。
        self.planner = Planner(window=min(window or positions, positions), clause_end=clause_end,
                               syllable_lm=syllable_lm, split_penalty=split_penalty, reading_margin=reading_margin,
                               abbreviation_penalty=abbreviation_penalty)

    # The planner owns these settings; they read through to it so that there is one copy of each.
    window = property(lambda self: self.planner.window, doc="the longest token sequence given to the model at once")
    clause_end = property(lambda self: self.planner.clause_end, doc="whether lines are decoded with a virtual 。")
    syllable_lm = property(lambda self: self.planner.syllable_lm, doc="the syllable model of readings' priors")
    split_penalty = property(lambda self: self.planner.split_penalty, doc="the cost of each extra syllable")
    abbreviation_penalty = property(lambda self: self.planner.abbreviation_penalty,
                                    doc="the cost of reading a lone letter that is a syllable as an abbreviation")
    reading_margin = property(lambda self: self.planner.reading_margin, doc="how far below the best prior a "
                              "reading is still decoded (with n-gram fusion)")

    # ------------------------------------------------------------------------------------------ loading

    @classmethod
    def from_checkpoint(cls, path: str | Path | None = None, *, device: str = "cpu", lm_weight: float | None = None,
                        word_weight: float | None = None, log: Callable[[str], None] | None = None) -> Converter:
        """A converter for the checkpoint at ``path`` (None: see :func:`resolve_checkpoint`), with its
        decode settings (decode.prefixes, decode.fuzzy and decode.shuangpin included; a checkpoint older
        than them reads full pinyin, with prefixes on only for a model trained with abbreviations), syllable
        model, character n-gram model and word model. ``lm_weight`` and ``word_weight`` replace the
        checkpoint's decode.lm_weight and decode.word_weight; ``log`` receives a note when such a weight is > 0
        but the checkpoint has no such model. ``device``: cpu, cuda, cuda:N, mps or auto. Raises CheckpointError (one
        line) for a missing or unreadable checkpoint or a path that is no str or Path, ConfigError for a device
        that is no device or not available here, or an argument of the wrong type, before the checkpoint
        is read."""
        arguments.loading_options("from_checkpoint", path=path, lm_weight=lm_weight, word_weight=word_weight, log=log)
        device = arguments.inference_device(device)
        path, _ = resolve_checkpoint(path)
        parts = load_for_inference(path)
        config = parts.config
        decode = config.decode
        decode.lm_weight = decode.lm_weight if lm_weight is None else lm_weight
        decode.word_weight = decode.word_weight if word_weight is None else word_weight
        for weight, model, what, tool in ((decode.lm_weight, parts.char_lm, "character n-gram model", "char_lm"),
                                          (decode.word_weight, parts.word_lm, "word model", "word_lm")):
            if weight > 0 and model is None and log is not None:
                log(f"note: {path} has no {what}: decoding without one (add one with python -m pinyin_hanzi.cli.{tool})")
        return cls(parts.model, parts.pinyin_vocab, parts.hanzi_vocab, device, window=config.data.max_len,
                   split_penalty=decode.split_penalty, syllable_lm=parts.syllable_lm, clause_end=decode.clause_end,
                   char_lm=parts.char_lm, lm_weight=decode.lm_weight, reading_margin=decode.reading_margin,
                   beam=decode.beam, constrained=decode.constrained, config=config, checkpoint=path,
                   prefixes={"on": True, "off": False}.get(decode.prefixes), fuzzy=decode.fuzzy,
                   shuangpin=decode.shuangpin or None, word_lm=parts.word_lm, word_weight=decode.word_weight,
                   prefix_beam=decode.prefix_beam, abbreviation_penalty=decode.abbreviation_penalty)

    @classmethod
    def from_pretrained(cls, *, device: str = "cpu", lm_weight: float | None = None, word_weight: float | None = None,
                        log: Callable[[str], None] | None = None) -> Converter:
        """A converter for the shipped model (pinyin_hanzi/pretrained/model.pt); see :meth:`from_checkpoint`."""
        return cls.from_checkpoint(SHIPPED_MODEL, device=device, lm_weight=lm_weight, word_weight=word_weight, log=log)

    # ---------------------------------------------------------------------------------------- public API

    def convert(self, text: str | Sequence[str]) -> str | list[str]:
        """The best conversion of a typed line (str -> str), or of each of several (list -> list, batched),
        with this converter's ``beam`` and ``constrained``. DataError (one line) for anything but a str or a
        list (tuple, ...) of str, and for text holding a lone surrogate."""
        lines = arguments.text_lines(text, "convert", single=True)
        found = self.convert_lines(lines, beam=self.beam, constrained=self.constrained)
        outputs = [candidates[0].text for candidates in found]
        return outputs[0] if isinstance(text, str) else outputs

    def candidates(self, text: str, n: int = 5) -> list[Candidate]:
        """Up to ``n`` distinct conversions of a typed line, best first (beam: the larger of ``beam`` and n).
        DataError (one line) unless ``text`` is a str, ConfigError unless ``n`` is an integer in 1..MAX_NBEST."""
        text = arguments.text_line(text, "candidates")
        _check_call(nbest=n)
        return self.convert_lines([text], beam=max(self.beam, n), nbest=n, constrained=self.constrained)[0]

    def convert_lines(self, lines: Sequence[str], *, beam: int | None = None, nbest: int = 1,
                      constrained: bool | None = None, batch_size: int = 256, alternatives_limit: int = 4,
                      chinese_punctuation: bool = False, prefixes: bool | None = None,
                      fuzzy: Iterable[str] | None = None, shuangpin: str | None = None) -> list[list[Candidate]]:
        """Typed lines -> up to ``nbest`` distinct conversions each, best first (beam: ``self.beam`` unless
        given, at least ``nbest``). ``prefixes``, ``fuzzy`` and ``shuangpin`` replace the converter's own
        for this call when given (``fuzzy=()`` none, ``shuangpin=""`` full pinyin); DataError for an unknown
        fuzzy pair or layout.

        Each alternative reading of ambiguous input (``xian`` = xian / xi'an) is decoded and the scores pick
        among them. Input longer than one window is converted chunk by chunk (cut at punctuation); its
        n-best list then holds the best conversion only. Pass-through text more than :data:`LITERAL_CONTEXT`
        characters from any pinyin is copied without the model, so a line costs decoding steps only for
        its pinyin and the context around it. A line holding line ends (``typed_input.split_lines``) is
        converted line by line and its output lines are joined by "\\n": n lines in, n lines out.
        ``chinese_punctuation``: ASCII , . ? ! right after a hanzi become ，。？！. ``constrained`` None: this
        converter's own setting. DataError (one line) unless ``lines`` is a list (tuple, ...) of str without
        lone surrogates (a str alone is refused: its characters would be taken for lines), ConfigError for a
        flag that is not a bool."""
        lines = arguments.text_lines(lines, "convert_lines", single=False)
        _check_call(beam=beam, nbest=nbest, batch_size=batch_size, alternatives_limit=alternatives_limit)
        arguments.check_flags("convert_lines", optional=("constrained", "prefixes"), constrained=constrained,
                              prefixes=prefixes, chinese_punctuation=chinese_punctuation)
        fuzzy = arguments.typing_options("convert_lines", fuzzy, shuangpin)
        constrained = self.constrained if constrained is None else constrained
        beam = max(beam or self.beam, nbest)
        fused = fusion_for(beam, self.fusion) is not None
        options = {"prefixes": self.prefixes if prefixes is None else prefixes,
                   "fuzzy": self.fuzzy if fuzzy is None else fuzzy_pairs(fuzzy),
                   "shuangpin": self.shuangpin if shuangpin is None else (shuangpin or None)}
        plan = self.planner.plan(lines, alternatives_limit, fused, options)
        found = self._decode_best_first(plan, beam, nbest, constrained, batch_size, fused)
        return assemble(plan, found, nbest, chinese_punctuation)

    def convert_tokens(self, token_lists: Sequence[Sequence[str]], *, constrained: bool = True,
                       batch_size: int = 256, beam: int = 1) -> list[str]:
        """One output per list of corpus tokens (same order; an empty list gives ""), each constrained by
        :func:`pinyin_hanzi.text.lexicon.token_key`. Token lists longer than the window are converted window by
        window. DataError (one line) unless ``token_lists`` is a list of lists of str."""
        token_lists = arguments.token_lists(token_lists, "convert_tokens")
        _check_call(beam=beam, batch_size=batch_size)
        arguments.check_flags("convert_tokens", constrained=constrained)
        pieces = [(i, list(tokens[start : start + self.window]))
                  for i, tokens in enumerate(token_lists) for start in range(0, max(len(tokens), 1), self.window)]
        found = self._decode([(tokens, [token_key(token) for token in tokens]) for _, tokens in pieces], beam,
                             constrained, batch_size)
        outputs = [""] * len(token_lists)
        for (i, _), candidates in zip(pieces, found):
            outputs[i] += candidates[0].text
        return outputs

    def search(self, token_lists: Sequence[Sequence[str]], key_lists: Sequence[Sequence[str]] | None = None, *,
               beam: int = 1, constrained: bool = True) -> list[list[Hypothesis]]:
        """The search's hypotheses for token lists (keys: the lexicon's constraint keys, unless given those of
        corpus tokens, :func:`pinyin_hanzi.text.lexicon.token_key`): per list, up to ``beam`` (hanzi ids, score),
        best first. No fallbacks, no chunking. DataError (one line) unless both are lists of non-empty lists of
        str, with as many keys as tokens; ConfigError for a beam out of range."""
        token_lists, key_lists = self._search_arguments(token_lists, key_lists, beam, constrained)
        if not token_lists:
            return []
        key_lists = key_lists or [[token_key(token) for token in tokens] for tokens in token_lists]
        length = max(len(tokens) for tokens in token_lists)
        source = pad([self.pinyin_vocab.encode(tokens) for tokens in token_lists]).to(self.device)
        rows = torch.tensor([[self.lexicon.row(key) for key in keys] + [PAD_ROW] * (length - len(keys))
                             for keys in key_lists])
        return beam_search(self.model, source, Constraint(self.lexicon, rows, constrained), beam=beam,
                           fusion=self.fusion)

    @staticmethod
    def _search_arguments(token_lists, key_lists, beam, constrained) -> tuple[list[list[str]], list[list[str]] | None]:
        token_lists = arguments.token_lists(token_lists, "search")
        check_range("decode.beam", beam, "beam")
        arguments.check_flags("search", constrained=constrained)
        if key_lists is not None:
            key_lists = arguments.token_lists(key_lists, "search", "key_lists")
            if len(key_lists) != len(token_lists):
                raise DataError(f"search(): {len(key_lists)} key lists for {len(token_lists)} token lists")
        for index, tokens in enumerate(token_lists):
            if not tokens:
                raise DataError(f"search(): token list {index} is empty: the model needs at least one token")
            if key_lists is not None and len(key_lists[index]) != len(tokens):
                raise DataError(f"search(): key list {index} has {len(key_lists[index])} keys for "
                                f"{len(tokens)} tokens: expected one key per token")
        return token_lists, key_lists

    # ------------------------------------------------------------------------------------------ decoding

    def _decode(self, readings: list[tuple[list[str], list[str]]], beam: int, constrained: bool,
                batch_size: int) -> list[list[Candidate]]:
        """Candidates (best first) of each (tokens, keys) reading, decoded in batches of similar length. A
        beam search of a reading with abbreviated syllables uses at least ``self.prefix_beam``: each of
        its abbreviated places allows the characters of every syllable it may begin, and a beam of the
        usual width loses the right one among them."""
        results: list[list[Candidate]] = [[] for _ in readings]
        widened = max(beam, self.prefix_beam) if beam > 1 else beam
        beam_of = [widened if any(is_prefix_key(key) for key in keys) else beam for _, keys in readings]
        order = sorted(range(len(readings)), key=lambda i: (beam_of[i], len(readings[i][0])))
        groups = [list(group) for _, group in itertools.groupby(order, key=beam_of.__getitem__)]  # one per beam
        batches = [group[begin : begin + batch_size] for group in groups for begin in range(0, len(group), batch_size)]
        for batch in batches:
            indices = [i for i in batch if readings[i][0]]
            for i in batch:
                if not readings[i][0]:
                    results[i] = [Candidate("", 0.0)]
            if not indices:
                continue
            found = self.search([readings[i][0] for i in indices], [readings[i][1] for i in indices],
                                beam=beam_of[indices[0]], constrained=constrained)
            for i, hypotheses in zip(indices, found):
                for ids, score in hypotheses:
                    chars, notes = self._text(ids, readings[i][1], constrained)
                    read_as = [self.lexicon.syllable_of(char, key) for char, key in zip(chars, readings[i][1])]
                    results[i].append(Candidate("".join(chars), score, list(readings[i][0]), notes, read_as))
        return results

    def _text(self, ids: list[int], keys: Sequence[str], constrained: bool) -> tuple[list[str], list[str]]:
        """The characters of hanzi ids, one per key, with each fallback (a key without a character in the
        vocabulary) put in; and the notes on the fallbacks used."""
        chars, notes = [], []
        for index, key in zip(ids, keys):
            fallback = self.lexicon.fallback(key)
            if constrained and fallback is not None:
                chars.append(fallback)
                if fallback != (key[1] if is_literal_key(key) else key):
                    notes.append(f"no character of '{key}' is in the model's vocabulary: used '{fallback}'")
            else:
                chars.append(self.hanzi_vocab.tokens[index])
        return chars, notes

    def _decode_best_first(self, plan: Plan, beam: int, nbest: int, constrained: bool, batch_size: int,
                           fused: bool) -> list[list[Candidate] | None]:
        """Candidates of the plan's readings, scores including their priors; None for readings that cannot
        enter the n-best list and were not decoded.

        log P(hanzi | syllables) <= 0 (and so are the n-gram model's terms), so a reading whose prior is
        below the nbest-th score already found cannot enter the n-best list. Decoding each chunk's most
        probable reading first leaves almost nothing else to decode. With n-gram fusion the readings left
        (see :meth:`pinyin_hanzi.decoding.planning.Planner.readings`) mostly survive that bound, so when one batch holds them all they are
        decoded together at once instead of in two passes."""
        found: list[list[Candidate] | None] = [None] * len(plan.readings)

        def decode(indices: list[int]) -> None:
            searched = self._decode([plan.readings[i] for i in indices], beam, constrained, batch_size)
            for i, candidates in zip(indices, searched):
                for candidate in candidates:
                    candidate.score += plan.priors[i]
                found[i] = candidates

        if fused and len(plan.readings) <= batch_size:
            decode(list(range(len(plan.readings))))
        decode([max(indices, key=plan.priors.__getitem__) for indices in plan.chunks.values()
                if all(found[i] is None for i in indices)])
        remaining = []
        for indices in plan.chunks.values():
            best_by_text: dict[str, float] = {}
            for candidate in (c for i in indices if found[i] is not None for c in found[i]):
                best_by_text[candidate.text] = max(candidate.score, best_by_text.get(candidate.text, float("-inf")))
            scores = sorted(best_by_text.values(), reverse=True)
            bar = scores[nbest - 1] if len(scores) >= nbest else float("-inf")
            remaining += [i for i in indices if found[i] is None and plan.priors[i] >= bar]
        decode(remaining)
        return found

