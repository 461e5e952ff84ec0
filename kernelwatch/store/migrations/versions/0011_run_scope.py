"""what a run set out to measure is a field: ``run`` gains ``scope``

The run's scope (``kernelwatch.store.schema.Scope``: suites, kernels, case filter, kernels carried over by
``--changed-since``) as ``kernelwatch collect`` recorded it; the gate expects every case of the checked-out specs within
it. Runs stored before it have none (NULL): their scope is read from their notes as they are exported
(``kernelwatch.store.schema.upgrade_document``), once, there.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("scope", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("scope")
