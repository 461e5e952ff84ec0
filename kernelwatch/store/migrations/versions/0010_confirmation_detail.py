"""a confirmation explains itself: ``confirmation`` gains ``detail``

``kernelwatch confirm`` keeps, per case, each round's paired ratio and medians, which side went first, the
timing method, the NVML SM clock and board power around the round, and each side's kernel launches and tile
configuration (``kernelwatch.store.schema.ConfirmDetail``), as JSON. Confirmations stored before have none (NULL).
The verdict column also takes NOT_SLOWER (a String(16) already holds it).

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("confirmation") as batch:
        batch.add_column(sa.Column("detail", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("confirmation") as batch:
        batch.drop_column("detail")
