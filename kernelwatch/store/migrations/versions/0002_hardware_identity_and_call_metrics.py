"""hardware identity is what decides performance; per-call time, peak memory, exploration, acks

* ``hardware`` keeps vendor, device name, compute units, memory size (and the datasheet ceilings,
  which follow from the device name). Driver, toolkit and device count move to ``run``: rows that
  differed only in those merge into one, and every result row follows its run.
* ``perf_result`` gains ``call_ms``, ``call_samples_ms``, ``peak_mem_bytes``, ``device``;
  ``accuracy_result`` gains ``kind`` (gate / explore); ``run`` gains ``peak_read_gbps``, ``phases_s``.
* ``ack``: acknowledged changes.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

IDENTITY = (
    "vendor",
    "device_name",
    "compute_units",
    "memory_bytes",
)  # frozen copy: kernelwatch.store.schema may move on


def _fingerprint(row: dict) -> str:
    ident = json.dumps([row[k] for k in IDENTITY], separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _merge_hardware(conn: sa.Connection) -> None:
    rows = (
        conn.execute(sa.text("SELECT id, vendor, device_name, compute_units, memory_bytes FROM hardware ORDER BY id"))
        .mappings()
        .all()
    )
    survivors: dict[str, int] = {}
    for row in rows:
        fp = _fingerprint(row)
        keep = survivors.setdefault(fp, row["id"])
        if keep == row["id"]:
            continue
        for table in ("run", "accuracy_result", "perf_result", "profiler_metric"):
            conn.execute(
                sa.text(f"UPDATE {table} SET hardware_id = :keep WHERE hardware_id = :old"),
                {"keep": keep, "old": row["id"]},
            )
        conn.execute(sa.text("DELETE FROM hardware WHERE id = :old"), {"old": row["id"]})
    for fp, hw_id in survivors.items():
        conn.execute(sa.text("UPDATE hardware SET fingerprint = :fp WHERE id = :id"), {"fp": fp, "id": hw_id})


def upgrade() -> None:
    conn = op.get_bind()
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("peak_read_gbps", sa.Float(), nullable=True))
        batch.add_column(sa.Column("driver", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("toolkit", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("device_count", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("phases_s", sa.JSON(), nullable=True))
    conn.execute(
        sa.text(
            "UPDATE run SET driver = (SELECT driver FROM hardware WHERE hardware.id = run.hardware_id), "
            "toolkit = (SELECT toolkit FROM hardware WHERE hardware.id = run.hardware_id), "
            "device_count = (SELECT device_count FROM hardware WHERE hardware.id = run.hardware_id)"
        )
    )
    _merge_hardware(conn)
    with op.batch_alter_table("run") as batch:
        batch.alter_column("device_count", existing_type=sa.Integer(), nullable=False)
    with op.batch_alter_table("hardware") as batch:
        for column in ("device_count", "driver", "toolkit", "peak_gbps", "peak_tflops"):
            batch.drop_column(column)
        batch.alter_column("vendor", existing_type=sa.String(length=32), type_=sa.String(length=64))
    with op.batch_alter_table("kernel_case") as batch:
        batch.alter_column("dtype", existing_type=sa.String(length=16), type_=sa.String(length=32))
    with op.batch_alter_table("profiler_metric") as batch:
        batch.alter_column("source", existing_type=sa.String(length=16), type_=sa.String(length=32))
    with op.batch_alter_table("accuracy_result") as batch:
        batch.add_column(sa.Column("kind", sa.String(length=8), nullable=False, server_default="gate"))
        batch.drop_constraint("uq_accuracy_run_case", type_="unique")
        batch.create_unique_constraint("uq_accuracy_run_case_kind", ["run_id", "case_id", "kind"])
    with op.batch_alter_table("accuracy_result") as batch:
        batch.alter_column("kind", existing_type=sa.String(length=8), server_default=None)
    with op.batch_alter_table("perf_result") as batch:
        batch.add_column(sa.Column("call_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("call_samples_ms", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("peak_mem_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("device", sa.String(length=32), nullable=True))
    op.create_table(
        "ack",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("hardware_id", sa.Integer(), nullable=False),
        sa.Column("commit_sha", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("author", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["kernel_case.id"]),
        sa.ForeignKeyConstraint(["hardware_id"], ["hardware.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("case_id", "hardware_id", "commit_sha", name="uq_ack_case_hw_commit"),
    )


def downgrade() -> None:
    raise NotImplementedError("0002 merges hardware rows; restore a backup to go back to 0001")
