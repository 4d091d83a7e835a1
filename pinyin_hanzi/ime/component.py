"""The engine's IBus component (the XML that tells ibus-daemon how to start it) and its install for one user.

ibus-daemon reads components from ``/usr/share/ibus/component``, or, where the environment variable
``IBUS_COMPONENT_PATH`` is set, from the folders it lists instead (``:`` between them): IBus 1.5 has no
per-user component folder of its own. So :func:`install` writes the component into
``$XDG_DATA_HOME/ibus/component`` (``~/.local/share/...``) and a systemd ``environment.d`` file that sets
``IBUS_COMPONENT_PATH`` to the system folder and that one for every later login, and restarts a running
ibus-daemon with that path now. ``install(system=True)`` (as root) writes into the system folder instead.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from xml.sax.saxutils import escape

COMPONENT_NAME = "org.freedesktop.IBus.PinyinHanzi"
ENGINE_NAME = "pinyin-hanzi"
FILE_NAME = "pinyin-hanzi.xml"
SYSTEM_FOLDER = Path("/usr/share/ibus/component")
ENVIRONMENT_FILE = "90-pinyin-hanzi-ibus.conf"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding pinyin_hanzi/


def exec_line(settings: str | None = None) -> str:
    """The command ibus-daemon runs: this Python, with this copy of the package importable."""
    command = [shutil.which("env") or "/usr/bin/env", f"PYTHONPATH={PACKAGE_ROOT}", sys.executable, "-m", "pinyin_hanzi.ime", "engine", "--ibus"]
    if settings:
        command += ["--settings", settings]
    return shlex.join(command)


def component_fields(settings: str | None = None) -> dict:
    from pinyin_hanzi import __version__

    return {"name": COMPONENT_NAME, "description": "Pinyin to hanzi with a trainable Transformer",
            "version": __version__, "license": "see the project", "author": "pinyin_hanzi",
            "homepage": "", "command_line": exec_line(settings), "textdomain": "pinyin_hanzi"}


def engine_fields() -> dict:
    return {"name": ENGINE_NAME, "longname": "Pinyin→Hanzi (Transformer)", "description":
            "Pinyin to hanzi with a trainable Transformer", "language": "zh_CN", "license": "see the project",
            "author": "pinyin_hanzi", "icon": "", "layout": "us", "rank": 0, "symbol": "拼"}


def component_xml(settings: str | None = None) -> str:
    """The component file's text."""
    component = component_fields(settings)
    component["exec"] = component.pop("command_line")
    engine = "".join(f"      <{key}>{escape(str(value))}</{key}>\n" for key, value in engine_fields().items())
    fields = "".join(f"  <{key}>{escape(str(value))}</{key}>\n" for key, value in component.items())
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<component>\n{fields}  <engines>\n    <engine>\n{engine}'
            "    </engine>\n  </engines>\n</component>\n")


def user_folder() -> Path:
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "ibus" / "component"


def environment_path() -> Path:
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "environment.d" / ENVIRONMENT_FILE


def component_path_value() -> str:
    return f"{SYSTEM_FOLDER}:{user_folder()}"


def install(*, system: bool = False, restart: bool = True, log=print) -> list[Path]:
    """Write the component (and, per user, the environment.d file); restart a running ibus-daemon so that it
    lists the engine. Returns the files written. OSError (a read-only folder, no root for ``system``)."""
    folder = SYSTEM_FOLDER if system else user_folder()
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / FILE_NAME]
    written[0].write_text(component_xml(), encoding="utf-8")
    if not system:
        environment = environment_path()
        environment.parent.mkdir(parents=True, exist_ok=True)
        environment.write_text("# pinyin_hanzi's IBus engine (python -m pinyin_hanzi.ime install)\n"
                               f"IBUS_COMPONENT_PATH={component_path_value()}\n", encoding="utf-8")
        written.append(environment)
    for path in written:
        log(f"wrote {path}")
    if restart:
        _restart_daemon(system, log)
    return written


def uninstall(*, system: bool = False, restart: bool = True, log=print) -> list[Path]:
    """Remove what :func:`install` wrote (the settings file and the history stay); restart a running daemon.
    Returns the files removed."""
    removed = []
    for path in ([SYSTEM_FOLDER / FILE_NAME] if system else [user_folder() / FILE_NAME, environment_path()]):
        if path.exists():
            path.unlink()
            removed.append(path)
            log(f"removed {path}")
    if not removed:
        log("nothing to remove: the engine was not installed" + (" system-wide" if system else " for this user"))
    if restart:
        _restart_daemon(system, log)
    return removed


def _restart_daemon(system: bool, log) -> None:
    """Replace a running ibus-daemon by one that reads the component folders (ibus restart would keep the old
    daemon's environment, without IBUS_COMPONENT_PATH); nothing when none runs."""
    ibus = shutil.which("ibus")
    if ibus is None or subprocess.run([ibus, "address"], capture_output=True, text=True).stdout.strip() in ("", "(null)"):
        log("ibus-daemon is not running: the engine is listed from its next start (log in again)")
        return
    environment = dict(os.environ)
    if not system:
        environment["IBUS_COMPONENT_PATH"] = component_path_value()
    subprocess.run(["ibus-daemon", "--daemonize", "--replace", "--xim"], env=environment, check=False)
    log(f"restarted ibus-daemon: choose '{engine_fields()['longname']}' in your input sources, or run "
        f"`ibus engine {ENGINE_NAME}`")
