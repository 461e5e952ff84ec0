"""profiler rows name their launch: ``profiler_metric`` gains ``launch``

A case starts several kernels (LayerNorm+MatMul's statistics prepass, then its GEMM); the counters are taken
from the first launch matching the case's profiler regex, and a regex that took the prepass gave the
prepass's SM throughput under the GEMM's case, invisibly. The name of the launch the counters came from is
now stored with them. Rows of earlier runs have none (NULL): it was never recorded.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("profiler_metric") as batch:
        batch.add_column(sa.Column("launch", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("profiler_metric") as batch:
        batch.drop_column("launch")
