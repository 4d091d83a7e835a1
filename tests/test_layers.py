"""The package's layers (README, "Where things are"): a module imports only from its own layer and the layers
listed before it, but for the two seams the README names."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pinyin_hanzi"

LAYERS = [("errors", "files", "runtime", "progress"), ("text",), ("data",), ("config", "config_docs", "config_limits"),
          ("models", "lm"),
          ("checkpoint", "checkpoint_copies", "visualize"), ("decoding", "evaluation", "__init__"),
          ("training", "serving"), ("cli", "startup", "ime")]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
SEAMS = {("text/lexicon.py", "data"), ("data/corpus.py", "config")}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pinyin_hanzi":
            parts = node.module.split(".")
            names |= {parts[1]} if len(parts) > 1 else {"__init__"}
        elif isinstance(node, ast.Import):
            names |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("pinyin_hanzi.")}
    return names


def test_no_module_imports_a_higher_layer():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        layer = relative.split("/")[0].removesuffix(".py")
        for imported in _imports(path):
            if RANK[imported] > RANK[layer] and (relative, imported) not in SEAMS:
                upward.append(f"{relative} imports {imported}")
    assert upward == []


def test_every_layer_is_placed():
    found = {path.relative_to(PACKAGE).parts[0].removesuffix(".py") for path in PACKAGE.rglob("*.py")}
    assert found <= set(RANK)
