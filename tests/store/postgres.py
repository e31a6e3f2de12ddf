"""A real PostgreSQL server for the tests: Debian's postgresql package (``initdb``, ``pg_ctl``) on a
temporary folder and a free loopback port, run as the ``postgres`` user when the tests run as root
(PostgreSQL refuses to run as root); stopped and removed afterwards. Skips, saying how to install it,
where the server is not installed (``.ci/run`` installs it)."""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import system

PACKAGE_BIN = "/usr/lib/postgresql/*/bin"


def server_bin() -> Path | None:
    """The folder of initdb and pg_ctl: Debian's versioned one, else the PATH's."""
    for folder in sorted(glob.glob(PACKAGE_BIN), reverse=True):
        if os.path.exists(os.path.join(folder, "pg_ctl")):
            return Path(folder)
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Postgres:
    """A running server: its data folder, port and a SQLAlchemy URL for a fresh database each call."""

    folder: Path
    port: int
    user: str
    bin: Path
    count: int = 0

    def url(self, name: str | None = None) -> str:
        """A new, empty database on the server and its URL (psycopg 3)."""
        self.count += 1
        name = name or f"edgeship_test_{self.count}"
        self.run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, name)
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{name}"

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        return _as_user([str(self.bin / tool), *args])


def _as_user(command: list[str]) -> subprocess.CompletedProcess:
    """Run ``command`` as the postgres user when we are root (PostgreSQL's tools refuse root)."""
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    return subprocess.run(command, check=True, capture_output=True, text=True)


def start_postgres() -> Postgres:
    bin_dir = server_bin()
    if bin_dir is None:
        pytest.skip(system.reason("postgresql", "PostgreSQL server not installed here (initdb/pg_ctl missing); "
                                                ".ci/run installs the postgresql "
                    "package with apt-get"))
    if os.geteuid() == 0:
        try:
            subprocess.run(["id", "postgres"], check=True, capture_output=True)
        except subprocess.CalledProcessError:
            pytest.skip(system.reason("postgresql", "running as root and there is no postgres user to run as"))
    folder = Path(tempfile.mkdtemp(prefix="edgeship-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data, port = folder / "data", free_port()
    _as_user([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"])
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off -c max_connections=100"
    _as_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w",
              "-t", "60", "start"])
    server = Postgres(folder, port, "postgres", bin_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if subprocess.run([str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                          capture_output=True).returncode == 0:
            return server
        time.sleep(0.2)
    raise RuntimeError(f"PostgreSQL did not come up: {(folder / 'log').read_text()[-2000:]}")


def stop_postgres(server: Postgres) -> None:
    try:
        _as_user([str(server.bin / "pg_ctl"), "-D", str(server.folder / "data"), "-m", "fast", "-w", "stop"])
    finally:
        shutil.rmtree(server.folder, ignore_errors=True)


def write_concurrently(url: str, writers: int, builds: int, devices: int = 6) -> tuple[float, list[BaseException]]:
    """``writers`` threads, each with its own ResultsStore on ``url``, start together and record
    ``builds`` builds each (``devices`` measured rows and one failed variant's row a build, one
    transaction a build); the seconds it took and the errors raised."""
    import threading

    from edgeship.store import ResultsStore
    from tests.test_store import _latency, _results

    errors: list[BaseException] = []
    barrier = threading.Barrier(writers)

    def write(w: int) -> None:
        store = ResultsStore(url)
        try:
            barrier.wait()
            for b in range(builds):
                rows = [_latency(f"dev{d}", 1.0 + d, measured_at=f"2026-01-01T{w:02d}:{b:02d}:{d:02d}Z")
                        for d in range(devices)]
                store.record(_results(model=f"m{w}", latency=rows), build_id=f"w{w}-b{b}")
        except BaseException as e:  # noqa: BLE001 - the caller reports them
            errors.append(e)
        finally:
            store.engine.dispose()
    began = time.perf_counter()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - began, errors
