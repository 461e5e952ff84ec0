"""a case names its ceiling: ``kernel_case`` gains ``ceiling`` (``copy`` or ``read``)

Which measured bandwidth is a case's 100% comes from its kernel's spec (``KernelSpec.ceiling``) and is
stored with the case, so the dashboard needs no knowledge of any kernel. NULL for cases only runs from
before it was recorded have measured; the next run that measures a case fills it (ingest).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kernel_case") as batch:
        batch.add_column(sa.Column("ceiling", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kernel_case") as batch:
        batch.drop_column("ceiling")
