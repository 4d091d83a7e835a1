"""The desktop input method: an IBus engine over the :class:`~pinyin_hanzi.decoding.converter.Converter`.

- settings.py: the settings file (model, abbreviations, fuzzy pairs, shuangpin, history, table size);
- conversion.py: the converter, loaded on a thread of its own, and the candidate table of typed letters;
- composer.py: the keys (preedit, candidates, partial selection, English mode, punctuation), without IBus;
- engine.py: the IBus engine that adapts the composer to ibus-daemon (needs PyGObject);
- component.py: the component XML and the install for one user or all;
- headless.py: a private D-Bus session with ibus-daemon and an input context, for tests and benchmarks;
- ``python -m pinyin_hanzi.ime``: install, uninstall, run the engine (docs/ime.md).
"""
