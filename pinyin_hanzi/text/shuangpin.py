"""Shuangpin (double pinyin): every syllable typed as exactly two keys, an initial key and a final key.

Each layout is data, a :class:`Layout`: the keys of the initials zh ch sh (the other initials are their own
letter), the key(s) of every multi-letter final and of ü (``v``), and how the syllables without an initial
(``a ai an ang ao e ei en eng er o ou``) are typed, which differs per layout. Syllables are the project's:
toneless, ü written ``v`` (``lv``, ``nve``), while ju qu xu yu keep the ``u`` of standard spelling.

Decoding reads a run of keys two at a time::

    decode("vsgo", "microsoft")        -> ["zhong", "guo"]
    decode_pieces("nihkv", "microsoft") -> [("syllable", "ni", "ni"), ("syllable", "hao", "hk"),
                                            ("prefix", "zh", "v")]

:func:`decode` is strict: a pair that spells no syllable, or a lone trailing key, raises :class:`DataError`.
:func:`decode_pieces` never fails on what a user may type: a pair that spells no syllable comes back as a
``"keys"`` piece holding the keys themselves, for the caller to pass through as typed; a lone trailing key
(the user is half-way through a syllable) that is an initial key comes back as a ``"prefix"`` piece holding
the initial it stands for (``"zh"`` for ``v`` in Microsoft), for the caller to treat as an abbreviated
syllable; any other lone key is a ``"keys"`` piece.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text.pinyin import syllables

# Initials whose key is their own letter in every layout; zh ch sh get a layout's own keys.
SINGLE_INITIALS = "bpmfdtnlgkhjqxrzcsyw"
_INITIALS = ("zh", "ch", "sh") + tuple(SINGLE_INITIALS)
# Single-letter finals are their own key in every layout (ü, written v, has a layout's own key).
_SINGLE_FINALS = "aoeiu"
# The syllables without an initial; every layout says how to type each one.
ZERO_INITIAL = ("a", "ai", "an", "ang", "ao", "e", "ei", "en", "eng", "er", "o", "ou")

# Syllables of the project's table that no layout here types. The syllabic nasals (嗯 呣 哼) have no final
# to put on a key; lo (咯) would be typed as luo, since every layout puts o and uo on one key (after b p m
# f only o occurs, after other initials uo) and luo is the reading that key pair stands for.
UNTYPED = frozenset({"m", "n", "ng", "hm", "hng", "lo"})

SYLLABLE, PREFIX, KEYS = "syllable", "prefix", "keys"


@dataclass(frozen=True)
class Layout:
    """One double-pinyin layout.

    ``finals`` and ``zero_initial`` list, for each final or initial-less syllable, every way the layout
    lets it be typed, the first being the one :func:`encode` types: ``finals`` as a string of keys (one
    key each, ``"tv"`` = t, or also v), ``zero_initial`` as space-separated key pairs (``"ah oh"``).
    ``jqxy_umlaut``: ju qu xu yu (and jue que …) may also be typed with the keys of ü (``v``) and üe
    (``ve``), as the layout's IMEs accept.
    """

    name: str
    title: str
    initials: dict[str, str]
    finals: dict[str, str]
    zero_initial: dict[str, str]
    jqxy_umlaut: bool = True
    untyped: frozenset[str] = UNTYPED

    @property
    def keys(self) -> frozenset[str]:
        """Every key the layout uses: the 26 letters, and ``;`` where a final sits on it."""
        return frozenset("abcdefghijklmnopqrstuvwxyz") | {key for keys in self.finals.values() for key in keys}

    def initial_key(self, initial: str) -> str:
        return self.initials.get(initial, initial)

    def final_keys(self, final: str) -> str:
        return self.finals.get(final, final if final in _SINGLE_FINALS else "")


# Microsoft (微软双拼). Source: the Microsoft Pinyin IME's published 微软双拼 key chart. The initial-less
# syllables start with the key o. üe is on T with ue; the chart also puts it on V (with zh, ui).
MICROSOFT = Layout(
    name="microsoft",
    title="微软双拼",
    initials={"zh": "v", "ch": "i", "sh": "u"},
    finals={
        "iu": "q", "ia": "w", "ua": "w", "er": "r", "uan": "r", "ue": "tv", "ve": "tv", "uai": "y", "v": "y",
        "uo": "o", "un": "p", "ong": "s", "iong": "s", "iang": "d", "uang": "d", "en": "f", "eng": "g",
        "ang": "h", "an": "j", "ao": "k", "ai": "l", "ing": ";", "ei": "z", "ie": "x", "iao": "c", "ui": "v",
        "ou": "b", "in": "n", "ian": "m",
    },
    zero_initial={
        "a": "oa", "ai": "ol", "an": "oj", "ang": "oh", "ao": "ok", "e": "oe", "ei": "oz", "en": "of",
        "eng": "og", "er": "or", "o": "oo", "ou": "ob",
    },
)

# Sogou (搜狗双拼). Source: the Sogou Pinyin IME's published 搜狗双拼 key chart. Microsoft's layout, ing on
# ; included, except that üe is on T alone: V holds zh and ui only.
SOGOU = Layout(
    name="sogou",
    title="搜狗双拼",
    initials={"zh": "v", "ch": "i", "sh": "u"},
    finals={**MICROSOFT.finals, "ue": "t", "ve": "t"},
    zero_initial=dict(MICROSOFT.zero_initial),
)

# Ziranma (自然码). Source: the published 自然码双拼 key chart. Initial-less syllables as spelled when they
# have two letters (ai, ou), a single letter doubled (aa), three letters as first letter + final key
# (ang = ah, eng = eg), as Xiaohe; the older chart starts them with o + final key instead (ang = oh), and
# Ziranma IMEs (and this module) accept both.
ZIRANMA = Layout(
    name="ziranma",
    title="自然码",
    initials={"zh": "v", "ch": "i", "sh": "u"},
    finals={
        "iu": "q", "ia": "w", "ua": "w", "uan": "r", "ue": "t", "ve": "t", "ing": "y", "uai": "y", "uo": "o",
        "un": "p", "ong": "s", "iong": "s", "iang": "d", "uang": "d", "en": "f", "eng": "g", "ang": "h",
        "an": "j", "ao": "k", "ai": "l", "ei": "z", "ie": "x", "iao": "c", "ui": "v", "v": "v", "ou": "b",
        "in": "n", "ian": "m", "er": "r",
    },
    zero_initial={
        "a": "aa oa", "ai": "ai ol", "an": "an oj", "ang": "ah oh", "ao": "ao ok", "e": "ee oe", "ei": "ei oz",
        "en": "en of", "eng": "eg og", "er": "er or", "o": "oo", "ou": "ou ob",
    },
)

# Xiaohe (小鹤双拼). Source: the published 小鹤双拼 key chart. Initial-less syllables: a single letter
# doubled (aa, ee, oo), two letters as spelled (ai, en, er, ou), three as first letter + final key
# (ang = ah, eng = eg); there is no o-led form.
XIAOHE = Layout(
    name="xiaohe",
    title="小鹤双拼",
    initials={"zh": "v", "ch": "i", "sh": "u"},
    finals={
        "iu": "q", "ei": "w", "uan": "r", "ue": "t", "ve": "t", "un": "y", "uo": "o", "ie": "p", "ong": "s",
        "iong": "s", "ai": "d", "en": "f", "eng": "g", "ang": "h", "an": "j", "ing": "k", "uai": "k",
        "iang": "l", "uang": "l", "ou": "z", "ia": "x", "ua": "x", "ao": "c", "ui": "v", "v": "v", "in": "b",
        "iao": "n", "ian": "m",
    },
    zero_initial={
        "a": "aa", "ai": "ai", "an": "an", "ang": "ah", "ao": "ao", "e": "ee", "ei": "ei", "en": "en",
        "eng": "eg", "er": "er", "o": "oo", "ou": "ou",
    },
)

# Zhineng ABC (智能ABC). Source: the 智能ABC input method's published 双打 key chart. zh ch sh sit on the
# vowel keys A E V; initial-less syllables start with o + final key.
ABC = Layout(
    name="abc",
    title="智能ABC",
    initials={"zh": "a", "ch": "e", "sh": "v"},
    finals={
        "ei": "q", "ian": "w", "iu": "r", "er": "r", "iang": "t", "uang": "t", "ing": "y", "uo": "o",
        "uan": "p", "ong": "s", "iong": "s", "ia": "d", "ua": "d", "en": "f", "eng": "g", "ang": "h",
        "an": "j", "ao": "k", "ai": "l", "iao": "z", "ie": "x", "in": "c", "uai": "c", "ou": "b", "un": "n",
        "ue": "m", "ve": "m", "ui": "m", "v": "v",
    },
    zero_initial={
        "a": "oa", "ai": "ol", "an": "oj", "ang": "oh", "ao": "ok", "e": "oe", "ei": "oq", "en": "of",
        "eng": "og", "er": "or", "o": "oo", "ou": "ob",
    },
    jqxy_umlaut=False,
)

# Guobiao (国标双拼). Source: the published 国标双拼 key chart. Initial-less syllables start with a +
# final key (o = ao, er = al).
GUOBIAO = Layout(
    name="guobiao",
    title="国标双拼",
    initials={"zh": "v", "ch": "i", "sh": "u"},
    finals={
        "ia": "q", "ua": "q", "uan": "w", "en": "r", "ie": "t", "iu": "y", "uai": "y", "uo": "o", "ou": "p",
        "ong": "s", "iong": "s", "ian": "d", "an": "f", "ang": "g", "eng": "h", "ing": "j", "ai": "k",
        "in": "l", "er": "l", "un": "z", "ue": "x", "ve": "x", "ao": "c", "ui": "v", "v": "v", "ei": "b",
        "iang": "n", "uang": "n", "iao": "m",
    },
    zero_initial={
        "a": "aa", "ai": "ak", "an": "af", "ang": "ag", "ao": "ac", "e": "ae", "ei": "ab", "en": "ar",
        "eng": "ah", "er": "al", "o": "ao", "ou": "ap",
    },
)

# Ziguang (紫光双拼). Source: the Ziguang (Unispim) Pinyin IME's published 紫光双拼 key chart. zh ch sh on
# U A I; ing on ;; initial-less syllables start with o + final key.
ZIGUANG = Layout(
    name="ziguang",
    title="紫光双拼",
    initials={"zh": "u", "ch": "a", "sh": "i"},
    finals={
        "ao": "q", "en": "w", "eng": "t", "in": "y", "uai": "y", "uo": "o", "ai": "p", "ang": "s", "ie": "d",
        "ian": "f", "iang": "g", "uang": "g", "ong": "h", "iong": "h", "er": "j", "iu": "j", "ei": "k",
        "uan": "l", "ing": ";", "ou": "z", "ia": "x", "ua": "x", "iao": "b", "ue": "n", "ve": "n", "ui": "n",
        "un": "m", "an": "r", "v": "v",
    },
    zero_initial={
        "a": "oa", "ai": "op", "an": "or", "ang": "os", "ao": "oq", "e": "oe", "ei": "ok", "en": "ow",
        "eng": "ot", "er": "oj", "o": "oo", "ou": "oz",
    },
)

# PinyinJiaJia (拼音加加). Source: the 拼音加加 IME's published 双拼 key chart. zh ch sh on V U I;
# initial-less syllables are first letter + final key (ai = as, en = er, er = eq), and o + final key is
# accepted too (ai = os).
PINYINJIAJIA = Layout(
    name="pinyinjiajia",
    title="拼音加加",
    initials={"zh": "v", "ch": "u", "sh": "i"},
    finals={
        "er": "q", "ing": "q", "ei": "w", "en": "r", "eng": "t", "ong": "y", "iong": "y", "uo": "o",
        "ou": "p", "ai": "s", "ao": "d", "an": "f", "ang": "g", "iang": "h", "uang": "h", "ian": "j",
        "iao": "k", "in": "l", "un": "z", "uai": "x", "ue": "x", "ve": "x", "uan": "c", "ui": "v", "v": "v",
        "ia": "b", "ua": "b", "iu": "n", "ie": "m",
    },
    zero_initial={
        "a": "aa oa", "ai": "as os", "an": "af of", "ang": "ag og", "ao": "ad od", "e": "ee oe",
        "ei": "ew ow", "en": "er or", "eng": "et ot", "er": "eq oq", "o": "oo", "ou": "op",
    },
)

LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (MICROSOFT, ZIRANMA, XIAOHE, SOGOU, ABC, GUOBIAO, ZIGUANG, PINYINJIAJIA)
}


class KeyPiece(NamedTuple):
    """One piece of a decoded key run: ``kind`` is ``"syllable"`` (``text`` the syllable), ``"prefix"``
    (a lone trailing initial key; ``text`` the initial, e.g. ``"zh"``) or ``"keys"`` (keys that spell no
    syllable; ``text`` the keys themselves). ``keys`` are the one or two keys typed for the piece."""

    kind: str
    text: str
    keys: str


def layout_named(name: str) -> Layout:
    """The layout called ``name``; :class:`DataError` listing the known names otherwise."""
    try:
        return LAYOUTS[name]
    except (KeyError, TypeError):
        raise DataError(f"unknown shuangpin layout {name!r}; known: {', '.join(LAYOUTS)}") from None


def _split(syllable: str) -> tuple[str, str]:
    """(initial, final) of a syllable with an initial; ("", syllable) for one without."""
    for initial in _INITIALS:
        if syllable.startswith(initial) and len(syllable) > len(initial):
            return initial, syllable[len(initial):]
    return "", syllable


# ü-spelled finals whose keys also type the u-spelled ones after j q x y, where u is pronounced ü.
_JQXY_UMLAUT = {"u": "v", "ue": "ve"}


def _all_codes(syllable: str, layout: Layout) -> list[str]:
    """Every key pair that types ``syllable`` in ``layout``, the canonical one first; [] if none."""
    if syllable in layout.untyped:
        return []
    initial, final = _split(syllable)
    if not initial:
        return layout.zero_initial.get(syllable, "").split()
    initial_key = layout.initial_key(initial)
    final_keys = layout.final_keys(final)
    if layout.jqxy_umlaut and initial in ("j", "q", "x", "y") and final in _JQXY_UMLAUT:
        final_keys += layout.final_keys(_JQXY_UMLAUT[final])
    return list(dict.fromkeys(initial_key + key for key in final_keys))


@functools.lru_cache(maxsize=None)
def _tables(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(syllable -> canonical code, code -> syllable) over the project's syllables. A canonical code
    always decodes to its own syllable; another accepted code only where no canonical code takes it."""
    layout = LAYOUTS[name]
    encoding: dict[str, str] = {}
    decoding: dict[str, str] = {}
    alternatives: list[tuple[str, str]] = []
    for syllable in sorted(syllables()):
        codes = _all_codes(syllable, layout)
        if codes:
            encoding[syllable] = codes[0]
            decoding.setdefault(codes[0], syllable)
            alternatives.extend((code, syllable) for code in codes[1:])
    for code, syllable in alternatives:
        decoding.setdefault(code, syllable)
    return encoding, decoding


def _spelled(syllable: str) -> str:
    return syllable.lower().replace("ü", "v")


def encode(syllable: str, layout: str) -> str:
    """The two keys ``layout`` types for ``syllable`` (toneless; ü as ``v`` or ``ü``): ``encode("zhong",
    "microsoft") == "vs"``. Raises :class:`DataError` for an unknown layout, a string that is no syllable,
    or a syllable the layout does not type (those in ``Layout.untyped``)."""
    spec = layout_named(layout)
    syllable = _spelled(syllable)
    if syllable not in syllables():
        raise DataError(f"{syllable!r} is not a pinyin syllable")
    code = _tables(spec.name)[0].get(syllable)
    if code is None:
        raise DataError(f"the {spec.name} shuangpin layout ({spec.title}) has no keys for {syllable!r}")
    return code


def encodings(syllable: str, layout: str) -> tuple[str, ...]:
    """Every key pair ``layout`` accepts for ``syllable``, the one :func:`encode` types first; () for a
    syllable the layout does not type and for a string that is no syllable. Raises :class:`DataError` for
    an unknown layout."""
    spec = layout_named(layout)
    syllable = _spelled(syllable)
    return tuple(_all_codes(syllable, spec)) if syllable in syllables() else ()


def decode_pieces(keys: str, layout: str) -> list[KeyPiece]:
    """A run of keys read two at a time (case ignored), one :class:`KeyPiece` per pair and one for an odd
    trailing key; see the module docstring for what each kind means. Raises :class:`DataError` for an
    unknown layout or a character that is no key of the layout (the caller splits runs at anything else)."""
    spec = layout_named(layout)
    keys = keys.lower()
    for char in keys:
        if char not in spec.keys:
            raise DataError(f"{char!r} is not a key of the {spec.name} shuangpin layout ({spec.title})")
    decoding = _tables(spec.name)[1]
    pieces = []
    for start in range(0, len(keys) - 1, 2):
        pair = keys[start:start + 2]
        syllable = decoding.get(pair)
        pieces.append(KeyPiece(SYLLABLE, syllable, pair) if syllable else KeyPiece(KEYS, pair, pair))
    if len(keys) % 2:
        last = keys[-1]
        initial = {key: initial for initial, key in spec.initials.items()}.get(last)
        if initial is None and last in SINGLE_INITIALS:
            initial = last
        pieces.append(KeyPiece(PREFIX, initial, last) if initial else KeyPiece(KEYS, last, last))
    return pieces


def decode(keys: str, layout: str) -> list[str]:
    """The toneless syllables a run of key pairs spells: ``decode("vsgo", "microsoft") == ["zhong",
    "guo"]``; ``[]`` for no keys. Raises :class:`DataError` for an unknown layout, a character that is no
    key, a pair that spells no syllable, or a lone trailing key (:func:`decode_pieces` passes those on)."""
    spec = layout_named(layout)
    result = []
    for piece in decode_pieces(keys, layout):
        if piece.kind == PREFIX:
            raise DataError(f"lone trailing key {piece.keys!r} ({piece.text}…) in {spec.name} shuangpin: "
                            "a syllable takes two keys")
        if piece.kind == KEYS:
            what = "lone trailing key" if len(piece.keys) == 1 else "keys"
            raise DataError(f"{what} {piece.keys!r} spell no syllable in the {spec.name} shuangpin layout "
                            f"({spec.title})")
        result.append(piece.text)
    return result
