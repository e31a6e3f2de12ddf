"""A results store's schema revision: which one a database is at, and the one way to move it.

Opening a store never migrates it: on a shared database, a teammate's newer edgeship upgrading it
on a read or a build would lock out everyone else's. :func:`upgrade` (``edgeship store upgrade``) is
the only migration; :func:`check` says what a database is and refuses one a newer edgeship upgraded.
A database with no tables at all is created at the newest revision (creation, not a migration).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from edgeship.errors import StoreError

if TYPE_CHECKING:
    import sqlalchemy as sa
    from alembic.config import Config
    from alembic.script import ScriptDirectory

HERE = Path(__file__).resolve().parent
FIRST_REVISION = "0001"   # the schema of the tables edgeship made before migrations (no alembic_version)
MIGRATION_LOCK = 7243100117  # pg_advisory_xact_lock key: one creating or migrating connection at a time
UPGRADE = "edgeship store upgrade"


@dataclass(frozen=True)
class Upgrade:
    """What ``edgeship store upgrade`` did: the revision before (None: the database was empty) and after."""

    url: str
    before: str | None
    after: str

    def __str__(self) -> str:
        if self.before == self.after:
            return f"results database {self.url}: at schema revision {self.after}, the newest: nothing to do"
        return f"results database {self.url}: schema revision {self.before or 'none (empty)'} -> {self.after}"


def config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    return cfg


@cache
def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(config())


def head() -> str:
    """The newest revision this edgeship knows."""
    return _scripts().get_current_head()


def known() -> set[str]:
    return {rev.revision for rev in _scripts().walk_revisions()}


def stamp(conn: sa.Connection) -> str | None:
    """The revision in the database's ``alembic_version`` table (None: no such table or row)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def current(conn: sa.Connection) -> str | None:
    """The database's revision: its stamp, ``FIRST_REVISION`` for schema 1's tables without one, None
    for a database without tables."""
    import sqlalchemy as sa

    revision = stamp(conn)
    if revision is None and sa.inspect(conn).has_table("builds"):
        return FIRST_REVISION
    return revision


def check(conn: sa.Connection, where: str, *, writing: bool) -> str | None:
    """The revision of the database behind ``conn`` (None: empty). StoreError for a newer edgeship's
    revision, and, when ``writing``, for an older one (naming ``edgeship store upgrade``)."""
    if writing:
        _lock(conn, shared=True)
    revision, newest = current(conn), head()
    if revision is not None and revision not in known():
        raise StoreError(f"results database {where}: schema revision {revision} was written by a newer edgeship; "
                         f"this one knows revisions up to {newest}: upgrade edgeship")
    if writing and revision not in (None, newest):
        raise StoreError(f"results database {where}: schema revision {revision}, older than this edgeship's "
                         f"{newest}; a build records only into {newest}. Upgrade the database with: {UPGRADE} "
                         f"--db {where} (the only command that migrates it; an edgeship that knows revisions only up "
                         f"to {revision} refuses it after that). edgeship report reads it as it is.")
    return revision


def behind(revision: str | None, where: str) -> str | None:
    """A note for a reader of a database older than this edgeship's revision; None when it is not."""
    newest = head()
    if revision is None or revision == newest:
        return None
    return (f"results database {where} is at schema revision {revision}, older than this edgeship's {newest}: read "
            f"as it is (what later revisions record is empty there); to upgrade it: {UPGRADE} --db {where}")


def create_or_check(engine: sa.Engine, where: str) -> str:
    """A store about to be written: a database without tables made at the newest revision (under the
    lock on PostgreSQL, so builds opening one new database at once make it once); else :func:`check`."""
    with engine.begin() as conn:
        _lock(conn)
        if current(conn) is None:
            _upgrade_to_head(conn)
        return check(conn, where, writing=True) or head()


def upgrade(engine: sa.Engine, where: str) -> Upgrade:
    """Migrate the database to the newest revision in one transaction (under the lock on PostgreSQL).
    A database of before migrations (schema 1's tables, no ``alembic_version``) is stamped 0001 first."""
    from alembic import command

    with engine.begin() as conn:
        _lock(conn)
        before = check(conn, where, writing=False)
        if before == FIRST_REVISION and stamp(conn) is None:
            cfg = config()
            cfg.attributes["connection"] = conn
            command.stamp(cfg, FIRST_REVISION)  # made by edgeship before migrations existed
        if before != head():
            _upgrade_to_head(conn)
    return Upgrade(where, before, head())


def _upgrade_to_head(conn: sa.Connection) -> None:
    from alembic import command

    cfg = config()
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "head")


def _lock(conn: sa.Connection, shared: bool = False) -> None:
    """On PostgreSQL, the migration lock until ``conn``'s transaction ends: exclusive for a creating or
    migrating connection, ``shared`` for a writer that checked the revision (so no migration commits
    between its check and its rows)."""
    import sqlalchemy as sa

    if conn.dialect.name == "postgresql":
        kind = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        conn.execute(sa.text(f"SELECT {kind}(:key)"), {"key": MIGRATION_LOCK})
