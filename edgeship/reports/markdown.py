"""Text for report.md: any value, shown as itself in GitHub-flavoured Markdown.

A value read from results.json or a results store (a variant, device or model name, a runtime, a
note, a failure) may hold Markdown or HTML. Written as is, a newline and a ``#`` would start a
heading, ``[text](url)`` a link, ``<img ...>`` raw HTML. :func:`md_text` makes it one line of
literal text; the report's jinja2 environment runs it on every ``{{ ... }}`` (its ``finalize``
hook), so a field added to the template later cannot forget it. Text the renderer made itself
(a cell with its footnote mark) is :class:`Markdown` and passes unchanged.
"""
from __future__ import annotations

import re

# CommonMark backslash-escapes any ASCII punctuation. These are the characters that start inline
# Markdown or HTML anywhere in a line: code spans, emphasis, links and images (``[`` ``]``: without
# them ``(`` ``)`` and ``!`` start nothing), headings, raw HTML, entities, GFM's table cells and
# strikethrough, GitHub's math. One pass, the backslash included, so the text cannot undo an escape.
INLINE = re.compile(r"([\\`*\[\]#<>&|~$])")
# A run of ``_`` emphasises only at a word boundary: between letters or digits (snake_case) it is text.
UNDERSCORE = re.compile(r"(?<!\w)_+|_++(?!\w)")
# What starts a block at the beginning of a line (a list item, a setext underline, a thematic break):
# ``-``/``+``/``=`` not followed by a digit (``-3.2%`` stays as it is), or a number followed by ``.``/``)``
# and a space or the end (``1. `` starts an ordered list, ``1.5`` does not).
LEADING = re.compile(r"^(?:([-+=])(?!\d)|(\d{1,9})([.)])(?=\s|$))")
# Control characters a terminal would act on (``cat report.md``), and the bidirectional overrides
# that reorder what a reader sees: shown as U+FFFD.
HIDDEN = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with the control characters and bidirectional overrides shown as U+FFFD."""
    return HIDDEN.sub("\ufffd", text)


class Markdown(str):
    """Text already in Markdown: written into report.md as it is."""


def md_text(value: object, *, block_start: bool = True) -> Markdown:
    """``value`` as one line of literal text in Markdown (a table cell, a heading, a list item).

    ``block_start=False`` where no block can start (a GFM table cell: its line starts with ``|``), so
    a ``-`` placeholder stays ``-``; the default escapes what would start one at a line's beginning
    or in a list item, and is what every ``{{ ... }}`` of report.md gets unless told otherwise."""
    if isinstance(value, Markdown):
        return value
    text = visible(" ".join(str(value).split()))  # every line break and indent: one space
    text = UNDERSCORE.sub(lambda m: "\\_" * len(m.group()), INLINE.sub(r"\\\1", text))
    if not block_start:
        return Markdown(text)
    return Markdown(LEADING.sub(lambda m: f"\\{m[1]}" if m[1] else f"{m[2]}\\{m[3]}", text))


def md_code(value: object) -> Markdown:
    """``value`` as a code span (a hash, a path): fenced by more backticks than it holds, one line,
    its ``|`` escaped for GFM tables (the only escape a code span reads)."""
    text = visible(" ".join(str(value).split())).replace("|", "\\|")
    if not text:
        return Markdown("")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Markdown(f"{fence}{pad}{text}{pad}{fence}")
