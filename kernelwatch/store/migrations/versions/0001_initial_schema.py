"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hardware",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("vendor", sa.String(length=32), nullable=False),
        sa.Column("device_name", sa.String(length=128), nullable=False),
        sa.Column("device_count", sa.Integer(), nullable=False),
        sa.Column("compute_units", sa.Integer(), nullable=True),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("driver", sa.String(length=64), nullable=True),
        sa.Column("toolkit", sa.String(length=64), nullable=True),
        sa.Column("peak_gbps", sa.Float(), nullable=True),
        sa.Column("peak_gbps_datasheet", sa.Float(), nullable=True),
        sa.Column("peak_tflops", sa.Float(), nullable=True),
        sa.Column("peak_tflops_datasheet", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("fingerprint"),
    )
    op.create_table(
        "kernel_case",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    with op.batch_alter_table("kernel_case", schema=None) as batch_op:
        batch_op.create_index("ix_case_kernel", ["kernel", "variant"], unique=False)

    op.create_table(
        "run",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("hardware_id", sa.Integer(), nullable=False),
        sa.Column("commit_sha", sa.String(length=64), nullable=False),
        sa.Column("branch", sa.String(length=255), nullable=False),
        sa.Column("commit_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("commit_subject", sa.Text(), nullable=True),
        sa.Column("dirty", sa.Boolean(), nullable=True),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("ci_job", sa.String(length=255), nullable=True),
        sa.Column("device", sa.String(length=16), nullable=False),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("synthetic", sa.Boolean(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("peak_gbps", sa.Float(), nullable=True),
        sa.Column("peak_tflops", sa.Float(), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["hardware_id"],
            ["hardware.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.create_index("ix_run_commit_sha", ["commit_sha"], unique=False)
        batch_op.create_index("ix_run_hw_commit_time", ["hardware_id", "commit_time"], unique=False)
        batch_op.create_index("ix_run_hw_status_started", ["hardware_id", "status", "started_at"], unique=False)

    op.create_table(
        "accuracy_result",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("hardware_id", sa.Integer(), nullable=False),
        sa.Column("max_abs_err", sa.Float(), nullable=True),
        sa.Column("max_rel_err", sa.Float(), nullable=True),
        sa.Column("rtol", sa.Float(), nullable=False),
        sa.Column("atol", sa.Float(), nullable=False),
        sa.Column("error_budget", sa.Float(), nullable=True),
        sa.Column("nan_mismatches", sa.Integer(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["case_id"],
            ["kernel_case.id"],
        ),
        sa.ForeignKeyConstraint(
            ["hardware_id"],
            ["hardware.id"],
        ),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "case_id", name="uq_accuracy_run_case"),
    )
    with op.batch_alter_table("accuracy_result", schema=None) as batch_op:
        batch_op.create_index("ix_acc_case_hw", ["case_id", "hardware_id"], unique=False)

    op.create_table(
        "perf_result",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("hardware_id", sa.Integer(), nullable=False),
        sa.Column("implementation", sa.String(length=32), nullable=False),
        sa.Column("median_ms", sa.Float(), nullable=True),
        sa.Column("p20_ms", sa.Float(), nullable=True),
        sa.Column("p80_ms", sa.Float(), nullable=True),
        sa.Column("min_ms", sa.Float(), nullable=True),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.Column("samples_ms", sa.JSON(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column("flops", sa.BigInteger(), nullable=True),
        sa.Column("gbps", sa.Float(), nullable=True),
        sa.Column("tflops", sa.Float(), nullable=True),
        sa.Column("pct_peak", sa.Float(), nullable=True),
        sa.Column("speedup_vs_eager", sa.Float(), nullable=True),
        sa.Column("target", sa.Text(), nullable=True),
        sa.Column("target_met", sa.Boolean(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["case_id"],
            ["kernel_case.id"],
        ),
        sa.ForeignKeyConstraint(
            ["hardware_id"],
            ["hardware.id"],
        ),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "case_id", "implementation", name="uq_perf_run_case_impl"),
    )
    with op.batch_alter_table("perf_result", schema=None) as batch_op:
        batch_op.create_index("ix_perf_case_hw", ["case_id", "hardware_id", "implementation"], unique=False)

    op.create_table(
        "profiler_metric",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("hardware_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(length=32), nullable=True),
        sa.Column("ideal", sa.String(length=32), nullable=True),
        sa.Column("meets_ideal", sa.Boolean(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["case_id"],
            ["kernel_case.id"],
        ),
        sa.ForeignKeyConstraint(
            ["hardware_id"],
            ["hardware.id"],
        ),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "case_id", "source", "name", name="uq_profiler_run_case_metric"),
    )
    with op.batch_alter_table("profiler_metric", schema=None) as batch_op:
        batch_op.create_index("ix_prof_case_hw", ["case_id", "hardware_id", "name"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("profiler_metric", schema=None) as batch_op:
        batch_op.drop_index("ix_prof_case_hw")

    op.drop_table("profiler_metric")
    with op.batch_alter_table("perf_result", schema=None) as batch_op:
        batch_op.drop_index("ix_perf_case_hw")

    op.drop_table("perf_result")
    with op.batch_alter_table("accuracy_result", schema=None) as batch_op:
        batch_op.drop_index("ix_acc_case_hw")

    op.drop_table("accuracy_result")
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_index("ix_run_hw_status_started")
        batch_op.drop_index("ix_run_hw_commit_time")
        batch_op.drop_index("ix_run_commit_sha")

    op.drop_table("run")
    with op.batch_alter_table("kernel_case", schema=None) as batch_op:
        batch_op.drop_index("ix_case_kernel")

    op.drop_table("kernel_case")
    op.drop_table("hardware")
