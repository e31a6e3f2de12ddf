"""Progress lines print paths, names and notes as written: a folder named ``[/x]`` in a line printed as
rich markup ended the build with a MarkupError traceback."""
from __future__ import annotations

from edgeship import progress
from edgeship.progress import Progress


def test_progress_info_prints_markup_in_a_line_as_written(capsys, monkeypatch) -> None:
    from rich.console import Console

    monkeypatch.setattr(progress, "console", Console(stderr=True, highlight=False, width=200))
    line = "/tmp/out[/x]/.edgeship-unrecorded.json cannot be read; [bold]kept[/bold]"
    Progress().info(line)
    Progress().marked("[yellow]![/yellow]", line)
    with Progress().step("lower [red]v[/]"):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0] == line and err[1] == f"! {line}"
    assert err[2].startswith("✓ lower [red]v[/] (")
