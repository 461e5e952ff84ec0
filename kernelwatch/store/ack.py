"""Acknowledged changes: a person records that a step in a case's time on one hardware is expected.

The gate reports an acknowledged step and no longer fails on it (``kernelwatch.gate.judge``); the dashboard marks it
on the case's charts. Only this module writes the ``ack`` table; reading is ``kernelwatch.store.queries.acks``.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kernelwatch.store import queries
from kernelwatch.store.models import Ack, Case, Hardware, Run
from kernelwatch.store.schema import NAME_LEN, SHORT_LEN, TEXT_LEN, format_time

_SHA = re.compile(r"^[0-9a-f]{4,64}$")


class AckError(ValueError):
    """An acknowledgement that cannot be recorded; the message is one line naming the input."""


def _one_line(value: str, what: str, limit: int) -> str:
    value = (value or "").strip()
    if not value:
        raise AckError(f"{what} must not be empty")
    if not value.isprintable():
        raise AckError(f"{what} must be one line of printable text (no line breaks or control characters)")
    if len(value) > limit:
        raise AckError(f"{what} is longer than {limit} characters")
    return value


def find_hardware(session: Session, hardware: str) -> Hardware:
    """The one hardware ``--hardware`` names (``kernelwatch.store.queries.find_hardware``: the rule every command
    uses)."""
    rows = session.execute(select(Hardware).order_by(Hardware.device_name)).scalars().all()
    try:
        found = queries.find_hardware(
            session.get_bind(),
            hardware,
            [{"id": h.id, "device_name": h.device_name, "fingerprint": h.fingerprint} for h in rows],
        )
    except LookupError as exc:
        raise AckError(str(exc)) from None
    return next(h for h in rows if h.id == found["id"])


def resolve_commit(session: Session, hardware_id: int, commit: str) -> str:
    """A full commit sha: the one commit starting with ``commit`` among this hardware's runs, else among all
    runs (a commit measured elsewhere still has a place in time), else ``commit`` itself (a candidate not
    ingested yet, at least 7 digits). Several matches are refused."""
    sha = commit.strip().lower()
    if not _SHA.match(sha):
        raise AckError(f"--commit {commit[:60]!r} must be a commit sha (4 to 64 hex digits)")
    for where, scope in (((Run.hardware_id == hardware_id),), "on this hardware"), ((), "in this database"):
        found = (
            session.execute(
                select(Run.commit_sha)
                .where(Run.commit_sha.startswith(sha, autoescape=True), *where)
                .distinct()
                .limit(3)
            )
            .scalars()
            .all()
        )
        if len(found) > 1:
            raise AckError(f"--commit {sha!r} is ambiguous {scope}: {', '.join(s[:12] for s in found)}")
        if found:
            return found[0]
    if len(sha) < 7:
        raise AckError(f"--commit {sha!r} matches no run on this hardware; give at least 7 hex digits")
    return sha


def add_ack(
    engine: Engine,
    case: str,
    hardware: str,
    commit: str,
    reason: str,
    author: str | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """Record that ``case`` on ``hardware`` changed at ``commit`` for ``reason``; returns the stored row."""
    reason = _one_line(reason, "--reason", TEXT_LEN)
    author = _one_line(author, "--author", NAME_LEN) if author and author.strip() else None
    case = (case or "").strip()
    if not case:
        raise AckError("CASE must not be empty")
    with Session(engine) as s:
        row = s.execute(select(Case.id, Case.key).where(Case.key == case)).first()
        if row is None:
            near = (
                s.execute(
                    select(Case.key)
                    .where(Case.key.contains(case[:SHORT_LEN], autoescape=True))
                    .order_by(Case.key)
                    .limit(3)
                )
                .scalars()
                .all()
            )
            hint = f"; did you mean {', '.join(near)}" if near else ""
            raise AckError(f"unknown case {case[:120]!r} (not in this database){hint}")
        hw = find_hardware(s, hardware)
        name, fingerprint = hw.device_name, hw.fingerprint
        sha = resolve_commit(s, hw.id, commit)
        ack = Ack(
            case_id=row.id,
            hardware_id=hw.id,
            commit_sha=sha,
            reason=reason,
            author=author,
            created_at=now or dt.datetime.now(dt.timezone.utc),
        )
        s.add(ack)
        try:
            s.commit()
        except IntegrityError:
            s.rollback()
            raise AckError(f"{case} on {name} is already acknowledged at {sha[:12]}") from None
        return {
            "id": ack.id,
            "case": row.key,
            "hardware": name,
            "fingerprint": fingerprint,
            "commit": sha,
            "reason": reason,
            "author": author,
            "created_at": format_time(ack.created_at),
        }
