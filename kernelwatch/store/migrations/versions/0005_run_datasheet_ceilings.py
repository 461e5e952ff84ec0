"""datasheet ceilings are run context: ``run`` gains ``peak_gbps_datasheet`` and ``peak_tflops_datasheet``

docs/design.md's data model: the measured peaks and the datasheet beside them belong to each run; the
hardware row is the identity (vendor, name, compute units, memory). The datasheet values lived on the
hardware row, written by the first run of a fingerprint and kept silently when a later run gave other
ones, so ``export`` returned values that run never recorded and re-ingesting the export was refused as
"already exists with different content". Existing runs get their hardware row's values, which is what
every export of them returned until now (their content hashes were taken from the artifacts; a run whose
artifact differed was already exported with the hardware's values).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("peak_gbps_datasheet", sa.Float(), nullable=True))
        batch.add_column(sa.Column("peak_tflops_datasheet", sa.Float(), nullable=True))
    op.execute(
        "UPDATE run SET peak_gbps_datasheet = (SELECT h.peak_gbps_datasheet FROM hardware h "
        "WHERE h.id = run.hardware_id), peak_tflops_datasheet = (SELECT h.peak_tflops_datasheet "
        "FROM hardware h WHERE h.id = run.hardware_id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("peak_tflops_datasheet")
        batch.drop_column("peak_gbps_datasheet")
