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
    """Conversions with fixed tables: the composer's rules without a model."""

    def __init__(self, tables: dict[str, list[Entry]], **settings):
        self.settings = ImeSettings(**settings)
        self.tables, self.learned, self.ready, self.error = tables, [], True, None

    def table(self, typed, words=False):
        entries = [e for e in self.tables.get(typed, [Entry(typed.upper(), len(typed))])
                   if words or e.consumed == len(typed)]
        return Table(tuple(entries), ())

    def wait(self, timeout=None):
        return True

    def learn(self, text):
        self.learned.append(text)


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
    assert ic.preedit == "我想去北京" and ic.candidates[0] == "我想去北京" and len(ic.candidates) >= 3
    ic.type(" ")
    assert ic.commits == ["我想去北京"]


def test_choosing_candidate_two(ic):
    ic.type("shiyan")
    second = ic.candidates[1]
    ic.type("2")
    assert ic.commits == [second] and ic.preedit == ""


def test_partial_selection_then_the_rest(ic):
    ic.type("woxiangqubeijing")
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
    assert len(ic.preedit) == 3 and ic.candidates  # qubeijing is left, converted
    ic.type(" ")
    assert len(ic.commits) == 2 and len(ic.commits[1]) == 3 and ic.preedit == ""


def test_backspace_escape_and_enter(ic):
    ic.type("nihaom")
    ic.type("\b")
    assert ic.preedit == "你好"
    ic.type("\x1b")
    assert ic.preedit == "" and ic.candidates == [] and ic.commits == []
    ic.type("nihao\n")
    assert ic.commits == ["nihao"]


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
