"""the physical device is data: ``perf_result`` gains ``device_uuid``, ``host`` and ``timing``

``device_uuid`` (GPU UUID / NPU serial) and ``host`` say which machine measured a result: two machines
of one model differ by up to 7% on GEMM cases, two GPUs of one host by 7-11% on the atomic MSELoss, so a
comparison must know whether it compares like with like. Runs collected before this named their GPUs in
their notes only (``devices: cuda:0 = GPU-..., PCI ...; cuda:1 = ...``): their rows get the UUID from there.
``timing`` says how GPU time was taken (``graph`` replay or ``events`` behind a hold); NULL for older runs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Frozen copies of kernelwatch.store.schema's notes format (the schema may move on; this migration must not).
_DEVICES = "devices: "
_ENTRY = re.compile(r"([a-z]+:\d+) = ([^,;\s]+)")


def _uuids(notes: str) -> dict[str, str]:
    at = notes.rfind(_DEVICES)
    if at < 0:
        return {}
    return {label: ident for label, ident in _ENTRY.findall(notes[at + len(_DEVICES) :]) if ident != "unknown"}


def upgrade() -> None:
    with op.batch_alter_table("perf_result") as batch:
        batch.add_column(sa.Column("device_uuid", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("host", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("timing", sa.String(length=32), nullable=True))
    conn = op.get_bind()
    runs = conn.execute(sa.text("SELECT id, notes FROM run WHERE notes LIKE :pat"), {"pat": f"%{_DEVICES}%"})
    for run_id, notes in runs.all():
        for label, uuid in _uuids(notes or "").items():
            conn.execute(
                sa.text("UPDATE perf_result SET device_uuid = :uuid WHERE run_id = :run AND device = :label"),
                {"uuid": uuid, "run": run_id, "label": label},
            )


def downgrade() -> None:
    with op.batch_alter_table("perf_result") as batch:
        batch.drop_column("timing")
        batch.drop_column("host")
        batch.drop_column("device_uuid")
