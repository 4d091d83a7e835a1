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
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from pinyin_hanzi.checkpoint import load_for_inference
from pinyin_hanzi.config import Config, DecodeConfig, search_beam, validate_config
from pinyin_hanzi.data.batches import pad
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.decoding import arguments
from pinyin_hanzi.decoding.planning import CLAUSE_END_MARK, Candidate, Plan, Planner, assemble
from pinyin_hanzi.decoding.search import Constraint, Hypothesis, beam_search
from pinyin_hanzi.decoding.settings import SearchSettings, TypingOptions
from pinyin_hanzi.decoding.threads import parallel_searches
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.lm.char_ngram import CharNgramLM
from pinyin_hanzi.lm.history import History
from pinyin_hanzi.lm.history_lm import HistoryLM
from pinyin_hanzi.lm.syllable import SyllableBigrams
from pinyin_hanzi.lm.user_words import UserWords
from pinyin_hanzi.lm.word import WordLexiconLM
from pinyin_hanzi.models.inference import InferenceDecoder
from pinyin_hanzi.models.transformer import Transformer
from pinyin_hanzi.runtime import collector_paused, inference_precision
from pinyin_hanzi.text.lexicon import PAD_ROW, Lexicon, token_key
from pinyin_hanzi.text.pinyin import syllable_table, usual_readings
from pinyin_hanzi.text.read_as import syllables_read
from pinyin_hanzi.text.typed_input import PREFIX_TOKENS, is_literal_key

SHIPPED_MODEL = Path(__file__).resolve().parents[1] / "pretrained" / "model.pt"
CHECKPOINT_VARIABLE = "PINYIN_HANZI_CHECKPOINT"


def _build_reading_tables() -> None:
    syllable_table()
    usual_readings()


def resolve_checkpoint(path: str | Path | None = None) -> tuple[Path, str]:
    """The checkpoint that converts and how to name its origin to a user: ``path`` ("checkpoint"), else
    the environment variable PINYIN_HANZI_CHECKPOINT, else the shipped model. The file is not opened."""
    if path is not None:
        return Path(path), "checkpoint"
    if os.environ.get(CHECKPOINT_VARIABLE):
        return Path(os.environ[CHECKPOINT_VARIABLE]), f"the checkpoint named by {CHECKPOINT_VARIABLE}"
    return SHIPPED_MODEL, "the shipped model"


class Converter:
    """A trained model with its parts: converts typed lines or token lists into hanzi.

    It holds its parts (the model, both vocabularies, the lexicon, the syllable model of readings' priors,
    the character n-gram and word models, the planner) and one :class:`~pinyin_hanzi.config.DecodeConfig`,
    ``decode``: the checkpoint's decode settings (``config.decode``; the defaults without a config) with
    the keyword ``settings`` of the same names in place of its own (``beam=3``, ``lm_weight=0.5``,
    ``prefixes=True``, ``fuzzy={"z-zh"}``, ``shuangpin="microsoft"``; see
    :func:`pinyin_hanzi.decoding.arguments.decode_changes`). Each call's own arguments replace its fields
    for that call only, and :mod:`pinyin_hanzi.decoding.settings` turns the result into what the call
    searches with (:meth:`search_settings`) and how it reads typed text (:meth:`typing_options`).

    ``window``: the longest token sequence given to the model at once (the training examples' max length);
    longer input is cut at punctuation, or into windows, and converted piece by piece.

    Readings of ambiguous letters: log P(hanzi | syllables) of different readings condition on different
    syllables and are not comparable as they are (an extra syllable with few candidates costs almost
    nothing). With ``syllable_lm`` the score is the joint log P(hanzi, syllables) = log P(hanzi | syllables)
    + log P(syllables); decode.split_penalty further charges each syllable beyond the fewest-syllable
    reading, and decode.abbreviation_penalty each letter typed alone that is a syllable itself (``a``: 啊)
    read as an abbreviation (a*: 爱 安 ...), since only an abbreviating user types 爱 so. With ``char_lm``
    and decode.lm_weight > 0, beam search fuses the character n-gram model (search.py), and with ``word_lm``
    and decode.word_weight > 0 the word model (lm/word.py); then readings whose prior is more than
    decode.reading_margin below the best one's are not decoded.

    decode.prefixes "auto" reads letters that begin a syllable as any syllable they begin (``bei j``,
    ``wxqbj``) exactly when the model was trained with abbreviations (:attr:`trained_with_prefixes`: its
    pinyin vocabulary has the prefix tokens ``b*`` ``zh*`` ...). Turned on for a model without them, a
    prefix's model token is unknown to it (``<unk>``): the constraint alone (the characters of the syllables
    the prefix begins) and the context choose the character, which works for common words (``bei j`` ->
    北京) but is weaker than a model trained with abbreviations.

    :meth:`learn` keeps text the user committed in :attr:`history` (lm/history.py; in the file decode.history,
    if one is named, loaded here), whose cache model :attr:`history_lm` (lm/history_lm.py) is fused with
    decode.history_weight at any beam while the history holds anything; :meth:`forget` forgets it.

    decode.user_words names a user dictionary (lm/user_words.py), read here: :attr:`user_words` holds it (its
    ``note`` says what it left out; None without one), :attr:`user_lm` its model, fused with
    decode.user_weight at any beam, and its readings are added to :attr:`lexicon`.

    :attr:`beam` and :attr:`constrained` are what :meth:`convert` and :meth:`candidates` use; ``config``
    and ``checkpoint`` say where a converter loaded from a checkpoint came from (else None).

    Raises DataError for an unknown fuzzy pair or shuangpin layout, ConfigError (one line) for a number outside
    the range of its decode.* key (config.LIMITS: beam 1..64, weights 0..100, ...) or ``nbest`` outside
    1..MAX_NBEST, here and in every method that takes one; ConfigError for a ``device`` that is not one or is
    not available here; DataError for a user dictionary that is missing, unreadable or has no usable word.
    Every public method checks its arguments' types first (:mod:`pinyin_hanzi.decoding.arguments`):
    text that is not a str (or a list of str where a list is taken) or holds a lone surrogate is a DataError,
    a flag that is not a bool a ConfigError, each naming the method and the argument."""

    def __init__(self, model: Transformer, pinyin_vocab: Vocab, hanzi_vocab: Vocab,
                 device: torch.device | str = "cpu", *, window: int | None = None,
                 syllable_lm: SyllableBigrams | None = None, char_lm: CharNgramLM | None = None,
                 word_lm: WordLexiconLM | None = None, config: Config | None = None,
                 checkpoint: Path | None = None, **settings):
        base = config.decode if config is not None else DecodeConfig()  # a checkpoint's was checked on loading
        self.decode = replace(base, **arguments.decode_changes("Converter", settings))
        device = arguments.inference_device(device)
        self.model = model.to(device).eval()
        # the search's decoder, with bf16 (and int8) copies of its weights where decode.precision says so: made once
        precision = inference_precision(self.decode.precision, device)
        self.decoder = InferenceDecoder(self.model, bf16=precision != "fp32", int8=precision == "int8")
        self.pinyin_vocab, self.hanzi_vocab, self.device = pinyin_vocab, hanzi_vocab, device
        self.char_lm, self.word_lm = char_lm, word_lm
        self.config, self.checkpoint = config, checkpoint
        self.trained_with_prefixes = any(token in pinyin_vocab.ids for token in PREFIX_TOKENS)
        self.typing_options()  # an unknown fuzzy pair or layout fails here, not at the first conversion
        if settings:  # a checkpoint's config was checked on loading; these are checked as a file's keys are
            validate_config(Config(decode=self.decode), "Converter()")
        self.user_words = UserWords.read(self.decode.user_words) if self.decode.user_words else None
        self.user_lm = self.user_words.model(hanzi_vocab) if self.user_words is not None else None
        self.lexicon = Lexicon(hanzi_vocab, self.user_words.lexicon_readings() if self.user_words else None)
        # Training clauses end with their punctuation; typed input usually has none. Without it the model
        # reads the last syllable as the middle of a clause (ba -> 八, not 吧), so a line that ends in a
        # syllable is decoded with a virtual 。 after it, which is dropped from the output.
        end = CLAUSE_END_MARK
        clause_end = self.decode.clause_end and end in pinyin_vocab.ids and end in hanzi_vocab.ids
        positions = model.config.max_positions - clause_end  # room for the virtual 。
        self.planner = Planner(window=min(window or positions, positions), clause_end=clause_end,
                               syllable_lm=syllable_lm, split_penalty=self.decode.split_penalty,
                               reading_margin=self.decode.reading_margin,
                               abbreviation_penalty=self.decode.abbreviation_penalty)
        # last: it takes the history file's lock, which nothing after it may fail to give back
        self.history = History(self.decode.history or None, max_clauses=self.decode.history_clauses)
        self.history_lm = HistoryLM(hanzi_vocab, reference=char_lm)
        self.history.listen(self.history_lm)

    beam = property(lambda self: self.decode.beam, doc="the beam convert() and candidates() use: decode.beam")
    constrained = property(lambda self: self.decode.constrained, doc="whether conversions are constrained "
                           "unless a call says otherwise: decode.constrained")

    # ------------------------------------------------------------------------------------------ loading

    @classmethod
    def from_checkpoint(cls, path: str | Path | None = None, *, device: str = "cpu", lm_weight: float | None = None,
                        word_weight: float | None = None, user_words: str | Path | None = None,
                        user_weight: float | None = None, precision: str | None = None,
                        history: str | Path | None = None, log: Callable[[str], None] | None = None) -> Converter:
        """A converter for the checkpoint at ``path`` (None: see :func:`resolve_checkpoint`), with its
        decode settings (decode.prefixes, decode.fuzzy and decode.shuangpin included; a checkpoint older
        than them reads full pinyin, with prefixes on only for a model trained with abbreviations), syllable
        model, character n-gram model and word model. ``lm_weight``, ``word_weight``, ``user_words`` (a user
        dictionary's path, "" none), ``user_weight``, ``history`` (a history file's path, "" none) and
        ``precision`` ("auto", "fp32", "bf16", "int8") replace the
        checkpoint's decode.* keys of those names (``config.decode`` then holds them too); ``log`` receives a
        note when such a weight is > 0 but the checkpoint has no such model, and the user dictionary's note on
        what it left out. ``device``: cpu, cuda, cuda:N, mps or auto. Raises CheckpointError (one line) for a
        missing or unreadable checkpoint or a path that is no str or Path, ConfigError for a device that is no
        device or not available here, or an argument of the wrong type, before the checkpoint is read;
        DataError for a user dictionary that is missing, unreadable or has no usable word."""
        arguments.loading_options("from_checkpoint", path=path, log=log)
        weights = arguments.decode_changes("from_checkpoint", {"lm_weight": lm_weight, "word_weight": word_weight,
                                                               "user_words": user_words, "user_weight": user_weight,
                                                               "precision": precision, "history": history})
        device = arguments.inference_device(device)
        path, _ = resolve_checkpoint(path)
        # The reading tables (pure Python, 0.2 s) are built on a second thread while the checkpoint's tensors
        # are read and the n-gram tables built (C code that leaves the interpreter free): a shorter start on
        # two cores. A table asked for before it is ready is built where it is asked for, the same table.
        with collector_paused():  # (runtime.py: hundreds of thousands of objects that live as long as the model)
            warm = threading.Thread(target=_build_reading_tables, daemon=True)
            warm.start()
            parts = load_for_inference(path)
            warm.join()
        config = replace(parts.config, decode=replace(parts.config.decode, **weights))
        for weight, model, what, tool in ((config.decode.lm_weight, parts.char_lm, "character n-gram model", "char_lm"),
                                          (config.decode.word_weight, parts.word_lm, "word model", "word_lm")):
            if weight > 0 and model is None and log is not None:
                log(f"note: {path} has no {what}: decoding without one (add one with python -m pinyin_hanzi.cli.{tool})")
        converter = cls(parts.model, parts.pinyin_vocab, parts.hanzi_vocab, device, window=config.data.max_len,
                        syllable_lm=parts.syllable_lm, char_lm=parts.char_lm, word_lm=parts.word_lm, config=config,
                        checkpoint=path)
        if converter.user_words is not None and converter.user_words.note and log is not None:
            log(converter.user_words.note)
        return converter

    @classmethod
    def from_pretrained(cls, *, device: str = "cpu", lm_weight: float | None = None, word_weight: float | None = None,
                        user_words: str | Path | None = None, user_weight: float | None = None,
                        precision: str | None = None, history: str | Path | None = None,
                        log: Callable[[str], None] | None = None) -> Converter:
        """A converter for the shipped model (pinyin_hanzi/pretrained/model.pt); see :meth:`from_checkpoint`."""
        return cls.from_checkpoint(SHIPPED_MODEL, device=device, lm_weight=lm_weight, word_weight=word_weight,
                                   user_words=user_words, user_weight=user_weight, precision=precision,
                                   history=history, log=log)

    # ------------------------------------------------------------------------------------ call settings

    def search_settings(self, *, beam: int | None = None, nbest: int = 1,
                        constrained: bool | None = None) -> SearchSettings:
        """What a conversion call with these arguments searches with (None: decode.beam, decode.constrained):
        its beam (at least ``nbest``), the wider beam of a reading with abbreviations, constrained or not, the
        fused language models. ConfigError (one line) for a number out of range or a flag that is no bool."""
        arguments.check_call(nbest=nbest)
        return self._search_settings(self._for_call("search_settings", nbest, beam=beam, constrained=constrained))

    def typing_options(self, *, prefixes: bool | str | None = None, fuzzy: Iterable[str] | None = None,
                       shuangpin: str | None = None) -> TypingOptions:
        """How a conversion call with these arguments reads typed text (None: decode.prefixes, decode.fuzzy,
        decode.shuangpin; ``prefixes`` "auto": on for a model trained with abbreviations). DataError for an
        unknown fuzzy pair or layout, ConfigError for ``prefixes`` that is no bool or mode."""
        return self._typing_options(self._for_call("typing_options", prefixes=prefixes, fuzzy=fuzzy,
                                                   shuangpin=shuangpin))

    def _for_call(self, method: str, nbest: int = 1, **changes) -> DecodeConfig:
        """This converter's DecodeConfig with a call's arguments (None: left as they are) in place of its own,
        checked; its beam the one the call searches with (:func:`pinyin_hanzi.config.search_beam`)."""
        checked = arguments.decode_changes(method, changes)
        checked["beam"] = search_beam(checked.get("beam"), nbest, self.decode.beam)
        return replace(self.decode, **checked)

    def _search_settings(self, decode: DecodeConfig) -> SearchSettings:
        return SearchSettings.from_config(decode, char_lm=self.char_lm, word_lm=self.word_lm, user_lm=self.user_lm,
                                          history_lm=self.history_lm if len(self.history_lm) else None)

    def _typing_options(self, decode: DecodeConfig) -> TypingOptions:
        return TypingOptions.from_config(decode, trained_with_prefixes=self.trained_with_prefixes)

    # ---------------------------------------------------------------------------------------- public API

    def convert(self, text: str | Sequence[str]) -> str | list[str]:
        """The best conversion of a typed line (str -> str), or of each of several (list -> list, batched),
        with this converter's ``beam`` and ``constrained``. DataError (one line) for anything but a str or a
        list (tuple, ...) of str, and for text holding a lone surrogate."""
        lines = arguments.text_lines(text, "convert", single=True)
        found = self.convert_lines(lines)
        outputs = [candidates[0].text for candidates in found]
        return outputs[0] if isinstance(text, str) else outputs

    def learn(self, text: str) -> list[str]:
        """Keep ``text``, what the user committed (hanzi; punctuation and anything else may be in it), in the
        user history: conversions from then on prefer it (lm/history_lm.py), and a history file (decode.history)
        keeps it. Returns the clauses kept (cut at punctuation; those without a hanzi are not kept). DataError
        (one line) unless ``text`` is a str."""
        return self.history.learn(arguments.text_line(text, "learn"))

    def forget(self, text: str | None = None) -> int:
        """Forget the whole user history (None), or the clauses holding ``text``; a history file is rewritten
        to match. Returns how many clauses were forgotten. DataError (one line) unless ``text`` is None or a
        non-empty str."""
        if text is not None and not arguments.text_line(text, "forget"):
            raise DataError("forget(): text='' would forget everything: call forget() for that")
        return self.history.forget(text)

    def candidates(self, text: str, n: int = 5) -> list[Candidate]:
        """Up to ``n`` distinct conversions of a typed line, best first (beam: the larger of ``beam`` and n).
        DataError (one line) unless ``text`` is a str, ConfigError unless ``n`` is an integer in 1..MAX_NBEST."""
        text = arguments.text_line(text, "candidates")
        return self.convert_lines([text], nbest=n)[0]

    def convert_lines(self, lines: Sequence[str], *, beam: int | None = None, nbest: int = 1,
                      constrained: bool | None = None, batch_size: int = 256, alternatives_limit: int = 4,
                      chinese_punctuation: bool = False, prefixes: bool | str | None = None,
                      fuzzy: Iterable[str] | None = None, shuangpin: str | None = None) -> list[list[Candidate]]:
        """Typed lines -> up to ``nbest`` distinct conversions each, best first (beam: ``self.beam`` unless
        given, at least ``nbest``). ``constrained``, ``prefixes``, ``fuzzy`` and ``shuangpin`` replace the
        converter's own for this call when given, as in :meth:`search_settings` and :meth:`typing_options`
        (``fuzzy=()`` none, ``shuangpin=""`` full pinyin); DataError for an unknown fuzzy pair or layout.

        Each alternative reading of ambiguous input (``xian`` = xian / xi'an) is decoded and the scores pick
        among them. Input longer than one window is converted chunk by chunk (cut at punctuation); its
        n-best list then holds the best conversion only. Pass-through text more than :data:`LITERAL_CONTEXT`
        characters from any pinyin is copied without the model, so a line costs decoding steps only for
        its pinyin and the context around it. A line holding line ends (``typed_input.split_lines``) is
        converted line by line and its output lines are joined by "\\n": n lines in, n lines out.
        ``chinese_punctuation``: ASCII , . ? ! right after a hanzi become ，。？！. DataError (one line) unless
        ``lines`` is a list (tuple, ...) of str without lone surrogates (a str alone is refused: its characters
        would be taken for lines), ConfigError for a flag that is not a bool."""
        lines = arguments.text_lines(lines, "convert_lines", single=False)
        arguments.check_call(nbest=nbest, batch_size=batch_size, alternatives_limit=alternatives_limit)
        arguments.check_flags("convert_lines", chinese_punctuation=chinese_punctuation)
        decode = self._for_call("convert_lines", nbest, beam=beam, constrained=constrained, prefixes=prefixes,
                                fuzzy=fuzzy, shuangpin=shuangpin)
        settings = self._search_settings(decode)
        plan = self.planner.plan(lines, alternatives_limit, settings.fusion is not None, self._typing_options(decode))
        found = self._decode_best_first(plan, settings, nbest, batch_size)
        return assemble(plan, found, nbest, chinese_punctuation)

    def convert_tokens(self, token_lists: Sequence[Sequence[str]], *, constrained: bool = True,
                       batch_size: int = 256, beam: int = 1) -> list[str]:
        """One output per list of corpus tokens (same order; an empty list gives ""), each constrained by
        :func:`pinyin_hanzi.text.lexicon.token_key`, searched as :meth:`search_settings` resolves ``beam`` and
        ``constrained``. Token lists longer than the window are converted window by window. DataError (one line)
        unless ``token_lists`` is a list of lists of str."""
        token_lists = arguments.token_lists(token_lists, "convert_tokens")
        arguments.check_call(batch_size=batch_size)
        settings = self._search_settings(self._for_call("convert_tokens", beam=beam, constrained=constrained))
        window = self.planner.window
        pieces = [(i, list(tokens[start : start + window]))
                  for i, tokens in enumerate(token_lists) for start in range(0, max(len(tokens), 1), window)]
        found = self._decode([(tokens, [token_key(token) for token in tokens]) for _, tokens in pieces], settings,
                             batch_size)
        outputs = [""] * len(token_lists)
        for (i, _), candidates in zip(pieces, found):
            outputs[i] += candidates[0].text
        return outputs

    def search(self, token_lists: Sequence[Sequence[str]], key_lists: Sequence[Sequence[str]] | None = None, *,
               beam: int = 1, constrained: bool = True) -> list[list[Hypothesis]]:
        """The search's hypotheses for token lists (keys: the lexicon's constraint keys, unless given those of
        corpus tokens, :func:`pinyin_hanzi.text.lexicon.token_key`): per list, up to ``beam`` (hanzi ids, score),
        best first, searched as :meth:`search_settings` resolves ``beam`` and ``constrained`` (at exactly that
        beam: no wider beam for abbreviations). No fallbacks, no chunking. DataError (one line) unless both are
        lists of non-empty lists of str, with as many keys as tokens; ConfigError for a beam out of range."""
        token_lists, key_lists = arguments.search_arguments(token_lists, key_lists)
        settings = self._search_settings(self._for_call("search", beam=beam, constrained=constrained))
        if not token_lists:
            return []
        key_lists = key_lists or [[token_key(token) for token in tokens] for tokens in token_lists]
        return self._search(token_lists, key_lists, settings.beam, settings)

    # ------------------------------------------------------------------------------------------ decoding

    def _search(self, token_lists: list[list[str]], key_lists: list[list[str]], beam: int,
                settings: SearchSettings) -> list[list[Hypothesis]]:
        """:func:`~pinyin_hanzi.decoding.search.beam_search` of non-empty token lists and their keys at ``beam``,
        constrained and fused as ``settings`` say."""
        return self._search_rows(token_lists, self._rows(key_lists), beam, settings)

    def _rows(self, key_lists: list[list[str]]) -> torch.Tensor:
        """The lexicon rows of keys (n, s), PAD_ROW past each list's end. Rows are added to the lexicon on
        first use: one thread at a time."""
        length = max(len(keys) for keys in key_lists)
        return torch.tensor([[self.lexicon.row(key) for key in keys] + [PAD_ROW] * (length - len(keys))
                             for keys in key_lists])

    def _search_rows(self, token_lists: list[list[str]], rows: torch.Tensor, beam: int,
                     settings: SearchSettings) -> list[list[Hypothesis]]:
        source = pad([self.pinyin_vocab.encode(tokens) for tokens in token_lists]).to(self.device)
        return beam_search(self.decoder, source, Constraint(self.lexicon, rows, settings.constrained), beam=beam,
                           fusion=settings.fusion)

    def _decode(self, readings: list[tuple[list[str], list[str]]], settings: SearchSettings,
                batch_size: int, keep: int | None = None) -> list[list[Candidate]]:
        """Candidates (best first) of each (tokens, keys) reading, decoded in batches of similar length, each
        reading at its width (:meth:`SearchSettings.width`: wider with abbreviations); ``keep``: only the
        first that many of each (None: all). Several batches on a CPU with several torch threads are searched
        side by side, the threads shared among them, a few lines on a few threads (:func:`parallel_searches`)."""
        results: list[list[Candidate]] = [[] for _ in readings]
        beam_of = [settings.width(keys) for _, keys in readings]
        order = sorted(range(len(readings)), key=lambda i: (beam_of[i], len(readings[i][0])))
        groups = [list(group) for _, group in itertools.groupby(order, key=beam_of.__getitem__)]  # one per beam
        batches = [group[begin : begin + batch_size] for group in groups for begin in range(0, len(group), batch_size)]
        for i in order:
            if not readings[i][0]:
                results[i] = [Candidate("", 0.0)]
        batches = [kept for batch in batches if (kept := [i for i in batch if readings[i][0]])]
        jobs = [([readings[i][0] for i in batch], self._rows([readings[i][1] for i in batch]), beam_of[batch[0]])
                for batch in batches]
        searches = parallel_searches([len(batch) for batch in batches], self.device)
        found_lists = searches(lambda job: self._search_rows(*job, settings), jobs)
        for batch, found in zip(batches, found_lists):
            for i, hypotheses in zip(batch, found):
                for ids, score in hypotheses[:keep]:
                    chars, notes = self._text(ids, readings[i][1], settings.constrained)
                    read_as = syllables_read(self.lexicon, chars, readings[i][1])
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

    def _decode_best_first(self, plan: Plan, settings: SearchSettings, nbest: int,
                           batch_size: int) -> list[list[Candidate] | None]:
        """Candidates of the plan's readings, scores including their priors; None for readings that cannot
        enter the n-best list and were not decoded.

        log P(hanzi | syllables) <= 0 (and so are the n-gram model's terms), so a reading whose prior is
        below the nbest-th score already found cannot enter the n-best list. Decoding each chunk's most
        probable reading first leaves almost nothing else to decode. With n-gram fusion the readings left
        (see :meth:`pinyin_hanzi.decoding.planning.Planner.readings`) mostly survive that bound, so when one batch holds them all they are
        decoded together at once instead of in two passes."""
        found: list[list[Candidate] | None] = [None] * len(plan.readings)

        def decode(indices: list[int]) -> None:
            # the best conversion is some reading's best hypothesis: with nbest 1 the others need no text
            searched = self._decode([plan.readings[i] for i in indices], settings, batch_size,
                                    keep=1 if nbest == 1 else None)
            for i, candidates in zip(indices, searched):
                for candidate in candidates:
                    candidate.score += plan.priors[i]
                found[i] = candidates

        if settings.fusion is not None and len(plan.readings) <= batch_size:
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
