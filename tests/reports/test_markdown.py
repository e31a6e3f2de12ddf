"""report.md's escaping: any text, where the template puts it (a table cell, a list item, the start
of a line), renders as itself: one line, no Markdown or HTML construct, checked by a CommonMark
renderer with GitHub's tables and strikethrough (markdown-it-py, which rich brings)."""
from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from edgeship.reports.markdown import md_code, md_text
from tests.reports.builds import HOSTILE

RENDER = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render
TEXTS = [HOSTILE, "# h", "## h", "> q", "- item", "+ item", "* item", "1. item", "2) item", "---", "===", "    code",
         "```js", "~~~", "<div>x</div>", "<!-- c -->", "&amp; &#65;", "[a]: http://e", "![i](x.png)", "[l][1]",
         "<http://e>", "**b** __b__ *e* _e_", "~~s~~", "a | b", "\\", "x\\", "\\*x\\*", "$x$", "$$x$$",
         "a\tb\r\nc\u2028d", "snake_case_name", "1.5", "-3.2%", "+5.0%", "x\x1b[31my", "a\u202eb"]
CONTEXTS = {
    "table cell": ("| a | b |\n|---|---|\n| {} | z |\n", {"table", "thead", "tbody", "tr", "th", "td"}),
    "list item": ("1. {}\n", {"ol", "li"}),
    "line start": ("{}\n", {"p"}),
    "after text": ("text\n{}\n", {"p"}),
}


def tags_and_text(rendered: str) -> tuple[set[str], str]:
    tags = set(re.findall(r"<([a-z0-9]+)[\s>]", rendered))
    return tags, html.unescape(re.sub(r"<[^>]+>", " ", rendered))


def shown(text: str) -> str:
    """What a reader should see: the text on one line (control characters as U+FFFD)."""
    one_line = " ".join(text.split())
    return re.sub("[\x00-\x08\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", "\ufffd", one_line)


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("text", TEXTS)
def test_md_text_renders_as_the_text_itself_wherever_the_template_puts_it(text: str, context: str) -> None:
    template, structure = CONTEXTS[context]
    tags, rendered = tags_and_text(RENDER(template.format(md_text(text))))
    assert tags <= structure, (tags - structure, md_text(text))
    assert shown(text) in " ".join(rendered.split()), md_text(text)


@pytest.mark.parametrize("text", ["0123456789ab", "ab`|c", "``", "a\nb"])
def test_md_code_is_one_code_span_holding_the_text(text: str) -> None:
    tags, rendered = tags_and_text(RENDER(f"| a |\n|---|\n| {md_code(text)} |\n"))
    assert "code" in tags and tags <= {"table", "thead", "tbody", "tr", "th", "td", "code"}
    assert " ".join(text.split()) in rendered


@pytest.mark.parametrize("text", TEXTS)
def test_md_text_without_block_start_renders_as_the_text_in_a_table_cell(text: str) -> None:
    """In a table cell (where report.md's cells go) no block can start: without that escaping the
    text still renders as itself, and a "-" placeholder is written "-", not "\\-"."""
    template, structure = CONTEXTS["table cell"]
    tags, rendered = tags_and_text(RENDER(template.format(md_text(text, block_start=False))))
    assert tags <= structure, (tags - structure, md_text(text, block_start=False))
    assert shown(text) in " ".join(rendered.split())
    assert md_text("-", block_start=False) == "-" and md_text("1. x", block_start=False) == "1. x"
