"""confirmations are data: a ``confirmation`` table

``kernelwatch confirm`` re-measures a suspect case with both commits on one device; its verdict (SAME, FASTER,
SLOWER, UNKNOWN), rounds, ratio and interval, device and time taken are kept per hardware and commit pair, so
the gate run that follows uses them and the dashboard shows them. Nothing existing changes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "confirmation",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("hardware_id", sa.Integer(), sa.ForeignKey("hardware.id"), nullable=False),
        sa.Column("case_key", sa.String(255), nullable=False),
        sa.Column("baseline_commit", sa.String(64), nullable=False),
        sa.Column("candidate_commit", sa.String(64), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("low", sa.Float(), nullable=True),
        sa.Column("high", sa.Float(), nullable=True),
        sa.Column("min_effect", sa.Float(), nullable=True),
        sa.Column("device_uuid", sa.String(128), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint(
            "hardware_id", "case_key", "baseline_commit", "candidate_commit", "confirmed_at", name="uq_confirmation"
        ),
    )
    op.create_index("ix_confirmation_hw_case", "confirmation", ["hardware_id", "case_key"])


def downgrade() -> None:
    op.drop_index("ix_confirmation_hw_case", table_name="confirmation")
    op.drop_table("confirmation")
