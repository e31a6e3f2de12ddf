"""The fenced blocks of a docs page and their ``<!-- test: ... -->`` markers (docs/contributing/docs.md).

A page is parsed with markdown-it (CommonMark, what GitHub renders), so a block shown inside another
block is text, not a block, and a marker shown inside a block is not a marker. Everything that could
let a ``bash`` or ``python`` block go unrun without a word is a *problem* of the page: a marker that is
not right before a block, a malformed marker, a block of a language that looks runnable (``sh``,
``py``, ...) and a fence CommonMark does not see (indented under an admonition or a tab).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

RUN = ("bash", "python")
# Languages a reader would take for commands or Python: the harness would not run them, so they are refused.
RUNNABLE_LOOKALIKES = {"sh", "shell", "zsh", "py", "python3", "ipython", "pycon", "shell-session", "bash-session"}
MARKER = re.compile(r"^\s*<!--\s*test\b(.*?)-->\s*$")
FORM = re.compile(r"^:\s*(?P<kind>\S+)\s*(?P<arg>.*?)\s*$")
FENCE_LINE = re.compile(r"^\s*(`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
KINDS = {"file": "NAME", "slow": None, "exit": "N", "skip": "REASON", "output": "TEXT"}


@dataclass(frozen=True)
class Marker:
    kind: str
    arg: str
    line: int  # 1-based


@dataclass
class Block:
    """One fenced block: its language, text, first line (1-based, the fence's) and markers."""

    lang: str
    text: str
    line: int
    markers: list[Marker] = field(default_factory=list)

    def marker(self, kind: str) -> Marker | None:
        return next((m for m in self.markers if m.kind == kind), None)

    @property
    def runs(self) -> bool:
        """Run by the harness: a bash or python block that is neither skipped nor written to a file."""
        return self.lang in RUN and not (self.marker("skip") or self.marker("file"))

    @property
    def expected_exit(self) -> int:
        found = self.marker("exit")
        return int(found.arg) if found else 0

    @property
    def outputs(self) -> list[str]:
        return [m.arg for m in self.markers if m.kind == "output"]

    @property
    def first_line(self) -> str:
        """The block's first line of content, as a failure names it."""
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "(empty block)")

    @property
    def in_repo(self) -> bool:
        """A bash block whose first command is ``make`` runs in the repository root."""
        first = next((line.strip() for line in self.text.splitlines()
                      if line.strip() and not line.strip().startswith("#")), "")
        return self.lang == "bash" and first.split(" ", 1)[0] == "make"


@dataclass
class Page:
    path: Path
    name: str  # as tests name it: relative to the repository, posix
    blocks: list[Block]
    problems: list[str]

    @property
    def slow(self) -> bool:
        return any(b.marker("slow") for b in self.blocks)

    @property
    def run(self) -> list[Block]:
        return [b for b in self.blocks if b.runs]

    @property
    def skipped(self) -> list[Block]:
        return [b for b in self.blocks if b.lang in RUN and b.marker("skip")]


def parse_marker(text: str, line: int) -> tuple[Marker | None, str | None]:
    """One marker comment: the marker, or the problem with it."""
    found = FORM.match(text)
    if not found or found["kind"] not in KINDS:
        return None, f"line {line}: malformed marker {text.strip()!r}: write <!-- test: KIND ... --> with KIND one " \
                     f"of {', '.join(KINDS)}"
    kind, arg = found["kind"], found["arg"]
    if KINDS[kind] is None and arg:
        return None, f"line {line}: `{kind}` takes nothing, got {arg!r}"
    if KINDS[kind] is not None and not arg:
        return None, f"line {line}: `{kind}` needs {KINDS[kind]}"
    if kind == "exit" and not (arg.isdigit() and int(arg) <= 255):
        return None, f"line {line}: `exit` needs a status 0-255, got {arg!r}"
    if kind == "file" and (PurePosixPath(arg).is_absolute() or ".." in PurePosixPath(arg).parts):
        return None, f"line {line}: `file` needs a path inside the page's folder, got {arg!r}"
    return Marker(kind, arg, line), None


def _fences(text: str) -> list[tuple[str, str, int, int]]:
    """(language, content, first line, last line) of every fenced block CommonMark sees (lines 1-based,
    the fences included)."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(text)
    return [(t.info.split()[0] if t.info.strip() else "", t.content, t.map[0] + 1, t.map[1])
            for t in tokens if t.type == "fence" and t.map]


def _marker_lines(text: str, fence_spans: list[tuple[int, int]]) -> dict[int, str]:
    """Line -> the marker text after ``test``, for marker comments outside every block."""
    inside = {n for start, end in fence_spans for n in range(start, end + 1)}
    return {n: m.group(1) for n, line in enumerate(text.splitlines(), 1)
            if n not in inside and (m := MARKER.match(line))}


def _check_block(block: Block) -> list[str]:
    kinds = [m.kind for m in block.markers]
    where = f"line {block.line}"
    problems = [f"{where}: `{k}` given twice" for k in set(kinds) if kinds.count(k) > 1 and k != "output"]
    if block.lang not in RUN and set(kinds) - {"file"}:
        problems.append(f"{where}: a `{block.lang or 'plain'}` block is never run: only `file` applies to it")
    if "skip" in kinds and len(kinds) > 1:
        problems.append(f"{where}: a skipped block takes no other marker")
    if "file" in kinds and set(kinds) - {"file"}:
        problems.append(f"{where}: a block written to a file is not run: no other marker applies")
    if block.lang in RUNNABLE_LOOKALIKES:
        problems.append(f"{where}: a `{block.lang}` block is not run: write `bash` or `python` (run), or "
                        "`console`/`text` for printed output")
    return problems


def parse_page(path: Path, repo: Path) -> Page:
    """The page's blocks with their markers, and every problem that would let a block go unrun."""
    text = path.read_text(encoding="utf-8")
    fences = _fences(text)
    lines = text.splitlines()
    spans = [(first, last) for _, _, first, last in fences]
    markers = _marker_lines(text, spans)
    problems: list[str] = []
    blocks = []
    for lang, content, line, _ in fences:
        block = Block(lang, content, line)
        n = line - 1
        while n in markers:
            marker, problem = parse_marker(markers.pop(n), n)
            problems += [problem] if problem else []
            block.markers[:0] = [marker] if marker else []
            n -= 1
        problems += _check_block(block)
        blocks.append(block)
    problems += [f"line {n}: marker `test{rest.rstrip()}` is not on the line right before a fenced block"
                 for n, rest in sorted(markers.items())]
    inside = {n for start, end in spans for n in range(start, end + 1)}
    for n, line in enumerate(lines, 1):
        found = FENCE_LINE.match(line)
        if found and found["lang"] in RUN and n not in inside:
            problems.append(f"line {n}: a `{found['lang']}` fence the Markdown parser does not see as a block "
                            "(indented under an admonition, a tab or a list?): it would never run")
    return Page(path, path.relative_to(repo).as_posix(), blocks, problems)


def docs_pages(repo: Path) -> list[Path]:
    """The pages whose blocks are tested: README.md and every Markdown file under docs/."""
    return [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
