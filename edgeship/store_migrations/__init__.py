"""The results store's schema migrations (alembic): ``versions/`` holds one revision per schema
change, each with its upgrade; ``revisions.upgrade`` runs them, for ``edgeship store upgrade`` only
(opening a store never migrates it: ``revisions.py``). A revision's DDL is written out in full, never
taken from the current table definitions, so an old database upgrades the same way forever.

A new revision: copy the last file of ``versions/``, give it the next number as ``revision`` and
the last one's as ``down_revision``, write its ``upgrade()``, change ``edgeship/store.py``'s tables
to match (a column a reader may find missing in an older store must be nullable: reports read such a
store as it is), and add a test that upgrades a database of the revision before
(tests/store/test_store_postgres.py); tests/store/test_store_revisions.py names the head revision."""
