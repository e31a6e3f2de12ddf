"""Schema 2: where each measurement ran (``measurements.node``: the Ray node and host of an
``edgeship matrix`` run on a cluster; null for a build measured from one host) and which matrix run
recorded a build (``builds.matrix``: null for a lone ``edgeship build``)."""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("node", sa.String, nullable=True))
    with op.batch_alter_table("builds") as batch:
        batch.add_column(sa.Column("matrix", sa.String, nullable=True))
