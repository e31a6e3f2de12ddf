"""Schema 3: which measurements ran under an emulator (``measurements.emulated``: qemu-user and its
CPU model; null on a real device). Their times are the emulator's, so comparisons leave them out."""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("emulated", sa.String, nullable=True))
