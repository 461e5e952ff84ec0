"""Typed SQLAlchemy 2 entities: hardware, run, case and the three kinds of result.

The two queries everything leans on have their own indexes:

* history of one case on one hardware fingerprint in commit order:
  ``ix_perf_case_hw`` on perf_result(case_id, hardware_id, implementation) and
  ``ix_acc_case_hw`` on accuracy_result(case_id, hardware_id); the run row is then
  reached by primary key and ordered by (commit_time, started_at).
* latest complete run per hardware: ``ix_run_hw_status_started`` on
  run(hardware_id, status, started_at).

``hardware_id`` is copied onto result rows on purpose: it turns the history query into one
index range scan instead of a join through every run of the case.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from kernelwatch.store.schema import KEY_LEN, NAME_LEN, SHORT_LEN, TAG_LEN


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[float]: JSON}


class Hardware(Base):
    """What decides performance (``kernelwatch.store.schema.IDENTITY``), fingerprinted. Driver, toolkit, device count
    and the ceilings, measured and datasheet, are context of each run (columns of ``run``): they never
    split a history. The datasheet columns here are those of the fingerprint's first run (kept for
    databases written before migration 0005; nothing reads them)."""

    __tablename__ = "hardware"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    vendor: Mapped[str] = mapped_column(String(SHORT_LEN))
    device_name: Mapped[str] = mapped_column(String(NAME_LEN))
    compute_units: Mapped[int | None] = mapped_column(Integer)
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    peak_gbps_datasheet: Mapped[float | None] = mapped_column(Float)
    peak_tflops_datasheet: Mapped[float | None] = mapped_column(Float)

    runs: Mapped[list[Run]] = relationship(back_populates="hardware")


class Run(Base):
    """One collector invocation."""

    __tablename__ = "run"
    __table_args__ = (
        Index("ix_run_hw_status_started", "hardware_id", "status", "started_at"),
        Index("ix_run_hw_commit_time", "hardware_id", "commit_time"),
        Index("ix_run_commit_sha", "commit_sha"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    hardware_id: Mapped[int] = mapped_column(ForeignKey("hardware.id"))
    commit_sha: Mapped[str] = mapped_column(String(SHORT_LEN))
    branch: Mapped[str] = mapped_column(String(KEY_LEN))
    commit_time: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    commit_subject: Mapped[str | None] = mapped_column(Text)
    dirty: Mapped[bool | None] = mapped_column(Boolean)
    trigger: Mapped[str] = mapped_column(String(16))
    ci_job: Mapped[str | None] = mapped_column(String(KEY_LEN))
    device: Mapped[str] = mapped_column(String(16))
    command: Mapped[str | None] = mapped_column(Text)
    versions: Mapped[dict[str, Any]] = mapped_column(JSON)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16))
    synthetic: Mapped[bool] = mapped_column(Boolean, default=False)
    notes: Mapped[str | None] = mapped_column(Text)
    peak_gbps: Mapped[float | None] = mapped_column(Float)
    peak_tflops: Mapped[float | None] = mapped_column(Float)
    peak_read_gbps: Mapped[float | None] = mapped_column(Float)
    peak_gbps_datasheet: Mapped[float | None] = mapped_column(Float)
    peak_tflops_datasheet: Mapped[float | None] = mapped_column(Float)
    driver: Mapped[str | None] = mapped_column(String(SHORT_LEN))
    toolkit: Mapped[str | None] = mapped_column(String(SHORT_LEN))
    device_count: Mapped[int] = mapped_column(Integer)
    sm_clock_mhz: Mapped[int | None] = mapped_column(Integer)
    phases_s: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    scope: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    content_hash: Mapped[str] = mapped_column(String(64))

    hardware: Mapped[Hardware] = relationship(back_populates="runs")


class Case(Base):
    """A kernel x variant x parameters point; ``key`` is the same string in every run."""

    __tablename__ = "kernel_case"
    __table_args__ = (Index("ix_case_kernel", "kernel", "variant"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(KEY_LEN), unique=True)
    kernel: Mapped[str] = mapped_column(String(SHORT_LEN))
    variant: Mapped[str] = mapped_column(String(SHORT_LEN))
    dtype: Mapped[str] = mapped_column(String(TAG_LEN))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    ceiling: Mapped[str | None] = mapped_column(String(TAG_LEN))  # copy / read (kernelwatch.kernels.names.CEILINGS)
    facts: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # schema.CaseInfo.facts: the spec's, as the ceiling


class AccuracyResult(Base):
    __tablename__ = "accuracy_result"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id", "kind", name="uq_accuracy_run_case_kind"),
        Index("ix_acc_case_hw", "case_id", "hardware_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    case_id: Mapped[int] = mapped_column(ForeignKey("kernel_case.id"))
    hardware_id: Mapped[int] = mapped_column(ForeignKey("hardware.id"))
    max_abs_err: Mapped[float | None] = mapped_column(Float)
    max_rel_err: Mapped[float | None] = mapped_column(Float)
    rtol: Mapped[float] = mapped_column(Float)
    atol: Mapped[float] = mapped_column(Float)
    error_budget: Mapped[float | None] = mapped_column(Float)
    nan_mismatches: Mapped[int] = mapped_column(Integer)
    trials: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(BigInteger)
    passed: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(8), default="gate")


class PerfResult(Base):
    __tablename__ = "perf_result"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id", "implementation", name="uq_perf_run_case_impl"),
        Index("ix_perf_case_hw", "case_id", "hardware_id", "implementation"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    case_id: Mapped[int] = mapped_column(ForeignKey("kernel_case.id"))
    hardware_id: Mapped[int] = mapped_column(ForeignKey("hardware.id"))
    implementation: Mapped[str] = mapped_column(String(TAG_LEN))
    median_ms: Mapped[float | None] = mapped_column(Float)
    p20_ms: Mapped[float | None] = mapped_column(Float)
    p80_ms: Mapped[float | None] = mapped_column(Float)
    min_ms: Mapped[float | None] = mapped_column(Float)
    n_samples: Mapped[int] = mapped_column(Integer)
    samples_ms: Mapped[list[float]] = mapped_column(JSON)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    flops: Mapped[int | None] = mapped_column(BigInteger)
    gbps: Mapped[float | None] = mapped_column(Float)
    tflops: Mapped[float | None] = mapped_column(Float)
    pct_peak: Mapped[float | None] = mapped_column(Float)
    speedup_vs_eager: Mapped[float | None] = mapped_column(Float)
    target: Mapped[str | None] = mapped_column(Text)
    target_met: Mapped[bool | None] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    call_ms: Mapped[float | None] = mapped_column(Float)
    call_samples_ms: Mapped[list[float] | None] = mapped_column(JSON)
    peak_mem_bytes: Mapped[int | None] = mapped_column(BigInteger)
    device: Mapped[str | None] = mapped_column(String(TAG_LEN))
    device_uuid: Mapped[str | None] = mapped_column(String(NAME_LEN))
    host: Mapped[str | None] = mapped_column(String(NAME_LEN))
    timing: Mapped[str | None] = mapped_column(String(TAG_LEN))
    host_probe_us: Mapped[float | None] = mapped_column(Float)
    host_probe_samples_us: Mapped[list[float] | None] = mapped_column(JSON)


class ProfilerMetric(Base):
    __tablename__ = "profiler_metric"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id", "source", "name", name="uq_profiler_run_case_metric"),
        Index("ix_prof_case_hw", "case_id", "hardware_id", "name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    case_id: Mapped[int] = mapped_column(ForeignKey("kernel_case.id"))
    hardware_id: Mapped[int] = mapped_column(ForeignKey("hardware.id"))
    source: Mapped[str] = mapped_column(String(TAG_LEN))
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    value: Mapped[float | None] = mapped_column(Float)
    unit: Mapped[str | None] = mapped_column(String(TAG_LEN))
    ideal: Mapped[str | None] = mapped_column(String(TAG_LEN))
    meets_ideal: Mapped[bool | None] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    launch: Mapped[str | None] = mapped_column(String(NAME_LEN))


class Ack(Base):
    """A change in a case's time on one hardware that a person says is expected, from one commit on.

    Written by ``kernelwatch ack``; the gate reports it and does not fail on it again; charts mark it.
    """

    __tablename__ = "ack"
    __table_args__ = (UniqueConstraint("case_id", "hardware_id", "commit_sha", name="uq_ack_case_hw_commit"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    case_id: Mapped[int] = mapped_column(ForeignKey("kernel_case.id"))
    hardware_id: Mapped[int] = mapped_column(ForeignKey("hardware.id"))
    commit_sha: Mapped[str] = mapped_column(String(SHORT_LEN))
    reason: Mapped[str] = mapped_column(Text)
    author: Mapped[str | None] = mapped_column(String(NAME_LEN))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class Confirmation(Base):
    """A case of two commits re-measured on one device (``kernelwatch confirm``;
    ``kernelwatch.store.schema.Confirmation``).

    Kept per hardware fingerprint and commit pair, not per run: the gate uses it for any run of the candidate
    commit judged against a baseline of the baseline commit on this hardware; a run's export carries those of
    its commit. ``case_key`` is the case's key as text: a confirmation may name a case no stored run has.
    """

    __tablename__ = "confirmation"
    __table_args__ = (
        UniqueConstraint(
            "hardware_id", "case_key", "baseline_commit", "candidate_commit", "confirmed_at", name="uq_confirmation"
        ),
        Index("ix_confirmation_hw_case", "hardware_id", "case_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hardware_id: Mapped[int] = mapped_column(ForeignKey("hardware.id"))
    case_key: Mapped[str] = mapped_column(String(KEY_LEN))
    baseline_commit: Mapped[str] = mapped_column(String(SHORT_LEN))
    candidate_commit: Mapped[str] = mapped_column(String(SHORT_LEN))
    verdict: Mapped[str] = mapped_column(String(16))
    rounds: Mapped[int] = mapped_column(Integer)
    ratio: Mapped[float | None] = mapped_column(Float)
    low: Mapped[float | None] = mapped_column(Float)
    high: Mapped[float | None] = mapped_column(Float)
    min_effect: Mapped[float | None] = mapped_column(Float)
    device_uuid: Mapped[str | None] = mapped_column(String(NAME_LEN))
    seconds: Mapped[float] = mapped_column(Float)
    confirmed_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # schema.ConfirmDetail: per-round data
