"""a case's facts are stored with it: ``kernel_case`` gains ``facts``

What the kernel's spec declares about timing the case (``kernelwatch.kernels.names.CaseFacts``: noise class,
launch-bound, calls per sample, same-run references, peers), as a run recorded it, beside the ``ceiling`` (0004).
Cases stored before have none (NULL): the gate reads theirs off their runs' rows
(``kernelwatch.store.schema.recorded_facts``), once, there.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kernel_case") as batch:
        batch.add_column(sa.Column("facts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kernel_case") as batch:
        batch.drop_column("facts")
