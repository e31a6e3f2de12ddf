"""The results store: every measurement of every build in one database, so reports can compare
devices and follow a model over time.

SQLite at ``artifacts/results.db`` by default; any SQLAlchemy URL (``--db URL`` or the
``EDGESHIP_DB`` environment variable), so a team can point every build at one PostgreSQL
(``postgresql+psycopg://user@server/edgeship``, with the ``psycopg`` driver installed).

One row per (variant, device) measurement, keyed by model, artifact sha256, device, runtime and
the time it was measured. A variant that has no measurement at all (it failed to lower, or no
device could run it) gets one row with ``device`` null and the reason in ``notes``. Numbers that
were not measured are null, as in results.json. Recording is idempotent: a measurement already
stored (same model, target, variant, artifact, device and ``measured_at``, as when ``build --resume``
reuses it) is not stored twice, nor is a build id already there (a build recorded again by the next
run after a failure). A measurement another target's build reused from the stage cache is stored
with that build too, so each target's rows are whole (reports count it once: ``reports/compare.py``).
A database that cannot take or give rows (locked, away) is a ``StoreError``.

The schema is versioned with alembic (``edgeship/store_migrations``): opening a store upgrades its
database to the newest revision this edgeship knows, inside one transaction (on PostgreSQL under an
advisory lock, so many builds opening one database at once migrate it once). A database made before
migrations existed (schema 1's tables, no ``alembic_version``) is stamped as revision 0001 first; a
database a newer edgeship upgraded is refused, naming both revisions, rather than written wrongly.
Each build's rows go in one transaction, so concurrent writers (the builds of ``edgeship matrix``)
lose nothing and never see half a build.
"""
from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeship.errors import StoreError, first_line
from edgeship.results import Latency, Results, VariantResult

if TYPE_CHECKING:
    import sqlalchemy as sa

DEFAULT_PATH = Path("artifacts") / "results.db"
ENV = "EDGESHIP_DB"
MIGRATIONS = Path(__file__).resolve().parent / "store_migrations"
FIRST_REVISION = "0001"   # the schema of the tables edgeship made before migrations
MIGRATION_LOCK = 7243100117  # pg_advisory_xact_lock key: one migrating connection at a time

# The columns of a measurement row, by where they come from in results.json.
BUILD_COLUMNS = ["build_id", "created", "target", "model"]
VARIANT_COLUMNS = ["variant", "backend", "precision", "quantization", "artifact_sha256", "size_bytes"]
LATENCY_COLUMNS = ["device", "runtime", "threads", "warmup", "iterations", "p50_ms", "p90_ms", "p99_ms",
                   "mean_ms", "std_ms", "cv", "load_ms", "peak_rss_mb", "measured_at", "node", "emulated",
                   "import_ms", "first_inference_ms", "rss_over_baseline_mb"]
ACCURACY_COLUMNS = ["samples", "top1", "top1_drop", "sqnr_db", "agreement", "cosine", "max_abs_err"]
INT_COLUMNS = {"size_bytes", "threads", "warmup", "iterations", "samples"}
FLOAT_COLUMNS = {"p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "cv", "load_ms", "peak_rss_mb",
                 "import_ms", "first_inference_ms", "rss_over_baseline_mb",
                 "top1", "top1_drop", "sqnr_db", "agreement", "cosine", "max_abs_err"}


def default_url() -> str:
    """``EDGESHIP_DB`` when set, else SQLite at ``artifacts/results.db`` under the working folder."""
    return os.environ.get(ENV) or f"sqlite:///{DEFAULT_PATH}"


def _tables(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table]:
    import sqlalchemy as sa

    def column(name: str) -> sa.Column[int | float | str]:
        kind = sa.Integer if name in INT_COLUMNS else sa.Float if name in FLOAT_COLUMNS else sa.String
        return sa.Column(name, kind, nullable=True)

    builds = sa.Table("builds", metadata,
                      sa.Column("build_id", sa.String(64), primary_key=True),
                      sa.Column("created", sa.String(32), nullable=False),
                      sa.Column("target", sa.String, nullable=False),
                      sa.Column("model", sa.String, nullable=False),
                      sa.Column("results", sa.Text, nullable=False, doc="The build's results.json"),
                      sa.Column("matrix", sa.String, nullable=True, doc="The matrix run that recorded it"))
    rows = sa.Table("measurements", metadata,
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("build_id", sa.String(64), sa.ForeignKey("builds.build_id"), nullable=False),
                    *[column(n) for n in BUILD_COLUMNS[1:] + VARIANT_COLUMNS + LATENCY_COLUMNS
                      + ACCURACY_COLUMNS],
                    sa.Column("gates_passed", sa.Boolean, nullable=True),
                    sa.Column("notes", sa.Text, nullable=False, default="[]"),
                    sa.Index("ix_measurements_key", "model", "artifact_sha256", "device", "runtime",
                             "measured_at"))
    return builds, rows


def masked_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (SQLAlchemy's own rendering), for every message,
    report and file; in a URL SQLAlchemy cannot parse, whatever stands between ``user:`` and ``@``
    is masked the same way. A password is never written anywhere by edgeship."""
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        scheme, sep, rest = url.partition("://") if "://" in url else ("", "", url)
        return scheme + sep + re.sub(r"^([^/:@]*:)[^@]*@", r"\1***@", rest)


class ResultsStore:
    """A database of measurements. ``url`` is any SQLAlchemy URL; None: :func:`default_url`."""

    def __init__(self, url: str | None = None) -> None:
        import sqlalchemy as sa

        self.url = url or default_url()
        try:
            parsed = sa.engine.make_url(self.url)
        except (sa.exc.ArgumentError, ValueError) as e:  # ValueError: a port that is not a number
            raise StoreError(f"results database URL {masked_url(self.url)!r}: {first_line(e)}") from None
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            try:
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            except (OSError, ValueError) as e:  # a parent that is a file, a NUL in the path, ...
                raise StoreError(f"results database {self.display_url}: cannot make its folder: "
                                 f"{first_line(e)}") from None
        try:
            self.engine = sa.create_engine(parsed)
            self.metadata = sa.MetaData()
            self.builds, self.measurements = _tables(self.metadata)
            migrate(self.engine)
        except ImportError as e:
            raise StoreError(f"results database {self.display_url}: its driver is not installed: {e}") from None
        except (sa.exc.SQLAlchemyError, OSError, ValueError) as e:
            raise StoreError(f"results database {self.display_url}: cannot open it: {first_line(e)}") from None

    @property
    def display_url(self) -> str:
        """The URL with any password hidden, for messages and files."""
        return masked_url(self.url)

    def record(self, results: Results, build_id: str | None = None, matrix: str | None = None) -> str:
        """Store every measurement in ``results`` (``matrix``: the matrix run recording it); return the
        build id (a new one when None). A build id already stored is not stored again. StoreError when
        the database cannot take it (locked, away, read-only)."""
        import sqlalchemy as sa

        build_id = build_id or uuid.uuid4().hex[:16]
        rows = [r for v in results.variants for r in _variant_rows(results, v)]
        try:
            with self.engine.begin() as conn:
                if conn.execute(sa.select(self.builds.c.build_id).where(self.builds.c.build_id == build_id)).first():
                    return build_id
                stored = self._stored_keys(conn, results.model.name)
                fresh = [r for r in rows if r["measured_at"] is None or _key(r) not in stored]
                conn.execute(self.builds.insert().values(
                    build_id=build_id, created=results.created, target=results.target,
                    model=results.model.name, results=results.dump(), matrix=matrix))
                if fresh:
                    conn.execute(self.measurements.insert(), [{**r, "build_id": build_id} for r in fresh])
        except sa.exc.SQLAlchemyError as e:
            raise StoreError(f"results database {self.display_url}: could not record build {build_id}: "
                             f"{first_line(e)}") from None
        return build_id

    def rows(self, model: str | None = None, target: str | None = None,
             device: str | None = None) -> list[dict[str, Any]]:
        """Measurements, oldest first, optionally only one model's, target's or device's (StoreError
        when the database cannot be read)."""
        import sqlalchemy as sa

        m = self.measurements
        query = m.select().order_by(m.c.created, m.c.id)
        for column, value in (("model", model), ("target", target), ("device", device)):
            if value is not None:
                query = query.where(m.c[column] == value)
        try:
            with self.engine.connect() as conn:
                out = [dict(r._mapping) for r in conn.execute(query)]
        except sa.exc.SQLAlchemyError as e:
            raise StoreError(f"results database {self.display_url}: cannot read it: {first_line(e)}") from None
        for row in out:
            row["notes"] = json.loads(row["notes"] or "[]")
        return out

    def _stored_keys(self, conn: sa.Connection, model: str) -> set[tuple[object, ...]]:
        m = self.measurements
        query = m.select().with_only_columns(m.c.target, m.c.variant, m.c.artifact_sha256, m.c.device,
                                             m.c.measured_at)
        return {tuple(r) for r in conn.execute(query.where(m.c.model == model))}


def migrate(engine: sa.Engine) -> str:
    """Upgrade the database behind ``engine`` to the newest schema revision; return it. StoreError for
    a database of a revision this edgeship does not know (a newer edgeship's)."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        current = MigrationContext.configure(conn).get_current_revision()
        if current == head:
            return head
        known = {rev.revision for rev in ScriptDirectory.from_config(config).walk_revisions()}
        if current is not None and current not in known:
            raise StoreError(f"results database {engine.url.render_as_string(hide_password=True)}: schema revision "
                             f"{current} was written by a newer edgeship; this one knows revisions up to {head}: "
                             "upgrade edgeship")
        config.attributes["connection"] = conn
        if current is None and sa.inspect(conn).has_table("builds"):
            command.stamp(config, FIRST_REVISION)  # made by edgeship before migrations existed
        command.upgrade(config, "head")
    return head


def _key(row: Mapping[str, object]) -> tuple[object, ...]:
    return (row["target"], row["variant"], row["artifact_sha256"], row["device"], row["measured_at"])


def _variant_rows(results: Results, v: VariantResult) -> list[dict[str, object]]:
    """One row per latency entry (per device); one device-less row when there is none."""
    base = {"created": results.created, "target": results.target, "model": results.model.name,
            "variant": v.name, "backend": v.backend, "precision": v.precision,
            "quantization": v.quantization, "artifact_sha256": v.sha256, "size_bytes": v.size_bytes,
            "gates_passed": v.gates.passed}
    if not v.latency:
        reasons = ([v.error] if v.error else []) + v.notes
        return [{**base, **_accuracy(v, None), **dict.fromkeys(LATENCY_COLUMNS),
                 "notes": json.dumps(reasons)}]
    return [{**base, **_accuracy(v, lat), **{c: getattr(lat, c) for c in LATENCY_COLUMNS},
             "notes": json.dumps(lat.notes)} for lat in v.latency]


def _accuracy(v: VariantResult, lat: Latency | None) -> dict[str, object]:
    """A device's row carries the accuracy of that device's own outputs (null when it returned none)."""
    acc = lat.accuracy if lat is not None else v.accuracy
    return {c: getattr(acc, c) if acc is not None else None for c in ACCURACY_COLUMNS}
