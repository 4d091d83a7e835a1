"""The Python API's arguments checked at its edge (:class:`pinyin_hanzi.decoding.converter.Converter`'s public methods).

A value of the wrong type would otherwise fail deep inside (an AttributeError from the tokenizer), or worse,
be converted as something else: a dict's keys, a str's characters as lines, bytes as numbers. Each check
raises one of the project's errors in one line that names the method, the argument and what it expected
("convert() takes a str or a list of str, got bytes"): DataError for the text to convert, ConfigError for
an option, CheckpointError for a checkpoint path. The checks cost a type test per line (and a scan of
non-ASCII lines for surrogates), nothing next to decoding.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence

import torch

from pinyin_hanzi.config import MAX_NBEST, PRECISIONS, PREFIX_MODES, DecodeConfig, check_range, shown
from pinyin_hanzi.errors import CheckpointError, ConfigError, DataError

# U+D800..U+DFFF are no characters: a lone one comes from a bad "\ud800" escape or a "surrogateescape" decoder,
# and no UTF-8 writer can encode it (the output line would fail to print, or be sent as garbage).
_SURROGATE = re.compile("[\ud800-\udfff]")
DEVICES_HINT = "use cpu, cuda, cuda:N, mps or auto"


def _kind_of(value) -> str:
    """What a message calls a value's type: ``None``, ``bytes``, ``dict``, ..."""
    return "None" if value is None else type(value).__name__


def _check_unicode(text: str, method: str, where: str) -> None:
    if not text.isascii() and (surrogate := _SURROGATE.search(text)):
        raise DataError(f"{method}() takes Unicode text, but {where} holds a lone surrogate "
                        f"U+{ord(surrogate.group()):04X} (character {surrogate.start() + 1}), which is no character")


def _is_list_like(value) -> bool:
    """A sequence of items (list, tuple, ...), not text: str, bytes and bytearray are sequences too."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray, memoryview))


def _refuse(method: str, expected: str, value) -> DataError:
    hint = ": decode it first (data.decode('utf-8'))" if isinstance(value, (bytes, bytearray, memoryview)) else ""
    return DataError(f"{method}() takes {expected}, got {_kind_of(value)}{hint}")


def text_lines(value, method: str, *, single: bool) -> list[str]:
    """``value`` as a list of lines: a list (tuple, ...) of str, or with ``single`` one str. DataError (one line)
    for anything else (bytes, None, a dict, a list holding a non-str, a str where a list is expected) and
    for a line holding a lone surrogate."""
    expected = "a str or a list of str" if single else "a list of str"
    if isinstance(value, str):
        if not single:
            raise DataError(f"{method}() takes {expected}, got a str: put one line in a list ([text])")
        _check_unicode(value, method, "the text")
        return [value]
    if not _is_list_like(value):
        raise _refuse(method, expected, value)
    lines = list(value)
    for index, line in enumerate(lines):
        if not isinstance(line, str):
            raise DataError(f"{method}() takes {expected}, got a {_kind_of(value)} whose item {index} is "
                            f"{_kind_of(line)}")
        _check_unicode(line, method, f"item {index}")
    return lines


def text_line(value, method: str) -> str:
    """``value`` if it is a str of Unicode text; DataError (one line) otherwise."""
    if not isinstance(value, str):
        raise _refuse(method, "a str", value)
    _check_unicode(value, method, "the text")
    return value


def token_lists(value, method: str, argument: str = "token_lists") -> list[list[str]]:
    """``value`` as a list of token lists (``[["ni", "hao"], ...]``); DataError (one line) otherwise."""
    expected = f"{argument} as a list of token lists, e.g. [['ni', 'hao']]"
    if not _is_list_like(value):
        raise _refuse(method, expected, value)
    lists = []
    for index, tokens in enumerate(value):
        if not _is_list_like(tokens):
            raise DataError(f"{method}() takes {expected}, got one whose item {index} is {_kind_of(tokens)}")
        for token in tokens:
            if not isinstance(token, str):
                raise DataError(f"{method}() takes {expected}, got one whose item {index} holds {_kind_of(token)}")
            _check_unicode(token, method, f"{argument}[{index}]")
        lists.append(list(tokens))
    return lists


def check_flags(method: str, *, optional: Iterable[str] = (), **flags) -> None:
    """ConfigError (one line) unless each flag is True or False; those named in ``optional`` may be None."""
    for name, value in flags.items():
        if not (isinstance(value, bool) or (value is None and name in optional)):
            expected = "True, False or None" if name in optional else "True or False"
            raise ConfigError(f"{method}(): {name}={shown(value)} is invalid: expected {expected}")


def typing_options(method: str, fuzzy, shuangpin):
    """``fuzzy`` as None, a pair's name or a tuple of names (read once: it may be a generator); DataError (one
    line) unless it is one of those and ``shuangpin`` is None or a layout's name. Unknown names are the
    converter's to refuse: it lists the known ones."""
    if not (fuzzy is None or isinstance(fuzzy, str)) and isinstance(fuzzy, Iterable) and not isinstance(
            fuzzy, (bytes, bytearray, dict)):
        fuzzy = tuple(fuzzy)
    if not (fuzzy is None or isinstance(fuzzy, str) or
            (isinstance(fuzzy, tuple) and all(isinstance(name, str) for name in fuzzy))):
        raise DataError(f"{method}(): fuzzy={shown(fuzzy)} is invalid: expected None or a list of pair names "
                        f"such as ['z-zh', 'n-l']")
    if not (shuangpin is None or isinstance(shuangpin, str)):
        raise DataError(f"{method}(): shuangpin={shown(shuangpin)} is invalid: expected None or a layout's name")
    return fuzzy


def decode_changes(method: str, changes: dict) -> dict:
    """``changes`` (DecodeConfig field -> a value as the Python API takes it; None: left as it is) as
    DecodeConfig values, each checked as a config file's value is: ``prefixes`` True, False or a mode of
    decode.prefixes ("auto", "on", "off") -> the mode; ``fuzzy`` pair names (any iterable, or one name) -> a
    list; ``shuangpin`` a layout's name or "" (full pinyin); ``user_words`` a path (a str or Path; "" none) -> a
    str. ConfigError (one line, naming the argument) for a
    number outside its decode.* range (config.LIMITS), a flag that is not a bool or text that is no str;
    DataError for ``fuzzy`` or ``shuangpin`` of the wrong type (unknown names are refused where they are read,
    listing the known ones); TypeError for a name DecodeConfig lacks, as Python reports a misspelt keyword."""
    kinds = {item.name: item.type for item in dataclasses.fields(DecodeConfig)}  # "int", "bool", ... (strings)
    checked = {}
    for name, value in changes.items():
        if value is None:
            continue
        kind = kinds.get(name)
        if kind is None:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")
        if name == "prefixes":
            value = _prefix_mode(method, value)
        elif name == "fuzzy":
            names = typing_options(method, value, None)
            value = [names] if isinstance(names, str) else list(names)
        elif name == "shuangpin":
            typing_options(method, None, value)
        elif name in ("user_words", "history") and isinstance(value, os.PathLike) and not isinstance(value, bytes):
            value = os.fspath(value)  # a path, as from_checkpoint takes one
            if not isinstance(value, str):
                raise ConfigError(f"{method}(): {name}={shown(value)} is invalid: expected a str or Path")
        elif kind in ("int", "float"):
            check_range(f"decode.{name}", value, name)
            value = float(value) if kind == "float" else value  # as a config file's 1 becomes 1.0
        elif kind == "bool":
            check_flags(method, optional=(name,), **{name: value})
        elif not isinstance(value, str):
            raise ConfigError(f"{method}(): {name}={shown(value)} is invalid: expected a str")
        elif name == "precision" and value not in PRECISIONS:
            raise ConfigError(f"{method}(): precision={shown(value)} is invalid: expected 'auto', 'fp32', 'bf16' or 'int8'")
        checked[name] = value
    return checked


def _prefix_mode(method: str, value) -> str:
    """decode.prefixes' mode of a ``prefixes`` argument: True "on", False "off", or a mode itself."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value in PREFIX_MODES:
        return value
    raise ConfigError(f"{method}(): prefixes={shown(value)} is invalid: expected True, False, None or one of "
                      f"{', '.join(repr(mode) for mode in PREFIX_MODES)}")


def loading_options(method: str, *, path, log) -> None:
    """CheckpointError or ConfigError (one line) for a bad ``path`` or ``log`` of ``from_checkpoint``/
    ``from_pretrained``, before seconds go into loading the checkpoint."""
    if not (path is None or isinstance(path, (str, os.PathLike))) or isinstance(path, bytes):
        raise CheckpointError(f"{method}() takes a checkpoint path (a str or pathlib.Path), got {_kind_of(path)}")
    if not (log is None or callable(log)):
        raise ConfigError(f"{method}(): log={shown(log)} is invalid: expected None or a function of one str")


def inference_device(device) -> torch.device:
    """``device`` ("cpu", "cuda", "cuda:1", "mps", "auto" or a torch.device) as a device that exists here: "auto"
    picks CUDA, then MPS, then the CPU. ConfigError (one line) for a name torch does not know, a kind of device
    that cannot convert (meta, xla, ...), or one this machine lacks (cuda without CUDA, cuda:3 on a machine
    with two)."""
    from pinyin_hanzi.runtime import select_device  # torch: the other checks answer without it

    if isinstance(device, str) and device == "auto":
        return select_device("auto")
    try:
        chosen = torch.device(device) if isinstance(device, (str, torch.device)) else None
    except (RuntimeError, ValueError, TypeError):  # torch lists its twenty device types; the hint says ours
        chosen = None
    if chosen is None:
        raise ConfigError(f"device={shown(device)} is not a device: {DEVICES_HINT}")
    name = str(device)
    if chosen.type == "cpu":
        return chosen
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device={name!r}, but this machine has no CUDA device: use cpu, or auto")
        if chosen.index is not None and chosen.index >= count:
            raise ConfigError(f"device={name!r}, but this machine has {count} CUDA device"
                              f"{'s' if count > 1 else ''}: cuda:0{f'..cuda:{count - 1}' if count > 1 else ''}")
        return chosen
    if chosen.type == "mps":
        if not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
            raise ConfigError(f"device={name!r}, but MPS is not available here: use cpu, or auto")
        return chosen
    raise ConfigError(f"device={name!r} cannot convert: {DEVICES_HINT}")


def check_call(*, nbest: int = 1, batch_size: int = 1, alternatives_limit: int = 1) -> None:
    """ConfigError (one line) for a conversion call's number outside its range: batch_size as
    decode.batch_sentences, nbest 1..MAX_NBEST, alternatives_limit 1..64."""
    check_range("decode.batch_sentences", batch_size, "batch_size")
    for value, label, high in ((nbest, "nbest", MAX_NBEST), (alternatives_limit, "alternatives_limit", 64)):
        if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high):
            raise ConfigError(f"{label}={shown(value)} is invalid: expected an integer in 1..{high}")


def search_arguments(lists, keys) -> tuple[list[list[str]], list[list[str]] | None]:
    """``Converter.search``'s token lists and key lists (None: none given), checked: DataError (one line) unless
    both are lists of non-empty lists of str, with as many keys as tokens."""
    lists = token_lists(lists, "search")
    if keys is not None:
        keys = token_lists(keys, "search", "key_lists")
        if len(keys) != len(lists):
            raise DataError(f"search(): {len(keys)} key lists for {len(lists)} token lists")
    for index, tokens in enumerate(lists):
        if not tokens:
            raise DataError(f"search(): token list {index} is empty: the model needs at least one token")
        if keys is not None and len(keys[index]) != len(tokens):
            raise DataError(f"search(): key list {index} has {len(keys[index])} keys for "
                            f"{len(tokens)} tokens: expected one key per token")
    return lists, keys
