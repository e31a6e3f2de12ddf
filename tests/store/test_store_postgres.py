"""The results store's schema migrations (SQLite and a real PostgreSQL), and PostgreSQL taking many
concurrent writers without losing a row."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from edgeship.errors import StoreError
from edgeship.store import ResultsStore, upgrade_store
from tests.store.postgres import write_concurrently
from tests.store.test_store_revisions import revision_of
from tests.test_store import _latency, _results

# The tables as edgeship made them before migrations existed (schema 1, metadata.create_all), written
# out as that code made them: a database of that time has these and no alembic_version table.
V1 = [
    "CREATE TABLE builds (build_id VARCHAR(64) NOT NULL, created VARCHAR(32) NOT NULL, target VARCHAR NOT NULL, "
    "model VARCHAR NOT NULL, results TEXT NOT NULL, PRIMARY KEY (build_id))",
    "CREATE TABLE measurements (id INTEGER NOT NULL, build_id VARCHAR(64) NOT NULL, created VARCHAR, target VARCHAR, "
    "model VARCHAR, variant VARCHAR, backend VARCHAR, precision VARCHAR, quantization VARCHAR, "
    "artifact_sha256 VARCHAR, size_bytes INTEGER, device VARCHAR, runtime VARCHAR, threads INTEGER, "
    "warmup INTEGER, iterations INTEGER, p50_ms FLOAT, p90_ms FLOAT, p99_ms FLOAT, mean_ms FLOAT, std_ms FLOAT, "
    "cv FLOAT, load_ms FLOAT, peak_rss_mb FLOAT, measured_at VARCHAR, samples INTEGER, top1 FLOAT, top1_drop FLOAT, "
    "sqnr_db FLOAT, agreement FLOAT, cosine FLOAT, max_abs_err FLOAT, gates_passed BOOLEAN, notes TEXT NOT NULL, "
    "PRIMARY KEY (id), FOREIGN KEY(build_id) REFERENCES builds (build_id))",
    "CREATE INDEX ix_measurements_key ON measurements (model, artifact_sha256, device, runtime, measured_at)",
    "INSERT INTO builds VALUES ('old1', '2026-01-01T00:00:00Z', 'host', 'tiny', '{}')",
    "INSERT INTO measurements (id, build_id, created, target, model, variant, device, p50_ms, notes) "
    "VALUES (1, 'old1', '2026-01-01T00:00:00Z', 'host', 'tiny', 'ort', 'host', 1.25, '[]')",
]


def _schema_1(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for statement in V1:
            if engine.dialect.name == "postgresql":
                statement = statement.replace("id INTEGER NOT NULL,", "id SERIAL NOT NULL,")
            conn.execute(sa.text(statement))
        if engine.dialect.name == "postgresql":  # the serial's next value after the row inserted by hand
            conn.execute(sa.text("SELECT setval('measurements_id_seq', 1)"))
    engine.dispose()




def _upgrades_a_schema_1_database(url: str) -> None:
    _schema_1(url)
    assert [r["p50_ms"] for r in ResultsStore(url, read_only=True).rows()] == [1.25]  # read as it is: not stamped
    engine = sa.create_engine(url)
    assert not sa.inspect(engine).has_table("alembic_version")
    engine.dispose()
    upgrade = upgrade_store(url)
    assert (upgrade.before, upgrade.after) == ("0001", "0004") and revision_of(url) == "0004"
    store = ResultsStore(url)
    old = store.rows()
    assert [(r["build_id"], r["variant"], r["p50_ms"], r["node"], r["emulated"], r["first_inference_ms"],
             r["rss_over_baseline_mb"], r["import_ms"]) for r in old] == [("old1", "ort", 1.25, None, None, None,
                                                                           None, None)]
    row = _latency("board", 2.0)
    row.node, row.emulated = "lab2 (Ray node 0123456789ab)", "qemu-x86_64 7.2.22 -cpu Haswell (TCG)"
    row.import_ms, row.first_inference_ms, row.rss_over_baseline_mb = 210.5, 7.25, 38.5
    store.record(_results(latency=[row]), build_id="new1", matrix="m.toml@2026")
    new = [r for r in store.rows() if r["build_id"] == "new1"]
    assert {r["node"] for r in new if r["device"] == "board"} == {"lab2 (Ray node 0123456789ab)"}
    assert {r["emulated"] for r in new if r["device"] == "board"} == {"qemu-x86_64 7.2.22 -cpu Haswell (TCG)"}
    assert {(r["import_ms"], r["first_inference_ms"], r["rss_over_baseline_mb"])
            for r in new if r["device"] == "board"} == {(210.5, 7.25, 38.5)}
    ResultsStore(url)  # opening it again is a no-op at the head revision
    assert revision_of(url) == "0004" and len(store.rows()) == 3


def test_a_sqlite_database_of_schema_1_is_upgraded_with_its_rows_kept(tmp_path: Path) -> None:
    _upgrades_a_schema_1_database(f"sqlite:///{tmp_path / 'old.db'}")


def test_a_postgresql_database_of_schema_1_is_upgraded_with_its_rows_kept(postgres) -> None:
    _upgrades_a_schema_1_database(postgres.url())


def test_a_database_a_newer_edgeship_upgraded_is_refused_naming_both_revisions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    ResultsStore(url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(StoreError, match="schema revision 0099 was written by a newer edgeship; this one knows "
                                         "revisions up to 0004"):
        ResultsStore(url)


def test_six_stores_opening_a_new_postgresql_database_at_once_migrate_it_under_the_lock(postgres) -> None:
    url = postgres.url()
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            ResultsStore(url).engine.dispose()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=open_store, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Without the advisory lock the concurrent CREATE TABLEs block each other (seen here: no opener
    # returned within a minute); with it each opener migrates or finds the head in about a second.
    assert not any(t.is_alive() for t in threads), "openers still migrating after 60 s"
    assert not errors, errors
    assert revision_of(url) == "0004"


def test_postgresql_takes_eight_concurrent_writers_and_loses_no_row(postgres, record_property) -> None:
    """8 writers each record 40 builds of 6 measurement rows (1920 rows) at once; every row arrives."""
    url = postgres.url()
    ResultsStore(url).engine.dispose()
    writers, builds, per_build = 8, 40, 6
    seconds, errors = write_concurrently(url, writers, builds, per_build)
    assert not errors, errors
    # each build: 6 measured rows plus the failed variant's device-less row
    rows = ResultsStore(url).rows()
    assert len(rows) == writers * builds * (per_build + 1)
    assert len({r["build_id"] for r in rows}) == writers * builds
    rate = len(rows) / seconds
    record_property("postgres_rows_per_second", round(rate))
    print(f"PostgreSQL: {len(rows)} rows from {writers} concurrent writers in {seconds:.2f} s = {rate:.0f} rows/s")


def test_a_database_password_is_written_into_no_report_file_and_no_message(postgres, tmp_path: Path) -> None:
    """A real PostgreSQL (trust authentication: it takes any password) reached by a URL with a
    password: the report names the store with the password masked, and so does a store error."""
    from edgeship.cli import main

    url = postgres.url().replace(f"://{postgres.user}@", f"://{postgres.user}:S3cretPW@")
    assert "S3cretPW" in url
    ResultsStore(url).record(_results(), build_id="earlier")
    (tmp_path / "build").mkdir()
    _results(latency=[_latency("host", 1.2, "2026-02-01T00:00:00Z")]).write(tmp_path / "build" / "results.json")
    assert main(["report", str(tmp_path / "build" / "results.json"), "--db", url, "--out", str(tmp_path / "r")]) == 0
    written = {p.name: p.read_text() for p in (tmp_path / "r").iterdir()}
    assert written and not [name for name, text in written.items() if "S3cretPW" in text]
    assert f"{postgres.user}:\\*\\*\\*@" in written["report.md"]  # Markdown's escapes: shown as ***
    unreachable = url.replace(f":{postgres.port}/", ":1/")
    with pytest.raises(StoreError) as refused:
        ResultsStore(unreachable)
    assert "S3cretPW" not in str(refused.value) and f"{postgres.user}:***@" in str(refused.value)
