"""The docs harness itself (tests/docs/blocks.py, runner.py, report.py) on small pages written here."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.docs.blocks import parse_page
from tests.docs.report import PROPERTY, skipped_lines
from tests.docs.runner import BlockFailure, run_page

FENCE = "```"


def page_of(tmp_path: Path, text: str, name: str = "page.md"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).replace("'''", FENCE))
    return parse_page(path, tmp_path)


def run(tmp_path: Path, text: str, work: str = "work"):
    page = page_of(tmp_path, text)
    assert not page.problems
    folder = tmp_path / work
    folder.mkdir()
    return run_page(page, folder, tmp_path, tmp_path / "cache")


def test_parse_page_attaches_markers_to_the_block_right_after_them(tmp_path) -> None:
    page = page_of(tmp_path, """\
        # Title
        <!-- test: exit 2 -->
        <!-- test: output bad input -->
        '''bash
        edgeship build --target nowhere
        '''

        '''python
        print(1)
        '''
        """)
    first, second = page.blocks
    assert (first.line, first.expected_exit, first.outputs, second.markers) == (4, 2, ["bad input"], [])
    assert not page.problems and not page.slow


def test_parse_page_reads_no_marker_or_block_inside_a_block(tmp_path) -> None:
    page = page_of(tmp_path, """\
        ````markdown
        <!-- test: slow -->
        '''bash
        make target=host
        '''
        ````
        """)
    assert [b.lang for b in page.blocks] == ["markdown"] and not page.problems and not page.slow


@pytest.mark.parametrize("text, problem", [
    ("<!-- test: slow -->\n\n'''bash\nls\n'''\n", "not on the line right before a fenced block"),
    ("<!-- test: sloow -->\n'''bash\nls\n'''\n", "malformed marker"),
    ("<!-- test skip no colon -->\n'''bash\nls\n'''\n", "malformed marker"),
    ("<!-- test: skip -->\n'''bash\nls\n'''\n", "`skip` needs REASON"),
    ("<!-- test: exit two -->\n'''bash\nls\n'''\n", "`exit` needs a status"),
    ("<!-- test: file ../x.toml -->\n'''toml\na = 1\n'''\n", "inside the page's folder"),
    ("<!-- test: slow -->\n'''text\nls\n'''\n", "is never run"),
    ("<!-- test: skip no phone -->\n<!-- test: slow -->\n'''bash\nls\n'''\n", "takes no other marker"),
    ("'''sh\nedgeship build\n'''\n", "a `sh` block is not run"),
    ("!!! note\n    '''bash\n    ls\n    '''\n", "does not see as a block"),
])
def test_parse_page_names_what_would_leave_a_block_unrun(tmp_path, text: str, problem: str) -> None:
    page = page_of(tmp_path, text)
    assert any(problem in p for p in page.problems), page.problems


def test_parse_page_is_slow_when_a_block_is(tmp_path) -> None:
    assert page_of(tmp_path, "<!-- test: slow -->\n'''bash\nsleep 1\n'''\n").slow


def test_run_page_writes_file_blocks_for_the_blocks_after_them(tmp_path) -> None:
    ran = run(tmp_path, """\
        <!-- test: file conf/model.toml -->
        '''toml
        name = "tiny"
        '''

        <!-- test: output name = "tiny" -->
        '''bash
        cat conf/model.toml
        '''

        '''python
        open("helper.py", "w").write("X = 1")
        import helper  # a module in the page's folder is importable, as beside a reader's script
        assert helper.X == 1
        '''
        """)
    assert len(ran) == 2


def test_run_page_gives_each_block_the_venv_repo_and_cache(tmp_path) -> None:
    ran = run(tmp_path, """\
        '''bash
        test "$EDGESHIP_REPO" = "$(cd "$EDGESHIP_REPO" && pwd)" && test -d "$EDGESHIP_REPO"
        test "$(command -v python)" -ef "$(python -c 'import sys; print(sys.executable)')"
        test "$EDGESHIP_CACHE_DIR" = "$EDGESHIP_REPO/cache"
        '''
        """)
    assert len(ran) == 1


def test_run_page_reports_a_failing_block_with_its_line_status_and_output(tmp_path) -> None:
    with pytest.raises(BlockFailure) as failure:
        run(tmp_path, """\
            '''bash
            echo fine
            '''

            '''bash
            echo step one
            echo "went wrong" >&2
            false
            echo never
            '''
            """)
    text = str(failure.value)
    assert text.startswith("page.md:5: the bash block starting `echo step one` exited with status 1, expected 0")
    assert "step one" in text and "went wrong" in text and "never" not in text


def test_run_page_fails_a_block_whose_status_or_output_differs_from_its_markers(tmp_path) -> None:
    with pytest.raises(BlockFailure, match="exited with status 0, expected 3"):
        run(tmp_path, "<!-- test: exit 3 -->\n'''bash\ntrue\n'''\n")
    with pytest.raises(BlockFailure, match="stdout lacks 'goodbye'"):
        run(tmp_path, "<!-- test: output goodbye -->\n'''python\nprint('hello')\n'''\n", work="again")


def test_run_page_passes_a_block_that_exits_as_its_marker_says(tmp_path) -> None:
    assert len(run(tmp_path, "<!-- test: exit 2 -->\n'''python\nimport sys\nsys.exit(2)\n'''\n")) == 1


def test_run_page_leaves_skipped_blocks_unrun(tmp_path) -> None:
    ran = run(tmp_path, "<!-- test: skip needs an Android phone on adb -->\n'''bash\nexit 1\n'''\n")
    assert ran == []


def test_run_page_runs_make_blocks_in_the_repository(tmp_path) -> None:
    (tmp_path / "Makefile").write_text("where:\n\t@pwd\n\t@test $$(pwd) = $(CURDIR)\n")
    assert len(run(tmp_path, "<!-- test: output " + str(tmp_path) + " -->\n'''bash\nmake where\n'''\n")) == 1


def test_run_page_refuses_a_make_block_that_would_reinstall_the_venv(tmp_path) -> None:
    (tmp_path / "Makefile").write_text("where:\n\t@pwd\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".installed").touch()
    os.utime(tmp_path / ".venv" / ".installed", (1, 1))
    (tmp_path / "pyproject.toml").touch()
    with pytest.raises(BlockFailure, match="make would reinstall the venv"):
        run(tmp_path, "'''bash\nmake where\n'''\n")


def test_skipped_lines_lists_each_skipped_block_with_its_reason() -> None:
    class Report:
        user_properties = [(PROPERTY, [("docs/x.md:12", "adb devices", "needs an Android phone on adb")])]

    assert skipped_lines([Report()]) == ["  docs/x.md:12: `adb devices`: needs an Android phone on adb"]
