"""``python -m pinyin_hanzi.ime COMMAND``: the IBus input method.

    python -m pinyin_hanzi.ime install [--system] [--no-restart]     add the engine for this user (or all)
    python -m pinyin_hanzi.ime uninstall [--system] [--no-restart]   remove it
    python -m pinyin_hanzi.ime engine [--ibus] [--settings FILE]     the engine itself (ibus-daemon runs it)
    python -m pinyin_hanzi.ime component                             print the component XML
    python -m pinyin_hanzi.ime settings [--settings FILE]            check the settings file, print what it sets

Errors are one line and exit status 2 (:func:`pinyin_hanzi.cli.run`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from pinyin_hanzi.cli import run
from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.ime import component
from pinyin_hanzi.ime.settings import default_path, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pinyin_hanzi.ime",
                                     description="The pinyin_hanzi input method for IBus.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("install", "add the engine to IBus"), ("uninstall", "remove the engine from IBus")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--system", action="store_true", help="for every user (/usr/share/ibus/component; root)")
        sub.add_argument("--no-restart", action="store_true", help="leave a running ibus-daemon as it is")
    engine = commands.add_parser("engine", help="run the engine (ibus-daemon starts it)")
    engine.add_argument("--ibus", action="store_true", help="started by ibus-daemon from the component")
    engine.add_argument("--settings", help=f"settings file (default {default_path()})")
    commands.add_parser("component", help="print the component XML")
    check = commands.add_parser("settings", help="check the settings file and print the settings")
    check.add_argument("--settings", help=f"settings file (default {default_path()})")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("install", "uninstall"):
        action = component.install if args.command == "install" else component.uninstall
        action(system=args.system, restart=not args.no_restart)
    elif args.command == "component":
        print(component.component_xml(), end="")
    elif args.command == "settings":
        for key, value in asdict(load_settings(args.settings)).items():
            print(f"{key}: {value}")
    else:
        settings = load_settings(args.settings)  # a bad file is one line here, before the engine joins the bus
        from pinyin_hanzi.ime.engine import _ibus, run_engine

        try:
            _ibus()  # only this import's failures are about PyGObject: the engine's own errors stay what they are
        except (ImportError, ValueError) as error:  # no PyGObject, or no IBus introspection data
            raise PinyinHanziError(f"the engine needs PyGObject and IBus's introspection data "
                                   f"(gir1.2-ibus-1.0): {error}") from None
        run_engine(settings, launched_by_ibus=args.ibus)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
