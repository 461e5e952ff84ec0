"""Between the run schema's records (:mod:`kernelwatch.store.schema`) and the table rows
(:mod:`kernelwatch.store.models`): one mapping.

Ingest, export and the queries take their field lists from here, and these from the schema's models: a field
added to a record reaches its column (and comes back out of it) with no list spelled again. A field is stored
in the column of its own name, except:

* the run's ``commit`` is flattened into the run row (:data:`COMMIT_COLUMNS`);
* the hardware's identity (:data:`kernelwatch.store.schema.IDENTITY`) is the ``hardware`` row, fingerprinted; every
other
  hardware field is context of the run (driver, ceilings, clock), a column of the ``run`` row
  (:data:`RUN_HARDWARE`);
* a result's ``case`` is the ``case_id`` of its key.

Timestamps are text in the records and ``DateTime`` columns in the tables: converted by the column's type.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import DateTime, Table

from kernelwatch.store import models, schema

COMMIT_COLUMNS = {
    "sha": "commit_sha",
    "branch": "branch",
    "time": "commit_time",
    "subject": "commit_subject",
    "dirty": "dirty",
}
CASE_FIELDS = tuple(schema.CaseInfo.model_fields)  # columns of kernel_case, by the same names
RUN_FIELDS = tuple(name for name in schema.RunInfo.model_fields if name != "commit")
RUN_HARDWARE = tuple(name for name in schema.Hardware.model_fields if name not in schema.IDENTITY)

# Result records and their tables; ``case`` is the case_id of its key.
RESULTS: dict[type[schema.Record], type[models.Base]] = {
    schema.AccuracyResult: models.AccuracyResult,
    schema.PerfResult: models.PerfResult,
    schema.ProfilerMetric: models.ProfilerMetric,
}


def result_fields(record: type[schema.Record], leave_out: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The fields of a result record that are columns of its table (all but ``case``), less ``leave_out``."""
    return tuple(name for name in record.model_fields if name != "case" and name not in leave_out)


def result_columns(record: type[schema.Record], leave_out: tuple[str, ...] = ()) -> list[Any]:
    """The columns of :func:`result_fields`, to select."""
    table = RESULTS[record]
    return [getattr(table, name) for name in result_fields(record, leave_out)]


def _to_column(table: Table, name: str, value: Any) -> Any:
    if isinstance(value, schema.Record):  # a record inside the run (its scope): a JSON column
        return value.model_dump()
    if value is not None and isinstance(table.c[name].type, DateTime):
        return schema.parse_time(value)
    return value


def _from_column(value: Any) -> Any:
    return schema.format_time(value) if isinstance(value, dt.datetime) else value


def run_row(run: schema.RunInfo, hardware: schema.Hardware) -> dict[str, Any]:
    """The ``run`` row of a run (less ``hardware_id`` and ``content_hash``, which the database decides)."""
    table = models.Run.__table__
    row = {name: getattr(run, name) for name in RUN_FIELDS}
    row.update({column: getattr(run.commit, name) for name, column in COMMIT_COLUMNS.items()})
    row.update({name: getattr(hardware, name) for name in RUN_HARDWARE})
    return {name: _to_column(table, name, value) for name, value in row.items()}


def run_record(run: models.Run) -> dict[str, Any]:
    """The ``run`` record of a stored run, as plain data."""
    data = {name: _from_column(getattr(run, name)) for name in RUN_FIELDS}
    data["commit"] = {name: _from_column(getattr(run, column)) for name, column in COMMIT_COLUMNS.items()}
    return data


def hardware_record(run: models.Run, hardware: models.Hardware) -> dict[str, Any]:
    """The ``hardware`` record of a stored run: its hardware row's identity and the run's context."""
    return {
        **{name: getattr(hardware, name) for name in schema.IDENTITY},
        **{name: getattr(run, name) for name in RUN_HARDWARE},
    }
