"""The IBus input method (pinyin_hanzi/ime/): its settings, the keys' rules on a stand-in converter, install and
uninstall, and the real thing: a private D-Bus session with ibus-daemon, the engine started by the daemon from
its component, an input context typing keys and reading back commits, preedit and candidate table. The
daemon tests skip (with the reason) where dbus-daemon, ibus-daemon or PyGObject's IBus are missing; .ci/run
installs them."""

from __future__ import annotations

import random
import time

import pytest

from pinyin_hanzi.errors import ConfigError
from pinyin_hanzi.ime import composer as keys
from pinyin_hanzi.ime.__main__ import main as ime_main
from pinyin_hanzi.ime.composer import Composer
from pinyin_hanzi.ime.conversion import Entry, Table, syllable_ends
from pinyin_hanzi.ime.settings import ImeSettings, load_settings

# ------------------------------------------------------------------------------------------ settings


def test_settings_defaults_and_values(tmp_path):
    assert load_settings(tmp_path / "absent.yaml") == ImeSettings()
    path = tmp_path / "ime.yaml"
    path.write_text("fuzzy: [z-zh, n-l]\nshuangpin: xiaohe\nprefixes: off\npage_size: 7\nhistory: ''\n")
    settings = load_settings(path)
    assert settings.fuzzy == ("n-l", "z-zh") and settings.shuangpin == "xiaohe" and settings.prefixes == "off"
    assert settings.page_size == 7 and settings.history_path == ""


@pytest.mark.parametrize("text, message", [
    ("colour: red\n", "unknown setting 'colour'"),
    ("page_size: 0\n", "page_size must be a whole number between 1 and 10"),
    ("fuzzy: [z-q]\n", "unknown fuzzy pinyin pair 'z-q'"),
    ("shuangpin: qwerty\n", "unknown shuangpin layout 'qwerty'"),
    ("- a list\n", "expected a mapping"),
    ("words: maybe\n", "words must be true or false"),
])
def test_bad_settings_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "ime.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as raised:
        load_settings(path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_bad_settings_file_exits_with_one_line(tmp_path, capsys):
    from pinyin_hanzi.cli import run

    path = tmp_path / "ime.yaml"
    path.write_text("threads: many\n")
    assert run(ime_main, ["engine", "--settings", str(path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and "threads" in error


# ------------------------------------------------------------------------------- syllables and keys


def test_syllable_ends_lay_tokens_over_letters():
    assert syllable_ends("woxiangqubeijing", ("wo", "xiang", "qu", "bei", "jing"), False) == [2, 7, 9, 12, 16]
    assert syllable_ends("xi'an", ("xi", "an"), False) == [2, 5]
    assert syllable_ends("zhongg", ("zhong", "g*"), False) == [5, 6]
    assert syllable_ends("wxqbeij", ("w*", "x*", "q*", "bei", "j*"), False) == [1, 2, 3, 6, 7]
    assert syllable_ends("nihk", ("ni", "hao"), True) == [2, 4]  # double pinyin: two keys a syllable
    assert syllable_ends("nihao", ("ni",), False) is None


class StandIn:
    """Conversions with fixed tables, made as soon as they are asked for: the composer's rules without a model."""

    def __init__(self, tables: dict[str, list[Entry]], **settings):
        self.settings = ImeSettings(**settings)
        self.tables, self.learned, self.ready, self.error, self.down = tables, [], True, None, None

    def table(self, typed, words=False):
        entries = [e for e in self.tables.get(typed, [Entry(typed.upper(), len(typed))])
                   if words or e.consumed == len(typed)]
        return Table(tuple(entries), ())

    cached = table

    def request(self, typed, words=False):
        pass

    def wait(self, timeout=None):
        return True

    def learn(self, text):
        self.learned.append(text)


class Deferred(StandIn):
    """A stand-in whose tables come later, as the conversions' thread makes them: :meth:`finish` makes the
    table requested (or the one named), :meth:`table` (a commit) makes it at once. Its conversion of a line
    is its syllables' characters from ``hanzi``, and what it made is remembered as the real one remembers."""

    def __init__(self, hanzi: dict[str, str], **settings):
        super().__init__({}, **settings)
        self.hanzi, self.made, self.requested, self.converted = hanzi, {}, None, []

    def _convert(self, typed):
        syllables = tuple(s for s in SYLLABLES if s in typed)
        syllables = tuple(sorted(syllables, key=typed.index))
        text = "".join(self.hanzi[s] for s in syllables) + typed[sum(map(len, syllables)):]
        return Table((Entry(text, len(typed)), Entry(text[::-1], len(typed))), syllables + tuple(
            typed[sum(map(len, syllables)):]))

    def cached(self, typed, words=False):
        return self.made.get(typed)

    def request(self, typed, words=False):
        self.requested = typed

    def finish(self, typed=None):
        typed = typed or self.requested
        self.made[typed] = self._convert(typed)
        self.converted.append(typed)

    def table(self, typed, words=False):
        if typed not in self.made:
            self.finish(typed)
        return self.made[typed]


SYLLABLES = ("wo", "xiang", "qu", "ni", "hao")


def press(composer: Composer, text: str) -> list[bool]:
    names = {"\b": keys.BACKSPACE, "\x1b": keys.ESCAPE, "\n": keys.RETURN}
    return [composer.process_key(names.get(c, ord(c)), keys.SHIFT_MASK if c.isupper() else 0) for c in text]


def test_partial_selection_commits_the_first_syllables_and_converts_the_rest():
    tables = {"woxiangqu": [Entry("我想去", 9), Entry("我想", 7), Entry("我", 2)], "qu": [Entry("去", 2)]}
    composer = Composer(StandIn(tables, page_size=1))
    press(composer, "woxiangqu")
    assert composer.view().candidates == ("我想去",)  # the words come once the user turns past the sentences
    composer.process_key(keys.PAGE_DOWN, 0)
    assert composer.view().candidates == ("我想去", "我想", "我") and composer.cursor == 1
    press(composer, "1")  # the first candidate of the second page
    assert composer.take_commits() == ["我想"] and composer.typed == "qu" and composer.view().preedit == "去"
    press(composer, " ")
    assert composer.take_commits() == ["去"] and composer.conversions.learned == ["我想去"]


def test_a_preview_first_then_the_conversion_replaces_it():
    conversions = Deferred({"wo": "我", "xiang": "想", "qu": "去"})
    composer = Composer(conversions)
    press(composer, "wo")
    assert composer.view() == keys.View("wo", "wo", (), 0) and conversions.requested == "wo"  # nothing converted yet
    conversions.finish()
    assert composer.view() == keys.View("我", "wo", ("我", "我"[::-1]), 0, exact=True)
    press(composer, "xiangq")
    # the syllables before the last of the latest conversion of a beginning (wo of "woxiang"), then the letters
    conversions.finish("woxiang")
    assert composer.view().preedit == "我xiangq" and not composer.view().exact
    assert conversions.requested == "woxiangq"
    conversions.finish()
    assert composer.view().preedit == "我想q" and composer.view().candidates[0] == "我想q"


def test_a_conversion_for_letters_no_longer_typed_is_not_shown():
    conversions = Deferred({"ni": "你", "hao": "好"})
    composer = Composer(conversions)
    press(composer, "nih")
    composer.view()
    press(composer, "ao")
    conversions.finish("nih")  # the stale request ends after the letters changed
    view = composer.view()
    assert not view.exact and view.candidates == () and view.preedit == "你hao" and conversions.requested == "nihao"
    conversions.finish()
    assert composer.view().exact and composer.view().preedit == "你好"


def test_a_commit_right_after_the_last_key_is_the_conversion_of_the_letters():
    conversions = Deferred({"wo": "我", "xiang": "想", "qu": "去"})
    composer = Composer(conversions)
    press(composer, "woxiangqu")
    assert not composer.view().exact  # what is shown is a preview ...
    press(composer, " ")  # ... but Space commits the letters' own conversion, made for it
    assert composer.take_commits() == ["我想去"] and conversions.learned == ["我想去"]
    press(composer, "woxiang2")  # a digit too: the second candidate of the letters' conversion
    assert composer.take_commits() == ["想我"] and conversions.converted[-1] == "woxiang"


def test_preview_of_letters_never_converted_is_the_letters():
    from pinyin_hanzi.ime.conversion import preview

    table = Table((Entry("我想", 7),), ("wo", "xiang"))
    assert preview("woxiangqu", {"woxiang": table}.get, False) == "我xiangqu"
    assert preview("woxiang'qu", {"woxiang": table}.get, False) == "我想qu"  # ' ends the syllable before it
    assert preview("woxiangqu", {}.get, False) == "woxiangqu"
    assert preview("woxiangqu", {"woxiang": Table((Entry("我想啊", 7),), ("wo", "xiang"))}.get, False) == "woxiangqu"


def test_enter_escape_backspace_and_punctuation():
    composer = Composer(StandIn({"ni": [Entry("你", 2)]}))
    press(composer, "nih\b")
    assert composer.view().preedit == "你" and composer.view().typed == "ni"
    press(composer, "\x1b")
    assert composer.view() == keys.View("", "", (), 0) and composer.take_commits() == []
    press(composer, "ni\n")
    assert composer.take_commits() == ["ni"] and composer.conversions.learned == []
    press(composer, 'ni,"x"')
    assert composer.take_commits()[:4] == ["你", "，", "“", "X"]


def test_english_mode_and_keys_the_application_keeps():
    composer = Composer(StandIn({}))
    assert press(composer, "1") == [False]  # no composition: digits go to the application
    assert composer.process_key(ord("c"), keys.CONTROL_MASK) is False
    press(composer, "ab")
    composer.process_key(keys.SHIFT_L, 0)
    composer.process_key(keys.SHIFT_L, keys.SHIFT_MASK | keys.RELEASE_MASK)
    assert composer.english and composer.take_commits() == ["ab"]  # the composition is committed as typed
    assert press(composer, "x1,") == [False, False, False] and composer.view().preedit == ""
    composer.process_key(keys.SHIFT_L, 0)
    composer.process_key(ord("A"), keys.SHIFT_MASK)  # Shift used for a capital: no change of mode
    composer.process_key(keys.SHIFT_L, keys.SHIFT_MASK | keys.RELEASE_MASK)
    assert composer.english


def test_random_keys_never_leave_a_composition_behind():
    composer = Composer(StandIn({}))
    generator = random.Random(1)
    pool = list(range(0x20, 0x7F)) + [keys.BACKSPACE, keys.RETURN, keys.ESCAPE, keys.PAGE_DOWN, keys.UP, keys.TAB,
                                      keys.SHIFT_L]
    for _ in range(5000):
        keyval = generator.choice(pool)
        state = generator.choice([0, 0, 0, keys.SHIFT_MASK, keys.CONTROL_MASK, keys.RELEASE_MASK])
        composer.process_key(keyval, state)
        view = composer.view()
        assert bool(view.preedit) == bool(composer.typed) and len(composer.typed) <= keys.MAX_TYPED
    composer.process_key(keys.ESCAPE, 0) if not composer.english else composer.reset()
    assert composer.view().preedit == ""


# ------------------------------------------------------------------------------------- install


def test_install_and_uninstall_for_this_user(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert ime_main(["install", "--no-restart"]) == 0
    component = tmp_path / "data" / "ibus" / "component" / "pinyin-hanzi.xml"
    environment = tmp_path / "config" / "environment.d" / "90-pinyin-hanzi-ibus.conf"
    assert "<name>pinyin-hanzi</name>" in component.read_text() and "pinyin_hanzi.ime engine --ibus" in component.read_text()
    assert environment.read_text().splitlines()[-1] == (f"IBUS_COMPONENT_PATH=/usr/share/ibus/component:"
                                                         f"{tmp_path / 'data' / 'ibus' / 'component'}")
    assert ime_main(["uninstall", "--no-restart"]) == 0
    assert not component.exists() and not environment.exists()
    assert "removed" in capsys.readouterr().out


# ------------------------------------------------------------------------- the real ibus-daemon


@pytest.fixture(scope="module")
def ibus(tmp_path_factory):
    from pinyin_hanzi.ime.headless import HeadlessIBus, process_running, missing

    reason = missing()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("ibus")
    settings = work / "ime.yaml"
    settings.write_text(f"history: {work / 'history.txt'}\n")
    with HeadlessIBus(work, settings) as session:
        session.activate()
        session.history = work / "history.txt"
        pids = [process.pid for process in session.processes] + [session.engine_pid()]
        yield session
    assert None not in pids and not [pid for pid in pids if process_running(pid)]  # nothing left running


@pytest.fixture
def ic(ibus):
    """The session with no composition and no commits recorded yet."""
    ibus.key(keys.ESCAPE)
    ibus.commits.clear()
    return ibus


def test_nihao_space_commits_and_is_learned(ic):
    assert ic.type("nihao") == [True] * 5
    ic.type(" ")
    assert ic.commits == ["你好"] and ic.preedit == "" and ic.candidates == []
    deadline = time.monotonic() + 5  # the history is saved in the background, a second after learning
    while not (ic.history.exists() and "你好" in ic.history.read_text(encoding="utf-8")):
        assert time.monotonic() < deadline, "the commit was not learned into the history file"
        time.sleep(0.1)


def test_a_sentence_with_its_preedit_and_table(ic):
    ic.type("woxiangqubeijing")
    ic.settle()  # the key's answer was a preview: the conversion follows from the engine's thread
    assert ic.preedit == "我想去北京" and ic.candidates[0] == "我想去北京" and len(ic.candidates) >= 3
    ic.type(" ")
    assert ic.commits == ["我想去北京"]


def test_choosing_candidate_two(ic):
    ic.type("shiyan")
    ic.settle()
    second = ic.candidates[1]
    ic.type("2")
    assert ic.commits == [second] and ic.preedit == ""


def test_partial_selection_then_the_rest(ic):
    ic.type("woxiangqubeijing")
    ic.settle()
    sentences = len(ic.candidates)
    ic.key(keys.PAGE_DOWN)  # past the sentences: the candidates of the first syllables join the table
    words = ic.candidates[sentences:]
    two = next(i for i, text in enumerate(ic.candidates) if i >= sentences and len(text) == 2)
    while ic.cursor < two:
        ic.key(keys.DOWN)
    while ic.cursor > two:
        ic.key(keys.UP)
    ic.type(" ")
    assert ic.commits == [words[two - sentences]]
    ic.settle()
    assert len(ic.preedit) == 3 and ic.candidates  # qubeijing is left, converted
    ic.type(" ")
    assert len(ic.commits) == 2 and len(ic.commits[1]) == 3 and ic.preedit == ""


def test_backspace_escape_and_enter(ic):
    ic.type("nihaom")
    ic.type("\b")
    ic.settle()
    assert ic.preedit == "你好"
    ic.type("\x1b")
    assert ic.preedit == "" and ic.candidates == [] and ic.commits == []
    ic.type("nihao\n")
    assert ic.commits == ["nihao"]


def test_keys_are_answered_with_a_preview_and_the_conversion_follows(ic):
    ic.type("woxiangqu")
    ic.settle()
    assert ic.preedit == "我想去" and ic.candidates
    ic.type("beijing")
    assert ic.preedit.startswith("我想") and ic.preedit.endswith("g")  # a preview: hanzi kept, then the letters
    ic.settle()
    assert ic.preedit == "我想去北京" and ic.candidates[0] == "我想去北京"
    line = "zhongguorenmingongheguowansui"
    ic.type("\x1b" + line)
    ic.settle()
    converted = ic.candidates[0]  # (nothing is learned until a commit: Escape commits nothing)
    ic.type("\x1b" + line + " ")  # Space right after the last letter commits the conversion, not a preview
    assert ic.commits == [converted] and converted.isalpha() and not converted.isascii()


def test_english_mode_passes_digits_and_letters(ic):
    ic.toggle_english()
    assert ic.type("42ab") == [False] * 4 and ic.commits == [] and ic.preedit == ""
    ic.toggle_english()
    assert ic.type("ni") == [True, True] and ic.preedit


def test_chinese_punctuation_ends_a_composition(ic):
    ic.type("nihao,")
    assert ic.commits == ["你好", "，"]


def test_random_keys_keep_the_engine_alive_and_leave_no_preedit(ic):
    generator = random.Random(7)
    # compositions of a few letters each on average: random letters read as abbreviations cost the most per key
    pool = [ord(c) for c in "abcdefghijklmnopqrstuvwxyz" * 2 + "'      12,.-="] + [
        keys.BACKSPACE, keys.ESCAPE, keys.ESCAPE, keys.RETURN, keys.PAGE_DOWN, keys.DOWN]
    for _ in range(200):
        keyval = generator.choice(pool)
        ic.key(keyval)
        if keyval == keys.ESCAPE:
            assert ic.preedit == "" and ic.candidates == []
    ic.key(keys.ESCAPE)
    assert ic.engine_alive() and ic.preedit == "" and ic.candidates == []
