"""Reading stored values typed: a value its column cannot hold is named where it is read.

SQLite keeps whatever it is given: ``UPDATE run SET started_at='yesterday'`` or ``UPDATE perf_result SET
samples_ms='{not json'`` make SQLAlchemy's own decoding raise a bare ``ValueError`` in the middle of a fetch, and
``median_ms='fast'`` is returned as the text ``'fast'`` to code that divides by it. (PostgreSQL's types refuse
all three; a column whose type was altered by hand can still hold them.) The queries read through
:func:`rows`, :func:`entities` and :func:`scalars`, which check every value against its column's declared type
and raise :class:`kernelwatch.store.engine.StoredValueError` naming the table, the run and the field. When SQLAlchemy's
decoding itself fails, the tables the statement reads are scanned once, raw, for the value that did it
(:func:`find_damage`). :func:`check_database` checks a whole database (the dashboard, before it serves).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Connection, Engine, Select, Table, select, text, type_coerce
from sqlalchemy import types as sqltypes
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.orm import Session

from kernelwatch.store.engine import StoredValueError, check_integrity, redact
from kernelwatch.store.models import Base

# What SQLAlchemy's result processors raise on a value they cannot decode (JSONDecodeError is a ValueError;
# PostgreSQL's float processor refuses a column altered to text: InvalidRequestError "Unknown PG numeric type").
DECODING_ERRORS = (ValueError, TypeError, OverflowError, InvalidRequestError)
NUMBER = (int, float)
SHOWN = 40  # characters of a damaged value quoted in the message
NUL_JSON = "\\u0000"  # how JSON writes a NUL character


@functools.cache
def _json_shapes() -> dict[tuple[str, str], type]:
    """(table, column) -> list or dict, for every JSON column, from the models' annotations
    (``Mapped[list[float]]``): the one definition of what each JSON column holds."""
    shapes = {}
    for mapper in Base.registry.mappers:
        hints = typing.get_type_hints(mapper.class_)
        for attr in mapper.column_attrs:
            column = attr.columns[0]
            if isinstance(column.type, sqltypes.JSON):
                (inner,) = typing.get_args(hints[attr.key])[:1]  # Mapped[list[float] | None] -> list[float] | None
                if typing.get_origin(inner) in (typing.Union, types.UnionType):
                    inner = next(a for a in typing.get_args(inner) if a is not type(None))
                shapes[(column.table.name, column.name)] = typing.get_origin(inner) or inner
    return shapes


def _quoted(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= SHOWN else shown[:SHOWN] + "..."


def _numbers(value: Any) -> bool:
    """A list of numbers (fsum walks it in C: a text, list or object element is a TypeError; a per-element type
    test cost the gate a third of a second on the shipped history)."""
    if not isinstance(value, list):
        return False
    try:
        math.fsum(value)
    except TypeError:
        return False
    except OverflowError:  # numbers past 1e308 in sum: element by element
        return all(type(v) in NUMBER for v in value)
    return True


@functools.cache  # per column: every value of every row read goes through it
def expected(column: Column) -> tuple[Callable[[Any], bool], str] | None:
    """(does a decoded value fit ``column``, what it must be in words), or None for a type not checked."""
    kind = column.type
    if isinstance(kind, sqltypes.Boolean):
        return (lambda v: isinstance(v, bool)), "true or false"
    if isinstance(kind, (sqltypes.Float, sqltypes.Numeric)):
        return (lambda v: isinstance(v, NUMBER) and not isinstance(v, bool)), "a number"
    if isinstance(kind, sqltypes.Integer):
        return (lambda v: isinstance(v, int) and not isinstance(v, bool)), "an integer"
    if isinstance(kind, sqltypes.DateTime):
        return (lambda v: isinstance(v, dt.datetime)), "a date and time"
    if isinstance(kind, sqltypes.JSON):
        shape = _json_shapes().get((column.table.name, column.name))
        if shape is list:
            return _numbers, "a JSON list of numbers"
        return (lambda v: shape is None or (isinstance(v, shape) and NUL_JSON not in json.dumps(v))), (
            "a JSON object without NUL characters"
        )
    if isinstance(kind, sqltypes.String):
        # NUL: no artifact may hold one (schema.py), PostgreSQL's text cannot, and every page and report cuts or
        # refuses it; only a hand-edited SQLite file has one.
        return (lambda v: isinstance(v, str) and "\x00" not in v), "text without NUL characters"
    return None


def problem(column: Column, value: Any) -> str | None:
    """What is wrong with ``value`` read from ``column``, or None when its declared type holds it."""
    if value is None:
        return None if column.nullable else "empty (NULL) where a value is required"
    rule = expected(column)
    if rule is None or rule[0](value):
        return None
    return f"{_quoted(value)} is not {rule[1]}"


# A row is named by its run where it has one, else by what identifies it.
_IDENTITY = {
    "run": ("id", "run"),
    "hardware": ("fingerprint", "hardware"),
    "kernel_case": ("key", "case"),
    "ack": ("id", "acknowledgement"),
}


def _identity_column(table: Table) -> tuple[Column, str]:
    if "run_id" in table.c:
        return table.c.run_id, "run"
    name, word = _IDENTITY.get(table.name, ("id", "row"))
    return table.c[name], word


def _base_column(element: Any) -> Column | None:
    """The table column a selected element reads (through a label), or None for an expression (a count...)."""
    element = getattr(element, "element", element) if not isinstance(element, Column) else element
    table = getattr(element, "table", None)
    if not isinstance(table, Table) or element.name not in table.c:
        return None
    return table.c[element.name]


def _tables(stmt: Select) -> list[Table]:
    found: dict[str, Table] = {}
    for element in stmt.selected_columns:
        column = _base_column(element)
        if column is not None:
            found.setdefault(column.table.name, column.table)
    for source in stmt.get_final_froms():
        for table in getattr(source, "_from_objects", [source]):
            if isinstance(table, Table):
                found.setdefault(table.name, table)
    return list(found.values())


def _name_row(column: Column, values: dict[Column, Any]) -> str | None:
    """``run ID`` for a row whose values include its run (or the row's own identity), else None."""
    ident, word = _identity_column(column.table)
    if ident in values:
        return f"{word} {values[ident]}"
    for other, value in values.items():  # a joined run's id names it as well
        if (other.table.name, other.name) == ("run", "id") or other.name == "run_id":
            return f"run {value}"
    return None


def check(columns: list[Column | None], row: Iterable[Any]) -> None:
    """Raise StoredValueError for the first value of ``row`` its column (same position) cannot hold."""
    values = list(row)
    for column, value in zip(columns, values):
        if column is None:
            continue
        why = problem(column, value)
        if why is not None:
            named = {c: v for c, v in zip(columns, values) if c is not None}
            raise StoredValueError(column.table.name, _name_row(column, named), column.name, why)


def check_entity(obj: Any) -> None:
    """Raise StoredValueError for the first loaded attribute of an ORM object its column cannot hold."""
    mapper = type(obj).__mapper__
    table = mapper.local_table
    ident, word = _identity_column(table)
    for attr in mapper.column_attrs:
        column = attr.columns[0]
        if attr.key not in obj.__dict__:
            continue
        why = problem(column, obj.__dict__[attr.key])
        if why is not None:
            row_name = f"{word} {obj.__dict__.get(mapper.get_property_by_column(ident).key)}"
            raise StoredValueError(table.name, row_name, column.name, why)


def _decoder(column: Column, dialect: Any) -> Callable[[Any], Any] | None:
    """SQLAlchemy's decoding of a raw value of ``column`` on ``dialect`` (None: the driver's value is the value)."""
    try:
        return column.type.dialect_impl(dialect).result_processor(dialect, None)
    except DECODING_ERRORS:  # a processor that needs the driver's type code: the type check below decides
        return None


def find_damage(
    conn: Connection | Session, tables: Iterable[Table], where: Any = None, only: list[Column] | None = None
) -> StoredValueError | None:
    """Scan ``tables`` raw (no decoding by SQLAlchemy) and decode each value as its column's type does: the
    first value that fails, as the error to raise, or None. Reads every row (of ``where``; the ``only`` columns):
    for the failure path and for suspects, not for every query."""
    bind = conn.get_bind() if isinstance(conn, Session) else conn
    dialect = bind.dialect
    for table in tables:
        ident, word = _identity_column(table)
        columns = only or list(table.c)
        raw = select(ident, *(type_coerce(c, sqltypes.NullType()) for c in columns))
        if where is not None:
            raw = raw.where(where)
        decoders = [_decoder(c, dialect) for c in columns]
        for ident_value, *values in conn.execute(raw):
            for column, decode, value in zip(columns, decoders, values):
                try:
                    if isinstance(column.type, sqltypes.Boolean) and value not in (None, 0, 1):
                        raise ValueError  # SQLAlchemy reads any SQLite value as bool(value): 'maybe' is True
                    value = decode(value) if decode is not None and value is not None else value
                except DECODING_ERRORS:
                    rule = expected(column)
                    why = f"{_quoted(value)} is not {rule[1] if rule else column.type}"
                    return StoredValueError(table.name, f"{word} {ident_value}", column.name, why)
                why = problem(column, value)
                if why is not None:
                    return StoredValueError(table.name, f"{word} {ident_value}", column.name, why)
    return None


def _decoding_failed(conn: Connection | Session, stmt: Select, exc: BaseException) -> StoredValueError:
    """The damaged value behind a decoding error, or the error itself when no stored value explains it."""
    damage = find_damage(conn, _tables(stmt))
    if damage is None:
        raise exc
    return damage


def rows(conn: Connection | Session, stmt: Select) -> list[dict[str, Any]]:
    """A Core select's rows as dicts, every value of a table column checked against its type."""
    columns = [_base_column(c) for c in stmt.selected_columns]
    try:
        result = conn.execute(stmt).mappings().all()
    except DECODING_ERRORS as exc:
        raise _decoding_failed(conn, stmt, exc) from None
    out = []
    for r in result:
        check(columns, r.values())
        out.append(dict(r))
    return out


def entities(conn: Session, stmt: Select) -> list[Any]:
    """An ORM select's rows (tuples of objects), each object's values checked against their columns' types."""
    try:
        result = conn.execute(stmt).all()
    except DECODING_ERRORS as exc:
        raise _decoding_failed(conn, stmt, exc) from None
    for r in result:
        for obj in r:
            if hasattr(type(obj), "__mapper__"):
                check_entity(obj)
    return result


def scalars(conn: Session, stmt: Select) -> list[Any]:
    """The first entity of each row of an ORM select (``select(Run).where(...)``), checked."""
    return [r[0] for r in entities(conn, stmt)]


def check_database(engine: Engine) -> None:
    """The dashboard's check before it serves pages that would each fail on a damaged database: SQLite's own
    ``quick_check`` of its pages (DatabaseError naming the first problem), then every stored value against its
    column's type (StoredValueError naming the first damaged one).

    A full decode of every row takes seconds (the timing samples are most of a database), so the database itself
    finds the suspects: SQLite's ``typeof``, ``datetime`` and ``json_valid`` over every column, PostgreSQL's column
    types (which hold only their type's values, unless altered by hand). Only suspect rows and columns are decoded
    here, by :func:`find_damage`'s rules."""
    from sqlalchemy import inspect

    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            check_integrity(Path(engine.url.database or ""), redact(engine.url))
            for table in Base.metadata.sorted_tables:
                rowids = _sqlite_suspects(conn, table)
                damage = (
                    find_damage(conn, [table], where=text(f"rowid IN ({','.join(map(str, rowids))})"))
                    if rowids
                    else None
                )
                if damage is not None:
                    raise damage
            return
        reflected = inspect(conn)
        for table in Base.metadata.sorted_tables:
            kinds = {c["name"]: c["type"] for c in reflected.get_columns(table.name)}
            altered = [c for c in table.columns if not _same_family(c.type, kinds.get(c.name))]
            damage = find_damage(conn, [table], only=altered) if altered else None
            if damage is not None:
                raise damage


_FAMILIES = (sqltypes.Boolean, sqltypes.DateTime, sqltypes.JSON, sqltypes.Float, sqltypes.Integer, sqltypes.String)


def _same_family(declared: sqltypes.TypeEngine, found: sqltypes.TypeEngine | None) -> bool:
    """Whether a reflected column type holds what the declared one does (DOUBLE_PRECISION for Float, VARCHAR for
    String...)."""
    family = next((f for f in _FAMILIES if isinstance(declared, f)), None)
    return found is not None and (family is None or isinstance(found, family))


def _sqlite_suspects(conn: Connection, table: Table, limit: int = 100) -> list[int]:
    """Rowids of ``table`` with a value SQLite itself sees is not of its column's type (or NULL where one is
    required); checked in C over every row."""
    checks = []
    for column in table.columns:
        name = f'"{column.name}"'
        kind, type_of = column.type, f"typeof({name})"
        if not column.nullable:
            checks.append(f"{name} IS NULL")
        if isinstance(kind, sqltypes.Boolean):
            checks.append(f"({type_of} NOT IN ('integer', 'null') OR {name} NOT IN (0, 1))")
        elif isinstance(kind, (sqltypes.Float, sqltypes.Numeric)):
            checks.append(f"{type_of} NOT IN ('real', 'integer', 'null')")
        elif isinstance(kind, sqltypes.Integer):
            checks.append(f"{type_of} NOT IN ('integer', 'null')")
        elif isinstance(kind, sqltypes.DateTime):
            checks.append(f"({type_of} NOT IN ('text', 'null') OR ({name} IS NOT NULL AND datetime({name}) IS NULL))")
        elif isinstance(kind, sqltypes.JSON):
            # Valid JSON of the wrong kind: its first character says (what SQLAlchemy writes has no leading space).
            # Elements of a list are left to the reads (json_each or instr over every sample took seconds).
            shape = _json_shapes().get((table.name, column.name))
            starts = ("'['" if shape is list else "'{'") + (", 'n'" if column.nullable else "")  # n: JSON null
            checks.append(
                f"({name} IS NOT NULL AND (json_valid({name}) = 0 OR substr({name}, 1, 1) NOT IN ({starts})))"
            )
            if shape is not list:
                checks.append(f"instr({name}, '{NUL_JSON}') > 0")
        elif isinstance(kind, sqltypes.String):
            checks.append(f"{type_of} NOT IN ('text', 'null')")
            checks.append(f"instr(CAST({name} AS BLOB), x'00') > 0")  # SQLite's text functions stop at a NUL
    sql = f'SELECT rowid FROM "{table.name}" WHERE {" OR ".join(checks)} LIMIT {limit}'
    return [rowid for (rowid,) in conn.exec_driver_sql(sql)]
