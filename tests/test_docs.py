"""The documents: every relative link resolves, and the README stays a short document for users."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL_CARD = ROOT / "pinyin_hanzi" / "pretrained" / "MODEL_CARD.md"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), MODEL_CARD]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def _without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", _without_fences(text))


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file: lower case, punctuation dropped, spaces to -."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ +(.+?) *$", _without_fences(path.read_text(encoding="utf-8")), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:  # a repeated heading gets -1, -2, ...
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def _links(path: Path) -> list[str]:
    return [target for target in LINK.findall(_prose(path.read_text(encoding="utf-8")))
            if not re.match(r"[a-z]+:", target)]  # http:, https:, mailto: are not checked (no network)


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(d.relative_to(ROOT)) for d in DOCUMENTS])
def test_relative_links_resolve(document):
    assert document.exists()
    broken = []
    for target in _links(document):
        file_part, _, anchor = target.partition("#")
        linked = (document.parent / file_part).resolve() if file_part else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert broken == []


def test_the_link_check_sees_links_and_skips_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A `code` heading\n[ok](#a-code-heading) ![img](pic.png) `[not](a link)`\n"
                    "```\n[not](either)\n```\n[web](https://example.com)\n", encoding="utf-8")
    assert _links(page) == ["#a-code-heading", "pic.png"]
    assert _anchors(page) == {"a-code-heading"}


def test_readme_is_short_and_every_document_is_linked_from_it():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in _links(ROOT / "README.md")}
    assert [str(d.relative_to(ROOT)) for d in DOCUMENTS if d.resolve() not in linked and d.name != "README.md"] == []


def test_every_torch_install_line_says_which_machine_it_is_for():
    """PyPI's Linux torch wheel brings several GB of CUDA packages: a line that installs it says it is for a GPU
    machine (or macOS/Windows), and the README also gives the CPU wheel index for Linux without a GPU."""
    lines = [(path.name, line) for path in [*DOCUMENTS, ROOT / "requirements.txt", ROOT / "pyproject.toml"]
             for line in path.read_text(encoding="utf-8").splitlines() if re.search(r"pip install torch\b", line)]
    cpu_index = "--index-url https://download.pytorch.org/whl/cpu"
    assert [(name, line) for name, line in lines if cpu_index not in line and "GPU" not in line] == []
    readme = [line for name, line in lines if name == "README.md"]
    assert any(cpu_index in line and "without an NVIDIA GPU" in line for line in readme)
    assert any(cpu_index not in line and "GPU machine" in line for line in readme)
