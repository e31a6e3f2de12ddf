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

The schema is versioned with alembic (``edgeship/store_migrations``), and opening a store never
migrates it (``store_migrations/revisions.py``): on a shared database one teammate's newer edgeship
would lock out everyone else's. Reading (``read_only``: reports) takes a database of any revision
this edgeship knows as it is, a column a later revision added read as null; writing (builds) needs
the newest revision and refuses an older one, naming ``edgeship store upgrade`` (:func:`upgrade_store`),
the only command that migrates. A database a newer edgeship upgraded is refused, naming both
revisions, rather than read or written wrongly. A database without tables is created at the newest
revision when a build opens it (on PostgreSQL under an advisory lock, so builds opening one new
database at once create it once). Each build's rows go in one transaction, so concurrent writers
(the builds of ``edgeship matrix``) lose nothing and never see half a build.
"""
from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeship.errors import StoreError, first_line
from edgeship.results import Latency, Results, VariantResult
from edgeship.store_migrations import revisions
from edgeship.store_migrations.revisions import Upgrade

if TYPE_CHECKING:
    import sqlalchemy as sa

DEFAULT_PATH = Path("artifacts") / "results.db"
ENV = "EDGESHIP_DB"
MIGRATIONS = revisions.HERE

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
    """A database of measurements. ``url`` is any SQLAlchemy URL; None: :func:`default_url`.
    ``read_only``: for reading only (reports): a database of an older revision is read as it is, and
    nothing is created (a SQLite file that does not exist is a StoreError); otherwise (builds) a
    database without tables is created at the newest revision and an older one is refused."""

    def __init__(self, url: str | None = None, *, read_only: bool = False) -> None:
        import sqlalchemy as sa

        self.url = url or default_url()
        self.engine = _engine(self.url, create=not read_only)
        self.metadata = sa.MetaData()
        self.builds, self.measurements = _tables(self.metadata)
        with _database_errors(self.display_url, "cannot open it"):
            if read_only:
                with self.engine.connect() as conn:
                    self.revision = revisions.check(conn, self.display_url, writing=False)
            else:
                self.revision = revisions.create_or_check(self.engine, self.display_url)

    @property
    def display_url(self) -> str:
        """The URL with any password hidden, for messages and files."""
        return masked_url(self.url)

    @property
    def behind(self) -> str | None:
        """For a reader: a note that the database is at an older revision (what that means, how to
        upgrade it), else None."""
        return revisions.behind(self.revision, self.display_url)

    def record(self, results: Results, build_id: str | None = None, matrix: str | None = None) -> str:
        """Store every measurement in ``results`` (``matrix``: the matrix run recording it); return the
        build id (a new one when None). A build id already stored is not stored again. StoreError when
        the database cannot take it (locked, away, read-only)."""
        import sqlalchemy as sa

        build_id = build_id or uuid.uuid4().hex[:16]
        rows = [r for v in results.variants for r in _variant_rows(results, v)]
        try:
            with self.engine.begin() as conn:
                revisions.check(conn, self.display_url, writing=True)  # upgraded or replaced since it was opened
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
        try:
            with self.engine.connect() as conn:
                tables = sa.inspect(conn)
                if not tables.has_table("measurements"):
                    return []  # a database nothing was recorded in yet
                present = {c["name"] for c in tables.get_columns("measurements")}  # fewer in an older revision
                query = sa.select(*[c for c in m.c if c.name in present]).order_by(m.c.created, m.c.id)
                for column, value in (("model", model), ("target", target), ("device", device)):
                    if value is not None:
                        query = query.where(m.c[column] == value)
                out = [dict.fromkeys(m.c.keys()) | dict(r._mapping) for r in conn.execute(query)]
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


def upgrade_store(url: str | None = None) -> Upgrade:
    """Migrate the results store at ``url`` (None: :func:`default_url`) to the newest schema revision
    this edgeship knows: ``edgeship store upgrade``, the only migration. StoreError for a database of a
    newer edgeship, one that cannot be reached, or a SQLite file that does not exist."""
    url = url or default_url()
    engine = _engine(url, create=False)
    with _database_errors(masked_url(url), "cannot upgrade it"):
        return revisions.upgrade(engine, masked_url(url))


def _engine(url: str, create: bool) -> sa.Engine:
    """An engine for ``url`` (StoreError for a URL it cannot use). A SQLite file's folder is made when
    ``create``; else a SQLite file that does not exist is refused rather than made empty."""
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as e:  # ValueError: a port that is not a number
        raise StoreError(f"results database URL {masked_url(url)!r}: {first_line(e)}") from None
    path = parsed.database if parsed.get_backend_name() == "sqlite" and not parsed.query.get("uri") else None
    if path not in (None, "", ":memory:"):
        try:
            if create:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            elif not Path(path).is_file():
                raise StoreError(f"results database {masked_url(url)}: no such file: {path} (a build makes it; "
                                 "check the path)")
        except (OSError, ValueError) as e:  # a parent that is a file, a NUL in the path, ...
            doing = "cannot make its folder" if create else "cannot use its path"
            raise StoreError(f"results database {masked_url(url)}: {doing}: {first_line(e)}") from None
    with _database_errors(masked_url(url), "cannot open it"):
        return sa.create_engine(parsed)


@contextmanager
def _database_errors(where: str, doing: str) -> Iterator[None]:
    """A database's failures (its driver missing, a server away, a locked file) as StoreError."""
    import sqlalchemy as sa

    try:
        yield
    except ImportError as e:
        raise StoreError(f"results database {where}: its driver is not installed: {e}") from None
    except (sa.exc.SQLAlchemyError, OSError, ValueError) as e:
        raise StoreError(f"results database {where}: {doing}: {first_line(e)}") from None


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
