"""The documents: every relative link resolves, and the README stays a short document for users."""

from __future__ import annotations

import ast
import re
import shlex
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


# ---- every conversion the documents show comes out as shown, with the shipped model ----------------------

# Documents whose examples record other engines or past models, by date: libime's outputs, the quickstart
# models of the training log. Every other document's examples are claims about the shipped model.
RECORDS = {"benchmarks.md", "training-log.md"}
CJK_TEXT = "[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]+"  # hanzi, CJK and full-width punctuation
# `typed` → 汉字 (or ->) in prose: typed text with a letter and nothing elided (…), and hanzi after the arrow
PROSE_CLAIM = re.compile(rf"`([^`…]*[a-z][^`…]*)` ?(?:→|->) ?({CJK_TEXT})")
TRANSLATE_OPTIONS = {"--fuzzy": "fuzzy", "--shuangpin": "shuangpin", "--prefixes": "prefixes"}  # convert_lines'
CONVERTER_OPTIONS = {"--user-words": "user_words"}  # what a converter is made with


def _fenced_lines(text: str) -> list[str]:
    return [line for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
            for line in block.splitlines()]


def _translate_arguments(words: list[str]) -> tuple[str, dict]:
    """(typed text, convert_lines options) of translate.py's arguments; AssertionError for an option this
    test does not know, so that a new example teaches it."""
    options, texts, words = {}, [], list(words)
    while words:
        word = words.pop(0)
        if word.startswith("-"):
            assert word in TRANSLATE_OPTIONS or word in CONVERTER_OPTIONS, f"{word}: teach test_docs what it means"
            value = words.pop(0)
            options[{**TRANSLATE_OPTIONS, **CONVERTER_OPTIONS}[word]] = ({"on": True, "off": False}[value] if word == "--prefixes" else
                                                value.split(",") if word == "--fuzzy" else value)
        else:
            texts.append(word)
    return " ".join(texts), options


def _translate_claim(line: str) -> tuple[str, dict, str] | None:
    """(typed, convert_lines options, output) of ``python translate.py [OPTIONS] TEXT  # ... 汉字`` (the
    output: after the comment's last arrow, else what the comment starts with), or None without hanzi."""
    command, _, comment = line.partition("  #")
    if not command.startswith("python translate.py ") or not comment:
        return None
    claimed = re.match(rf"\s*({CJK_TEXT})", re.split("->|→", comment)[-1])
    return None if claimed is None else (*_translate_arguments(shlex.split(command)[2:]), claimed[1])


def _claims() -> list[tuple[str, str, dict, str]]:
    """(where, typed, options, output) of every conversion the README, docs/ and the model card show."""
    found = []
    for document in DOCUMENTS:
        if document.name in RECORDS:
            continue
        text = document.read_text(encoding="utf-8")
        where = str(document.relative_to(ROOT))
        for line in _fenced_lines(text):
            if (claim := _translate_claim(line)) is not None:
                found.append((where, *claim))
            elif (api := re.match(r"conv\.convert\((.+?)\)\s+# ('[^']*'|\[[^\]]*\])", line.strip())):
                found.append((where, ast.literal_eval(api[1]), {}, ast.literal_eval(api[2])))
        found += [(where, typed, {}, output) for typed, output in PROSE_CLAIM.findall(_without_fences(text))]
    return found


def test_the_claims_are_found_in_code_comments_the_api_examples_and_prose():
    claims = {(typed if isinstance(typed, str) else tuple(typed)): output for _, typed, _, output in _claims()}
    assert claims["wo men qu bei jing ba"] == "我们去北京吧" and claims["zi dao"] == "知道"
    assert claims["nihk"] == "你好" and claims[("ni hao", "xie xie")] == ["你好", "谢谢"]
    assert claims["e qie ta hen hao"] == "而且他很好" and len(claims) >= 12
    assert ("README.md", "wang jing ting", {"user_words": "data/user_words.txt"}, "王景廷") in _claims()
    assert _translate_claim('python translate.py --nbest 5 "xian zai"  # the 5 best: text, score') is None
    assert _translate_claim('python translate.py --shuangpin ms nihk  # a, b -> 你好') == ("nihk", {"shuangpin": "ms"}, "你好")


def _converter(shipped, user_words: str | None):
    """The shipped model's converter, or with ``user_words`` (a path relative to the repository) the shipped
    model's parts in a converter with that dictionary, as translate.py --user-words FILE makes one."""
    if user_words is None:
        return shipped
    from pinyin_hanzi.decoding.converter import Converter

    return Converter(shipped.model, shipped.pinyin_vocab, shipped.hanzi_vocab, window=shipped.planner.window,
                     syllable_lm=shipped.planner.syllable_lm, char_lm=shipped.char_lm, config=shipped.config,
                     user_words=str(ROOT / user_words))


def test_every_conversion_the_documents_show_comes_out_as_shown(shipped_converter):
    wrong = []
    for where, typed, options, output in _claims():
        lines = [typed] if isinstance(typed, str) else typed
        options = dict(options)
        converter = _converter(shipped_converter, options.pop("user_words", None))
        got = [found[0].text for found in converter.convert_lines(lines, **options)]
        if got != ([output] if isinstance(typed, str) else output):
            wrong.append(f"{where}: {typed!r} {options or ''} gives {got}, not {output!r}")
    assert wrong == []


def test_the_bad_input_tables_conversions_come_out_as_shown_with_the_shipped_model(shipped_converter):
    """docs/bad-input.md shows what a model without abbreviations gives (test_bad_input runs it with the
    tiny test model): the shipped model gives the same with prefixes off."""
    from test_bad_input import CASES, LONG_LINE

    checked, wrong = 0, []
    for case in CASES:
        if case.status != 0 or case.stdout is None or case.line == LONG_LINE:  # 10,000 syllables: a minute here
            continue
        line, options = case.line, {}
        if line is None:  # a conversion with options (--shuangpin, --prefixes): only the options known here
            if case.script != "translate.py" or not set(case.argv) & set(TRANSLATE_OPTIONS):
                continue
            line, options = _translate_arguments(list(case.argv))
        output = shipped_converter.convert_lines([line], **{"prefixes": False, **options})[0][0].text
        checked += 1
        if not (case.stdout(output) if callable(case.stdout) else output == case.stdout):
            wrong.append(f"{case.name}: {line[:40]!r} gives {output[:40]!r}")
    assert wrong == [] and checked >= 30
