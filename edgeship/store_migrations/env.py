"""alembic's environment for the results store: it runs on the connection ``revisions.upgrade`` (or
``revisions.create_or_check`` for a new database) hands over (``config.attributes["connection"]``), inside that
connection's transaction."""
from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
