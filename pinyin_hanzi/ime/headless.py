"""A private desktop session without a desktop: dbus-daemon, ibus-daemon with this engine's component, and an
IBus input context in this process that types keys and records what the engine sends back.

    with HeadlessIBus(workdir, settings_file) as session:    # starts both daemons, stops them after
        session.activate()                                    # the engine, started by ibus-daemon from its exec
        session.type("nihao ")                                # keys; session.commits == ["你好"]
        session.type("woxiang"); session.settle()             # until the letters' conversion is shown

Everything lives under ``workdir`` (the daemons' config, cache and address file), so the user's own IBus is not
touched, and every process started here is stopped on exit. Used by tests/test_ime.py, bench/ime_keys.py and
bench/ime_screenshot.py. Needs ``dbus-daemon``, ``ibus-daemon`` and PyGObject with IBus (:func:`missing`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.ime.component import ENGINE_NAME, FILE_NAME, component_xml
from pinyin_hanzi.ime.composer import BACKSPACE, ESCAPE, RELEASE_MASK, RETURN, SHIFT_L, SHIFT_MASK

NAMED_KEYS = {"\b": BACKSPACE, "\x1b": ESCAPE, "\n": RETURN}
START_TIMEOUT_S = 10.0
SETTLE_TICK_MS = 50


def missing() -> str | None:
    """Why a headless session cannot run here (a program or PyGObject's IBus missing), or None."""
    for program in ("dbus-daemon", "ibus-daemon"):
        if shutil.which(program) is None:
            return f"{program} is not installed (Debian: apt-get install dbus ibus gir1.2-ibus-1.0)"
    try:
        import gi

        gi.require_version("IBus", "1.0")
        from gi.repository import IBus  # noqa: F401
    except (ImportError, ValueError) as error:
        return f"PyGObject with IBus is not available ({error}): pip install 'PyGObject<3.50', gir1.2-ibus-1.0"
    return None


class HeadlessIBus:
    """The daemons and one input context; what the engine sent: :attr:`commits`, :attr:`preedit`,
    :attr:`candidates` (the whole table), :attr:`cursor`. ``panel``: ibus-daemon's panel command (None: no
    panel); ``environment``: more variables for the daemons (DISPLAY, ...)."""

    def __init__(self, workdir: str | Path, settings: str | Path, *, panel: str | None = None,
                 environment: dict | None = None):
        self.workdir = Path(workdir)
        self.settings, self.panel = Path(settings), panel
        self.extra = environment or {}
        self.processes: list[subprocess.Popen] = []
        self.commits: list[str] = []
        self.preedit, self.candidates, self.cursor = "", [], 0
        self.context = None
        self._saved_environment: dict[str, str | None] = {}

    # -------------------------------------------------------------------------------------- daemons

    def __enter__(self) -> HeadlessIBus:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def environment(self) -> dict[str, str]:
        """The variables the daemons, the engine they start and this process's IBus client share."""
        components = self.workdir / "component"
        components.mkdir(parents=True, exist_ok=True)
        (components / FILE_NAME).write_text(component_xml(), encoding="utf-8")
        # the model's n-gram tables stay in the user's cache (lm/lookup_cache.py), not rebuilt for each session
        cache = os.environ.get("PINYIN_HANZI_CACHE") or str(
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pinyin_hanzi")
        return {"PINYIN_HANZI_CACHE": cache, "XDG_CONFIG_HOME": str(self.workdir / "config"), "XDG_CACHE_HOME": str(self.workdir / "cache"),
                "IBUS_ADDRESS_FILE": str(self.workdir / "ibus-address"), "IBUS_COMPONENT_PATH": str(components),
                "PINYIN_HANZI_IME_SETTINGS": str(self.settings), "GSETTINGS_BACKEND": "memory", **self.extra}

    def start(self) -> None:
        variables = self.environment()
        bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--nosyslog", "--print-address=1"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, **variables}, start_new_session=True)
        self.processes.append(bus)
        variables["DBUS_SESSION_BUS_ADDRESS"] = bus.stdout.readline().strip()
        for name, value in variables.items():  # this process's IBus client reads them too
            self._saved_environment.setdefault(name, os.environ.get(name))
            os.environ[name] = value
        log = open(self.workdir / "ibus-daemon.log", "w")
        command = ["ibus-daemon", "--verbose", "--config=disable", "--emoji-extension=disable", "--cache=none",
                   f"--panel={self.panel or 'disable'}"]
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ),
                                               start_new_session=True))
        log.close()
        self._connect()

    def _connect(self) -> None:
        from gi.repository import IBus

        deadline = time.monotonic() + START_TIMEOUT_S
        while not Path(os.environ["IBUS_ADDRESS_FILE"]).exists():
            if time.monotonic() > deadline or self.processes[-1].poll() is not None:
                raise PinyinHanziError(f"ibus-daemon did not start: see {self.workdir / 'ibus-daemon.log'}")
            time.sleep(0.05)
        IBus.init()
        self.bus = IBus.Bus.new()
        while not self.bus.is_connected():
            if time.monotonic() > deadline:
                raise PinyinHanziError("cannot connect to the headless ibus-daemon")
            time.sleep(0.05)
            self._pump()

    def stop(self) -> None:
        """Stop every process started here (the engine is ibus-daemon's child: its group goes with it), and
        wait until the engine has saved its history and ended."""
        engine = self.engine_pid()
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in reversed(self.processes):
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self.processes.clear()
        if engine is not None:
            _wait_gone(engine)
        for name, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment.clear()

    # ------------------------------------------------------------------------------- input context

    def activate(self) -> None:
        """Create an input context with focus and switch it to the engine (ibus-daemon starts the engine's
        process from the component the first time)."""
        from gi.repository import IBus

        self.context = self.bus.create_input_context("pinyin-hanzi-headless")
        capabilities = (IBus.Capabilite.PREEDIT_TEXT | IBus.Capabilite.AUXILIARY_TEXT
                        | IBus.Capabilite.LOOKUP_TABLE | IBus.Capabilite.FOCUS)
        self.context.set_capabilities(capabilities)
        self.context.connect("commit-text", lambda _c, text: self.commits.append(text.get_text()))
        self.context.connect("update-preedit-text", self._on_preedit)
        self.context.connect("hide-preedit-text", lambda _c: setattr(self, "preedit", ""))
        self.context.connect("update-lookup-table", self._on_table)
        self.context.connect("hide-lookup-table", lambda _c: self._on_table(None, None, False))
        self.context.focus_in()
        self.context.set_engine(ENGINE_NAME)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.engine_alive():  # the daemon starts the engine's process and waits for its factory
            if time.monotonic() > deadline:
                raise PinyinHanziError(f"ibus-daemon did not start the engine: see {self.workdir / 'ibus-daemon.log'}")
            time.sleep(0.02)
            self._pump()

    def _on_preedit(self, _context, text, _cursor, visible) -> None:
        self.preedit = text.get_text() if visible else ""

    def _on_table(self, _context, table, visible) -> None:
        if not visible or table is None:
            self.candidates, self.cursor = [], 0
            return
        self.candidates = [table.get_candidate(i).get_text() for i in range(table.get_number_of_candidates())]
        self.cursor = table.get_cursor_pos()

    def _pump(self) -> None:
        from gi.repository import GLib

        context = GLib.MainContext.default()
        while context.pending():
            context.iteration(False)

    def key(self, keyval: int, state: int = 0) -> bool:
        """Press and release one key; whether the engine consumed the press. The signals it sent are read."""
        handled = self.context.process_key_event(keyval, 0, state)
        self.context.process_key_event(keyval, 0, state | RELEASE_MASK)
        self._pump()
        return handled

    def settle(self, timeout: float = START_TIMEOUT_S) -> float:
        """Wait until the engine shows the conversion of the letters typed (its candidate table: a preview
        has none), or nothing is being composed; the seconds waited. PinyinHanziError past ``timeout``."""
        from gi.repository import GLib

        start = time.monotonic()
        self._pump()
        tick = GLib.timeout_add(SETTLE_TICK_MS, lambda: True)  # wakes the blocking wait below to check the time
        try:
            while self.preedit and not self.candidates:
                if time.monotonic() - start > timeout:
                    raise PinyinHanziError(f"the engine showed no conversion of the letters within {timeout} s")
                GLib.MainContext.default().iteration(True)  # sleeps until the engine's next signal (no polling)
        finally:
            GLib.source_remove(tick)
        return time.monotonic() - start

    def type(self, text: str) -> list[bool]:
        """Type ``text``: printable characters as their keys (capitals with Shift), and \\b Backspace, \\x1b
        Escape, \\n Enter. Returns whether each key was consumed."""
        return [self.key(NAMED_KEYS.get(char, ord(char)), SHIFT_MASK if char.isupper() else 0) for char in text]

    def toggle_english(self) -> None:
        """Shift pressed and released alone."""
        self.context.process_key_event(SHIFT_L, 0, 0)
        self.context.process_key_event(SHIFT_L, 0, SHIFT_MASK | RELEASE_MASK)
        self._pump()

    def engine_pid(self) -> int | None:
        """The engine's process id (a child of ibus-daemon running pinyin_hanzi.ime), or None."""
        daemon = self.processes[-1].pid if self.processes else None
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    command = (entry / "cmdline").read_bytes()
                    parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if parent == daemon and b"pinyin_hanzi.ime" in command:
                    return int(entry.name)
        return None

    def engine_alive(self) -> bool:
        """Whether the input context still has the engine (its process did not die)."""
        engine = self.context.get_engine()
        return engine is not None and engine.get_name() == ENGINE_NAME


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Wait until process ``pid`` (not this process's child) has ended; SIGKILL it past ``timeout``."""
    deadline = time.monotonic() + timeout
    while process_running(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.02)


def process_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
