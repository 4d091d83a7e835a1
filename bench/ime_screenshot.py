"""A picture of what a user sees: the engine's candidate window, drawn by IBus's own panel (ibus-ui-gtk3), over
a small GTK text field, on a virtual X display (Xvfb). Saved as docs/images/ime_ibus_candidates.png.

    apt-get install xvfb ibus ibus-gtk3 gir1.2-ibus-1.0 xdotool imagemagick fonts-droid-fallback
    python bench/ime_screenshot.py [--out docs/images/ime_ibus_candidates.png] [--text woxiangqubeijing]

Starts Xvfb, a private D-Bus session and ibus-daemon with the panel (pinyin_hanzi/ime/headless.py), a GTK
window whose text field types through IBus (GTK_IM_MODULE=ibus), makes the engine the global one, types the
letters into the field with xdotool (real X key events), and grabs the screen with ImageMagick's import.
Everything it started is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi.ime.component import ENGINE_NAME  # noqa: E402
from pinyin_hanzi.ime.headless import HeadlessIBus, missing  # noqa: E402

DISPLAY = ":97"
PANEL = "/usr/libexec/ibus-ui-gtk3"
WINDOW = """
import gi
gi.require_version("Gtk", "3.0")
from gi.repository import Gtk
window = Gtk.Window(title="pinyin_hanzi IBus engine")
window.set_default_size(520, 60)
window.move(40, 40)
entry = Gtk.Entry()
entry.set_text("")
window.add(entry)
window.connect("destroy", Gtk.main_quit)
window.show_all()
Gtk.main()
"""


def set_global_engine(timeout: float = 15.0) -> None:
    """``ibus engine`` once the panel is up (it answers with an error until then)."""
    deadline = time.monotonic() + timeout
    while subprocess.run(["ibus", "engine", ENGINE_NAME], env=dict(os.environ), capture_output=True).returncode:
        if time.monotonic() > deadline:
            sys.exit(f"error: ibus engine {ENGINE_NAME} failed for {timeout:.0f} s: the panel did not come up")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / "ime_ibus_candidates.png"))
    parser.add_argument("--text", default="woxiangqubeijing")
    args = parser.parse_args()
    for program in ("Xvfb", "xdotool", "import", PANEL):
        if shutil.which(program) is None:
            sys.exit(f"error: {program} is not installed (see the apt-get line in this script's docstring)")
    if missing():
        sys.exit(f"error: {missing()}")
    with tempfile.TemporaryDirectory() as work:
        settings = Path(work) / "ime.yaml"
        settings.write_text("history: ''\n", encoding="utf-8")
        xvfb = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", "640x300x24", "-nolisten", "tcp"],
                                stderr=subprocess.DEVNULL, start_new_session=True)
        window = None
        try:
            time.sleep(1.0)
            # The panel needs an engine it knows besides ours, or it aborts at start (panel_switch_engine's
            # assertion): the system's components (the xkb keyboards) are listed after the engine's own.
            display = {"DISPLAY": DISPLAY, "GTK_IM_MODULE": "ibus", "NO_AT_BRIDGE": "1",
                       "IBUS_COMPONENT_PATH": f"{work}/component:/usr/share/ibus/component"}
            with HeadlessIBus(work, settings, panel=PANEL, environment=display) as session:
                # the global engine first: the panel switches a new input context to it (to its first
                # keyboard otherwise, which would take the engine away from the context made here)
                set_global_engine()
                session.activate()  # starts the engine's process and loads the model once
                session.type("ni ")
                window = subprocess.Popen([sys.executable, "-c", WINDOW], env=dict(os.environ))
                time.sleep(3.0)
                subprocess.run(["xdotool", "search", "--name", "pinyin_hanzi", "windowfocus", "--sync"],
                               env=dict(os.environ), check=False, timeout=10)
                subprocess.run(["xdotool", "type", "--delay", "120", args.text], env=dict(os.environ), check=True)
                time.sleep(2.0)
                subprocess.run(["import", "-window", "root", args.out],
                               env=dict(os.environ), check=True)
                window.terminate()
                window.wait(timeout=5)
        finally:
            if window is not None and window.poll() is None:
                window.kill()
            xvfb.terminate()
            xvfb.wait(timeout=5)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
