"""bench/man_pages.py without the package: a man page's groff source stripped to its running text."""

from __future__ import annotations

import importlib.util

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("man_pages", ROOT / "bench" / "man_pages.py")
man_pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(man_pages)


MAN_PAGE = r""".\" a comment 注释不要
.TH LS 1 2022年9月 "GNU coreutils" 用户命令
.de XX
.B 定义不要
..
.SH 名称
ls \- 列出目录内容
.SH "描述"
列出指定\fB文件\fP的信息，如果没有
指定则按字母排序。
.B 粗体
接着写。
.TP
\fB\-a\fP, \fB\-\-all\fP 选项标签
不要忽略条目
.nf
第一行
第二行
.fi
.if n 条件不要
.TS
l l.
表格不要	表格
.TE
见\*(L"文件\*(R"一节
最后一段
"""


def test_groff_text_keeps_running_text_and_drops_macros():
    assert man_pages.groff_text(MAN_PAGE) == [
        "名称", "ls - 列出目录内容", "描述",
        "列出指定文件的信息，如果没有指定则按字母排序。 粗体接着写。",  # no space at a line break between hanzi
        "-a, --all 选项标签", "不要忽略条目", "第一行", "第二行", "见 文件 一节最后一段"]
