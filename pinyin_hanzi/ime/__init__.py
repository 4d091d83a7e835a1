"""The desktop input method: an IBus engine over the :class:`~pinyin_hanzi.decoding.converter.Converter`.

- settings.py: the settings file (model, abbreviations, fuzzy pairs, shuangpin, history, table size);
- conversion.py: the converter on a thread of its own (it loads, then converts what the keys ask for), the
  candidate table of typed letters, and the preview shown until that table is there;
- remote.py: the converter when ``serve.py`` converts (the setting ``service``), over HTTP, standard library only;
- composer.py: the keys (preedit, candidates, partial selection, English mode, punctuation), without IBus;
- engine.py: the IBus engine that adapts the composer to ibus-daemon (needs PyGObject);
- component.py: the component XML and the install for one user or all;
- headless.py: a private D-Bus session with ibus-daemon and an input context, for tests and benchmarks;
- ``python -m pinyin_hanzi.ime``: install, uninstall, run the engine (docs/ime.md).
"""
