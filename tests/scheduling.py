"""How ``make test`` shares the suite between pytest-xdist workers (``--dist loadgroup``).

Each test file runs on one worker, so a module's fixture (a build, a compiled app) is made once, not
once per worker. Files that use one of SHARED_FIXTURES (session fixtures that build the demo or start
a server) run on one worker together, so the build or server is made once per run. The groups are the
connected files: two files sharing any such fixture share a worker.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

SHARED_FIXTURES = ("two_device_build", "postgres", "sshd")
TURN_ENV = "EDGESHIP_TEST_TURN"   # the folder of the run's two lock files, set by the controller
# The work units (a file, or the files joined by a shared fixture) that take longest, measured (`make test`
# --junitxml, 1254 tests: test_faults 163 s, the Ray+PostgreSQL group 154 s, test_linux 119 s, the sshd group
# 114 s, ...), sent to the workers first so that no long unit starts last and runs alone at the end. Order
# only (the Makefile turns off xdist's reordering by test count); a file missing here just goes later.
FIRST = ("tests/pipeline/test_faults.py", "tests/matrix/test_matrix_ray.py", "tests/bundle/test_linux.py",
         "tests/devices/test_ssh.py", "tests/test_cpu_kinds.py", "tests/devices/test_arm.py",
         "tests/bundle/test_make.py", "tests/backends/openvino/test_lower.py",
         "tests/faults/test_one_build_per_folder.py", "tests/test_cli.py", "tests/test_same_results.py",
         "tests/backends/aoti/test_lower.py", "tests/faults/test_interrupts.py", "tests/devices/test_browser.py",
         "tests/pipeline/test_stagecache.py", "tests/quantize/test_autokeep.py",
         "tests/pipeline/test_accuracy_checks.py", "tests/faults/test_device_interrupts.py",
         "tests/quantize/test_scope.py", "tests/test_build_e2e.py")


def file_groups(files: dict[str, set[str]]) -> dict[str, str]:
    """The xdist group of each test file, given the SHARED_FIXTURES each file's tests use: the file's
    own path, or for files joined by shared fixtures, those fixtures' names joined by '+'."""
    parent = {name: name for name in files}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    first_user: dict[str, str] = {}
    for name, fixtures in files.items():
        for fixture in sorted(fixtures):
            parent[root(name)] = root(first_user.setdefault(fixture, name))
    shared: dict[str, set[str]] = {}
    for name, fixtures in files.items():
        shared.setdefault(root(name), set()).update(fixtures)
    return {name: "+".join(sorted(shared[root(name)])) or name for name in files}


def first_key(nodeid: str) -> int:
    """Sort key that sends the FIRST files ahead of the rest (stable for everything else)."""
    path = nodeid.split("::")[0]
    return FIRST.index(path) if path in FIRST else len(FIRST)


@contextlib.contextmanager
def turn(alone: bool) -> Iterator[None]:
    """A test's turn under pytest-xdist: every test holds the room shared; a test marked ``alone`` (it
    measures the machine's own load) holds it exclusive, so it runs while no other test does. The
    turnstile stops new tests from entering while an ``alone`` test waits for the room to empty.
    Without TURN_ENV (a plain, serial pytest) there is nothing to wait for."""
    folder = os.environ.get(TURN_ENV)
    if not folder:
        yield
        return
    with open(os.path.join(folder, "turnstile"), "a") as gate, open(os.path.join(folder, "room"), "a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
