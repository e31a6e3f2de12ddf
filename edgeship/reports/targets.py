"""What ``edgeship targets`` prints: one row per variant of every profile, with the profile's devices
and file, as a rich table on a terminal (like the build's table) and as plain aligned text otherwise
(a pipe or a log: one line per variant, the target's name on each, for grep and scripts)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from edgeship.devices.config import BUILT_IN
from edgeship.profile.listing import PROJECT, TargetEntry
from edgeship.reports.markdown import visible

COLUMNS = ("target", "variant", "backend", "precision", "devices", "profile")


def target_rows(entries: list[TargetEntry]) -> list[list[list[str]]]:
    """Per profile, its rows of COLUMNS' cells: one per variant, or one saying why it cannot be used."""
    out = []
    for e in entries:
        where = f"{e.path} ({e.origin}" + (f"; hides {e.hides}" if e.hides else "") + ")"
        if e.profile is None:
            out.append([[e.name, "-", "-", "-", "-", f"{where}: cannot be used: {' '.join(str(e.error).split())}"]])
            continue
        named = [d if d in BUILT_IN else f"{d} (with --devices)" for d in e.profile.devices]
        devices = ", ".join(named) or "host (default)"
        out.append([[e.name, v.name, v.backend, v.precision, devices, where] for v in e.profile.variants])
    return out


def targets_table(entries: list[TargetEntry]) -> Table:
    """The rich table: a section per profile, its name, devices and file on its first row."""
    table = Table(title="profiles for --target NAME", title_justify="left", caption=_caption(entries),
                  caption_justify="left")
    for column in COLUMNS:
        table.add_column(column)
    for rows in target_rows(entries):
        for i, cells in enumerate(rows):
            shown = cells if i == 0 else ["", *cells[1:4], "", ""]
            table.add_row(*(Text(visible(c)) for c in shown), end_section=i == len(rows) - 1)
    return table


def targets_text(entries: list[TargetEntry]) -> str:
    """Plain text: a header and one line per variant, columns aligned, every cell filled."""
    lines = [list(COLUMNS)] + [cells for rows in target_rows(entries) for cells in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)) + "  " + line[-1] for line in lines)


def print_targets(entries: list[TargetEntry], console: Console | None = None) -> None:
    """The table on a terminal, plain text otherwise."""
    console = console or Console()
    if console.is_terminal:
        console.print(targets_table(entries))
    else:
        print(visible(targets_text(entries)))


def _caption(entries: list[TargetEntry]) -> str | None:
    if not any(e.origin == PROJECT for e in entries):
        return None
    return f"{PROJECT}: ./targets in the working folder (found before the built-in profiles)"
