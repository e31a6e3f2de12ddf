"""report.md and report.html, rendered from jinja2 templates (``reports/templates``).

Both show the same tables; the HTML page adds the charts (inline SVG) and loads nothing from the
network: no scripts, no fonts, no images outside the page, and a Content-Security-Policy that
forbids fetching any. A "not measured" cell links to its reason, listed once at the end.

Every value is shown as text, whatever it holds: the HTML template is autoescaped (its only
``|safe`` is the charts' SVG, whose text matplotlib escapes), and the Markdown template's
environment escapes every printed value (``finalize``: :func:`markdown.md_text`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

import edgeship.reports.formatting as formatting  # the templates call its functions as c.<cell>
from edgeship import __version__
from edgeship.reports.charts import charts
from edgeship.reports.compare import Comparison
from edgeship.reports.markdown import Markdown, md_code, md_text
from edgeship.reports.rows import Report, Shown

if TYPE_CHECKING:
    import jinja2


@dataclass
class Footnotes:
    """Reasons for "not measured" cells, numbered in order of first use and listed once."""

    items: list[str] = field(default_factory=list)

    def number(self, why: str) -> int:
        if why not in self.items:
            self.items.append(why)
        return self.items.index(why) + 1


def render_markdown(report: Report, comparison: Comparison | None = None) -> str:
    """GitHub-flavoured Markdown: variants, latency per device side by side, comparisons, reasons."""
    notes = Footnotes()

    def cell(shown: Shown) -> Markdown:  # a table cell: no block starts there
        text = md_text(shown.text, block_start=False)
        return Markdown(f"{text} [{notes.number(shown.why)}]") if shown.why else text

    env = _environment(cell, md_text, finalize=md_text)
    env.filters["code"] = md_code
    return env.get_template("report.md.j2").render(**_context(report, comparison, notes))


def render_html(report: Report, comparison: Comparison | None = None) -> str:
    """One self-contained page: the same tables plus the charts, inline."""
    notes = Footnotes()

    def cell(shown: Shown) -> Markup:
        if not shown.why:
            return escape(shown.text)
        n = notes.number(shown.why)
        return Markup('<span class="nm" title="{why}">{text}</span><sup><a href="#note-{n}">{n}</a></sup>').format(
            why=shown.why, text=shown.text, n=n)

    context = _context(report, comparison, notes)
    context["charts"] = charts(report) if report.lines else []
    return _environment(cell, escape).get_template("report.html.j2").render(**context)


def _environment(cell: Callable[[Shown], str], text: Callable[[object], str],
                 finalize: Callable[[object], object] | None = None) -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("edgeship.reports", "templates"),
                             autoescape=jinja2.select_autoescape(["html.j2"]), trim_blocks=True, finalize=finalize,
                             lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["cell"] = cell
    env.filters["text"] = text
    return env


def _context(report: Report, comparison: Comparison | None, notes: Footnotes) -> dict[str, object]:
    sources = comparison.sources if comparison else [b.source for b in report.builds]
    return {"report": report, "comparison": comparison, "notes": notes, "c": formatting, "sources": sources,
            "toolchain": _toolchain_table(report), "edgeship_version": __version__}


def _toolchain_table(report: Report) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Library versions: one column per library, one row per build."""
    names = list(dict.fromkeys(k for b in report.builds for k in b.results.toolchain))
    return names, [(b.label, [b.results.toolchain.get(k, "—") for k in names]) for b in report.builds]
