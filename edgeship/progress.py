"""Progress lines for long work, on stderr, so stdout stays for results."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape

from edgeship.errors import is_interrupt, user_code_exit

console = Console(stderr=True, highlight=False)
_quiet = [False]  # the running build's --quiet, for lines from deep inside a step (detail)


def detail(message: str) -> None:
    """A progress line from inside a step (a quantizer's per-layer loop), which has no Progress of
    its own; silent when the build is quiet."""
    if not _quiet[0]:
        console.print(message, markup=False)


class Progress:
    """Prints one line per finished step with its duration; a spinner while a step runs."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        _quiet[0] = quiet

    def info(self, message: str) -> None:
        """A line as written: paths, names and notes in it are never read as rich markup (a folder
        named ``[/x]`` printed as markup ended a build with a MarkupError)."""
        if not self.quiet:
            console.print(message, markup=False)

    def marked(self, mark: str, message: str) -> None:
        """``message`` as written, after ``mark`` (edgeship's own markup: a coloured ✓, ✗ or !)."""
        self._markup(f"{mark} {escape(message)}")

    def _markup(self, text: str) -> None:
        if not self.quiet:
            console.print(text)

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[dict[str, str]]:
        """Run a step; the caller may set ``status["result"]`` for the closing line. ``SystemExit`` (or
        any other BaseException that is not an interrupt) leaving the step came from user code run in
        it: it leaves as a model or data error naming the step (exit 2), never as an exit status."""
        status: dict[str, str] = {}
        start = time.perf_counter()
        spinner = console.status(f"{label} ...") if not self.quiet and console.is_terminal else None
        try:
            if spinner:
                spinner.start()
            yield status
        except BaseException as error:
            if spinner:
                spinner.stop()
            self._markup(f"[red]✗[/red] {escape(label)} [dim]({time.perf_counter() - start:.1f} s)[/dim]")
            if isinstance(error, Exception) or is_interrupt(error):
                raise
            raise user_code_exit(error, f"the step '{label}'") from error
        if spinner:
            spinner.stop()
        mark = "[yellow]![/yellow]" if status.get("warn") else "[green]✓[/green]"
        extra = f": {escape(status['result'])}" if status.get("result") else ""
        self._markup(f"{mark} {escape(label)}{extra} [dim]({time.perf_counter() - start:.1f} s)[/dim]")
