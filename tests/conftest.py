"""Shared fixtures: a tiny model project on disk (spec, module, weights, data) and a fast profile."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest_plugins = ["tests.docs.report"]  # the closing block's list of docs blocks not run (tests/docs)

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

FAST_PROFILE = """\
name = "{name}"
description = "test profile"
[latency]
warmup = 2
iterations = 10
threads = 1
[gates]
min_sqnr_db = 60.0
[evaluation]
samples = 24
"""


def shipped_variants_profile(folder: Path, name: str, description: str, variants: list[dict],
                             gates_of: str = "host") -> Path:
    """A profile of variants taken from the shipped ones (host.toml's capture, targets/``gates_of``'s
    gates, 2 warmup and 10 timed runs), written as ``folder/name.toml``."""
    import tomllib

    from tests.test_bad_input import toml_document

    host = tomllib.loads((REPO / "targets" / "host.toml").read_text())
    gates = tomllib.loads((REPO / "targets" / f"{gates_of}.toml").read_text())["gates"]
    doc = {"description": description, "capture": host["capture"], "latency": {"warmup": 2, "iterations": 10},
           "gates": gates, "variants": variants}
    path = folder / f"{name}.toml"
    path.write_text(toml_document(doc))
    return path


def build_on(profile: Path, out: Path, devices: list[str], timeout: float = 1800):
    """``edgeship build --target profile --out out --device ...`` as a user runs it (a subprocess)."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--out", str(out)]
    return subprocess.run(command + [a for d in devices for a in ("--device", d)], cwd=out.parent,
                          capture_output=True, text=True, timeout=timeout)


def write_profile(folder: Path, variants: str, name: str = "testhost", extra: str = "") -> Path:
    """A profile with fast latency settings and the given ``[[variants]]`` TOML."""
    path = folder / f"{name}.toml"
    path.write_text(FAST_PROFILE.format(name=name) + textwrap.dedent(extra) + textwrap.dedent(variants))
    return path


def add_other_weights(project: Path) -> Path:
    """Beside a tiny project's model.toml, model_b.toml: the same model with other weights
    (tiny_b.pt, the head's bias moved by 1): a build that differs from the one already in a folder."""
    import torch

    from tests.models.tinynet import build

    model = build()
    with torch.no_grad():
        model.head.bias.add_(1.0)
    torch.save(model.state_dict(), project / "tiny_b.pt")
    (project / "model_b.toml").write_text((project / "model.toml").read_text().replace("tiny.pt", "tiny_b.pt"))
    return project / "model_b.toml"


def make_tiny_project(folder: Path) -> Path:
    """tests/models/tinynet.py copied into ``folder`` beside a model.toml, a state_dict and .npz data."""
    import torch

    from tests.models.tinynet import build

    folder.mkdir()
    shutil.copy(TESTS / "models" / "tinynet.py", folder / "tinynet.py")
    torch.save(build().state_dict(), folder / "tiny.pt")
    rng = np.random.default_rng(0)
    for name, n in (("calib", 16), ("eval", 32)):
        np.savez(folder / f"{name}.npz", x=rng.random((n, 3, 16, 16), dtype=np.float32),
                 y=rng.integers(0, 4, n).astype(np.int64))
    (folder / "model.toml").write_text(textwrap.dedent("""\
        name = "tiny"
        entry = "tinynet:build"
        weights = "tiny.pt"
        inputs = [{ name = "image", shape = [1, 3, 16, 16], dtype = "float32" }]
        [data]
        calibration = "calib.npz"
        evaluation = "eval.npz"
        """))
    return folder


@pytest.fixture(autouse=True, scope="session")
def _isolated_state(tmp_path_factory: pytest.TempPathFactory):
    """Tests never share the user's stage cache, results store or the key that signs the cache: all
    live in the session's tmp."""
    import os

    root = tmp_path_factory.mktemp("state")
    saved = {k: os.environ.get(k) for k in ("EDGESHIP_CACHE_DIR", "EDGESHIP_DB", "XDG_CONFIG_HOME")}
    os.environ["XDG_CONFIG_HOME"] = str(root / "config")
    os.environ["EDGESHIP_CACHE_DIR"] = str(root / "cache")
    os.environ["EDGESHIP_DB"] = f"sqlite:///{root / 'results.db'}"
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    """tests/models/tinynet.py copied beside a model.toml, a state_dict and calibration/eval .npz."""
    return make_tiny_project(tmp_path / "tiny")


@pytest.fixture(scope="session")
def two_device_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real build of the tiny model, timed on two local devices: the build folder (results.json,
    reports, android and jetson bundles). Built once per test session (tests/reports/builds.py)."""
    from tests.reports.builds import build_on_two_devices

    return build_on_two_devices(tmp_path_factory.mktemp("two-devices"))


@pytest.fixture
def tiny_spec(tiny_project: Path):
    from edgeship.spec import load_spec

    return load_spec(tiny_project / "model.toml")


@pytest.fixture
def tiny_model(tiny_spec):
    from edgeship.model import load_model

    return load_model(tiny_spec)


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for the session (tests/store/postgres.py; skips where it is not installed)."""
    from tests.store.postgres import start_postgres, stop_postgres

    server = start_postgres()
    yield server
    stop_postgres(server)


TURN_FOLDER = pytest.StashKey[str]()
SLOW_LEFT = pytest.StashKey[dict]()  # test file -> its slow tests this run deselected (make test: -m "not slow")
INDUCTOR_FOLDER = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (``make test``; tests/scheduling.py). An explicit
    ``xdist_group`` mark wins."""
    from tests.scheduling import SHARED_FIXTURES, file_groups, first_key

    files: dict[str, set[str]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], set()).update(
            f for f in SHARED_FIXTURES if f in getattr(item, "fixturenames", ()))
    groups = file_groups(files)
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid.split("::")[0]]))
    # `alone` tests first: at the start the other worker is on its first, short test, so the wait is
    # short; later it could be a two-minute one.
    items.sort(key=lambda item: (item.get_closest_marker("alone") is None, first_key(item.nodeid)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """Under ``--dist loadgroup`` every worker must name each test with its group (``nodeid@group``; every
    test here has one): that suffix is all pytest-xdist schedules by. pytest 9.2 with xdist 3.8 dropped it
    silently, every test became its own unit and both workers built the shared fixtures (pyproject.toml
    pins pytest < 9.2). Stop before anything runs instead."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    lost = [nodeid for nodeid in ids if nodeid.rfind("@") <= nodeid.rfind("]")]  # as xdist reads a group
    if lost:
        import xdist

        pytest.exit(f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__}: {len(lost)} test(s) "
                    f"reached the scheduler without their xdist_group (e.g. {lost[0]}), so --dist loadgroup would "
                    "split the groups between workers; use the versions pyproject.toml pins",
                    returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the controller makes the folder of the workers' turn locks (tests/scheduling.py);
    the workers it starts inherit its environment. A serial run (a pytest a test starts, too) takes no part."""
    import os
    import tempfile

    from tests.scheduling import TURN_ENV

    if hasattr(config, "workerinput"):
        # Inductor's compile cache is one folder per user, shared by every process: two workers compiling
        # the same graph at once wrote the same files there, and an AOTInductor package was seen holding
        # an empty wrapper_metadata.json. Each worker (and the builds it starts) gets its own.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = config.stash.setdefault(
            INDUCTOR_FOLDER, tempfile.mkdtemp(prefix=f"edgeship-inductor-{config.workerinput['workerid']}-"))
        return
    if getattr(config.option, "numprocesses", None):
        os.environ[TURN_ENV] = config.stash.setdefault(TURN_FOLDER, tempfile.mkdtemp(prefix="edgeship-test-turn-"))
    else:
        os.environ.pop(TURN_ENV, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    import os
    import shutil

    from tests.scheduling import TURN_ENV

    if INDUCTOR_FOLDER in config.stash:
        shutil.rmtree(config.stash[INDUCTOR_FOLDER], ignore_errors=True)
    if TURN_FOLDER in config.stash:
        os.environ.pop(TURN_ENV, None)
        shutil.rmtree(config.stash[TURN_FOLDER], ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """A test marked ``alone`` runs while no other worker runs a test (tests/scheduling.py)."""
    from tests.scheduling import turn

    with turn(item.get_closest_marker("alone") is not None):
        yield


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Count the ``slow`` tests a ``-m "not slow"`` run leaves out, by file, for the closing block."""
    for item in items:
        if item.get_closest_marker("slow") is not None:
            left = item.config.stash.setdefault(SLOW_LEFT, {})
            path = item.nodeid.split("::")[0]
            left[path] = left.get(path, 0) + 1


def _send_slow_left(session: pytest.Session) -> None:
    """A worker sends its count to the controller (every worker collects the whole suite)."""
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["slow_left"] = session.config.stash.get(SLOW_LEFT, {})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    left = getattr(node, "workeroutput", {}).get("slow_left") or {}
    if sum(left.values()) > sum(node.config.stash.get(SLOW_LEFT, {}).values()):
        node.config.stash[SLOW_LEFT] = left


def slow_lines(left: dict[str, int]) -> list[str]:
    """The closing block's line for the slow tests a run left out: how many, where, what runs them."""
    if not left:
        return []
    files = ", ".join(f"{path.removeprefix('tests/')} ({n})" for path, n in sorted(left.items()))
    return [f"{sum(left.values())} slow test(s) left to `make test-slow` (CI runs them; `make test-all` runs "
            f"everything): {files}"]


def _skip_reasons(config: pytest.Config) -> list[str]:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    reasons = []
    for report in (reporter.stats.get("skipped", []) if reporter else []):
        longrepr = report.longrepr
        reasons.append(longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr))
    return reasons


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The closing block: which tests did not run here, by the part of the machine they lack."""
    from tests import system

    if hasattr(config, "workerinput"):
        return
    reasons = _skip_reasons(config)
    terminalreporter.section("not run here (tests/system.py)")
    if not any(terminalreporter.stats.get(k) for k in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")):
        terminalreporter.write_line("no test ran")  # stopped before any (or none selected): not "every test ran"
        return
    slow = slow_lines(config.stash.get(SLOW_LEFT, {}))
    for line in slow + system.summary_lines(reasons, system.example_reasons(reasons), some_left_out=bool(slow)):
        terminalreporter.write_line(line)
    failures = system.ci_failures(system.skip_counts(reasons))
    if system.strict() and failures:
        terminalreporter.write_line(f"{system.STRICT_ENV}=1: failing the run, CI installs these parts: "
                                    + ", ".join(f"{p} ({n})" for p, n in sorted(failures.items())), red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under EDGESHIP_TEST_STRICT=1 (.ci/run) a skip CI should have prevented fails the run."""
    from tests import system

    _send_slow_left(session)
    if hasattr(session.config, "workerinput") or not system.strict():
        return
    if system.ci_failures(system.skip_counts(_skip_reasons(session.config))) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
