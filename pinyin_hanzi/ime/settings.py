"""The input method's settings file: which model converts and how typed letters are read.

A YAML mapping, every key optional (the defaults are below); unknown keys and values out of range are an error
naming the key and the file, as with the training configs:

    checkpoint: ""            # a checkpoint path; "": $PINYIN_HANZI_CHECKPOINT, else the shipped model
    prefixes: auto            # abbreviations (bei j, wxqbj): auto (on for a model trained with them), on, off
    fuzzy: []                 # fuzzy pinyin pairs: z-zh c-ch s-sh n-l r-l f-h an-ang en-eng in-ing ian-iang uan-uang
    shuangpin: ""             # a double-pinyin layout (microsoft, ziranma, xiaohe, ...); "": full pinyin
    history: ~/.local/share/pinyin_hanzi/ime_history.txt    # what you commit, learned; "": learn for the session only
    page_size: 5              # candidates a page (1..10)
    sentences: 5              # n-best conversions of the whole line in the table (1..10)
    words: true               # also candidates for the first one and two syllables (partial selection)
    chinese_punctuation: true # , . ? ! ; : ( ) [ ] < > \\ " ' ... typed as ，。？！；：（）【】《》、“”‘’
    threads: 2                # torch threads for conversion (1..64)
    service: ""               # "": the model in the engine's process; http://127.0.0.1:8000: serve.py converts
                              # (checkpoint, threads and history are then the service's own)

Where it is read: ``--settings PATH``, else $PINYIN_HANZI_IME_SETTINGS, else
``$XDG_CONFIG_HOME/pinyin_hanzi/ime.yaml`` (``~/.config/...``); a missing file means the defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from pinyin_hanzi.config import PREFIX_MODES
from pinyin_hanzi.errors import ConfigError

SETTINGS_VARIABLE = "PINYIN_HANZI_IME_SETTINGS"
DEFAULT_HISTORY = "~/.local/share/pinyin_hanzi/ime_history.txt"
RANGES = {"page_size": (1, 10), "sentences": (1, 10), "threads": (1, 64)}


@dataclass(frozen=True)
class ImeSettings:
    checkpoint: str = ""
    prefixes: str = "auto"
    fuzzy: tuple[str, ...] = field(default_factory=tuple)
    shuangpin: str = ""
    history: str = DEFAULT_HISTORY
    page_size: int = 5
    sentences: int = 5
    words: bool = True
    chinese_punctuation: bool = True
    threads: int = 2
    service: str = ""  # the base URL of serve.py; "": convert in the engine's process

    @property
    def history_path(self) -> str:
        """The history file, ``~`` expanded; "" for none."""
        return str(Path(self.history).expanduser()) if self.history else ""


def default_path() -> Path:
    """Where the settings are read unless ``--settings`` names a file (see the module's docstring)."""
    if os.environ.get(SETTINGS_VARIABLE):
        return Path(os.environ[SETTINGS_VARIABLE])
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "pinyin_hanzi" / "ime.yaml"


def load_settings(path: str | Path | None = None) -> ImeSettings:
    """The settings in ``path`` (None: :func:`default_path`); the defaults where the file is missing.
    ConfigError (one line, naming the file) for a file that is unreadable or no YAML mapping, an unknown key,
    or a value of the wrong type or out of range."""
    path = Path(path) if path is not None else default_path()
    if not path.exists():
        return ImeSettings()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0]
        raise ConfigError(f"cannot read the IME settings {path}: {reason}") from None
    if data is None:
        return ImeSettings()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings (key: value), got {type(data).__name__}")
    return settings_from(data, str(path))


def settings_from(data: dict, where: str) -> ImeSettings:
    """ImeSettings from a mapping, each value checked; ``where`` names its source in errors."""
    known = {f.name: f for f in fields(ImeSettings)}
    for key in data:
        if key not in known:
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {', '.join(known)}")
    settings = ImeSettings()
    for key, value in data.items():
        settings = replace(settings, **{key: _checked(key, value, where)})
    return settings


def _checked(key: str, value, where: str):
    """One setting's value, checked and in its field's type."""
    bad = ConfigError(f"{where}: {key}: {value!r} is invalid")
    if key in RANGES:
        low, high = RANGES[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{where}: {key} must be a whole number between {low} and {high}, got {value!r}")
        return value
    if key in ("words", "chinese_punctuation"):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
        return value
    if key == "prefixes":
        value = {True: "on", False: "off"}.get(value, value)  # YAML reads a bare on/off as a bool
        if value not in PREFIX_MODES:
            raise ConfigError(f"{where}: prefixes must be one of {', '.join(PREFIX_MODES)}, got {value!r}")
        return value
    # the pinyin tables these checks read (pypinyin's, tens of MB) are imported only where the file sets a
    # value to check: a service-backed engine stays small
    if key == "fuzzy":
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise bad
        if not names:
            return ()
        from pinyin_hanzi.text.fuzzy import fuzzy_pairs

        return tuple(sorted(_with_source(lambda: fuzzy_pairs(names), where)))
    if key == "shuangpin":
        if value in (None, ""):
            return ""
        if not isinstance(value, str):
            raise bad
        from pinyin_hanzi.text.shuangpin import layout_named

        return _with_source(lambda: layout_named(value), where).name
    if key == "service":
        return _service_url(value, where)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a path (a string), got {value!r}")
    return value


def _service_url(value, where: str) -> str:
    """The service's base URL without a trailing slash ("" for none): http, a host, at most a port."""
    if value in (None, ""):
        return ""
    parts = urlsplit(value) if isinstance(value, str) else None
    try:
        port_ok = parts is not None and (parts.port is None or parts.port > 0)
    except ValueError:  # a port that is no number or out of range
        port_ok = False
    if not port_ok or parts.scheme != "http" or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(f"{where}: service must be the URL of serve.py, like http://127.0.0.1:8000, got {value!r}")
    return value.rstrip("/")


def _with_source(check, where: str):
    """``check()``, its DataError (an unknown pair or layout) as a ConfigError naming the settings file."""
    from pinyin_hanzi.errors import DataError

    try:
        return check()
    except DataError as error:
        raise ConfigError(f"{where}: {error}") from None
