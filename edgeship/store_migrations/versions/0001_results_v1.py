"""Schema 1: the builds and measurements tables as edgeship created them before migrations existed
(``metadata.create_all``). A database of that time has these tables and no ``alembic_version``; it
is stamped with this revision, then upgraded."""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TEXT = ["created", "target", "model", "variant", "backend", "precision", "quantization", "artifact_sha256"]
INTS = ["size_bytes"]
LATENCY_TEXT = ["device", "runtime"]
LATENCY_INTS = ["threads", "warmup", "iterations"]
LATENCY_FLOATS = ["p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "cv", "load_ms", "peak_rss_mb"]
ACCURACY_INTS = ["samples"]
ACCURACY_FLOATS = ["top1", "top1_drop", "sqnr_db", "agreement", "cosine", "max_abs_err"]


def upgrade() -> None:
    op.create_table("builds",
                    sa.Column("build_id", sa.String(64), primary_key=True),
                    sa.Column("created", sa.String(32), nullable=False),
                    sa.Column("target", sa.String, nullable=False),
                    sa.Column("model", sa.String, nullable=False),
                    sa.Column("results", sa.Text, nullable=False))
    columns = ([sa.Column(n, sa.String, nullable=True) for n in TEXT]
               + [sa.Column(n, sa.Integer, nullable=True) for n in INTS]
               + [sa.Column(n, sa.String, nullable=True) for n in LATENCY_TEXT]
               + [sa.Column(n, sa.Integer, nullable=True) for n in LATENCY_INTS]
               + [sa.Column(n, sa.Float, nullable=True) for n in LATENCY_FLOATS]
               + [sa.Column("measured_at", sa.String, nullable=True)]
               + [sa.Column(n, sa.Integer, nullable=True) for n in ACCURACY_INTS]
               + [sa.Column(n, sa.Float, nullable=True) for n in ACCURACY_FLOATS])
    op.create_table("measurements",
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("build_id", sa.String(64), sa.ForeignKey("builds.build_id"), nullable=False),
                    *columns,
                    sa.Column("gates_passed", sa.Boolean, nullable=True),
                    sa.Column("notes", sa.Text, nullable=False))
    op.create_index("ix_measurements_key", "measurements",
                    ["model", "artifact_sha256", "device", "runtime", "measured_at"])
