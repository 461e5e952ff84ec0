"""the host's speed beside a wall-timed case: ``perf_result`` gains ``host_probe_us`` and ``host_probe_samples_us``

The host's microseconds per launch of a fixed Triton probe, taken after each sample of a case timed by the wall
(``kernelwatch.collect.hostprobe``), each and their median: what the gate reads a host-bound baseline through when
the two runs' hosts differ. Results stored before have none (NULL), as have the cases not timed by the wall.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("perf_result") as batch:
        batch.add_column(sa.Column("host_probe_us", sa.Float(), nullable=True))
        batch.add_column(sa.Column("host_probe_samples_us", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("perf_result") as batch:
        batch.drop_column("host_probe_samples_us")
        batch.drop_column("host_probe_us")
