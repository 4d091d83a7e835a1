"""bench/domain_text.py through its command line, on a small .deb built here (python's own ar and tar
writing) that is laid out as Debian's libreoffice-help-zh-cn is: no network, no apt-get of the machine."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from conftest import ROOT, python_path
from pinyin_hanzi.data.corpus import read_examples

SCRIPT = ROOT / "bench" / "domain_text.py"
_spec = importlib.util.spec_from_file_location("domain_text", SCRIPT)
domain_text = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(domain_text)

# What a help page wraps around its text (from the real pages, cut down): none of it is running text.
FRAME = """<!DOCTYPE html><html lang="zh-CN"><head><title>标题不要</title>
<script type="text/javascript">var 脚本不要 = 1;</script></head><body>
<header id="TopLeftHeader"><a class="logo" href="x.html"><p dir="auto">页眉不要</p></a>
<div class="modules"><button type="button">模块不要</button><nav id="modules-nav"></nav></div></header>
<aside class="leftside"><div class="index-label">索引不要</div><input class="search" placeholder="搜索"></aside>
<div id="DisplayArea"><meta itemprop="keywords" content="关键词不要">
{body}
<div class="relatedtopics"><p class="related"><span class="emph">相关主题不要</span></p></div>
</div><footer><div class="debug"><p dir="auto">Title is: 调试不要</p></div></footer></body></html>"""

TRAIN_BODY = """<h1 id="hd_1">银行在长安街上</h1>
<p class="paragraph">今天天气很好，我们去公园。</p>
<div class="howtoget"><p class="howtogetheader">要访问此命令...</p>
<div class="howtogetbody"><p>菜单路径不要</p></div></div>
<p class="paragraph">选择「<span class="switchinline"><span hidden="true" class="MAC">苹果变体不要</span><span>工具 - 选项</span></span>」。</p>
<div class="embedded"><p class="embedded">嵌入不要</p></div>
<div class="bascode"><pre><code>Print "代码不要"</code></pre></div>
<p class="paragraph">Only English here.</p>
<ol><li><p class="listitem">打开文件，</p></li></ol>
<table><tr><td><p class="tablecontentintable">表格里的字</p></td></tr></table>"""

EVAL_BODY = """<h1>他长大了，想当医生。</h1>
<p class="paragraph">他长大了，打开文件，春天来了。</p>"""


def page_names() -> tuple[str, str]:
    """A page path the script keeps for fine-tuning and one it holds out (its own hash rule decides)."""
    names = [f"text/swriter/guide/page{number}.html" for number in range(200)]
    return (next(name for name in names if not domain_text.held_out(name)),
            next(name for name in names if domain_text.held_out(name)))


def ar_member(name: str, data: bytes) -> bytes:
    header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode("ascii")
    return header + data + (b"\n" if len(data) % 2 else b"")


def build_deb(path: Path, pages: dict[str, str]) -> Path:
    """A .deb (ar: debian-binary, control.tar.xz, data.tar.xz) holding ``pages`` under the zh-CN help folder."""
    def tar_xz(files: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    data = tar_xz({f"./{domain_text.HELP_ROOT}{page}": html.encode("utf-8") for page, html in pages.items()}
                  | {"./usr/share/doc/libreoffice-help-zh-cn/copyright": b"License: MPL-2.0\n"})
    control = tar_xz({"./control": b"Package: libreoffice-help-zh-cn\n"})
    path.write_bytes(b"!<arch>\n" + ar_member("debian-binary", b"2.0\n") + ar_member("control.tar.xz", control)
                     + ar_member("data.tar.xz", data))
    return path


def run_script(*args: str, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=python_path(ROOT))
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, str(SCRIPT), *args, "--no-phrase-pinyin"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_pages_become_running_text_and_held_out_clauses_none_of_them_in_train(tmp_path):
    train_page, eval_page = page_names()
    deb = build_deb(tmp_path / "help.deb", {train_page: FRAME.format(body=TRAIN_BODY),
                                            eval_page: FRAME.format(body=EVAL_BODY)})
    done = run_script("--deb", str(deb), "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    train = (tmp_path / "out" / "train.txt").read_text(encoding="utf-8").splitlines()
    # Paragraph text only, a paragraph a line; the page's frame, menus, hidden variants, embedded sections,
    # code, related topics and the debug footer are gone, and so is the paragraph without a hanzi.
    assert train == ["银行在长安街上", "今天天气很好，我们去公园。", "选择「工具 - 选项」。", "打开文件，", "表格里的字"]
    assert "不要" not in (tmp_path / "out" / "train.txt").read_text(encoding="utf-8")

    held = read_examples(tmp_path / "out" / "eval.tsv")  # every line a valid pinyin<TAB>hanzi pair
    # 打开文件， is a clause of train.txt and 他长大了， comes twice: each left out, the repeat once.
    assert [example.hanzi for example in held] == ["他长大了，", "想当医生。", "春天来了。"]
    assert held[0].tokens == ("ta", "zhang", "da", "le", "，")
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["train_pages"] == 1 and summary["eval_pages"] == 1 and summary["eval_clauses"] == 3
    assert summary["eval_left_out"] == {"also a clause of train.txt": 1, "duplicate": 1}

    capped = run_script("--deb", str(deb), "--out", "capped", "--max-eval", "2", cwd=tmp_path)
    assert capped.returncode == 0, capped.stderr
    assert len(read_examples(tmp_path / "capped" / "eval.tsv")) == 2


def test_fetches_with_apt_get_once_and_fails_in_one_line(tmp_path):
    train_page, eval_page = page_names()
    deb = build_deb(tmp_path / "built.deb", {train_page: FRAME.format(body=TRAIN_BODY),
                                             eval_page: FRAME.format(body=EVAL_BODY)})
    no_apt, failing_apt, working_apt = (tmp_path / name for name in ("none", "failing", "working"))
    for folder, body in ((failing_apt, "echo 'E: Unable to locate package libreoffice-help-zh-cn' >&2; exit 100"),
                         (working_apt, f"cp {deb} libreoffice-help-zh-cn_1%3a7.4_all.deb")):
        folder.mkdir()
        (folder / "apt-get").write_text(f"#!/bin/sh\n{body}\n")
        (folder / "apt-get").chmod(0o755)
    no_apt.mkdir()

    for path, expected in ((str(no_apt), "error: apt-get not found"),
                           (f"{failing_apt}:/usr/bin:/bin", "error: apt-get download libreoffice-help-zh-cn failed "
                                                            "(E: Unable to locate package libreoffice-help-zh-cn)")):
        done = run_script("--raw-dir", "raw", cwd=tmp_path, path=path)
        lines = done.stderr.strip().splitlines()  # a note that the download starts, then the error
        assert done.returncode == 2 and lines[-1].startswith(expected), done.stderr
        assert len(lines) <= 2 and "Traceback" not in done.stderr and not (tmp_path / "data").exists()
    assert list((tmp_path / "raw").iterdir()) == []  # the failed download left nothing that passes for the cache

    fetched = run_script("--raw-dir", "raw", "--out", "out", cwd=tmp_path, path=f"{working_apt}:/usr/bin:/bin")
    assert fetched.returncode == 0, fetched.stderr
    assert json.loads(fetched.stdout.splitlines()[-1])["version"] == "1:7.4"
    cached = run_script("--raw-dir", "raw", "--out", "again", cwd=tmp_path, path=str(no_apt))  # no apt-get needed now
    assert cached.returncode == 0, cached.stderr
    assert (tmp_path / "again" / "eval.tsv").read_bytes() == (tmp_path / "out" / "eval.tsv").read_bytes()

    (tmp_path / "bad.deb").write_bytes(b"not an archive")
    bad = run_script("--deb", str(tmp_path / "bad.deb"), cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr == f"error: {tmp_path / 'bad.deb'} is not a .deb (no ar archive): " \
                                                 f"delete it and run again\n"
