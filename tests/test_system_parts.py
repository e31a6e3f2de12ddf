"""The closing block of `make test`: skips counted by the part of the machine they lack, every skip
tagged, and EDGESHIP_TEST_STRICT=1 (.ci/run) failing a run that skipped what CI installs."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests import system
from tests.conftest import REPO, TESTS

SKIPS = ["Skipped: [chromium] Chromium is not installed", "[chromium] Chromium is not installed",
         "[openssh] OpenSSH not installed here", "[gpu] needs an NVIDIA GPU", "[cpu] this CPU has no bf16"]


def test_system_summary_counts_skips_by_part_and_says_what_installs_each() -> None:
    lines = system.summary_lines(SKIPS, system.example_reasons(SKIPS))
    assert lines[0] == "3 test(s) not run: parts of this machine are missing (`make test-deps` installs them all):"
    assert "  no Chromium (headless browser): 2 test(s); apt-get install chromium" in lines
    assert "  no OpenSSH server and client: 1 test(s); apt-get install openssh-server openssh-client" in lines
    assert "2 test(s) not run for what this machine is (nothing to install):" in lines
    assert "  an NVIDIA GPU with TensorRT: 1 test(s), e.g. needs an NVIDIA GPU" in lines
    assert system.summary_lines([], {}) == ["every test ran: nothing was skipped"]
    assert system.summary_lines([], {}, some_left_out=True) == ["every other test ran: nothing was skipped"]


def test_system_ci_fails_on_installable_and_untagged_skips_only() -> None:
    assert system.ci_failures(system.skip_counts(SKIPS)) == {"chromium": 2, "openssh": 1}
    assert system.ci_failures(system.skip_counts(["[gpu] no GPU", "[cpu] no bf16"])) == {}
    assert system.ci_failures(system.skip_counts(["no tag at all", "[nonsense] x"])) == {system.UNTAGGED: 2}


def _skip_calls(tree: ast.Module):
    """(line, reason expression) of every pytest.skip / importorskip / mark.skipif call in a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("skip", "importorskip", "skipif") and ast.unparse(node.func).startswith("pytest"):
            reasons = [k.value for k in node.keywords if k.arg in ("reason", "msg")]
            if node.func.attr == "skip" and node.args:
                reasons.append(node.args[0])
            yield node.lineno, reasons[0] if reasons else None


def test_system_every_skip_in_the_suite_names_its_part() -> None:
    """A new skip without a [part] tag would read as 'untagged' and fail CI only on the machine that
    skips it: caught here instead, on every machine."""
    untagged = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text())
        assigned = {t.id: ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
        for line, reason in _skip_calls(tree):
            text = ast.unparse(reason) if reason is not None else ""
            if isinstance(reason, ast.Call) and ast.unparse(reason.func) == "str" and reason.args:
                text = ast.unparse(reason.args[0])
            text = assigned.get(text, text)
            if "system." not in text:
                untagged.append(f"{path.relative_to(REPO)}:{line}: {text or '(no reason)'}")
    assert untagged == []


def test_system_strict_run_fails_on_a_skip_ci_installs(tmp_path: Path) -> None:
    """A real pytest run with the suite's hooks: the block at the end, and the exit status."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_parts.py").write_text(textwrap.dedent("""\
        import pytest
        from tests import system

        def test_needs_a_browser():
            pytest.skip(system.reason("chromium", "Chromium is not installed"))

        def test_needs_a_gpu():
            pytest.skip(system.reason("gpu", "needs an NVIDIA GPU"))

        def test_runs():
            pass
        """))

    def run(strict: str, *tests: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO), system.STRICT_ENV: strict}
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                               *[f"test_parts.py::{t}" for t in tests]], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)

    relaxed = run("", "test_needs_a_browser", "test_needs_a_gpu", "test_runs")
    assert relaxed.returncode == 0, relaxed.stdout
    assert "no Chromium (headless browser): 1 test(s); apt-get install chromium" in relaxed.stdout
    strict = run("1", "test_needs_a_browser", "test_runs")
    assert strict.returncode == 1 and "failing the run, CI installs these parts: chromium (1)" in strict.stdout
    legitimate = run("1", "test_needs_a_gpu", "test_runs")
    assert legitimate.returncode == 0 and "an NVIDIA GPU with TensorRT: 1 test(s)" in legitimate.stdout
    nothing = run("", "test_no_such_test")  # no test ran: the block must not say that every test ran
    assert "no test ran" in nothing.stdout and "every test ran" not in nothing.stdout, nothing.stdout


def test_scheduling_keeps_a_file_on_one_worker_and_joins_files_that_share_a_server() -> None:
    from tests.scheduling import file_groups

    groups = file_groups({"a.py": set(), "b.py": {"sshd"}, "c.py": {"postgres"}, "d.py": {"sshd", "postgres"},
                          "e.py": {"two_device_build"}, "f.py": {"two_device_build"}})
    assert groups["a.py"] == "a.py"
    assert groups["b.py"] == groups["c.py"] == groups["d.py"] == "postgres+sshd"
    assert groups["e.py"] == groups["f.py"] == "two_device_build"


def test_loadgroup_keeps_each_file_on_one_worker_in_a_real_xdist_run(tmp_path: Path) -> None:
    """pytest-xdist schedules by the ``@group`` suffix each worker writes into the node ids; with pytest
    9.2 and xdist 3.8 it was silently lost and every test went anywhere (shared fixtures were built on both
    workers). Two files of four tests, two workers: each file on one worker, under its group's name."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: left to make test-slow\n")
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text("import pytest\n\n" + "".join(
            f"def test_{i}():\n    pass\n\n" for i in range(4)) + ("@pytest.mark.slow\ndef test_slow():\n    pass\n"
                                                                  if name == "b" else ""))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-n", "2", "--dist", "loadgroup", "-m", "not slow"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    workers: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        if " PASSED " in line:
            worker, nodeid = line.split()[0].strip("[]"), line.split(" PASSED ")[1].strip()
            assert nodeid.endswith(f"@{nodeid.split('::')[0]}"), nodeid  # the group: the file's own path
            workers.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert sorted(workers) == ["test_a.py", "test_b.py"] and all(len(w) == 1 for w in workers.values()), workers
    # the slow test `-m "not slow"` left out is counted in the closing block, as each worker collected it
    assert "1 slow test(s) left to `make test-slow` (CI runs them; `make test-all` runs everything): " \
           "test_b.py (1)" in done.stdout, done.stdout[-2000:]
