"""Schema 4: cold start and the runtime's memory of each measurement (``measurements.import_ms``,
``first_inference_ms``: the runtime's import and the first inference after the load, beside
``load_ms``; ``rss_over_baseline_mb``: the runner's peak resident memory above its memory before
the runtime's import). Null in rows measured before, and where the device could not measure them."""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("import_ms", sa.Float, nullable=True))
        batch.add_column(sa.Column("first_inference_ms", sa.Float, nullable=True))
        batch.add_column(sa.Column("rss_over_baseline_mb", sa.Float, nullable=True))
