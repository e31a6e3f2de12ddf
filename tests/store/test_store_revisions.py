"""Opening a results store never migrates it: reports read an older store as it is, builds refuse
it naming ``edgeship store upgrade`` (the only command that migrates), and a store a newer edgeship
upgraded is refused naming both revisions (SQLite, and a real PostgreSQL for reading)."""
from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

import edgeship.store
from edgeship.cli import main
from edgeship.errors import StoreError
from edgeship.store import ResultsStore
from tests.conftest import make_tiny_project, write_profile

MIGRATIONS = Path(edgeship.store.__file__).parent / "store_migrations"
HEAD = "0004"
BEHIND = "0003"


def store_at(url: str, revision: str) -> None:
    """A store made by the migration chain stopped at ``revision``, holding one build (model tiny,
    variant ort on host, p50 1.25 ms), as an edgeship of that revision left it."""
    engine = sa.create_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        conn.execute(sa.text("INSERT INTO builds (build_id, created, target, model, results) "
                             "VALUES ('old1', '2026-01-01T00:00:00Z', 'host', 'tiny', '{}')"))
        conn.execute(sa.text("INSERT INTO measurements (build_id, created, target, model, variant, backend, precision, "
                             "device, p50_ms, notes) VALUES ('old1', '2026-01-01T00:00:00Z', 'host', 'tiny', 'ort', "
                             "'onnx', 'fp32', 'host', 1.25, '[]')"))
    engine.dispose()


def revision_of(url: str) -> str:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        value = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
    engine.dispose()
    return value


def _report_reads_without_migrating(url: str, out: Path, capsys) -> None:
    assert main(["report", "--db", url, "--out", str(out)]) == 0
    assert revision_of(url) == BEHIND
    printed = capsys.readouterr().out
    assert f"schema revision {BEHIND}, older than this edgeship's {HEAD}" in printed
    assert "edgeship store upgrade --db" in printed
    rows = ResultsStore(url, read_only=True).rows()
    assert [(r["variant"], r["p50_ms"], r["import_ms"]) for r in rows] == [("ort", 1.25, None)]  # 0004's column: null
    assert revision_of(url) == BEHIND


def test_store_report_reads_an_older_sqlite_store_without_migrating_it(tmp_path: Path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store_at(url, BEHIND)
    _report_reads_without_migrating(url, tmp_path / "report", capsys)


def test_store_report_reads_an_older_postgresql_store_without_migrating_it(postgres, tmp_path: Path, capsys) -> None:
    url = postgres.url()
    store_at(url, BEHIND)
    _report_reads_without_migrating(url, tmp_path / "report", capsys)


def test_store_upgrade_moves_an_older_store_to_the_newest_revision_keeping_its_rows(tmp_path: Path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store_at(url, BEHIND)
    assert main(["store", "upgrade", "--db", url]) == 0
    assert f"schema revision {BEHIND} -> {HEAD}" in capsys.readouterr().out
    assert revision_of(url) == HEAD
    assert [r["p50_ms"] for r in ResultsStore(url).rows()] == [1.25]
    assert main(["store", "upgrade", "--db", url]) == 0
    assert f"at schema revision {HEAD}, the newest: nothing to do" in capsys.readouterr().out


def test_store_of_a_newer_revision_is_refused_by_report_and_upgrade_naming_both(tmp_path: Path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    store_at(url, HEAD)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    for argv in (["report", "--db", url, "--out", str(tmp_path / "report")], ["store", "upgrade", "--db", url]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "schema revision 0099 was written by a newer edgeship; this one knows revisions up to 0004" in err
    assert revision_of(url) == "0099" and not (tmp_path / "report").exists()


def test_store_build_into_an_older_store_is_refused_before_any_work_naming_store_upgrade(tmp_path: Path,
                                                                                        capsys) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store_at(url, BEHIND)
    project = make_tiny_project(tmp_path / "tiny")
    profile = write_profile(tmp_path, '[[variants]]\nname = "onnx-fp32"\nbackend = "onnx"\n')
    out = tmp_path / "out"
    code = main(["build", "--target", str(profile), "--model", str(project / "model.toml"), "--out", str(out),
                 "--db", url, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"schema revision {BEHIND}, older than this edgeship's {HEAD}" in err
    assert f"edgeship store upgrade --db {url}" in err
    assert revision_of(url) == BEHIND and not out.exists()


def test_store_record_refuses_a_database_a_newer_edgeship_upgraded_after_it_was_opened(tmp_path: Path) -> None:
    from tests.test_store import _results

    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = ResultsStore(url)  # a build opens its store when it starts ...
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # ... and a teammate's newer edgeship upgrades it meanwhile
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(StoreError, match="schema revision 0099 was written by a newer edgeship"):
        store.record(_results(), build_id="b1")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM builds")).scalar_one() == 0
    engine.dispose()


def test_store_record_waits_for_a_migration_in_progress_on_postgresql(postgres) -> None:
    """record() checks the revision, then writes: a migration holding the lock (store upgrade, under
    pg_advisory_xact_lock) must not commit between the two, so the write waits for it."""
    import threading

    from edgeship.store_migrations.revisions import MIGRATION_LOCK
    from tests.test_store import _results

    url = postgres.url()
    store = ResultsStore(url)
    engine = sa.create_engine(url)
    done = threading.Event()
    with engine.connect() as conn, conn.begin():
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})  # a migration runs
        writer = threading.Thread(target=lambda: (store.record(_results(), build_id="waits"), done.set()))
        writer.start()
        assert not done.wait(1.5), "record() wrote while a migration held the lock"
    writer.join(30)
    assert done.is_set() and any(r["build_id"] == "waits" for r in store.rows())
    engine.dispose()
