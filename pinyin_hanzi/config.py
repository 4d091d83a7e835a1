"""Experiment configuration: one dataclass per section, loaded from YAML, validated on load.

A config file has the sections ``data``, ``model``, ``train`` and ``decode``; any key may be overridden on
the command line with ``section.key=value`` (the value is parsed as YAML and checked against the field's
type). Unknown sections or keys, wrong types and invalid values raise :class:`ConfigError` with a one-line
message that names the key and the file.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import stat
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pinyin_hanzi.data.inputs import names_user_text
from pinyin_hanzi.data.sources import SOURCES, WORD_TABLES  # named corpus sources and word tables
from pinyin_hanzi.config_limits import LIMITS  # the tools read the ranges through config too
from pinyin_hanzi.errors import ConfigError
from pinyin_hanzi.files import open_input


@dataclass
class DataConfig:
    corpus: str = "pd1998"  # one source: a name of sources.SOURCES (pd1998, ...) or your own text (as in sources)
    sources: dict[str, float] = field(default_factory=dict)  # several sources -> weight; replaces corpus. A
    # source is a name of sources.SOURCES or your own text: a file of plain text (.txt: a document a line) or
    # of pinyin<TAB>hanzi pairs (.tsv), either also gzip-compressed (.txt.gz, .tsv.gz), a folder of such files
    # (read recursively) or a glob (data/my_text/**/*.txt); a weight of 2 trains on each example twice
    phrase_pinyin: bool = False  # read polyphones with pypinyin-dict's phrase table (银行 yin hang)
    name: str = ""  # prepared-data folder name; defaults to the source's name, or the sources' names joined by +
    prepared_dir: str = "data/prepared"  # prepared splits, vocabularies and stats.json go to <prepared_dir>/<name>/
    raw_dir: str = "data/raw"  # downloaded corpus packages are cached and unpacked here
    max_len: int = 32  # longest example, in syllables; longer clauses are cut into pieces
    valid_per_mille: int = 10  # share of examples (by text hash) held out for validation
    test_per_mille: int = 20  # share of examples (by text hash) held out for testing
    min_char_count: int = 1  # rarer target characters map to <unk>
    abbreviate: float = 0.0  # share of training examples typed abbreviated (0..1): in each, every syllable
    # becomes its initial's prefix token (zhong -> zh*) with a rate drawn per example from (0, 1], so that
    # both "wo xiang q b j" and "bj" are seen; > 0 adds the prefix tokens to the pinyin vocabulary

    def source_weights(self) -> dict[str, float]:
        """Source -> weight: ``sources`` if given, else ``{corpus: 1.0}``."""
        return dict(self.sources) if self.sources else {self.corpus: 1.0}


@dataclass
class ModelConfig:
    d_model: int = 256  # width of embeddings and of every sublayer's input and output
    n_heads: int = 4  # attention heads; must divide d_model
    n_encoder_layers: int = 3  # encoder depth
    n_decoder_layers: int = 3  # decoder depth
    d_ff: int = 1024  # inner width of the feed-forward sublayer
    dropout: float = 0.1  # after embeddings, attention weights and sublayers
    norm: str = "pre"  # "pre" (LayerNorm before each sublayer) or "post" (the original paper)
    tie_output: bool = True  # output projection shares the target embedding's weights
    max_positions: int = 512  # rows of the positional-encoding table: the longest sequence the model takes


@dataclass
class TrainConfig:
    name: str = "run"  # runs/<name>/ and checkpoints/<name>/
    seed: int = 1234  # model initialisation, batch order and dropout
    device: str = "auto"  # auto (cuda > mps > cpu), cpu, cuda, mps
    threads: int = 0  # CPU threads for torch; 0 = number of cores
    max_steps: int = 10000  # optimizer steps; the cosine schedule ends here
    max_minutes: float = 0.0  # stop (and checkpoint) after this much wall time; 0 = no limit
    batch_tokens: int = 4096  # target tokens per batch, padding included
    grad_accum_steps: int = 1  # batches per optimizer step, over all processes (a multiple of their number)
    max_bad_steps: int = 5  # stop after this many batches in a row with a non-finite loss or gradient
    lr: float = 1e-3  # AdamW peak learning rate, reached after the warm-up
    warmup_steps: int = 300  # linear warm-up from 0 to lr
    min_lr_ratio: float = 0.05  # cosine decay ends at lr * min_lr_ratio
    weight_decay: float = 0.01  # AdamW decoupled weight decay (none on biases and norms)
    beta1: float = 0.9  # AdamW's first-moment decay
    beta2: float = 0.98  # AdamW's second-moment decay
    label_smoothing: float = 0.1  # share of the target probability spread over the other classes of the loss
    loss: str = "full"  # "full" softmax over all hanzi, or "candidates": over the syllable's candidates only
    grad_clip: float = 1.0  # largest gradient norm; 0 = no clipping
    log_every: int = 20  # steps between TensorBoard records of loss, lr, gradient norm (and stderr lines off a tty)
    eval_every: int = 500  # steps between evaluations; each writes last.pt, and best.pt when accuracy improves
    eval_sentences: int = 400  # validation clauses decoded (constrained greedy) at each evaluation
    attention_sentences: int = 2  # validation clauses whose cross-attention goes to TensorBoard (0 = none)
    checkpoint_dir: str = "checkpoints"  # last.pt and best.pt go to <checkpoint_dir>/<name>/
    runs_dir: str = "runs"  # TensorBoard events, config.yaml and the JSONL logs go to <runs_dir>/<name>/
    compile: str = "auto"  # torch.compile the step's forward pass and loss (and so its backward pass): "on" (reduce-
    # overhead, i.e. CUDA graphs, on a GPU; default on a CPU), "off", a torch.compile mode, or "auto" = off for now:
    # it crashed on an H200 (torch 2.11), was no faster on a 2-core CPU (docs/benchmarks.md, "Compiled training")
    length_bucket: int = 0  # 0: batches of one length each; N: lengths padded up to multiples of N, fixed rows a
    # bucket, so that a compiled step meets one shape a bucket and compiles them static (train.compile)
    prefetch: int = -1  # global batches built ahead on a thread (pinned on a GPU); -1 = 4 on a GPU, 0 on a CPU
    precision: str = "auto"  # "fp32", "bf16" (autocast; weights and optimizer stay fp32) or "auto": bf16 on CPUs
    # with native bf16 matrix units (AVX512-BF16 or AMX), fp32 elsewhere (GPUs too: faster there at these sizes)
    language_models: list[str] = field(default_factory=list)  # the n-gram models counted from the training split
    # into every checkpoint, for beam search to fuse: "char" (the character n-gram model of decode.lm_order,
    # lm_min_count, lm_phrases; decoding weighs it by decode.lm_weight) and/or "word" (the word model of
    # decode.word_table; weighed by decode.word_weight); [] = none (add one later: pinyin_hanzi.cli.char_lm/word_lm)
    distill_from: str = ""  # a trained checkpoint that teaches this run (knowledge distillation): the loss adds the
    # divergence of this model's distribution from the teacher's over the same characters, e.g. to train a
    # shallower decoder than the teacher's; "" = none. Vocabularies may differ: characters are matched by name
    distill_weight: float = 0.5  # share of the training loss that follows the teacher (the rest: the reference)
    distill_temperature: float = 1.0  # both distributions are softened by it (logits / T; the divergence x T^2)


PREFIX_MODES = ("auto", "on", "off")  # decode.prefixes
COMPILE_SETTINGS = ("auto", "on", "off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PRECISIONS = ("auto", "fp32", "bf16", "int8")  # decode.precision


def prefixes_on(mode: str | bool, trained_with_prefixes: bool) -> bool:
    """Whether abbreviations are read, for decode.prefixes' ``mode`` (True/False as "on"/"off"); torch-free, so
    that the service's server process reads a request's mode as its model processes do."""
    return trained_with_prefixes if mode == "auto" else mode in (True, "on")


@dataclass
class DecodeConfig:
    constrained: bool = True  # only characters whose reading matches the syllable may be chosen
    beam: int = 5  # translate.py's beam size unless --beam is given (1: greedy)
    prefix_beam: int = 16  # beam search widens to this for a reading with abbreviated syllables (b j), whose
    # places allow the characters of every syllable they may begin; greedy decoding (beam 1) stays greedy
    batch_sentences: int = 256  # sentences decoded together when evaluating
    split_penalty: float = 3.0  # score cost of each syllable beyond the fewest-syllable reading of a run
    abbreviation_penalty: float = 1.2  # score cost of reading a letter typed alone that is a syllable itself (a
    # e o; n m as a clause) as an abbreviation: 啊 is always typed a, 爱 only when abbreviated (-log 0.3)
    clause_end: bool = True  # a line typed without final punctuation is decoded as a whole clause (virtual 。)
    lm_weight: float = 0.0  # weight of the character n-gram model in beam search scores (0: none; greedy never
    # uses it; see lm/char_ngram.py); train.py counts the model when train.language_models has char, translate.py
    # --lm-weight overrides it
    lm_order: int = 3  # n of the character n-gram model, 1..4 (counted by train.py from the training split)
    lm_min_count: int = 1  # highest-order n-grams seen fewer times are left out of the n-gram model (smaller)
    lm_max_ngrams: int = 0  # the most n-grams the n-gram model keeps (0: no cap; about 3 bytes an n-gram in a
    # checkpoint, 30-60 in memory): beyond it the rarest are left out, the highest order's first
    # (its min count raised above lm_min_count), the lower orders' only where they alone would fill the cap;
    # the probabilities of those kept are still those of all the counts (docs/training.md#large-corpora)
    lm_phrases: int = 0  # each entry of pypinyin-dict's phrase table is counted this many more times into the
    # n-gram model (idioms and terms the training text has seldom seen; 0: none); with lm_min_count m, m copies
    # keep every phrase's n-grams
    word_weight: float = 0.0  # weight of the word model in beam search scores (lm/word.py: a word-frequency
    # table read as a model of the next character; 0: none; greedy decoding never uses it)
    word_table: str = "wordfreq-zh"  # the word-frequency table train.py counts it from (train.language_models: word):
    # wordfreq-zh or subtlex-ch (data/sources.py)
    word_min_frequency: float = 1e-7  # words rarer than this share of the table are left out (a smaller model)
    word_contrast: float = 0.0  # 0..<1: the word model's scores are divided by those of its words' frequencies
    # in the training split, mixed this much with the table's own (lm/word.py): words that the table's text
    # uses more than the training text gain, the training text's own habits lose; 0: a plain word model
    reading_margin: float = 8.0  # with the n-gram model: readings of ambiguous letters whose prior is more
    # than this below the best reading's are not decoded (a heuristic; without the model an exact bound prunes)
    prefixes: str = "auto"  # typed letters that begin a syllable (b, zh, zho) stand for any syllable they begin
    # (wo xiang q b j): "on", "off", or "auto" = on when the model was trained with abbreviations (its pinyin
    # vocabulary has the prefix tokens b* zh* ...); translate.py --prefixes overrides it
    fuzzy: list[str] = field(default_factory=list)  # fuzzy pinyin pairs on by default, from z-zh c-ch s-sh n-l
    # r-l f-h an-ang en-eng in-ing ian-iang uan-uang (a syllable typed with one side may become a character of
    # the other; [] = none); translate.py --fuzzy overrides it
    shuangpin: str = ""  # read typed letters as double-pinyin key pairs of this layout (microsoft, ziranma,
    # xiaohe, sogou, abc, guobiao, ziguang, pinyinjiajia; "" = full pinyin); translate.py --shuangpin overrides it
    user_words: str = ""  # a user dictionary (a file: one word a line, optionally its pinyin and a weight; see
    # user_words.py): its words are preferred wherever the typed syllables allow them, with no training; read
    # when a converter is made ("" = none); translate.py and serve.py --user-words override it
    user_weight: float = 2.0  # weight of the user dictionary's word model in the search: a finished user word
    # of L characters (weight 1) gains about user_weight x L; 0: the dictionary only adds its readings
    history: str = ""  # a user history (a file of committed text, lm/history.py): conversions prefer what the
    # user committed before (Converter.learn), and what is learned is saved there; "" = in memory only, empty
    # at start; translate.py and serve.py --history override it
    history_weight: float = 1.5  # weight of the history's cache model in the search (lm/history_lm.py: a
    # character gains as much as the user's text makes it likelier than everyday text); 0: nothing is learned
    history_clauses: int = 100000  # the most clauses a history keeps (the oldest are forgotten first)
    precision: str = "auto"  # conversion's matrix products on the CPU: "bf16" (beams and batches; 2-4x faster on
    # CPUs that multiply bf16 natively, emulated and slower elsewhere), "int8" (bf16, and int8 weights for the
    # few rows of a single sentence's beam: a line converted alone takes ~0.87x bf16's time), "fp32", or
    # "auto" = int8 where the CPU has native bf16 (AVX512-BF16, AMX; bf16 on Windows), else fp32; on a GPU
    # conversion runs fp32


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)  # the corpus: sources, preparation, splits
    model: ModelConfig = field(default_factory=ModelConfig)  # the encoder-decoder Transformer's shape
    train: TrainConfig = field(default_factory=TrainConfig)  # the run: optimizer, schedule, batches, logging
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # conversion defaults stored with the model

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


MAX_NBEST = 50  # the most candidates per line the Converter and translate.py --nbest give (not a config key)


def search_beam(beam: int | None, nbest: int, default: int) -> int:
    """The beam a conversion searches with: ``beam``, else ``default`` (the model's decode.beam), and at least
    ``nbest``, since a beam of k keeps at most k candidates. The one rule: the Converter resolves each call's
    beam with it, the HTTP service each request's (to estimate the request's work before the model sees it)."""
    return max(default if beam is None else beam, nbest)


def shown(value, limit: int = 60) -> str:
    """``repr(value)`` on one line and at most ``limit`` characters: what an error message may quote of a
    value a user or a file gave (a tensor or a long list would otherwise spill over many lines)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def range_problem(key: str, value) -> str | None:
    """None if ``value`` lies in the range LIMITS gives ``key`` (and is finite), else what was expected."""
    low, high = LIMITS[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return None if low <= value <= high else f"an integer in {low}..{high}"
    ok = isinstance(value, float) and math.isfinite(value) and low <= value <= high
    return None if ok else f"a finite number in [{low:g}, {high:g}]"


@functools.cache
def _type_hints(cls: type) -> dict:
    """A config section's field types. Cached: with string annotations each call evaluates them again
    (about 0.7 ms), and every conversion call checks its arguments' ranges."""
    return typing.get_type_hints(cls)


def check_range(key: str, value, label: str) -> None:
    """ConfigError (one line: ``label``, the value and the range) unless ``value`` has the type of the config
    key ``key`` and lies in the range LIMITS gives it: for settings of the same meaning outside a config file
    (the Converter's arguments, ``beam=100000``)."""
    section, name = key.split(".")
    integer = _type_hints(SECTIONS[section]).get(name) is int
    if integer and not (isinstance(value, int) and not isinstance(value, bool)):
        raise ConfigError(f"{label}={shown(value)} has the wrong type: expected an integer")
    if not integer and isinstance(value, int) and not isinstance(value, bool):
        value = float(value) if abs(value) < 2**1000 else math.inf
    if problem := range_problem(key, value):
        raise ConfigError(f"{label}={shown(value)} is invalid: expected {problem}")


def validate_config(config: Config, where: str) -> None:
    """ConfigError (one line, naming ``where`` and the key) for a value of ``config`` outside its range or
    against its rule. The values' types are taken as checked (load_config and the Converter check them)."""

    def check(ok: bool, key: str, expected: str) -> None:
        if not ok:
            section, name = key.split(".")
            value = getattr(getattr(config, section), name)
            raise ConfigError(f"{where}: {key}={shown(value)} is invalid: expected {expected}")

    for section, values in config.to_dict().items():
        hints = _type_hints(type(getattr(config, section)))
        for name, value in values.items():
            key = f"{section}.{name}"
            if hints[name] in (int, float) and (problem := range_problem(key, value)):
                raise ConfigError(f"{where}: {key}={shown(value)} is invalid: expected {problem}")
    for name, weight in config.data.sources.items():
        if problem := range_problem("data.sources", weight):
            raise ConfigError(f"{where}: data.sources.{name}={shown(weight)} is invalid: expected a weight: {problem}")
    d, m, t, dec = config.data, config.model, config.train, config.decode
    source_names = f"{', '.join(SOURCES)}, or your own text: a .txt/.tsv file (.gz too), a folder or a glob"
    check(d.corpus in SOURCES or names_user_text(d.corpus), "data.corpus", source_names)
    for name, weight in d.sources.items():
        if not (name in SOURCES or names_user_text(name)):
            raise ConfigError(f"{where}: data.sources has an unknown source {shown(name)}: expected {source_names}")
    check(not d.sources or any(d.sources.values()), "data.sources", "at least one weight > 0")
    check(d.valid_per_mille + d.test_per_mille < 1000, "data.test_per_mille", "valid + test < 1000")
    check(m.d_model % m.n_heads == 0, "model.n_heads", f"a divisor of model.d_model ({m.d_model})")
    check(m.dropout < 1.0, "model.dropout", "a number in [0, 1)")
    check(m.norm in ("pre", "post"), "model.norm", "'pre' or 'post'")
    check(m.max_positions >= d.max_len, "model.max_positions", f">= data.max_len ({d.max_len})")
    check(dec.word_table in WORD_TABLES, "decode.word_table", f"one of {', '.join(WORD_TABLES)}")
    check(dec.word_min_frequency < 1, "decode.word_min_frequency", "a number in [0, 1)")
    check(dec.word_contrast < 1, "decode.word_contrast", "a number in [0, 1)")
    check(dec.prefixes in PREFIX_MODES, "decode.prefixes", "'auto', 'on' or 'off'")
    check(dec.precision in PRECISIONS, "decode.precision", "'auto', 'fp32', 'bf16' or 'int8'")
    if dec.fuzzy or dec.shuangpin:
        from pinyin_hanzi.text.shuangpin import LAYOUTS  # the reading tables load only when these are used
        from pinyin_hanzi.text.typed_input import FUZZY_PAIRS

        for name in dec.fuzzy:
            if name not in FUZZY_PAIRS:
                raise ConfigError(f"{where}: decode.fuzzy has an unknown pair {shown(name)}: expected some of "
                                  f"{', '.join(FUZZY_PAIRS)}")
        check(dec.shuangpin in ("", *LAYOUTS), "decode.shuangpin", f"'' or one of {', '.join(LAYOUTS)}")
    # The name becomes a folder under checkpoint_dir and runs_dir: one plain path component, so that a run
    # can never write into a parent folder or somewhere else (``..``, ``.``, ``a/b``, ``C:\x``).
    check(bool(t.name) and t.name not in (".", "..") and not any(char in t.name for char in "/\\:\0")
          and t.name == t.name.strip(), "train.name", "a plain folder name (not . or .., no / \\ : or spaces around)")
    check(t.device in ("auto", "cpu", "cuda", "mps"), "train.device", "auto, cpu, cuda or mps")
    check(t.batch_tokens >= d.max_len, "train.batch_tokens", f">= data.max_len ({d.max_len})")
    check(t.lr > 0, "train.lr", "a positive number")
    check(t.beta1 < 1.0, "train.beta1", "a number in [0, 1)")
    check(t.beta2 < 1.0, "train.beta2", "a number in [0, 1)")
    check(t.label_smoothing < 1.0, "train.label_smoothing", "a number in [0, 1)")
    check(t.loss in ("full", "candidates"), "train.loss", "'full' or 'candidates'")
    check(t.precision in ("auto", "fp32", "bf16"), "train.precision", "'auto', 'fp32' or 'bf16'")
    check(t.compile in COMPILE_SETTINGS, "train.compile", ", ".join(COMPILE_SETTINGS))
    check(set(t.language_models) <= {"char", "word"}, "train.language_models", "a list of char and/or word")


def _coerce(value, annotation, key: str, where: str):
    """Return ``value`` as the field's type, or raise ConfigError naming the key."""
    if typing.get_origin(annotation) is list:  # decode.fuzzy: names, as a list or one comma-separated string
        if isinstance(value, str):
            value = [name.strip() for name in value.split(",") if name.strip()]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{where}: {key}={shown(value)} has the wrong type: expected a list of names")
        return list(value)
    if typing.get_origin(annotation) is dict:  # data.sources: name -> weight
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {key}={shown(value)} has the wrong type: expected a mapping of name: weight")
        return {str(name): _coerce(weight, float, f"{key}.{name}", where) for name, weight in value.items()}
    if key in ("decode.prefixes", "train.compile") and isinstance(value, bool):  # YAML 1.1 reads a bare on / off
        value = "on" if value else "off"  # (or true / false) as a boolean
    expected = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[annotation]
    if annotation is bool:
        ok = isinstance(value, bool)
    elif annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif annotation is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        try:
            value = float(value) if ok else value
        except OverflowError:  # an integer beyond any float (10**400): out of every range
            raise ConfigError(f"{where}: {key}={shown(value)} is invalid: expected a finite number") from None
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"{where}: {key}={shown(value)} has the wrong type: expected {expected}")
    return value


def _apply(config: Config, section: str, key: str, value, where: str) -> None:
    sections = {f.name for f in dataclasses.fields(Config)}
    if section not in sections:
        raise ConfigError(f"{where}: unknown section {shown(section)} (expected one of {', '.join(sorted(sections))})")
    target = getattr(config, section)
    hints = _type_hints(type(target))
    if key not in hints:
        name = " ".join(f"{section}.{key}".split())[:80]  # a key from a file: one line, not too long
        raise ConfigError(f"{where}: unknown key {name} (expected one of {', '.join(hints)})")
    setattr(target, key, _coerce(value, hints[key], f"{section}.{key}", where))


MAX_CONFIG_BYTES = 1 << 20  # a config is a few sections of key: value; far larger is no config


def _read_config_text(path: str | Path) -> str:
    """The text of a config file: a regular file, or a pipe (``--config <(...)``), of at most
    MAX_CONFIG_BYTES. ConfigError (one line) if it is missing, unreadable, another kind of file (a device,
    a directory), larger, or not UTF-8."""
    with open_input(path, "config file", ConfigError, pipes=True,
                    why=" or a pipe: name a YAML file such as configs/quickstart.yaml") as handle:
        try:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as error:
            raise ConfigError(f"cannot read config file {path}: {error.strerror or error}") from None
        if not data and stat.S_ISFIFO(os.fstat(handle.fileno()).st_mode):
            raise ConfigError(f"config file {path} is a named pipe that no process writes to")
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB: a config is a few "
                          f"sections of key: value (see configs/quickstart.yaml)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 (byte {error.start})") from None


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config (or start from the defaults) and apply ``section.key=value`` overrides.

    Raises ConfigError (one line, naming the key and file) for a missing, unreadable, oversized or
    unparsable file (see :func:`_read_config_text`), an unknown section or key, a value of the wrong type,
    or an invalid value.
    """
    config = Config()
    where = str(path) if path is not None else "<defaults>"
    if path is not None:
        text = _read_config_text(path)
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            at = f" (line {mark.line + 1})" if mark is not None else ""
            raise ConfigError(f"{path}: not valid YAML{at}") from None
        if raw is None:  # an empty file is a mistake, not a request for a 10,000-step run on defaults
            raise ConfigError(f"{path} is empty: expected the sections data, model, train, decode "
                              f"(see configs/quickstart.yaml)")
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping of sections (data, model, train, decode)")
        for section, values in raw.items():
            if not isinstance(values, dict):
                if not hasattr(config, str(section)):
                    _apply(config, str(section), "", None, where)  # raises "unknown section"
                raise ConfigError(f"{path}: section {section!r} must be a mapping of key: value")
            for key, value in values.items():
                _apply(config, str(section), str(key), value, where)
    apply_overrides(config, overrides)
    validate_config(config, where if not overrides else f"{where} + command line")
    return config


def apply_overrides(config: Config, overrides: list[str] | tuple[str, ...], sections: tuple[str, ...] = ()) -> None:
    """Apply ``section.key=value`` overrides as typed on a command line (values read as YAML; a string
    key keeps its text: ``name=123`` is a name) to ``config``, without validating the whole; ``sections``:
    the only sections they may change (empty: any). Raises ConfigError (one line) for a malformed override,
    a section not allowed, an unknown key or a value of the wrong type."""
    for override in overrides:
        dotted, sep, text_value = override.partition("=")
        section, dot, key = dotted.strip().partition(".")
        if not sep or not dot or not key:
            example = f"{sections[0]}.key=value" if sections else "section.key=value, e.g. train.lr=3e-4"
            raise ConfigError(f"override {shown(override)}: expected {example}")
        if sections and section not in sections:
            raise ConfigError(f"override {shown(override)}: only {', '.join(s + '.*' for s in sections)} "
                              f"settings can be changed here")
        try:
            value = yaml.safe_load(text_value) if text_value.strip() else ""
        except yaml.YAMLError:
            value = text_value
        hints = _type_hints(type(getattr(config, section, Config())))
        if hints.get(key) is str and not isinstance(value, str):
            value = text_value  # "name=123" is still a name
        _apply(config, section, key, value, "command line")


def config_from_dict(raw: dict, where: str = "checkpoint") -> Config:
    """Rebuild a Config from ``Config.to_dict()`` output (as stored in checkpoints), validating it."""
    config = Config()
    for section, values in raw.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: section {shown(section)} is not a mapping")
        for key, value in values.items():
            if not (isinstance(section, str) and isinstance(key, str)):
                raise ConfigError(f"{where}: config key {shown(section)}.{shown(key)} is not a name")
            _apply(config, section, key, value, where)
    validate_config(config, where)
    return config


def save_config(config: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8")


# The sections by name, as config files and dotted overrides name them.
SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "decode": DecodeConfig}
