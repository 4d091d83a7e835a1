"""The IBus engine: a thin adapter between ibus-daemon and the :class:`~pinyin_hanzi.ime.composer.Composer`.

One process serves every input context (IBus asks its factory for an engine per context); they share one
:class:`~pinyin_hanzi.ime.conversion.Conversions`, whose model starts loading before the process joins the
bus, so that the engine is listed at once and the model's seconds of loading overlap the desktop's start.
A key is answered at once with a preview (the composer's view); the conversion of the letters runs on the
conversions' thread, which hands its end back to the GLib main loop (``GLib.idle_add``: IBus is only called
from the loop's thread), and the engine then shows the table if the letters are still those typed. Keys that
commit or move in the table wait for the conversion of the letters typed, if it is not there yet. With the
setting ``service`` the conversions ask ``serve.py`` (remote.py) and this process loads no model and no torch.

Needs PyGObject with IBus's introspection data (Debian: ``gir1.2-ibus-1.0``; PyGObject from ``python3-gi`` or
``pip install "PyGObject<3.50"`` in the project's environment).
"""

from __future__ import annotations

import functools
import gc
import itertools
import signal
from typing import Callable

from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.ime.component import COMPONENT_NAME, ENGINE_NAME, component_fields, engine_fields
from pinyin_hanzi.ime.composer import Composer
from pinyin_hanzi.ime.conversion import Conversions
from pinyin_hanzi.ime.settings import ImeSettings

OBJECT_PATH = "/org/freedesktop/IBus/PinyinHanzi/Engine/{}"
ONEDNN_PRIMITIVES = 64  # oneDNN's kernels kept (its default: 1024)


def _ibus():
    """PyGObject's GLib and IBus, imported when the engine runs: the package imports without them."""
    import gi

    gi.require_version("IBus", "1.0")
    from gi.repository import GLib, IBus

    return GLib, IBus


@functools.cache
def engine_class() -> type:
    """The IBus.Engine subclass (made once: a GObject type is registered by its name)."""
    _, IBus = _ibus()

    class PinyinHanziEngine(IBus.Engine):
        __gtype_name__ = "PinyinHanziEngine"

        def __init__(self, conversions: Conversions, **properties):
            super().__init__(**properties)
            self.composer = Composer(conversions)
            self.shown = None  # the View last sent to the application: an unchanged one is not sent again
            self._lookup = IBus.LookupTable.new(conversions.settings.page_size, 0, True, False)
            self._lookup.set_orientation(IBus.Orientation.HORIZONTAL)

        def do_process_key_event(self, keyval: int, keycode: int, state: int) -> bool:
            handled = self.composer.process_key(keyval, state)
            self.render()
            return handled

        def do_focus_out(self) -> None:
            self._drop()

        def do_reset(self) -> None:
            self._drop()

        def do_disable(self) -> None:
            self._drop()

        def do_page_up(self) -> None:
            self._key(0xFF55)

        def do_page_down(self) -> None:
            self._key(0xFF56)

        def do_cursor_up(self) -> None:
            self._key(0xFF52)

        def do_cursor_down(self) -> None:
            self._key(0xFF54)

        def do_candidate_clicked(self, index: int, button: int, state: int) -> None:
            """A click on the candidate window: ``index`` counts on the page shown."""
            page_size = self.composer.settings.page_size
            self.composer.cursor = self.composer.cursor - self.composer.cursor % page_size + index
            self._key(0x20)

        def _drop(self) -> None:
            self.composer.reset()
            self.shown = None
            self.render()

        def _key(self, keyval: int) -> None:
            self.composer.process_key(keyval, 0)
            self.render()

        def render(self) -> None:
            _render(self, IBus)

    return PinyinHanziEngine


def _render(engine, IBus) -> None:
    """Commit what the engine's composer committed, then show its preedit, the letters typed and its candidates
    (unless they are what the application shows already: a key's release, a conversion no longer wanted)."""
    commits = engine.composer.take_commits()
    for text in commits:
        engine.commit_text(IBus.Text.new_from_string(text))
    view = engine.composer.view()
    if view == engine.shown and not commits:
        return
    engine.shown = view
    preedit = IBus.Text.new_from_string(view.preedit)
    if view.preedit:
        preedit.append_attribute(IBus.AttrType.UNDERLINE, IBus.AttrUnderline.SINGLE, 0, len(view.preedit))
    engine.update_preedit_text_with_mode(preedit, len(view.preedit), bool(view.preedit), IBus.PreeditFocusMode.COMMIT)
    engine.update_auxiliary_text(IBus.Text.new_from_string(view.typed), bool(view.typed))
    engine._lookup.clear()
    for text in view.candidates:
        engine._lookup.append_candidate(IBus.Text.new_from_string(text))
    if view.candidates:
        engine._lookup.set_cursor_pos(view.cursor)
    engine.update_lookup_table(engine._lookup, bool(view.candidates))


def load_converter(settings: ImeSettings) -> Callable[[], object]:
    """What the conversions' thread runs first: torch with the settings' threads, the Converter with its
    history. (Its first conversion, a warm-up or the first key's, pays for first-use work.) With the setting
    ``service``, the service's client instead (remote.py): no torch, no model in this process."""
    if settings.service:
        from pinyin_hanzi.ime.remote import ServiceConverter

        return lambda: ServiceConverter(settings.service)

    def load():
        import os
        from pathlib import Path

        # oneDNN keeps a kernel for every shape of product it met, and a typist's lines make ever new ones: a
        # smaller cache bounds the engine's memory at no cost in speed found (docs/ime.md). Set before torch
        # loads oneDNN, which reads it once; a value in the environment stays.
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_PRIMITIVES))
        import torch

        torch.set_num_threads(settings.threads)
        from pinyin_hanzi.decoding.converter import Converter

        if settings.history_path:
            os.makedirs(Path(settings.history_path).parent, exist_ok=True)
        converter = Converter.from_checkpoint(settings.checkpoint or None, history=settings.history_path)
        # the model's hundreds of thousands of objects live as long as the engine: out of the collector's full
        # passes, which would otherwise walk them all while a key waits for the interpreter
        gc.freeze()
        return converter

    return load


def run_engine(settings: ImeSettings, *, launched_by_ibus: bool) -> None:
    """Serve the engine until ibus-daemon goes away. ``launched_by_ibus``: started from the component's exec
    line (``--ibus``), so the daemon knows the component and only the name is claimed; otherwise the
    component is registered (an engine started by hand, for development). PinyinHanziError without a daemon."""
    engines: list = []

    def refresh() -> bool:  # a conversion is there (or the model failed): show it where it is still wanted
        for engine in engines:
            if engine.shown is not None and not engine.shown.exact:
                engine.render()
        return False

    GLib, IBus = _ibus()
    update = lambda: GLib.idle_add(refresh)  # noqa: E731 - called on the conversions' thread
    conversions = Conversions(settings, load_converter(settings), update, update)
    IBus.init()
    bus = IBus.Bus()
    if not bus.is_connected():
        raise PinyinHanziError("cannot connect to ibus-daemon: is it running? (ibus-daemon -drx starts it)")
    loop = GLib.MainLoop()
    bus.connect("disconnected", lambda _bus: loop.quit())
    for number in (signal.SIGTERM, signal.SIGINT):  # a normal exit, so that the history's last commits are saved
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, number, loop.quit)
    factory = IBus.Factory.new(bus.get_connection())
    numbers = itertools.count(1)

    def create_engine(_factory, name: str):
        engine = engine_class()(conversions, engine_name=name, object_path=OBJECT_PATH.format(next(numbers)),
                                   connection=bus.get_connection())
        engines.append(engine)
        return engine

    factory.connect("create-engine", create_engine)
    if launched_by_ibus:
        bus.request_name(COMPONENT_NAME, 0)
    else:
        component = IBus.Component(**component_fields())
        component.add_engine(IBus.EngineDesc(**engine_fields()))
        bus.register_component(component)
    try:
        loop.run()
    finally:
        conversions.stop()


__all__ = ["ENGINE_NAME", "engine_class", "run_engine"]
