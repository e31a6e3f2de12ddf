"""Run a docs page's blocks as a reader would type them (docs/contributing/docs.md).

The page's blocks run in order in one fresh working folder, each in a fresh process: ``bash`` blocks
with ``bash -euo pipefail``, ``python`` blocks as a script with the venv's Python; a ``file`` block
is written where its marker says. The venv's bin comes first on PATH, ``$EDGESHIP_REPO`` names the
repository and a block whose first command is ``make`` runs in it. The first block that fails stops
the page, and the failure names the page, the block's line and first line, its exit status and the
tail of its output.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.docs.blocks import Block, Page

TAIL_LINES = 30
FAST_TIMEOUT_S = 300     # a page in `make test`: its blocks take seconds
SLOW_TIMEOUT_S = 3600    # a `slow` page: a first `make target=host` sets up the venv (minutes)


@dataclass
class BlockFailure(Exception):
    page: str
    block: Block
    why: str
    stdout: str = ""
    stderr: str = ""

    def __str__(self) -> str:
        lines = [f"{self.page}:{self.block.line}: the {self.block.lang} block starting `{self.block.first_line}` "
                 f"{self.why}"]
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            tail = text.rstrip().splitlines()[-TAIL_LINES:]
            if tail:
                lines += [f"--- last {len(tail)} line(s) of its {name}:", *tail]
        return "\n".join(lines)


def block_env(repo: Path, cache: Path) -> dict[str, str]:
    """The environment of every block: this process's, the venv's bin first on PATH, the repository
    as $EDGESHIP_REPO and the docs tests' stage cache."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["EDGESHIP_REPO"] = str(repo)
    env["EDGESHIP_CACHE_DIR"] = str(cache)
    return env


def stale_venv(repo: Path) -> str | None:
    """Why a ``make`` block must not run here: make would reinstall a venv older than pyproject.toml
    (an engineer's clone sharing the lead's venv), or None."""
    installed = repo / ".venv" / ".installed"
    if installed.exists() and installed.stat().st_mtime < (repo / "pyproject.toml").stat().st_mtime:
        return "was not run: .venv/.installed is older than pyproject.toml, so make would reinstall the venv " \
               "(run `make setup` first)"
    return None


def _command(block: Block, folder: Path) -> list[str]:
    if block.lang == "bash":
        return ["bash", "-euo", "pipefail", "-c", block.text]
    script = folder / f".docs-block-{block.line}.py"  # in the folder: it is on sys.path, as for a reader's script
    script.write_text(block.text, encoding="utf-8")
    return [sys.executable, script.name]


def run_block(page: str, block: Block, folder: Path, repo: Path, env: dict[str, str], timeout: float) -> None:
    """Run one block; BlockFailure when its status or output is not what its markers say."""
    if block.in_repo and (why := stale_venv(repo)):
        raise BlockFailure(page, block, why)
    command = _command(block, folder)
    process = subprocess.Popen(command, cwd=repo if block.in_repo else folder, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the block's own session: what it started goes too
        stdout, stderr = process.communicate()
        raise BlockFailure(page, block, f"did not finish in {timeout:.0f} s (killed)", stdout, stderr) from None
    finally:
        if block.lang == "python":
            (folder / command[-1]).unlink(missing_ok=True)
    if process.returncode != block.expected_exit:
        raise BlockFailure(page, block, f"exited with status {process.returncode}, expected {block.expected_exit}",
                           stdout, stderr)
    missing = [text for text in block.outputs if text not in stdout]
    if missing:
        raise BlockFailure(page, block, f"exited {process.returncode} but its stdout lacks {missing[0]!r}",
                           stdout, stderr)


def run_page(page: Page, folder: Path, repo: Path, cache: Path) -> list[Block]:
    """Every block of ``page`` in order in ``folder``: files written, blocks run; the blocks run."""
    env = block_env(repo, cache)
    timeout = SLOW_TIMEOUT_S if page.slow else FAST_TIMEOUT_S
    ran = []
    for block in page.blocks:
        if (written := block.marker("file")) is not None:
            target = folder / written.arg
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
        elif block.runs:
            run_block(page.name, block, folder, repo, env, timeout)
            ran.append(block)
    return ran
