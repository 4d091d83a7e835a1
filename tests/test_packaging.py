"""The installed package (README, Set up: ``pip install -e .``, or ``pip install .``): a wheel built from this
tree holds every module and every data file the code reads, and works from a folder without the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, python_path

# Run from the install, in a folder that has no pinyin_hanzi/: import every module, find the files the code
# reads where the install put them, and convert with the shipped model.
_CHECK_INSTALL = """
import json, pkgutil, importlib, importlib.metadata, sys
import pinyin_hanzi
from pinyin_hanzi import Converter
from pinyin_hanzi.decoding.converter import SHIPPED_MODEL
from pinyin_hanzi.serving.service import WEB_DIR
modules = sorted(m.name for m in pkgutil.walk_packages(pinyin_hanzi.__path__, "pinyin_hanzi."))
for name in modules:
    importlib.import_module(name)
print(json.dumps({"package": pinyin_hanzi.__file__, "modules": modules, "model": str(SHIPPED_MODEL),
                  "model_exists": SHIPPED_MODEL.is_file(), "web": sorted(p.name for p in WEB_DIR.iterdir()),
                  "converted": Converter.from_pretrained().convert("ni hao"),
                  "version": pinyin_hanzi.__version__, "installed_version": importlib.metadata.version("pinyin-hanzi")}))
"""


def _source_modules() -> list[str]:
    """Every module of the source tree, as dotted names (a folder with an __init__.py is a package)."""
    names = []
    for path in (ROOT / "pinyin_hanzi").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts != ("pinyin_hanzi",):
            names.append(".".join(parts))
    return sorted(names)


def test_an_installed_wheel_has_every_module_and_data_file_and_converts_from_another_folder(tmp_path):
    source = tmp_path / "source"  # a copy, so that building writes nothing into the repository
    shutil.copytree(ROOT / "pinyin_hanzi", source / "pinyin_hanzi", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    quiet = ["--quiet", "--disable-pip-version-check", "--no-deps"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", *quiet, "--no-build-isolation", "-w", tmp_path / "wheels",
                    source], check=True, timeout=300)
    [wheel] = (tmp_path / "wheels").glob("*.whl")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", *quiet, "--target", site, wheel], check=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {**os.environ, "PYTHONPATH": python_path(site)}
    environment.pop("PINYIN_HANZI_CHECKPOINT", None)  # the shipped model converts, whatever the caller named
    done = subprocess.run([sys.executable, "-c", _CHECK_INSTALL], cwd=elsewhere, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(found["package"]).is_relative_to(site)  # the install, not the repository
    assert found["modules"] == _source_modules()
    assert Path(found["model"]).is_relative_to(site) and found["model_exists"]
    assert found["web"] == sorted(p.name for p in (ROOT / "pinyin_hanzi" / "serving" / "web").iterdir())
    assert found["converted"] == "你好"
    assert found["installed_version"] == found["version"]  # one version: pyproject.toml reads the package's
