"""the SM clock is run context: ``run`` gains ``sm_clock_mhz``

The first device's SM clock (MHz) as the run started (``kernelwatch.store.schema.Hardware.sm_clock_mhz``): a GPU held at
a lower clock, or throttled, is slower for a reason that is not the code. Runs stored before it have none (NULL).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("sm_clock_mhz", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("sm_clock_mhz")
