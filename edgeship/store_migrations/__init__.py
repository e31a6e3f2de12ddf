"""The results store's schema migrations (alembic): ``versions/`` holds one revision per schema
change, each with its upgrade; ``edgeship.store.migrate`` runs them when a store is opened, so a
team's database follows edgeship's upgrades. A revision's DDL is written out in full, never taken
from the current table definitions, so an old database upgrades the same way forever.

A new revision: copy the last file of ``versions/``, give it the next number as ``revision`` and
the last one's as ``down_revision``, write its ``upgrade()``, change ``edgeship/store.py``'s tables
to match, and add a test that upgrades a database of the revision before
(tests/test_store_migrations.py)."""
